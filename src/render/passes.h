// The renderer's heavy passes, as data-parallel loops over pixel rows and dab
// lists behind one small interface: one call runs them all, so a backend can
// keep the planes between passes in its own memory. The CPU implementation is
// the reference; the CUDA backend (issue 11, passes_cuda.h) implements the
// same interface.
//
// Every pass is deterministic: each output pixel is written by one worker,
// which visits the dabs in list order, so the image does not depend on the
// thread count.
//
// Thread-safety: a Passes object is used by one render at a time; the
// Textures it reads are immutable and shared.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "image/image.h"

namespace danqing::render {

// A float plane, row-major.
struct Plane {
  int w = 0, h = 0;
  std::vector<float> v;
  void Reset(int width, int height) {
    w = width;
    h = height;
    v.assign(static_cast<size_t>(w) * static_cast<size_t>(h), 0.0f);
  }
  float* row(int y) { return v.data() + static_cast<size_t>(y) * static_cast<size_t>(w); }
  const float* row(int y) const { return v.data() + static_cast<size_t>(y) * static_cast<size_t>(w); }
};

// Precomputed, tileable noise shared by all renders (built once per Renderer).
struct Textures {
  static constexpr int kFibre = 512;   // paper fibre tile, kFibre x kFibre, 0..1
  static constexpr int kNoise2 = 256;  // smooth value-noise lattice, periodic
  static constexpr int kNoise1 = 4096; // 1-D value noise, periodic
  // 宣纸 (issue 27): faint grain and long, thin, sparse fibres at random
  // angles, 0..255 (Paper: 0..1); large, so no period shows on a canvas up
  // to kPaper pixels a side. Compose's paper tone and wash take it.
  static constexpr int kPaper = 2048;
  std::vector<float> fibre, noise2, noise1;
  std::vector<uint8_t> paper;

