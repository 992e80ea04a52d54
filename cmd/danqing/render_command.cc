// `danqing render`: writes one inscription to a PNG or JPEG file and prints
// the render statistics.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "image/image.h"
#include "image/png16.h"
#include "render/backend.h"
#include "render/renderer.h"
#include "video/writing_video.h"

namespace {

struct RenderArgs {
  std::string text, title, signature, date, photo, size = "1920x1080", style = "xing",
      background, seal, out, strokes, font, backend;
  uint64_t seed = 0;
  bool horizontal = false;
  int threads = 1;
  // The writing (issue 28): a video, the write-time plane, a strip of frames.
  std::string video, writing, frames_dir;
  int video_fps = 30, frames = 0;
  double video_seconds = 8.0;
  std::string video_encoder = "auto", video_preset = "veryfast";
  int video_threads = 1;
};

[[noreturn]] void Fail(const std::string& msg, int code) {
  std::fprintf(stderr, "danqing render: %s\n", msg.c_str());
  throw CLI::RuntimeError(code);
}

// The writing's outputs: the 16-bit PNG of the write-time plane, frames at
// evenly spaced times, the MP4.
void WriteWriting(const RenderArgs& a, const danqing::video::ClipOptions& clip,
                  const danqing::image::Image& img, const danqing::render::Writing& wr,
                  const std::string& backend) {
  using namespace danqing;
  if (!a.writing.empty()) {
    auto png = image::EncodePngGrey16(image::Grey16{wr.plane_width, wr.plane_height, wr.ms});
    if (!png.ok()) Fail("--writing: " + png.status().ToString(), 1);
    std::FILE* f = std::fopen(a.writing.c_str(), "wb");
    if (f == nullptr || std::fwrite(png->data(), 1, png->size(), f) != png->size() ||
        std::fclose(f) != 0) {
      Fail("--writing: cannot write " + a.writing, 1);
    }
    std::printf(
        "%s: write-time plane %dx%d (16-bit grey PNG, ms), %zu bytes; writing %u ms, seal at %u "
        "ms\n",
        a.writing.c_str(), wr.plane_width, wr.plane_height, png->size(), wr.end_ms, wr.seal_ms);
  }
  const video::WritingFrames frames{&img,           &wr.background,  wr.ms.data(),
                                    wr.plane_width, wr.plane_height, wr.end_ms};
  if (!a.frames_dir.empty() && a.frames > 0) {
    for (int k = 0; k < a.frames; ++k) {
      const uint32_t t = a.frames == 1
                             ? wr.end_ms
                             : static_cast<uint32_t>(uint64_t{wr.end_ms} * k / (a.frames - 1));
      char name[64];
      std::snprintf(name, sizeof name, "/frame-%02d-%05ums.jpg", k, t);
      Status st = image::WriteFile(a.frames_dir + name, video::ComposeFrameRgb(frames, t));
      if (!st.ok()) Fail("--frames: " + st.ToString(), 1);
    }
    std::printf("%s: %d frames\n", a.frames_dir.c_str(), a.frames);
  }
  if (!a.video.empty()) {
    video::ClipOptions c = clip;
    c.prefer_nvenc = backend == "cuda";
    // The CUDA backend: frames composed on the GPU (the CPU after a CUDA error).
    if (backend == "cuda") c.device_composer = video::MakeCudaComposer;
    auto v = video::EncodeWritingMp4(frames, c, a.video);
    if (!v.ok())
      Fail("--video: " + v.status().ToString(),
           v.status().code() == StatusCode::kInvalidArgument ? 2 : 1);
    std::printf(
        "%s: %dx%d, %d frames at %d fps, %llu bytes (%.0f kbit/s), %s%s%s, encoded in %.2f s "
        "(frames composed on the %s in %.3f s%s%s)\n",
        a.video.c_str(), v->width, v->height, v->frames, c.fps,
        static_cast<unsigned long long>(v->bytes),
        static_cast<double>(v->bytes) * 8.0 / 1000.0 / c.seconds, v->encoder.c_str(),
        v->fallback.empty() ? "" : ", NVENC not used: ", v->fallback.c_str(), v->encode_seconds,
        v->composer == "cuda" ? "GPU" : "CPU", v->compose_seconds,
        v->compose_fallback.empty() ? "" : "; GPU composer failed: ", v->compose_fallback.c_str());
  }
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
  if (a.out.empty() && a.video.empty() && a.writing.empty() && a.frames_dir.empty()) {
    Fail("nothing to write: give -o FILE, --video FILE.mp4, --writing FILE.png or --frames DIR", 2);
  }
  if (const auto format = image::FormatForPath(a.out); !a.out.empty() && !format.ok()) {
    Fail("-o: " + format.status().message(), 2);
  }
  video::ClipOptions clip;
  clip.fps = a.video_fps;
  clip.seconds = a.video_seconds;
  clip.encoder = a.video_encoder;
  clip.preset = a.video_preset;
  clip.threads = a.video_threads;
  if (Status s = video::CheckClipOptions(clip); !a.video.empty() && !s.ok()) {
    Fail("--video-" + s.message(), 2);
  }
  if (!a.video.empty() && a.video.size() < 4) Fail("--video: the file name must end in .mp4", 2);
  if (!a.video.empty() && a.video.substr(a.video.size() - 4) != ".mp4") {
    Fail("--video: the file name must end in .mp4, got '" + a.video + "'", 2);
  }
  if (a.frames < 0 || a.frames > 100) Fail("--frame-count must be 0..100", 2);
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
  const bool want_writing = !a.video.empty() || !a.writing.empty() || !a.frames_dir.empty();
  render::Writing writing;
  auto img = (*r)->Render(ins, opts, &stats, want_writing ? &writing : nullptr);
  if (!img.ok()) Fail(img.status().ToString(), img.status().code() == StatusCode::kInvalidArgument ? 2 : 1);
  if (!a.out.empty()) {
    Status st = image::WriteFile(a.out, *img);
    if (!st.ok()) Fail(st.ToString(), 1);
  }
  if (want_writing) WriteWriting(a, clip, *img, writing, stats.backend);
  std::printf(
      "%s: %dx%d %s on %s, seed %llu\n"
      "characters %d (font fallback %d, dropped %d; from the %s forms %d, cao->xing %d, ->kai %d), "
      "dabs %zu\n"
      "total %.1f ms: background %.1f, strokes %.1f, diffusion %.1f, compose %.1f (heavy passes "
      "%.1f on %s)\n",
      a.out.empty() ? "(no image file)" : a.out.c_str(), opts.width, opts.height,
      std::string(render::StyleName(opts.style)).c_str(),
      std::string(render::BackgroundName(opts.background)).c_str(),
      static_cast<unsigned long long>(opts.seed), stats.characters, stats.fallback_characters,
      stats.dropped_characters, std::string(render::StyleName(opts.style)).c_str(),
      stats.form_characters, stats.forms_to_xing, stats.forms_to_kai, stats.dabs, stats.total_ms,
      stats.background_ms, stats.strokes_ms, stats.diffusion_ms, stats.compose_ms, stats.passes_ms,
      stats.backend.c_str());
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
  sub->add_option("-o,--output", args->out, "output file (.png, .jpg)");
  sub->add_option("--video", args->video, "also the writing as a video: H.264 in MP4 (.mp4)");
  sub->add_option("--video-fps", args->video_fps, "video frame rate, 1..60 (default 30)");
  sub->add_option("--video-seconds", args->video_seconds, "video length, 1..30 s (default 8)");
  sub->add_option("--video-encoder", args->video_encoder,
                  "auto | libx264 | h264_nvenc (default auto)");
  sub->add_option("--video-preset", args->video_preset, "x264 preset (default veryfast)");
  sub->add_option("--video-threads", args->video_threads, "encoder threads, 1..64 (default 1)");
  sub->add_option("--writing", args->writing,
                  "the write-time plane as a 16-bit grey PNG (ms, half resolution)");
  sub->add_option("--frames", args->frames_dir,
                  "a directory for JPEG frames of the writing (--frame-count)");
  sub->add_option("--frame-count", args->frames,
                  "frames at evenly spaced times, 0..100 (with --frames)");
  sub->callback([args] { Run(*args); });
}
