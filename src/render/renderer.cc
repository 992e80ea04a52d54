#include "render/renderer.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "common/utf8.h"
#include "render/backend.h"
#include "render/brush.h"
#include "render/cursive_forms.h"
#include "render/glyph_font.h"
#include "render/glyph_skeleton.h"
#include "render/layout.h"
#include "render/passes.h"
#include "render/passes_cuda.h"
#include "render/random.h"
#include "render/stroke_data.h"
#include "render/writing.h"

#ifndef DANQING_BUILD_DATA_DIR
#define DANQING_BUILD_DATA_DIR ""
#endif

namespace danqing::render {
namespace {

using Clock = std::chrono::steady_clock;
double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

constexpr char kDefaultFont[] = "/usr/share/fonts/truetype/arphic/ukai.ttc";

// Punctuation and spaces: line breaks, never written.
bool IsBreak(char32_t c) {
  if (c <= 0x20 || c == 0x7F) return true;
  if ((c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
      (c >= 0x7B && c <= 0x7E))
    return true;
  if (c >= 0x2000 && c <= 0x206F) return true;   // general punctuation
  if (c >= 0x3000 && c <= 0x303F) return true;   // CJK symbols and punctuation
  if (c >= 0xFE30 && c <= 0xFE4F) return true;   // CJK compatibility forms
  if ((c >= 0xFF01 && c <= 0xFF0F) || (c >= 0xFF1A && c <= 0xFF20) || (c >= 0xFF3B && c <= 0xFF40) ||
      (c >= 0xFF5B && c <= 0xFF65))
    return true;
  if (c == 0xFFFD || c == 0xFEFF || c == 0x00B7 || c == 0x00A0) return true;
  return false;
}

struct StyleSet {
  BrushStyle brush;
  float jitter_scale, jitter_rot, jitter_shear, jitter_offset, glyph;
  int reload_min, reload_max;
};

StyleSet StyleFor(Style s) {
  StyleSet st{};
  switch (s) {
    case Style::kKai:
      st.brush = {0.0f, 0, 0.9f, 0.12f, 0.05f, 0.45f, 0.0f, 0.0f, 0.0f};
      st.jitter_scale = 0.02f; st.jitter_rot = 0.0f; st.jitter_shear = 0.0f; st.jitter_offset = 0.01f;
      st.brush.entry = 0.7f;
      st.glyph = 0.94f; st.reload_min = 4; st.reload_max = 6;
      break;
    case Style::kXing:
      st.brush = {0.04f, 3, 1.08f, 0.22f, 0.1f, 1.1f, 0.45f, 0.12f, 5.0f};
      st.jitter_scale = 0.08f; st.jitter_rot = 0.04f; st.jitter_shear = 0.08f; st.jitter_offset = 0.04f;
      st.brush.entry = 0.6f;
      st.glyph = 0.95f; st.reload_min = 3; st.reload_max = 5;
      break;
    case Style::kCao:
      st.brush = {0.08f, 7, 0.92f, 0.25f, 0.2f, 1.3f, 0.9f, 0.45f, 12.0f};
      st.jitter_scale = 0.14f; st.jitter_rot = 0.08f; st.jitter_shear = 0.14f; st.jitter_offset = 0.07f;
      st.brush.entry = 0.4f;
      st.glyph = 1.0f; st.reload_min = 3; st.reload_max = 5;
      break;
  }
  return st;
}

// The brush writing a calligrapher's form (xing, cao): the paths are the
// font's, so no trimming and little smoothing or wobble; the font decides the
// joins within a character (no random 游丝), cao links more characters.
BrushStyle FormBrush(Style s) {
  //      trim smooth width press thin  dry   hair link  wobble entry
  if (s == Style::kCao) return {0.0f, 2, 0.98f, 0.16f, 0.1f, 0.8f, 0.0f, 0.4f, 3.0f, 0.25f};
  return {0.0f, 1, 0.96f, 0.16f, 0.08f, 0.75f, 0.0f, 0.12f, 2.0f, 0.35f};
}

// Column flow (行气) per style: character scale from stroke count in
// [lo, hi], the pitch along the column in cells of the scaled size, the
// column axis's sideways drift (cells) and the per-character tilt (radians).
struct Flow {
  float lo, hi, pitch, drift, tilt;
};
Flow FlowFor(Style s) {
  if (s == Style::kCao) return {0.66f, 1.18f, 0.92f, 0.10f, 0.09f};
  return {0.80f, 1.10f, 1.0f, 0.07f, 0.05f};
}

// Scales a form about the box centre (its paths and widths).
void ScaleForm(CharStrokes* ch, float k) {
  for (auto& st : ch->strokes) {
    for (auto& p : st.points) {
      p.x = 512.0f + (p.x - 512.0f) * k;
      p.y = 512.0f + (p.y - 512.0f) * k;
      p.half_width *= k;
    }
  }
}

// The larger side of a form's ink box (paths with their widths), box units.
float FormExtent(const CharStrokes& ch) {
  float x0 = 1e9f, y0 = 1e9f, x1 = -1e9f, y1 = -1e9f;
  for (const auto& st : ch.strokes) {
    for (const auto& p : st.points) {
      x0 = std::min(x0, p.x - p.half_width);
      x1 = std::max(x1, p.x + p.half_width);
      y0 = std::min(y0, p.y - p.half_width);
      y1 = std::max(y1, p.y + p.half_width);
    }
  }
  return x1 > x0 ? std::max(x1 - x0, y1 - y0) : 0.0f;
}

Affine CharAffine(const Cell& c, const StyleSet& st, Rng& rng) {
  float sc = c.size * st.glyph * (1.0f + st.jitter_scale * rng.Signed()) / 1024.0f;
  float rot = st.jitter_rot * rng.Signed();
  float shear = st.jitter_shear * (0.3f + 0.7f * rng.Uniform());
  float ox = c.cx + c.size * st.jitter_offset * rng.Signed();
  float oy = c.cy + c.size * st.jitter_offset * rng.Signed();
  float cr = std::cos(rot), sr = std::sin(rot);
  // M = S * R * Sh, Sh: x' = x - shear*y (tops lean right), about the box centre.
  float a = cr, b = -sr, d = sr, e = cr;
  float b2 = b - a * shear, e2 = e - d * shear;
  Affine xf;
  xf.m[0] = sc * a; xf.m[1] = sc * b2;
  xf.m[3] = sc * d; xf.m[4] = sc * e2;
  xf.m[2] = ox - (xf.m[0] * 512.0f + xf.m[1] * 512.0f);
  xf.m[5] = oy - (xf.m[3] * 512.0f + xf.m[4] * 512.0f);
  return xf;
}

LandscapeParams MakeLandscape(Rng& rng, bool text_right) {
  LandscapeParams p;
  float side = text_right ? 0.0f : 0.4f;
  p.ridges.push_back({0.50f + 0.05f * rng.Uniform(), 0.16f, 1.1f, rng.Range(0, 50), 0.16f, 0.2f, -0.2f, 1.2f});
  p.ridges.push_back({0.62f + 0.04f * rng.Uniform(), 0.24f, 1.5f, rng.Range(0, 50), 0.36f, 0.2f,
                      -0.2f + side, 0.7f + side});
  p.ridges.push_back({0.80f + 0.03f * rng.Uniform(), 0.34f, 2.0f, rng.Range(0, 50), 0.72f, 0.24f,
                      -0.2f + side, 0.5f + side});
  p.ridges.push_back({0.90f, 0.1f, 3.0f, rng.Range(0, 50), 0.38f, 0.12f, 0.72f - side, 1.2f});
  p.water_top = 0.84f + 0.03f * rng.Uniform();
  p.water_phase = rng.Range(0, 100);
  p.sky = 0.05f;
  return p;
}

// Distant trees on a ridge: trunks and dotted crowns (点叶), as light ink dabs.
void PlanTrees(const Ridge& ridge, const Textures& tex, const Region& avoid, Rng& rng, float W, float H,
               std::vector<Dab>* dabs) {
  int clusters = 2 + rng.Int(3);
  float unit = std::max(0.6f, H * 0.0035f);
  for (int c = 0; c < clusters; ++c) {
    float cx = rng.Range(std::max(0.02f, ridge.x0 + 0.12f), std::min(0.98f, ridge.x1 - 0.12f));
    int trees = 4 + rng.Int(8);
    for (int t = 0; t < trees; ++t) {
      float fx = cx + rng.Signed() * 0.035f;
      float base_y = (RidgeY(ridge, tex, fx) + 0.006f) * H;
      float x = fx * W;
      float height = unit * rng.Range(5.0f, 11.0f);
      if (x > avoid.x0 - height && x < avoid.x1 + height && base_y > avoid.y0 && base_y - height < avoid.y1) {
        continue;  // never under the inscription
      }
      float ink = rng.Range(0.35f, 0.55f);
      for (float k = 0; k < height; k += unit * 0.35f) {  // trunk
        Dab d;
        d.x = x + std::sin(k / height * 2.0f) * unit * 0.4f;
        d.y = base_y - k;
        d.r = unit * 0.32f;
        d.ink = ink;
        d.nx = 1;
        d.ny = 0;
        dabs->push_back(d);
      }
      int dots = 10 + rng.Int(10);
      for (int k = 0; k < dots; ++k) {  // crown
        Dab d;
        float a = rng.Uniform() * 6.2832f, rr = std::sqrt(rng.Uniform()) * height * 0.45f;
        d.x = x + std::cos(a) * rr;
        d.y = base_y - height * 0.75f + std::sin(a) * rr * 0.8f;
        d.r = unit * rng.Range(0.5f, 0.95f);
        d.ink = ink * rng.Range(0.7f, 1.0f);
        d.wet = 0.25f;
        d.nx = 1;
        d.ny = 0;
        dabs->push_back(d);
      }
    }
  }
}

void DrawSeal(const std::vector<char32_t>& chars, const StrokeData* strokes, const GlyphFont* font,
              float sx, float sy, float size, const Textures& tex, Rng& rng, image::Image* img) {
  int n = static_cast<int>(std::ceil(size));
  if (n < 6) return;
  // Carved characters (白文): a mask of thick, plain strokes.
  Plane mask;
  mask.Reset(n, n);
  std::vector<Dab> dabs;
  int count = static_cast<int>(chars.size());
  int cols = count <= 2 ? 1 : 2;
  int rows = (count + cols - 1) / cols;
  float border = 0.12f * size;
  float inner = size - 2 * border;
  for (int i = 0; i < count; ++i) {
    int col = cols == 1 ? 0 : (i / rows);  // right column first
    int row = i % rows;
    float cw = inner / static_cast<float>(cols), chh = inner / static_cast<float>(rows);
    float cx = size - border - (static_cast<float>(col) + 0.5f) * cw;
    float cy = border + (static_cast<float>(row) + 0.5f) * chh;
    Affine xf;
    float kx = cw * 0.98f / 1024.0f, ky = chh * 0.98f / 1024.0f;
    xf.m[0] = kx; xf.m[4] = ky;
    xf.m[2] = cx - kx * 512.0f;
    xf.m[5] = cy - ky * 512.0f;
    CharStrokes cs;
    if (strokes != nullptr && strokes->Lookup(chars[static_cast<size_t>(i)], &cs)) {
      BrushStyle plain{0.0f, 0, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
      InkState full;
      Rng r2(1);
      for (auto& st : cs.strokes) {
        for (auto& p : st.points) p.half_width = std::max(p.half_width, 30.0f) * 1.1f;
      }
      PlanCharacter(cs, xf, plain, std::min(cw, chh), r2, &full, &dabs, nullptr, nullptr);
    } else if (font != nullptr) {
      std::vector<uint8_t> raster;
      int res = std::clamp(static_cast<int>(std::max(cw, chh)), 16, 256);
      if (font->RasterizeBox(chars[static_cast<size_t>(i)], res, &raster)) {
        InkState full;
        Rng r2(1);
        PlanRaster(raster, res, xf, r2, &full, std::min(cw, chh), &dabs);
      }
    }
  }
  for (auto& d : dabs) { d.ink = 1; d.dry = 0; }
  CpuPasses(1).StampDabs(dabs, tex, &mask);
  const float red[3] = {182, 36, 30};
  float ox = rng.Range(0, 400), oy = rng.Range(0, 400);
  for (int y = 0; y < n; ++y) {
    int py = static_cast<int>(sy) + y;
    if (py < 0 || py >= img->height) continue;
    for (int x = 0; x < n; ++x) {
      int px = static_cast<int>(sx) + x;
      if (px < 0 || px >= img->width) continue;
      float fx = static_cast<float>(x) / size, fy = static_cast<float>(y) / size;
      // Worn edges: the square's border eaten by noise.
      float edge = std::min(std::min(fx, 1 - fx), std::min(fy, 1 - fy)) * size;
      float wear = tex.Noise2(ox + static_cast<float>(x) * 0.35f, oy + static_cast<float>(y) * 0.35f);
      float keep = std::clamp((edge - 0.6f - 2.5f * wear * std::max(1.0f, size / 60.0f)) * 0.8f + 1.0f, 0.0f, 1.0f);
      if (edge >= size * 0.5f + 1) keep = 0;
      float speck = tex.Fibre(x * 3 + static_cast<int>(ox), y * 3 + static_cast<int>(oy));
      float a = keep * (1.0f - mask.row(y)[x]) * (speck > 0.85f ? 0.45f : 0.9f);
      uint8_t* o = img->row(py) + static_cast<size_t>(px) * 3;
      for (int c = 0; c < 3; ++c) {
        float v = o[c];
        // Seal paste sits on the paper: multiply-like over what is below.
        float target = red[c] * (0.75f + 0.25f * v / 255.0f);
        o[c] = static_cast<uint8_t>(std::clamp(v + (target - v) * a + 0.5f, 0.0f, 255.0f));
      }
    }
  }
}

}  // namespace

std::string_view StyleName(Style style) {
  switch (style) {
    case Style::kKai: return "kai";
    case Style::kXing: return "xing";
    case Style::kCao: return "cao";
  }
  return "xing";
}

std::optional<Style> ParseStyle(std::string_view name) {
  if (name == "kai") return Style::kKai;
  if (name == "xing") return Style::kXing;
  if (name == "cao") return Style::kCao;
  return std::nullopt;
}

std::string_view BackgroundName(Background b) {
  switch (b) {
    case Background::kLandscape: return "landscape";
    case Background::kPaper: return "paper";
    case Background::kPhoto: return "photo";
  }
  return "landscape";
}

std::optional<Background> ParseBackground(std::string_view name) {
  if (name == "landscape") return Background::kLandscape;
  if (name == "paper") return Background::kPaper;
  if (name == "photo") return Background::kPhoto;
  return std::nullopt;
}

std::string DefaultStrokesPath() {
  namespace fs = std::filesystem;
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("DANQING_DATA_DIR"); env != nullptr && *env != '\0') dirs.emplace_back(env);
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back(exe.parent_path() / ".." / "data");
  if (std::string_view(DANQING_BUILD_DATA_DIR).size() > 0) dirs.emplace_back(DANQING_BUILD_DATA_DIR);
  dirs.emplace_back("/usr/share/danqing");
  for (const auto& d : dirs) {
    fs::path p = d / "strokes.bin";
    if (fs::is_regular_file(p, ec)) return p.lexically_normal().string();
  }
  return {};
}

Renderer::Renderer() = default;
Renderer::~Renderer() = default;

Result<std::unique_ptr<Renderer>> Renderer::Create(const RendererConfig& config) {
  std::unique_ptr<Renderer> r(new Renderer());
  r->strokes_path_ = config.strokes_path.empty() ? DefaultStrokesPath() : config.strokes_path;
  if (r->strokes_path_.empty()) {
    return NotFound(
        "stroke data strokes.bin not found (looked in $DANQING_DATA_DIR, <exe>/../data, the build tree, "
        "/usr/share/danqing); build the danqing_strokes target or set DANQING_DATA_DIR");
  }
  auto sd = StrokeData::Open(r->strokes_path_);
  if (!sd.ok()) return sd.status();
  r->strokes_ = std::move(sd).value();
  if (!config.no_font) {
    std::string font_path = config.font_path.empty() ? kDefaultFont : config.font_path;
    auto f = GlyphFont::Open(font_path);
    if (f.ok()) {
      r->font_ = std::move(f).value();
    } else {
      spdlog::warn("render: fallback font off: {}", f.status().ToString());
    }
  }
  // The running and cursive forms (issue 27), beside the stroke data unless
  // given: absent ones make xing and cao fall back (counted per render).
  if (!config.no_cursive) {
    const std::string dir = !config.cursive_dir.empty()
                                ? config.cursive_dir
                                : std::filesystem::path(r->strokes_path_).parent_path().string();
    auto forms = CursiveForms::Open(dir);
    if (forms.ok()) {
      r->forms_ = std::move(forms).value();
    } else if (forms.status().code() == StatusCode::kNotFound) {
      spdlog::warn("render: xing and cao from the stroke data (no forms): {}",
                   forms.status().ToString());
    } else {
      return forms.status();
    }
  }
  if (r->forms_ != nullptr) {
    // Each font draws its glyphs at its own size in the em: scale a style's
    // forms so that common characters span what the stroke data's do.
    for (Style st : {Style::kXing, Style::kCao}) {
      const StrokeData* file = r->forms_->forms(st);
      if (file == nullptr) continue;
      float sum = 0, ref = 0;
      for (char32_t c : std::u32string_view(U"永国風风山水日月人天地之心春秋花")) {
        CharStrokes form, kai;
        if (!file->Lookup(c, &form) || !r->strokes_->Lookup(c, &kai)) continue;
        const float fe = FormExtent(form), ke = FormExtent(kai);
        if (fe <= 0 || ke <= 0) continue;
        sum += fe;
        ref += ke;
      }
      if (sum > 0) r->form_scale_[static_cast<int>(st)] = std::clamp(ref / sum, 0.6f, 1.6f);
    }
  }
  r->textures_ = std::make_unique<Textures>(Textures::Build());

  // The backend for the heavy passes (backend.h).
  std::string choice_name = config.backend;
  if (choice_name.empty()) {
    const char* env = std::getenv("DANQING_RENDER_BACKEND");
    choice_name = env != nullptr && *env != '\0' ? env : "auto";
  }
  const auto choice = ParseBackendChoice(choice_name);
  if (!choice) {
    return InvalidArgument("render backend '" + choice_name + "': expected auto, cpu or gpu");
  }
  if (config.accelerator) {
    r->accelerator_ = config.accelerator;
    r->backend_ = "accelerator";
    r->backend_reason_ = "accelerator given by the caller (tests)";
  } else {
    const CudaProbe probe = *choice == BackendChoice::kCpu ? CudaProbe{} : ProbeCuda();
    BackendDecision d = DecideBackend(*choice, std::getenv("NVIDIA_VISIBLE_DEVICES"), probe);
    if (!d.status.ok()) {
      spdlog::error("render: {}", d.reason);
      return d.status;
    }
    r->backend_reason_ = d.reason;
    if (d.gpu) {
      size_t budget = config.gpu_memory_budget;
      if (const char* mb = std::getenv("DANQING_GPU_MEMORY_MB"); budget == 0 && mb != nullptr) {
        budget = static_cast<size_t>(std::strtoull(mb, nullptr, 10)) << 20;
      }
      auto ctx = CudaContext::Create(*r->textures_, budget);
      if (ctx.ok()) {
        r->cuda_ = std::move(ctx).value();
        r->backend_ = "cuda";
        r->gpu_name_ = probe.name;
        r->gpu_cc_major_ = probe.major;
        r->gpu_cc_minor_ = probe.minor;
        r->backend_reason_ += ", device memory budget " + std::to_string(r->cuda_->budget_bytes() >> 20) + " MiB";
      } else if (*choice == BackendChoice::kGpu) {
        return ctx.status().WithContext("render backend gpu requested");
      } else {
        r->backend_reason_ = "cpu: CUDA init failed: " + ctx.status().ToString();
      }
    }
  }
  spdlog::info("render: backend {} ({})", r->backend_, r->backend_reason_);
  return r;
}

bool Renderer::HasStrokes(char32_t c) const { return strokes_->Has(c); }

std::string Renderer::gpu_lost() const { return cuda_ != nullptr ? cuda_->lost_reason() : std::string(); }

bool Renderer::CanRender(char32_t c) const {
  return strokes_->Has(c) || (font_ != nullptr && font_->Has(c));
}

Result<image::Image> Renderer::Render(const Inscription& text, const RenderOptions& opts,
                                      RenderStats* stats) const {
  return RenderDetailed(text, opts, stats, nullptr);
}

Result<image::Image> Renderer::Render(const Inscription& text, const RenderOptions& opts,
                                      RenderStats* stats, Writing* writing) const {
  return RenderDetailed(text, opts, stats, nullptr, writing);
}

Result<image::Image> Renderer::RenderDetailed(const Inscription& text, const RenderOptions& opts,
                                              RenderStats* stats_out, Detail* detail,
                                              Writing* writing) const {
  const auto t0 = Clock::now();
  const int w = opts.width, h = opts.height;
  if (w < kMinSide || h < kMinSide || w > kMaxSide || h > kMaxSide ||
      static_cast<int64_t>(w) * h > kMaxPixels) {
    return InvalidArgument("canvas " + std::to_string(w) + "x" + std::to_string(h) + " out of range: each side " +
                           std::to_string(kMinSide) + ".." + std::to_string(kMaxSide) + " px, at most 7680x4320 pixels");
  }
  if (opts.threads < 1 || opts.threads > 256) return InvalidArgument("threads must be 1..256");
  if (opts.background == Background::kPhoto && (opts.photo == nullptr || opts.photo->empty())) {
    return InvalidArgument("background 'photo' needs a photo");
  }
  if (opts.photo != nullptr && !opts.photo->empty() &&
      opts.photo->rgb.size() != static_cast<size_t>(opts.photo->width) * static_cast<size_t>(opts.photo->height) * 3) {
    return InvalidArgument("photo buffer size does not match its dimensions");
  }
  // Before any work: each field valid UTF-8 and bounded in bytes (callers
  // such as `danqing render` pass what a user typed).
  std::u32string fields[5];
  {
    const std::pair<const char*, const std::string*> named[5] = {{"text", &text.text},
                                                                 {"title", &text.title},
                                                                 {"signature", &text.signature},
                                                                 {"date", &text.date},
                                                                 {"seal text", &opts.seal_text}};
    for (size_t f = 0; f < 5; ++f) {
      const auto& [name, field] = named[f];
      const size_t limit = f == 0 ? kMaxTextBytes : kMaxFieldBytes;
      if (field->size() > limit) {
        return InvalidArgument(std::string(name) + " is " + std::to_string(field->size()) +
                               " bytes, longer than " + std::to_string(limit));
      }
      auto cps = DecodeUtf8(*field);
      if (!cps.ok()) return InvalidArgument(std::string(name) + " is " + cps.status().message());
      fields[f] = std::move(cps).value();
    }
  }
  RenderStats stats;
  const StyleSet style = StyleFor(opts.style);
  auto keep = [&](const std::u32string& in, std::vector<char32_t>* out) {
    for (char32_t c : in) {
      if (IsBreak(c)) continue;
      if (CanRender(c))
        out->push_back(c);
      else
        ++stats.dropped_characters;
    }
  };
  // Poem lines, split at punctuation and line breaks.
  LayoutInput li;
  li.vertical = opts.vertical;
  {
    std::vector<char32_t> cur;
    for (char32_t c : fields[0]) {
      if (IsBreak(c)) {
        if (!cur.empty()) li.lines.push_back(std::move(cur));
        cur.clear();
        continue;
      }
      if (CanRender(c)) cur.push_back(c); else ++stats.dropped_characters;
    }
    if (!cur.empty()) li.lines.push_back(std::move(cur));
  }
  keep(fields[1], &li.title);
  keep(fields[2], &li.signature);
  keep(fields[3], &li.signature);

  const float W = static_cast<float>(w), H = static_cast<float>(h);
  Region region, full{0.05f * W, 0.05f * H, 0.95f * W, 0.95f * H};
  if (opts.background == Background::kPaper) {
    region = {0.08f * W, 0.08f * H, 0.92f * W, 0.92f * H};
  } else if (opts.vertical) {
    region = {0.42f * W, 0.07f * H, 0.95f * W, 0.86f * H};
  } else {
    region = {0.08f * W, 0.06f * H, 0.92f * W, 0.52f * H};
  }
  const float min_cell = std::max(6.0f, std::min(W, H) / 180.0f);
  auto lay = Layout(li, region, full, min_cell);
  if (!lay.ok()) return lay.status();
  const LayoutResult& layout = *lay;

  Rng rng(opts.seed, 0x1a70u);

  // Background plan: a landscape or plain paper, or the photo, which the
  // passes turn into a wash at a third of the resolution.
  const auto tb = Clock::now();
  const CanvasPlanes planes = PlanesFor(w, h);
  PhotoInput photo;
  Rng bg_rng(opts.seed, 0xb6u);
  std::vector<Dab> dabs;
  dabs.reserve(200000);
  LandscapeParams land;
  const bool photo_bg = opts.background == Background::kPhoto;
  if (opts.background == Background::kLandscape) {
    land = MakeLandscape(bg_rng, opts.vertical);
    PlanTrees(land.ridges[2], *textures_, layout.block, bg_rng, W, H, &dabs);
    PlanTrees(land.ridges[1], *textures_, layout.block, bg_rng, W, H, &dabs);
  } else if (photo_bg) {
    photo = CoverPhoto(*opts.photo, planes, layout.block.x0, layout.block.y0, layout.block.x1, layout.block.y1);
  } else {
    land.sky = 0.025f;
  }
  stats.background_ms = Ms(tb, Clock::now());
  const auto tp = Clock::now();
  // Column flow (xing, cao): each poem character's size from its stroke
  // count, the column re-paced along its length from its top with those
  // sizes, its axis drifting sideways; deterministic per seed.
  const bool flowing = opts.style != Style::kKai;
  std::vector<Cell> cells = layout.cells;
  if (flowing) {
    const Flow flow = FlowFor(opts.style);
    Rng fr(opts.seed, 0xf10u);
    for (size_t i = 0; i < cells.size();) {
      size_t j = i;
      while (j < cells.size() && cells[j].run == cells[i].run && cells[j].role == cells[i].role)
        ++j;
      if (cells[i].role == Role::kPoem) {
        const float size = cells[i].size;
        float pos = (opts.vertical ? cells[i].cy : cells[i].cx) - 0.5f * size;
        const float phase = fr.Range(0.0f, 6.2832f), freq = fr.Range(0.4f, 0.7f);
        for (size_t k = i; k < j; ++k) {
          CharStrokes ks;
          int n = strokes_->Lookup(cells[k].c, &ks) ? static_cast<int>(ks.strokes.size()) : 9;
          const float d = std::clamp((static_cast<float>(n) - 3.0f) / 11.0f, 0.0f, 1.0f);
          const float scale =
              std::clamp(flow.lo + (flow.hi - flow.lo) * d + 0.06f * fr.Signed(), flow.lo, flow.hi);
          const float pitch = size * scale * flow.pitch;
          const float along = pos + 0.5f * pitch;
          pos += pitch;
          const float across =
              size * flow.drift * std::sin(phase + freq * (along - cells[i].cy) / size);
          Cell& c = cells[k];
          c.size = size * scale;
          if (opts.vertical) {
            c.cy = along;
            c.cx += across;
          } else {
            c.cx = along;
            c.cy += across;
          }
        }
      }
      i = j;
    }
  }
  // Stroke plans: each character's brush path, ink load draining as it writes
  // and reloaded every few characters (kai) or at each phrase (xing, cao).
  InkState ink;
  int since_reload = 0;
  int until_reload = style.reload_min;
  PenPoint prev_last;
  int prev_run = -1;
  Role prev_role = Role::kPoem;
  std::vector<WrittenSpan> spans;  // the writing's characters (only when asked for)
  bool reloaded = false;
  for (size_t i = 0; i < cells.size(); ++i) {
    const Cell& cell = cells[i];
    Rng cr(opts.seed, 0xc000u + i);
    const size_t span_begin = dabs.size();
    if (!flowing) {
      if (until_reload-- <= 0) {
        reloaded = true;
        ink.load = 0.9f + 0.1f * cr.Uniform();
        until_reload = style.reload_min + cr.Int(style.reload_max - style.reload_min + 1);
      }
    } else if (i > 0 && (cell.line_start || cell.role != prev_role || since_reload >= 9)) {
      // A phrase begins (or a long one runs on): the brush is dipped again.
      reloaded = true;
      ink.load = 0.96f + 0.04f * cr.Uniform();
      since_reload = 0;
    }
    ++since_reload;
    StyleSet cs = style;
    if (cell.role == Role::kSignature) {
      cs = StyleFor(opts.style == Style::kKai ? Style::kXing : opts.style);
    }
    // xing, cao: the calligrapher's form, else one style down (counted).
    CharStrokes ch;
    int form = -1;
    if (flowing) {
      Style from = opts.style;
      if (forms_ != nullptr && forms_->Lookup(opts.style, cell.c, &ch, &from) &&
          !ch.strokes.empty()) {
        form = static_cast<int>(from);
        if (from != opts.style) ++stats.forms_to_xing;
        ++stats.form_characters;
        ScaleForm(&ch, form_scale_[form]);
        JoinTouchingPaths(&ch);
        const Flow flow = FlowFor(opts.style);
        cs.brush = FormBrush(from);
        // Links run down a column, from a character's last stroke to the
        // next one's first; across a row they would cut through the glyphs.
        cs.brush.link_chars = opts.vertical ? FormBrush(opts.style).link_chars : 0.0f;
        cs.jitter_scale = 0.03f;
        cs.jitter_rot = cell.role == Role::kPoem ? flow.tilt : 0.02f;
        cs.jitter_shear = 0.02f;
        cs.jitter_offset = 0.01f;
        cs.glyph = 1.0f;
      } else {
        ch.strokes.clear();
        ++stats.forms_to_kai;
      }
    }
    Affine xf = CharAffine(cell, cs, cr);
    Placement pl;
    pl.c = cell.c;
    std::copy(std::begin(xf.m), std::end(xf.m), std::begin(pl.m));
    pl.cell = cell.size;
    pl.role = static_cast<int>(cell.role);
    pl.run = cell.run;
    pl.form = form;
    PenPoint first, last;
    if (form >= 0) {
      PlanCharacter(ch, xf, cs.brush, cell.size, cr, &ink, &dabs, &first, &last);
    } else if (strokes_->Lookup(cell.c, &ch)) {
      PlanCharacter(ch, xf, cs.brush, cell.size, cr, &ink, &dabs, &first, &last);
    } else {
      std::vector<uint8_t> raster;
      int res = std::clamp(static_cast<int>(cell.size * 1.2f), 24, 512);
      if (font_ != nullptr && font_->RasterizeBox(cell.c, res, &raster)) {
        PlanRaster(raster, res, xf, cr, &ink, cell.size, &dabs);
        pl.fallback = true;
        ++stats.fallback_characters;
      } else {
        ++stats.dropped_characters;
        continue;
      }
    }
    const size_t span_link = dabs.size();
    if (prev_last.valid && first.valid && cell.run == prev_run && cell.role == prev_role &&
        cr.Uniform() < cs.brush.link_chars) {
      PlanHairline(prev_last, first, cell.size * 1.6f, cr, ink, &dabs);
    }
    if (writing != nullptr) {
      WrittenSpan sp;
      sp.begin = span_begin;
      sp.link = span_link;
      sp.end = dabs.size();
      sp.cell = cell.size;
      sp.run = cell.run;
      sp.role = static_cast<int>(cell.role);
      sp.reload = reloaded;
      spans.push_back(sp);
    }
    reloaded = false;
    prev_last = last;
    prev_run = cell.run;
    prev_role = cell.role;
    ++stats.characters;
    if (detail != nullptr) detail->placements.push_back(pl);
  }
  stats.dabs = dabs.size();
  const double plan_ms = Ms(tp, Clock::now());

  // The heavy passes: on the accelerator when the Renderer has one and it can
  // take this render, else (or when it fails mid-render) on the CPU.
  image::Image img;
  img.width = w;
  img.height = h;
  img.rgb.resize(static_cast<size_t>(w) * static_cast<size_t>(h) * 3);
  PassPlan plan;
  plan.planes = planes;
  plan.dabs = &dabs;
  if (photo_bg) plan.photo = &photo; else plan.landscape = &land;
  plan.diffuse_iterations = std::clamp(static_cast<int>(layout.body_size / 40.0f), 1, 6);
  plan.look.fibre_dx = static_cast<int>(opts.seed % 512);
  plan.look.fibre_dy = static_cast<int>((opts.seed / 512) % 512);
  if (photo_bg) {
    plan.look.paper_rgb[0] = 238; plan.look.paper_rgb[1] = 232; plan.look.paper_rgb[2] = 216;
  }
  // The writing: each dab's time, and where the passes put the planes.
  WritingSchedule schedule;
  WritingPlan writing_plan;
  std::vector<WriteSegment> segments;
  if (writing != nullptr) {
    schedule = ScheduleWriting(dabs, spans, opts.style);
    writing->width = w;
    writing->height = h;
    writing->plane_width = planes.ww;
    writing->plane_height = planes.wh;
    writing->ms.resize(static_cast<size_t>(planes.ww) *
                       static_cast<size_t>(planes.wh));  // the passes fill it
    writing->background.width = w;
    writing->background.height = h;
    writing->background.rgb.resize(static_cast<size_t>(w) * static_cast<size_t>(h) * 3);
    writing->seal_ms = schedule.seal_ms;
    writing->end_ms = schedule.end_ms;
    segments = BuildWriteSegments(dabs, schedule.dab_ms, WritingHaloPx(plan.diffuse_iterations));
    writing_plan.segments = &segments;
    writing_plan.ms_out = writing->ms.data();
    writing_plan.background_out = writing->background.rgb.data();
    plan.writing = &writing_plan;
  }
  Plane detail_ink;
  PassTimes times;
  Plane* ink_out = detail != nullptr ? &detail_ink : nullptr;
  // passes_ms runs from taking an accelerator (its budget wait and device
  // allocations) to the end of the passes that produced the image, so the
  // rest of total_ms is host work only.
  const auto tpasses = Clock::now();
  bool done = false;
  if (accelerator_ || cuda_ != nullptr) {
    auto p = accelerator_ ? accelerator_(plan) : cuda_->MakePasses(plan);
    if (p.ok()) {
      std::unique_ptr<Passes> accel = std::move(p).value();
      accel->Run(plan, *textures_, img.rgb.data(), ink_out, &times);
      if (Status st = accel->status(); !st.ok()) {
        stats.gpu_error = st.ToString();
      } else {
        stats.backend = accel->name();
        done = true;
      }
      accel.reset();  // frees its device memory for the next render now
    } else {
      stats.gpu_error = p.status().ToString();
    }
  }
  if (!done) {
    if (!stats.gpu_error.empty()) {
      spdlog::warn("render: {} failed, this render runs on the CPU: {}", backend_, stats.gpu_error);
    }
    CpuPasses cpu(opts.threads);
    cpu.Run(plan, *textures_, img.rgb.data(), ink_out, &times);
    if (Status st = cpu.status(); !st.ok()) return st;
    stats.backend = cpu.name();
  }
  stats.passes_ms = Ms(tpasses, Clock::now());
  stats.background_ms += times.background_ms;
  stats.strokes_ms = plan_ms + times.ink_ms;
  stats.diffusion_ms = times.wet_ms;
  stats.compose_ms = times.compose_ms;

  // The seal.
  std::vector<char32_t> seal_chars;
  for (char32_t c : opts.seal_text.empty() ? fields[2] : fields[4]) {
    if (!IsBreak(c) && CanRender(c) && c > 0x2E80 && seal_chars.size() < 4) seal_chars.push_back(c);
  }
  if (seal_chars.size() < 2) seal_chars = {U'丹', U'青'};
  if (seal_chars.size() == 3) seal_chars.resize(2);
  DrawSeal(seal_chars, strokes_.get(), font_.get(), layout.seal_x, layout.seal_y, layout.seal_size, *textures_, rng, &img);
  if (writing != nullptr) {
    // The seal's square (as DrawSeal walks it) is stamped at once, last:
    // every plane pixel whose block it touches.
    const int n = static_cast<int>(std::ceil(layout.seal_size));
    const uint16_t at = static_cast<uint16_t>(std::min<uint32_t>(schedule.seal_ms, kMaxWritingMs));
    if (n >= 6) {
      const int x0 = std::max(0, static_cast<int>(layout.seal_x)),
                y0 = std::max(0, static_cast<int>(layout.seal_y));
      const int x1 = std::min(w - 1, static_cast<int>(layout.seal_x) + n - 1);
      const int y1 = std::min(h - 1, static_cast<int>(layout.seal_y) + n - 1);
      for (int y = y0; y <= y1; ++y) {
        for (int x = x0; x <= x1; ++x) writing->ms[writing->PlaneIndex(x, y)] = at;
      }
    }
  }
  if (detail != nullptr) detail->ink = std::move(detail_ink.v);
  stats.total_ms = Ms(t0, Clock::now());
  if (stats_out != nullptr) *stats_out = stats;
  return img;
}

}  // namespace danqing::render
