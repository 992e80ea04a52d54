// danqing::render: a poem written in calligraphy over an ink-wash painting.
//
// The renderer plans each character's strokes, in kai from the stroke data
// (medians in writing order, widths from the outlines), in xing and cao from
// the calligraphers' forms (paths and widths recovered from the 行书/草书
// glyphs, render/cursive_forms.h; where the font joins two paths the brush
// keeps moving, where it lifts the brush lifts), simulates a brush along them
// (pressure, speed, a bristle ink load that drains into flying white, wet ink
// diffusing into paper fibres) in kai, xing or cao style, lays the poem out in
// columns with title, signature and a red seal, and composes it over a
// procedural landscape, plain rice paper, or the visitor's photo as ink wash.
// Characters missing from the stroke data are inked from a Kai font
// (FreeType); characters neither has are dropped and counted. A xing or cao
// character its font lacks falls back a style (cao -> xing -> kai), counted.
//
// Column flow (行气) in xing and cao, deterministic per seed: a character's
// size follows its stroke count within a per-style range, each is tilted a
// little, the column's axis drifts gently sideways, cao is set tighter and
// joins some consecutive characters with one continuous stroke, and the brush
// is dipped at each phrase (a line of the text), so a phrase runs 浓 to 枯.
//
// Errors (Render): INVALID_ARGUMENT for a bad canvas size, a photo background
// without a photo, or text with nothing renderable and no title/signature is
// fine (an empty inscription is a plain painting). Create: NOT_FOUND when the
// stroke data cannot be found; a missing font is not an error (fallback off).
//
// Thread-safety: a Renderer is immutable after Create(); Render() may run on
// many threads at once on one Renderer.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "image/image.h"
#include "render/cuda_backend_ns.h"

namespace danqing::render {

enum class Style { kKai, kXing, kCao };
enum class Background { kLandscape, kPaper, kPhoto };  // kPhoto: the visitor's photo as ink-wash

// UTF-8. Punctuation and whitespace in `text` break lines (columns) and are not
// written; each non-empty line starts a new column when the lines fit.
struct Inscription {
  std::string text;
  std::string title;
  std::string signature;
  std::string date;  // written after the signature, e.g. "甲辰春"
};

// Bounds on an inscription's fields, in bytes of UTF-8: Render refuses more
// (and malformed UTF-8) with INVALID_ARGUMENT naming the field.
inline constexpr size_t kMaxTextBytes = 16384;  // text
inline constexpr size_t kMaxFieldBytes = 1024;  // title, signature, date, seal text

// Canvas limits: each side in [kMinSide, kMaxSide], at most kMaxPixels.
inline constexpr int kMinSide = 64;
inline constexpr int kMaxSide = 8192;
inline constexpr int64_t kMaxPixels = 7680LL * 4320LL;

struct RenderOptions {
  int width = 1920;
  int height = 1080;
  Style style = Style::kXing;
  Background background = Background::kLandscape;
  uint64_t seed = 0;          // same seed and inputs: same image
  bool vertical = true;       // columns right to left; false: rows left to right
  const image::Image* photo = nullptr;  // required for Background::kPhoto
  int threads = 1;            // worker threads for the heavy passes
  std::string seal_text;      // 2..4 characters for the seal; empty: from the signature, else "丹青"
};

struct RenderStats {
  double total_ms = 0, background_ms = 0, strokes_ms = 0, diffusion_ms = 0, compose_ms = 0;
  // The heavy passes on whichever backend ran them, from taking an
  // accelerator (budget wait, device allocations) to the end of the passes
  // that made the image (a CPU redo included); the rest of total_ms is host
  // work no accelerator shortens (layout, stroke planning, the seal, the
  // output buffer).
  double passes_ms = 0;
  int characters = 0;           // characters written (poem, title, signature, date)
  int fallback_characters = 0;  // of those, inked from the font
  int dropped_characters = 0;   // in neither the stroke data nor the font
  // xing and cao (issue 27): characters written from the calligrapher's form
  // of the style asked for; those whose font lacks them, written one style
  // down instead: cao from the xing form, and (either style) from the kai
  // stroke data (also when the forms files are absent or a form is empty).
  int form_characters = 0;
  int forms_to_xing = 0;
  int forms_to_kai = 0;
  size_t dabs = 0;              // brush imprints stamped
  std::string backend = "cpu";  // which backend ran the heavy passes: "cpu" or "cuda"
  std::string gpu_error;        // non-empty: the GPU could not take or finish it, the CPU did
};

// The writing (issue 28), recorded in the same render when asked for: when
// the brush first reached each pixel, in writing order with the brush's
// rhythm (render/writing.h), and the page before any writing. A player shows
// `background` and, at time t, the final image wherever ms <= t; from end_ms
// on, the final image. Every pixel where the final image differs from the
// background has a time (the seal's square has seal_ms).
struct Writing {
  int width = 0, height = 0;  // the canvas
  // The times, at half resolution (plane_width x plane_height, w/2 x h/2):
  // milliseconds from the start, 0xFFFF where the brush never came.
  int plane_width = 0, plane_height = 0;
  std::vector<uint16_t> ms;
  // The plane pixel of canvas pixel (x, y).
  size_t PlaneIndex(int x, int y) const {
    const int px = x / 2 < plane_width - 1 ? x / 2 : plane_width - 1;
    const int py = y / 2 < plane_height - 1 ? y / 2 : plane_height - 1;
    return static_cast<size_t>(py) * static_cast<size_t>(plane_width) + static_cast<size_t>(px);
  }
  image::Image background;   // the painting without ink and seal
  uint32_t seal_ms = 0;      // when the seal is stamped
  uint32_t end_ms = 0;       // the whole writing, the seal and a short hold included
};

class Passes;
struct PassPlan;

struct RendererConfig {
  // Empty: $DANQING_DATA_DIR/strokes.bin, <exe dir>/../data/strokes.bin, the
  // build tree's data dir, /usr/share/danqing/strokes.bin (first that exists).
  std::string strokes_path;
  // Empty: /usr/share/fonts/truetype/arphic/ukai.ttc. A font that cannot be
  // opened turns the fallback off (logged), it is not an error.
  std::string font_path;
  // True: do not load any font (tests of the no-font path).
  bool no_font = false;
  // The running and cursive forms, cursive-{xing,cao}.bin (render/
  // cursive_forms.h). Empty: the stroke data's directory. Absent files are
  // not an error: xing and cao fall back to the next style down, counted in
  // RenderStats; a corrupt one makes Create fail (INVALID_ARGUMENT naming it).
  std::string cursive_dir = "";
  bool no_cursive = false;  // true: no forms (xing and cao from the stroke data)
  // The heavy passes' backend: "auto", "cpu" or "gpu" (see render/backend.h).
  // Empty: $DANQING_RENDER_BACKEND, else auto. gpu without a usable device
  // makes Create fail with FAILED_PRECONDITION / UNAVAILABLE.
  std::string backend = "";
  // Device memory the GPU renders may hold together (bytes); 0:
  // $DANQING_GPU_MEMORY_MB, else 80% of the device's free memory.
  size_t gpu_memory_budget = 0;
  // Tests: a stand-in accelerator used instead of CUDA (same fallback rules):
  // the Passes for one render's plan, as CudaContext::MakePasses.
  std::function<Result<std::unique_ptr<Passes>>(const PassPlan& plan)> accelerator = nullptr;
};

class StrokeData;
class GlyphFont;
class CursiveForms;
struct Textures;
inline namespace DANQING_CUDA_BACKEND_DEFAULT_NS {
class CudaContext;
}

class Renderer {
 public:
  static Result<std::unique_ptr<Renderer>> Create(const RendererConfig& config = {});
  ~Renderer();

