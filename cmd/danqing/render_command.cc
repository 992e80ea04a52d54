// `danqing render`: writes one inscription to a PNG or JPEG file and prints
// the render statistics.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "image/image.h"
#include "render/backend.h"
#include "render/renderer.h"

namespace {

struct RenderArgs {
  std::string text, title, signature, date, photo, size = "1920x1080", style = "xing",
      background, seal, out, strokes, font, backend;
  uint64_t seed = 0;
  bool horizontal = false;
  int threads = 1;
};

[[noreturn]] void Fail(const std::string& msg, int code) {
  std::fprintf(stderr, "danqing render: %s\n", msg.c_str());
  throw CLI::RuntimeError(code);
}

void Run(const RenderArgs& a) {
  using namespace danqing;
  render::RenderOptions opts;
  int consumed = 0;
  if (std::sscanf(a.size.c_str(), "%dx%d%n", &opts.width, &opts.height, &consumed) != 2 ||
      static_cast<size_t>(consumed) != a.size.size()) {
    Fail("--size must be WIDTHxHEIGHT, e.g. 1920x1080, got '" + a.size + "'", 2);
  }
  // Before any work: an output file whose format cannot be told.
  if (const auto format = image::FormatForPath(a.out); !format.ok()) {
    Fail("-o: " + format.status().message(), 2);
  }
  auto style = render::ParseStyle(a.style);
  if (!style) Fail("--style must be kai, xing or cao, got '" + a.style + "'", 2);
  opts.style = *style;
  std::string bg = a.background.empty() ? (a.photo.empty() ? "landscape" : "photo") : a.background;
  auto background = render::ParseBackground(bg);
  if (!background) Fail("--background must be landscape, paper or photo, got '" + bg + "'", 2);
  opts.background = *background;
  opts.seed = a.seed;
  opts.vertical = !a.horizontal;
  opts.threads = a.threads;
  opts.seal_text = a.seal;
  image::Image photo;
  if (!a.photo.empty()) {
    auto p = image::ReadFile(a.photo);
    if (!p.ok()) Fail("--photo: " + p.status().ToString(), 1);
    photo = std::move(p).value();
    opts.photo = &photo;
  } else if (opts.background == render::Background::kPhoto) {
    Fail("--background photo needs --photo FILE", 2);
  }
  if (!a.backend.empty() && !render::ParseBackendChoice(a.backend)) {
    Fail("--backend must be auto, cpu or gpu, got '" + a.backend + "'", 2);
  }
  render::RendererConfig cfg;
  cfg.strokes_path = a.strokes;
  cfg.font_path = a.font;
  cfg.backend = a.backend;
  auto r = render::Renderer::Create(cfg);
  if (!r.ok()) Fail(r.status().ToString(), 1);
  render::Inscription ins{a.text, a.title, a.signature, a.date};
  render::RenderStats stats;
  auto img = (*r)->Render(ins, opts, &stats);
  if (!img.ok()) Fail(img.status().ToString(), img.status().code() == StatusCode::kInvalidArgument ? 2 : 1);
  Status st = image::WriteFile(a.out, *img);
  if (!st.ok()) Fail(st.ToString(), 1);
  std::printf(
      "%s: %dx%d %s on %s, seed %llu\n"
      "characters %d (font fallback %d, dropped %d), dabs %zu\n"
      "total %.1f ms: background %.1f, strokes %.1f, diffusion %.1f, compose %.1f (heavy passes %.1f on %s)\n",
      a.out.c_str(), opts.width, opts.height, std::string(render::StyleName(opts.style)).c_str(),
      std::string(render::BackgroundName(opts.background)).c_str(),
      static_cast<unsigned long long>(opts.seed), stats.characters, stats.fallback_characters,
      stats.dropped_characters, stats.dabs, stats.total_ms, stats.background_ms, stats.strokes_ms,
      stats.diffusion_ms, stats.compose_ms, stats.passes_ms, stats.backend.c_str());
}

}  // namespace

void RegisterRenderCommand(CLI::App& app) {
  auto args = std::make_shared<RenderArgs>();
  CLI::App* sub = app.add_subcommand("render", "write an inscription over an ink-wash painting to PNG/JPEG");
  sub->add_option("--text", args->text, "the poem (UTF-8); punctuation breaks columns")->required();
  sub->add_option("--title", args->title, "poem title");
  sub->add_option("--signature", args->signature, "signature (落款)");
  sub->add_option("--date", args->date, "date written after the signature");
  sub->add_option("--photo", args->photo, "visitor's photo (PNG/JPEG) for --background photo");
  sub->add_option("--seed", args->seed, "random seed; same seed, same image");
  sub->add_option("--size", args->size, "WIDTHxHEIGHT (default 1920x1080)");
  sub->add_option("--style", args->style, "kai | xing | cao (default xing)");
  sub->add_option("--background", args->background, "landscape | paper | photo (default landscape, photo with --photo)");
  sub->add_option("--seal", args->seal, "2-4 characters for the seal (default from the signature)");
  sub->add_flag("--horizontal", args->horizontal, "rows left to right instead of columns");
  sub->add_option("--threads", args->threads, "worker threads (default 1)");
  sub->add_option("--strokes", args->strokes, "strokes.bin (default: DANQING_DATA_DIR, <exe>/../data, build tree)");
  sub->add_option("--font", args->font, "fallback Kai font (default ukai.ttc)");
  sub->add_option("--backend", args->backend,
                  "heavy passes on: auto | cpu | gpu (default $DANQING_RENDER_BACKEND, else auto)");
  sub->add_option("-o,--output", args->out, "output file (.png, .jpg)")->required();
  sub->callback([args] { Run(*args); });
}