  static Textures Build();
  float Fibre(int x, int y) const {
    return fibre[static_cast<size_t>((y & (kFibre - 1)) * kFibre + (x & (kFibre - 1)))];
  }
  float Paper(int x, int y) const {
    return static_cast<float>(
               paper[static_cast<size_t>((y & (kPaper - 1)) * kPaper + (x & (kPaper - 1)))]) *
           (1.0f / 255.0f);
  }
  float Noise1(float t) const;            // smooth, 0..1, period kNoise1
  float Noise2(float x, float y) const;   // smooth, 0..1, period kNoise2
  float Fbm2(float x, float y, int octaves) const;
};

// One brush imprint. The bristles lie across the stroke, along (nx, ny).
struct Dab {
  float x = 0, y = 0, r = 1;  // centre and radius in canvas pixels
  float nx = 0, ny = 1;       // unit normal to the stroke direction
  float ink = 1;              // darkness deposited, 0..1
  float dry = 0;              // 0 wet and full .. 1 bone dry (flying white)
  float wet = 0;              // water carried into the paper, 0..1
  float s = 0;                // distance along the stroke, pixels (streak noise)
  float phase = 0;            // per-stroke random offset for the bristle pattern
};

// A procedural ink-wash landscape, drawn as a wash density plane.
struct Ridge {
  float base = 0.6f;     // ridge height as a fraction of the canvas height (0 top)
  float amp = 0.15f;     // relief, fraction of height
  float freq = 2.0f;     // ridge noise frequency across the width
  float phase = 0;
  float density = 0.4f;  // wash darkness at the ridge
  float mist = 0.2f;     // fraction of the height over which the layer fades into mist
  float x0 = 0, x1 = 1;  // horizontal extent, fractions of the width (soft edges)
};
// Ridge height (fraction of the canvas height, 0 top) at fx (fraction of the width).
float RidgeY(const Ridge& ridge, const Textures& tex, float fx);

// The most ridges a landscape may have (the CUDA backend's table size).
inline constexpr int kMaxRidges = 16;

struct LandscapeParams {
  std::vector<Ridge> ridges;  // far to near, at most kMaxRidges
  float water_top = 2.0f;     // fraction of height where water lines start (>1: none)
  float water_phase = 0;
  float sky = 0.0f;           // faint wash at the top
};
// Every ridge's height (RidgeY) at the centre of each of w columns, ridge by
// ridge: w * ridges.size() values, the table both backends' landscape reads.
std::vector<float> RidgeTable(const LandscapeParams& p, const Textures& tex, int w);

// The planes one w x h render uses: full-resolution ink, wet ink at half
// resolution, the background wash (landscape or photo) and paper blotches at a
// third. One definition for the renderer, the backends and the device budget.
struct CanvasPlanes {
  int w = 0, h = 0;    // canvas, full resolution
  int ww = 0, wh = 0;  // wet ink
  int lw = 0, lh = 0;  // wash and blotches
  float wet_scale() const { return static_cast<float>(ww) / static_cast<float>(w); }
  // Pixels of each of the CUDA backend's two wet buffers: the wet plane, or
  // the wash if larger (they double as the photo wash's scratch planes).
  size_t wet_buffer_px() const {
    const size_t wet = static_cast<size_t>(ww) * static_cast<size_t>(wh);
    const size_t wash = static_cast<size_t>(lw) * static_cast<size_t>(lh);
    return wet > wash ? wet : wash;
  }
};
CanvasPlanes PlanesFor(int w, int h);

// The rectangle of the wet plane (ww x wh at `scale`) that StampWet may write
// for these dabs: every pixel it can make non-zero is inside. Empty (x1 < 0)
// when no dab carries water. Lets a backend that keeps the plane on the device
// bound the diffusion without reading the plane back.
struct PixelBox {
  int x0 = 0, y0 = 0, x1 = -1, y1 = -1;  // inclusive
  bool empty() const { return x1 < x0 || y1 < y0; }
  // n pixels more on every side, kept inside a w x h plane.
  PixelBox Grown(int n, int w, int h) const {
    return PixelBox{x0 - n < 0 ? 0 : x0 - n, y0 - n < 0 ? 0 : y0 - n, x1 + n > w - 1 ? w - 1 : x1 + n,
                    y1 + n > h - 1 ? h - 1 : y1 + n};
  }
};
PixelBox WetBounds(const std::vector<Dab>& dabs, float scale, int ww, int wh);

struct ComposeInputs {
  const Plane* wash_low = nullptr;  // background wash density (downsampled)
  const Plane* ink = nullptr;       // full resolution ink density
  const Plane* wet_half = nullptr;  // diffused wet ink, half resolution
  float paper_rgb[3] = {236, 226, 204};
  float wash_rgb[3] = {60, 62, 64};
  float ink_rgb[3] = {20, 18, 17};
  // The colour of pale washes (dilute ink: far ridges, mist); denser washes
  // turn to wash_rgb (paint::WashChannel).
  float wash_light_rgb[3] = {96, 110, 128};
  int fibre_dx = 0, fibre_dy = 0;  // seed offset into the fibre and paper tiles
};

// The visitor's photo as the background. The passes turn its window into an
// ink painting (PhotoWash, issue 27): a resample to lw x lh
// (image::MakeResampleTaps), the luminance, an edge-preserving smoothing
// (paint::PhotoSmooth), its tones reduced to a few ink values
// (paint::PhotoTone), wet bleeding from the dark areas and brush lines along
// the strong edges (paint::PhotoInk), lighter under the text block.
struct PhotoInput {
  const image::Image* image = nullptr;
  int x0 = 0, y0 = 0, w = 0, h = 0;             // the window of `image` that covers the canvas
  float text_x0 = 0, text_y0 = 0, text_x1 = 0, text_y1 = 0;  // the text block, canvas pixels
  // The window's tonal range (luminance 0..1 at its 2nd and 98th
  // percentiles, at least 0.25 apart), which the wash's ink values span: the
  // lights of any photo show the paper, its darks the darkest ink.
  float lum_lo = 0, lum_hi = 1;
};
// The largest centred window of `photo` with the aspect of the lw x lh wash
// (cover fit), its tonal range (from at most ~65k of its pixels), and the
// text block; the photo is not copied.
PhotoInput CoverPhoto(const image::Image& photo, const CanvasPlanes& planes, float text_x0, float text_y0,
                      float text_x1, float text_y1);

// The writing (issue 28): when the brush first reached each pixel, recorded
// in the same render. The times are kept at the wet plane's half resolution
// (ww x wh): canvas pixel (x, y) has the time of plane pixel
// (min(x / 2, ww - 1), min(y / 2, wh - 1)). The Renderer turns its dab list
// and the writing rhythm into WriteSegments (render/writing.h): runs of
// consecutive dabs of one stroke as capsules on that plane, each covering
// its dabs' footprints (the ink's reach, the wet halo, the 2x2 block), with
// the brush's time running from t0 to t1 along it. A plane pixel's time is
// the smallest over the capsules that hold its centre, t0 + (t1 - t0) * u at
// the nearest point u (0..1) of the capsule's axis, rounded. A capsule
// covers a stroke in a few pieces instead of a dab every pixel or two, so
// the plane costs a small part of the ink pass.
inline constexpr uint16_t kNotWritten = 0xFFFF;
struct WriteSegment {
  float x0 = 0, y0 = 0, x1 = 0, y1 = 0;  // axis, half-resolution plane pixels
  float r = 0;                           // radius, plane pixels
  float t0 = 0, t1 = 0;                  // ms at (x0, y0) and (x1, y1), t0 <= t1 < kNotWritten
};
// The time a capsule gives the plane pixel whose centre is (px, py), or
// kNotWritten outside it. Both backends use this arithmetic (nvcc compiles
// it for the device too).
#ifdef __CUDACC__
#define DANQING_HOST_DEVICE __host__ __device__
#else
#define DANQING_HOST_DEVICE
#endif
DANQING_HOST_DEVICE inline uint16_t SegmentTime(const WriteSegment& s, float px, float py) {
  const float dx = s.x1 - s.x0, dy = s.y1 - s.y0;
  const float l2 = dx * dx + dy * dy;
  float u = 0.0f;
  if (l2 > 0.0f) {
    u = ((px - s.x0) * dx + (py - s.y0) * dy) / l2;
    u = u < 0.0f ? 0.0f : (u > 1.0f ? 1.0f : u);
  }
  const float qx = s.x0 + u * dx - px, qy = s.y0 + u * dy - py;
  if (qx * qx + qy * qy > s.r * s.r) return kNotWritten;
  return static_cast<uint16_t>(s.t0 + (s.t1 - s.t0) * u + 0.5f);
}
struct WritingPlan {
  const std::vector<WriteSegment>* segments = nullptr;
  uint16_t* ms_out = nullptr;  // ww*wh, kNotWritten where no capsule reached
  // w*h*3 RGB: the page before the writing where the brush comes (every
  // pixel whose time is not kNotWritten: paper, wash and blotches without
  // ink); elsewhere the final image, which equals it there.
  uint8_t* background_out = nullptr;
};

// Everything the heavy passes of one render need. They run in this order:
// the background wash (a landscape or a photo), the ink of every dab, the
// wet ink and its diffusion, the composition to RGB.
struct PassPlan {
  CanvasPlanes planes;
  const std::vector<Dab>* dabs = nullptr;
  // Exactly one of: a landscape to draw into the wash, or a photo to turn
  // into it (the passes only read the photo).
  const LandscapeParams* landscape = nullptr;
  const PhotoInput* photo = nullptr;
  int diffuse_iterations = 1;
  // The colours and the fibre offset; its plane pointers are ignored.
  ComposeInputs look;
  // Optional: also record the writing (nullptr: not asked for, no cost).
  const WritingPlan* writing = nullptr;
};
// OK, or INTERNAL naming what is wrong: sizes that are not PlanesFor(w, h),
// no dab list, not exactly one of landscape and photo, a photo whose window
// is empty or not inside it (or whose pixels do not match its size), more
// than kMaxRidges ridges, a writing plan without its outputs or with a time
// per dab that does not match the dab list. Both backends check it first.
Status CheckPlan(const PassPlan& plan);

// Wall time of each stage of Run, in milliseconds (on a device: between
// events on its stream).
struct PassTimes {
  double background_ms = 0, ink_ms = 0, wet_ms = 0, compose_ms = 0;
};

class Passes {
 public:
  virtual ~Passes() = default;
  // Runs every pass of `plan` and writes w*h*3 bytes of RGB to `rgb`. With
  // `ink_out`, also hands back the full-resolution ink plane (tools, tests).
  // Planes between the passes stay where the backend keeps them (host memory
  // for the CPU, device memory for CUDA).
  virtual void Run(const PassPlan& plan, const Textures& tex, uint8_t* rgb, Plane* ink_out,
                   PassTimes* times) = 0;
  // The backend's name ("cpu", "cuda") and the first error a pass hit (an
  // accelerator stops at an error; the Renderer then redoes the render on the
  // CPU). The CPU passes fail only on a malformed plan.
  virtual const char* name() const { return "cpu"; }
  virtual Status status() const { return Status::Ok(); }
};

// The CPU reference. Its single passes are public for the seal (which stamps
// a small mask) and for tests.
class CpuPasses final : public Passes {
 public:
  explicit CpuPasses(int threads) : threads_(threads < 1 ? 1 : threads) {}
  // A plan that fails CheckPlan writes nothing and sets status().
  void Run(const PassPlan& plan, const Textures& tex, uint8_t* rgb, Plane* ink_out,
           PassTimes* times) override;
  Status status() const override { return status_; }

