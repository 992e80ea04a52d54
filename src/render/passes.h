// The renderer's heavy passes, as data-parallel loops over pixel rows and dab
// lists behind one small interface. The CPU implementation here is the
// reference; a CUDA backend (issue 11) implements the same interface.
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
  std::vector<float> fibre, noise2, noise1;

  static Textures Build();
  float Fibre(int x, int y) const {
    return fibre[static_cast<size_t>((y & (kFibre - 1)) * kFibre + (x & (kFibre - 1)))];
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

struct LandscapeParams {
  std::vector<Ridge> ridges;  // far to near
  float water_top = 2.0f;     // fraction of height where water lines start (>1: none)
  float water_phase = 0;
  float sky = 0.0f;           // faint wash at the top
};

struct ComposeInputs {
  const Plane* wash_low = nullptr;  // background wash density (downsampled)
  const Plane* ink = nullptr;       // full resolution ink density
  const Plane* wet_half = nullptr;  // diffused wet ink, half resolution
  float paper_rgb[3] = {236, 226, 204};
  float wash_rgb[3] = {60, 62, 64};
  float ink_rgb[3] = {20, 18, 17};
  int fibre_dx = 0, fibre_dy = 0;   // seed offset into the fibre tile
};

class Passes {
 public:
  virtual ~Passes() = default;
  // Ink: max-composites every dab's bristle imprint into `ink` (full res).
  // Wet: max-composites each dab's water (a plain disk) into `wet` at
  // `wet_scale` (0.5 for the half-resolution plane).
  virtual void StampDabs(const std::vector<Dab>& dabs, const Textures& tex, Plane* ink) = 0;
  virtual void StampWet(const std::vector<Dab>& dabs, float wet_scale, Plane* wet) = 0;
  // Wet ink creeping into paper fibres: `iterations` steps of fibre-weighted
  // spreading (a cheap MoXi-style step).
  virtual void Diffuse(const Textures& tex, int iterations, Plane* wet) = 0;
  // The landscape wash density at the plane's (low) resolution.
  virtual void Landscape(const LandscapeParams& p, const Textures& tex, Plane* wash) = 0;
  // Paper, wash and ink to RGB8 (w*h*3 bytes).
  virtual void Compose(const ComposeInputs& in, const Textures& tex, int w, int h,
                       uint8_t* rgb) = 0;
  // The backend's name ("cpu", "cuda") and the first error a pass hit (an
  // accelerator's passes stop at an error; the Renderer then redoes the render
  // on the CPU). The CPU passes never fail.
  virtual const char* name() const { return "cpu"; }
  virtual Status status() const { return Status::Ok(); }
};

std::unique_ptr<Passes> MakeCpuPasses(int threads);

// Runs fn(begin, end) over [0, n) split into contiguous chunks on up to
// `threads` threads (the caller's thread included).
template <typename Fn>
void ParallelFor(int threads, int n, Fn fn);

}  // namespace danqing::render

#include "render/parallel_inl.h"