  // Thread-safe: many renders may run at once on one Renderer.
  Result<image::Image> Render(const Inscription& text, const RenderOptions& opts,
                              RenderStats* stats = nullptr) const;
  // The same render, also recording the writing into `writing` (nullptr:
  // not recorded, as the plain Render).
  Result<image::Image> Render(const Inscription& text, const RenderOptions& opts,
                              RenderStats* stats, Writing* writing) const;
  bool HasStrokes(char32_t c) const;  // in the stroke data
  bool CanRender(char32_t c) const;   // strokes or the fallback font

  const std::string& strokes_path() const { return strokes_path_; }
  bool has_font() const { return font_ != nullptr; }
  // The backend chosen at Create ("cpu", "cuda") and why, as logged.
  const std::string& backend() const { return backend_; }
  const std::string& backend_reason() const { return backend_reason_; }
  // The GPU the CUDA backend renders on (name, compute capability), as the
  // CUDA runtime reported it at Create; empty name without one.
  const std::string& gpu_name() const { return gpu_name_; }
  int gpu_cc_major() const { return gpu_cc_major_; }
  int gpu_cc_minor() const { return gpu_cc_minor_; }
  // Empty, or why the GPU's CUDA context is unusable (renders then run on the
  // CPU until the process is restarted).
  std::string gpu_lost() const;

  // For tests and tools: where each written character landed and the ink
  // density plane (0..1, full resolution) before composition.
  struct Placement {
    char32_t c = 0;
    float m[6] = {1, 0, 0, 0, 1, 0};  // 1024-box (y down) -> canvas pixels: x' = m0 x + m1 y + m2
    float cell = 0;                   // cell size in pixels
    bool fallback = false;
    int role = 0;                     // 0 poem, 1 title, 2 signature/date
    int run = 0;                      // column (vertical) or row
    int form = -1;                    // the Style whose calligrapher's form it is; -1: stroke data
  };
  struct Detail {
    std::vector<Placement> placements;
    std::vector<float> ink;  // width*height
  };
  Result<image::Image> RenderDetailed(const Inscription& text, const RenderOptions& opts,
                                      RenderStats* stats, Detail* detail,
                                      Writing* writing = nullptr) const;
  const GlyphFont* font() const { return font_.get(); }
  const StrokeData* strokes() const { return strokes_.get(); }
  // The running/cursive forms, or nullptr when none were found.
  const CursiveForms* forms() const { return forms_.get(); }

 private:
  Renderer();
  std::string strokes_path_;
  std::unique_ptr<StrokeData> strokes_;
  std::unique_ptr<GlyphFont> font_;
  std::unique_ptr<CursiveForms> forms_;
  float form_scale_[3] = {1, 1, 1};  // per style: the forms' box scaled to the stroke data's size
  std::unique_ptr<Textures> textures_;
  std::string backend_ = "cpu", backend_reason_;
  std::string gpu_name_;
  int gpu_cc_major_ = 0, gpu_cc_minor_ = 0;
  std::unique_ptr<CudaContext> cuda_;
  std::function<Result<std::unique_ptr<Passes>>(const PassPlan&)> accelerator_;
};

std::string_view StyleName(Style style);
std::optional<Style> ParseStyle(std::string_view name);
std::string_view BackgroundName(Background background);
std::optional<Background> ParseBackground(std::string_view name);

// Finds the stroke data file by the default lookup (see RendererConfig).
std::string DefaultStrokesPath();

}  // namespace danqing::render