  // Ink: max-composites every dab's bristle imprint into `ink` (full res).
  // Wet: max-composites each dab's water (a plain disk) into `wet` at
  // `wet_scale` (0.5 for the half-resolution plane).
  void StampDabs(const std::vector<Dab>& dabs, const Textures& tex, Plane* ink) const;
  void StampWet(const std::vector<Dab>& dabs, float wet_scale, Plane* wet) const;
  // Wet ink creeping into paper fibres: `iterations` steps of fibre-weighted
  // spreading (a cheap MoXi-style step).
  void Diffuse(const Textures& tex, int iterations, Plane* wet) const;
  // The landscape wash density at the plane's (low) resolution.
  void Landscape(const LandscapeParams& p, const Textures& tex, Plane* wash) const;
  // The photo's wash density into `wash` (the planes' lw x lh; PhotoInput);
  // the resample runs on one thread, the rest on the pass's threads. A window
  // CheckPlan refuses gives an all-zero wash.
  void PhotoWash(const PhotoInput& photo, const CanvasPlanes& planes, Plane* wash) const;
  // Paper, wash and ink to RGB8 (w*h*3 bytes). With `background`, also the
  // writing's background (WritingPlan::background_out) from the same rows.
  struct BackgroundOut {
    uint8_t* rgb;        // w*h*3
    const uint16_t* ms;  // the half-resolution time plane, ww x wh
    int ww, wh;
  };
  void Compose(const ComposeInputs& in, const Textures& tex, int w, int h, uint8_t* rgb,
               const BackgroundOut* background = nullptr) const;
  // The write time of every pixel (WritingPlan) into the half-resolution
  // `ms` (ww x wh), which must hold kNotWritten before the first call.
  void StampWriteTimes(const std::vector<WriteSegment>& segments, int ww, int wh,
                       uint16_t* ms) const;

 private:
  int threads_;
  Status status_;
};

// Runs fn(begin, end) over [0, n) split into contiguous chunks on up to
// `threads` threads (the caller's thread included).
template <typename Fn>
void ParallelFor(int threads, int n, Fn fn);

}  // namespace danqing::render

#include "render/parallel_inl.h"
