// The CUDA backend of the heavy passes (see passes_cuda.h). Each kernel is the
// CPU reference's loop body (passes_cpu.cc) with one thread per output pixel;
// the dab passes run one block per dab and max-composite with an integer
// atomicMax on the (non-negative) float bits, which gives the same result as
// the CPU's max in list order. Compiled with --fmad=false so products and sums
// round as on the CPU; exp/pow may differ by an ulp or two.
#include <cuda_runtime.h>

// Every kernel launch goes through this macro, so that the host emulation the
// tests use (testing/cuda-host, which defines it first) runs the same kernels.
#ifndef DQ_LAUNCH
#define DQ_LAUNCH(kernel, grid, block, stream, ...) kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#endif

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "render/cuda_context_lost.h"
#include "render/paint.h"
#include "render/passes_cuda.h"

namespace danqing::render {
inline namespace DANQING_CUDA_BACKEND_NS {

// The device copies of the Textures (held by CudaContext::Impl, hence not in
// the anonymous namespace).
struct DevTex {
  const float* fibre = nullptr;
  const float* noise2 = nullptr;
  const float* noise1 = nullptr;
  const uint8_t* paper = nullptr;  // Textures::paper, kPaper x kPaper
};

namespace {

__device__ inline float Clampf(float v, float lo, float hi) { return fminf(fmaxf(v, lo), hi); }

__device__ inline float SmoothstepD(float a, float b, float x) {
  float t = Clampf((x - a) / (b - a), 0.0f, 1.0f);
  return t * t * (3.0f - 2.0f * t);
}

__device__ inline float FibreD(const DevTex& t, int x, int y) {
  return t.fibre[(y & (Textures::kFibre - 1)) * Textures::kFibre + (x & (Textures::kFibre - 1))];
}

__device__ inline float PaperD(const DevTex& t, int x, int y) {
  return static_cast<float>(t.paper[(y & (Textures::kPaper - 1)) * Textures::kPaper +
                                    (x & (Textures::kPaper - 1))]) *
         (1.0f / 255.0f);
}

__device__ inline float Noise1D(const DevTex& tx, float t) {
  float f = floorf(t);
  float fr = t - f;
  int i = static_cast<int>(static_cast<long long>(f) & (Textures::kNoise1 - 1));
  float a = tx.noise1[i], b = tx.noise1[(i + 1) & (Textures::kNoise1 - 1)];
  float s = fr * fr * (3.0f - 2.0f * fr);
  return a + (b - a) * s;
}

__device__ inline float Hash01D(uint32_t v) {
  unsigned long long z = v;
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z = z ^ (z >> 31);
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

// Max of non-negative floats through their bit patterns (monotonic for >= 0).
__device__ inline void MaxTo(float* p, float v) {
  atomicMax(reinterpret_cast<int*>(p), __float_as_int(v));
}

__global__ void StampKernel(const Dab* dabs, DevTex tex, float* ink, int w, int h) {
  const Dab d = dabs[blockIdx.x];
  float reach = d.r * 1.1f + 1.0f;
  int x0 = max(0, static_cast<int>(floorf(d.x - reach)));
  int x1 = min(w - 1, static_cast<int>(ceilf(d.x + reach)));
  int y0 = max(0, static_cast<int>(floorf(d.y - reach)));
  int y1 = min(h - 1, static_cast<int>(ceilf(d.y + reach)));
  if (x0 > x1 || y0 > y1) return;
  const int bw = x1 - x0 + 1, n = bw * (y1 - y0 + 1);
  const float inv_r = 1.0f / d.r;
  const int bristles = min(max(static_cast<int>(d.r / 1.1f), 5), 48);
  const bool dry = d.dry > 0.02f;
  const float streak_scale = 1.0f / fmaxf(2.0f, d.r * 2.2f);
  const uint32_t ph = static_cast<uint32_t>(d.phase * 997.0f);
  for (int k = threadIdx.x; k < n; k += blockDim.x) {
    int x = x0 + k % bw, y = y0 + k / bw;
    float dy = static_cast<float>(y) + 0.5f - d.y;
    float dx = static_cast<float>(x) + 0.5f - d.x;
    float d2 = dx * dx + dy * dy;
    if (d2 > reach * reach) continue;
    float fib = FibreD(tex, x, y);
    float edge = d.r * (0.9f + 0.2f * fib);
    float cov = Clampf(edge - sqrtf(d2) + 0.5f, 0.0f, 1.0f);
    if (cov <= 0.0f) continue;
    float val = d.ink * cov;
    if (dry) {
      float u = Clampf((dx * d.nx + dy * d.ny) * inv_r, -1.0f, 1.0f);
      int b = min(bristles - 1, static_cast<int>((u + 1.0f) * 0.5f * static_cast<float>(bristles)));
      float hb = Hash01D(static_cast<uint32_t>(b) * 7919u + ph);
      float nz = Noise1D(tex, d.s * streak_scale + static_cast<float>(b) * 37.0f + d.phase * 11.0f);
      float au = fabsf(u);
      float q = 0.45f * hb + 0.55f * nz + 0.12f - 0.35f * au * au * au;
      val *= SmoothstepD(d.dry - 0.1f, d.dry + 0.1f, q);
    }
    if (val > 0.0f) MaxTo(&ink[static_cast<size_t>(y) * w + x], val);
  }
}

// The write time (WritingPlan), one block per capsule: the earliest time
// wins through an integer atomicMin, as the CPU's min.
__global__ void WriteTimeKernel(const WriteSegment* segs, unsigned int* ms, int w, int h) {
  const WriteSegment sg = segs[blockIdx.x];
  const int x0 = max(0, static_cast<int>(floorf(fminf(sg.x0, sg.x1) - sg.r)));
  const int x1 = min(w - 1, static_cast<int>(ceilf(fmaxf(sg.x0, sg.x1) + sg.r)));
  const int y0 = max(0, static_cast<int>(floorf(fminf(sg.y0, sg.y1) - sg.r)));
  const int y1 = min(h - 1, static_cast<int>(ceilf(fmaxf(sg.y0, sg.y1) + sg.r)));
  if (x0 > x1 || y0 > y1) return;
  const int bw = x1 - x0 + 1, n = bw * (y1 - y0 + 1);
  for (int k = threadIdx.x; k < n; k += blockDim.x) {
    const int x = x0 + k % bw, y = y0 + k / bw;
    const unsigned int t =
        SegmentTime(sg, static_cast<float>(x) + 0.5f, static_cast<float>(y) + 0.5f);
    if (t < kNotWritten) atomicMin(&ms[static_cast<size_t>(y) * w + x], t);
  }
}

// The 32-bit write times (atomicMin needs them) to the 16-bit plane sent back.
__global__ void NarrowTimesKernel(const unsigned int* in, uint16_t* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  const unsigned int v = in[i];
  out[i] = static_cast<uint16_t>(v < kNotWritten ? v : kNotWritten);
}

__global__ void WetKernel(const Dab* dabs, float scale, float* wet, int w, int h) {
  const Dab d = dabs[blockIdx.x];
  if (d.wet <= 0.0f) return;
  float cx = d.x * scale, cy = d.y * scale, r = fmaxf(0.5f, d.r * scale);
  int x0 = max(0, static_cast<int>(cx - r - 1));
  int x1 = min(w - 1, static_cast<int>(cx + r + 1));
  int y0 = max(0, static_cast<int>(cy - r - 1));
  int y1 = min(h - 1, static_cast<int>(cy + r + 1));
  if (x0 > x1 || y0 > y1) return;
  const int bw = x1 - x0 + 1, n = bw * (y1 - y0 + 1);
  for (int k = threadIdx.x; k < n; k += blockDim.x) {
    int x = x0 + k % bw, y = y0 + k / bw;
    float dy = static_cast<float>(y) + 0.5f - cy;
    float dx = static_cast<float>(x) + 0.5f - cx;
    float cov = Clampf(r + 0.5f - sqrtf(dx * dx + dy * dy), 0.0f, 1.0f);
    float v = cov * d.wet;
    if (v > 0.0f) MaxTo(&wet[static_cast<size_t>(y) * w + x], v);
  }
}

__global__ void DiffuseKernel(const float* src, float* dst, int w, int h, DevTex tex, int bx0, int bx1, int by0,
                              int by1) {
  int x = bx0 + static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  int y = by0 + static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y);
  if (x > bx1 || y > by1) return;
  const float* up = src + static_cast<size_t>(max(0, y - 1)) * w;
  const float* mid = src + static_cast<size_t>(y) * w;
  const float* dn = src + static_cast<size_t>(min(h - 1, y + 1)) * w;
  int xl = max(0, x - 1), xr = min(w - 1, x + 1);
  float nb = fmaxf(fmaxf(up[x], dn[x]), fmaxf(mid[xl], mid[xr]));
  float avg = 0.25f * (up[x] + dn[x] + mid[xl] + mid[xr]);
  float perm = 0.45f + 0.5f * FibreD(tex, x * 2 + 17, y * 2 + 5);
  float flow = (0.55f * nb + 0.45f * avg) * perm * 0.93f;
  dst[static_cast<size_t>(y) * w + x] = fmaxf(mid[x], flow);
}

struct LandArgs {
  int nridges;
  float water_top, water_phase, sky;
};

__global__ void LandscapeKernel(const Ridge* ridges, const float* ridge_y, LandArgs a, DevTex tex,
                                float* wash, int w, int h) {
  int x = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  int y = static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y);
  if (x >= w || y >= h) return;
  wash[static_cast<size_t>(y) * w + x] = paint::LandscapePixel(
      tex.noise2, ridges, ridge_y, a.nridges, a.water_top, a.water_phase, a.sky, x, y, w, h);
}

__global__ void BlotchKernel(DevTex tex, float* blotch, int w, int h, float bscale) {
  int x = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  int y = static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y);
  if (x >= w || y >= h) return;
  blotch[static_cast<size_t>(y) * w + x] = paint::PaperMottle(tex.noise2, x, y, bscale);
}

// The photo wash (CpuPasses::PhotoWash), in three steps. First the resample
// of the photo's window to the wash's size (image::ResizeRegion's sums, in
// its order) and the luminance of the rounded pixel.
struct ResampleArgs {
  const uint8_t* src;  // the window, src_w pixels (3 bytes each) a row
  int src_w;
  const int *first_x, *count_x, *offset_x, *first_y, *count_y, *offset_y;
  const float* weights;  // x's weights, then y's
};

__global__ void PhotoLumKernel(ResampleArgs a, float* lum, int w, int h) {
  int x = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  int y = static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y);
  if (x >= w || y >= h) return;
  const int fx = a.first_x[x], nx = a.count_x[x], fy = a.first_y[y], ny = a.count_y[y];
  const float* wx = a.weights + a.offset_x[x];
  const float* wy = a.weights + a.offset_y[y];
  float acc[3] = {0.0f, 0.0f, 0.0f};
  for (int k = 0; k < ny; ++k) {
    const uint8_t* p = a.src + (static_cast<size_t>(fy + k) * a.src_w + fx) * 3;
    float row[3] = {0.0f, 0.0f, 0.0f};
    for (int j = 0; j < nx; ++j, p += 3) {
      for (int c = 0; c < 3; ++c) row[c] += wx[j] * static_cast<float>(p[c]);
    }
    for (int c = 0; c < 3; ++c) acc[c] += wy[k] * row[c];
  }
  const float r = static_cast<float>(image::RoundToByte(acc[0])), g = static_cast<float>(image::RoundToByte(acc[1])),
              b = static_cast<float>(image::RoundToByte(acc[2]));
  lum[static_cast<size_t>(y) * w + x] = (0.299f * r + 0.587f * g + 0.114f * b) / 255.0f;
}

// The ink painting of the photo (paint.h), one kernel per step: smoothing,
// tones, the bleeding's box blur (along x, then y), then lines, bleeding
// and the fade under the text.
__global__ void PhotoSmoothKernel(const float* lum, float* out, int w, int h) {
  int x = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  int y = static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y);
  if (x >= w || y >= h) return;
  out[static_cast<size_t>(y) * w + x] = paint::PhotoSmooth(lum, w, h, x, y);
}

__global__ void PhotoToneKernel(const float* smooth, float* tone, int w, int h, float lo,
                                float hi) {
  int x = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  int y = static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y);
  if (x >= w || y >= h) return;
  const size_t i = static_cast<size_t>(y) * w + x;
  tone[i] = paint::PhotoTone(smooth[i], lo, hi);
}

__global__ void BoxBlurKernel(const float* in, float* out, int w, int h, int along_x, int radius) {
  int x = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  int y = static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y);
  if (x >= w || y >= h) return;
  out[static_cast<size_t>(y) * w + x] = paint::BoxAt(in, w, h, x, y, along_x, radius);
}

__global__ void PhotoInkKernel(const float* smooth, const float* tone, const float* bleed,
                               paint::PhotoText text, float* wash, int w, int h) {
  int x = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  int y = static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y);
  if (x >= w || y >= h) return;
  wash[static_cast<size_t>(y) * w + x] = paint::PhotoInk(smooth, tone, bleed, w, h, x, y, text);
}

// A low-resolution plane sampled like the CPU's vrow + XTab: vertical, then
// horizontal linear interpolation.
struct LowPlane {
  const float* v;
  int w, h;
};

__device__ inline float Sample(const LowPlane& p, int x, int y, int W, int H) {
  float fy = Clampf((static_cast<float>(y) + 0.5f) * static_cast<float>(p.h) / static_cast<float>(H) - 0.5f, 0.0f,
                    static_cast<float>(p.h - 1));
  int y0 = static_cast<int>(fy), y1 = min(y0 + 1, p.h - 1);
  float ty = fy - static_cast<float>(y0);
  float k = static_cast<float>(p.w) / static_cast<float>(W);
  float fx = Clampf((static_cast<float>(x) + 0.5f) * k - 0.5f, 0.0f, static_cast<float>(p.w - 1));
  int i = min(static_cast<int>(fx), max(0, p.w - 2));
  float tx = p.w > 1 ? fx - static_cast<float>(i) : 0.0f;
  int i1 = min(i + 1, p.w - 1);
  const float* a = p.v + static_cast<size_t>(y0) * p.w;
  const float* b = p.v + static_cast<size_t>(y1) * p.w;
  float c0 = a[i] + (b[i] - a[i]) * ty;
  float c1 = a[i1] + (b[i1] - a[i1]) * ty;
  return c0 + (c1 - c0) * tx;
}

struct ComposeArgs {
  float paper[3], wash[3], wash_light[3], ink[3];
  int fibre_dx, fibre_dy;
  int has_wet;
};

// The writing's background (WritingPlan): the page without ink where the
// half-resolution time plane has a time, the final image elsewhere.
struct BackgroundArgs {
  uint8_t* out;  // nullptr: no writing
  const uint16_t* ms;
  int ww, wh;
};

__global__ void ComposeKernel(LowPlane wash, LowPlane blotch, LowPlane wet, const float* ink,
                              ComposeArgs a, DevTex tex, uint8_t* rgb, BackgroundArgs bg, int w,
                              int h) {
  int x = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  int y = static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y);
  if (x >= w || y >= h) return;
  const float pf = PaperD(tex, x + a.fibre_dx, y + a.fibre_dy);
  float bl = Sample(blotch, x, y, w, h);
  float wa = Sample(wash, x, y, w, h);
  float paper_k = paint::PaperTone(bl, pf);
  wa = paint::WashTaken(wa, bl, pf);
  const float mix = paint::WashMix(wa);
  float al = ink[static_cast<size_t>(y) * w + x];
  if (a.has_wet) {
    float halo = Sample(wet, x, y, w, h);
    if (halo > 0.0f) {
      const float fib = FibreD(tex, x + a.fibre_dx, y + a.fibre_dy);
      float spread = halo * (0.22f + 0.28f * fib);
      al = 1.0f - (1.0f - al) * (1.0f - spread);
    }
  }
  uint8_t* out = rgb + (static_cast<size_t>(y) * w + x) * 3;
  const bool timed =
      bg.out != nullptr &&
      bg.ms[static_cast<size_t>(min(y / 2, bg.wh - 1)) * bg.ww + min(x / 2, bg.ww - 1)] !=
          kNotWritten;
  for (int c = 0; c < 3; ++c) {
    float paper = a.paper[c] * paper_k;
    float v = paint::WashChannel(paper, a.wash[c], a.wash_light[c], wa, mix);
    const uint8_t under = static_cast<uint8_t>(Clampf(v + 0.5f, 0.0f, 255.0f));
    v = v + (a.ink[c] - v) * al;
    out[c] = static_cast<uint8_t>(Clampf(v + 0.5f, 0.0f, 255.0f));
    if (bg.out != nullptr)
      bg.out[(static_cast<size_t>(y) * w + x) * 3 + c] = timed ? under : out[c];
  }
}

std::string CudaMessage(cudaError_t e, const char* what) {
  return std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

dim3 Grid2(int w, int h, dim3 block) {
  return dim3(static_cast<unsigned>((w + static_cast<int>(block.x) - 1) / static_cast<int>(block.x)),
              static_cast<unsigned>((h + static_cast<int>(block.y) - 1) / static_cast<int>(block.y)));
}

}  // namespace

struct CudaContext::Impl {
  int device = 0;
  DevTex tex;
  float* tex_mem = nullptr;  // the float tables, then the paper tile's bytes
  size_t budget = 0;
  // Stream-ordered allocation from the device's pool (cudaMallocAsync), which
  // keeps freed planes for the next render; else cudaMalloc/cudaFree, whose
  // free waits for the whole device.
  bool pools = false;
  mutable std::mutex mu;
  std::condition_variable cv;
  size_t used = 0;
  std::string lost;  // guarded by mu: the error that left the context unusable

  void Lose(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    if (lost.empty()) lost = why;
  }

  void Release(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu);
      used -= bytes;
    }
    cv.notify_all();
  }
};

namespace {

class CudaPasses final : public Passes {
 public:
  CudaPasses(CudaContext::Impl* ctx, size_t reserved) : ctx_(ctx), reserved_(reserved) {}
  ~CudaPasses() override {
    for (void* p :
         {static_cast<void*>(ink_), static_cast<void*>(wet_[0]), static_cast<void*>(wet_[1]),
          static_cast<void*>(wash_), static_cast<void*>(blotch_), static_cast<void*>(rgb_),
          static_cast<void*>(dabs_), static_cast<void*>(ridge_y_), static_cast<void*>(ridges_),
          static_cast<void*>(photo_), static_cast<void*>(tap_index_),
          static_cast<void*>(tap_weights_), static_cast<void*>(segs_), static_cast<void*>(times32_),
          static_cast<void*>(times16_), static_cast<void*>(background_)}) {
      if (p == nullptr) continue;
      if (ctx_->pools) cudaFreeAsync(p, stream_);  // after the stream's work, back to the pool
      else cudaFree(p);
    }
    if (stream_ != nullptr) {
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
    }
    for (cudaEvent_t e : events_) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    cudaGetLastError();  // a failed clean-up must not fail the thread's next render
    ctx_->Release(reserved_);
  }

  // Allocates what `plan` (checked by MakePasses) needs: its canvas, dab
  // count and photo window size. Run then takes a plan of that shape; the
  // photo it names need only live until Run returns.
  Status Init(const PassPlan& plan) {
    pl_ = PlanesFor(plan.planes.w, plan.planes.h);
    max_dabs_ = std::max<size_t>(1, plan.dabs != nullptr ? plan.dabs->size() : 0);
    const size_t wet_px = pl_.wet_buffer_px();  // also the photo wash's scratch
    cudaGetLastError();  // start from a clean slate on this thread
    if (!Ok(cudaSetDevice(ctx_->device), "cudaSetDevice") ||
        !Ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate") ||
        !Alloc(&ink_, Px(pl_.w, pl_.h) * 4) || !Alloc(&wet_[0], wet_px * 4) ||
        !Alloc(&wet_[1], wet_px * 4) || !Alloc(&wash_, Px(pl_.lw, pl_.lh) * 4) ||
        !Alloc(&blotch_, Px(pl_.lw, pl_.lh) * 4) || !Alloc(&rgb_, Px(pl_.w, pl_.h) * 3) ||
        !Alloc(&dabs_, max_dabs_ * sizeof(Dab)) || !Alloc(&ridge_y_, static_cast<size_t>(kMaxRidges) * pl_.lw * 4) ||
        !Alloc(&ridges_, static_cast<size_t>(kMaxRidges) * sizeof(Ridge))) {
      return status_;
    }
    if (plan.photo != nullptr) {
      // The resampling tables, as image::ResizeRegion builds them, in one
      // index buffer (first, count, offset for x, then for y) and one weight
      // buffer (x's, then y's, the y offsets shifted past x's weights).
      photo_w_ = plan.photo->w;
      photo_h_ = plan.photo->h;
      const image::ResampleTaps tx = image::MakeResampleTaps(photo_w_, pl_.lw);
      const image::ResampleTaps ty = image::MakeResampleTaps(photo_h_, pl_.lh);
      host_tap_index_.clear();
      for (const auto* v : {&tx.first, &tx.count, &tx.offsets, &ty.first, &ty.count}) {
        host_tap_index_.insert(host_tap_index_.end(), v->begin(), v->end());
      }
      for (int o : ty.offsets) host_tap_index_.push_back(o + static_cast<int>(tx.weights.size()));
      host_tap_weights_ = tx.weights;
      host_tap_weights_.insert(host_tap_weights_.end(), ty.weights.begin(), ty.weights.end());
      if (!Alloc(&photo_, Px(photo_w_, photo_h_) * 3) || !Alloc(&tap_index_, host_tap_index_.size() * sizeof(int)) ||
          !Alloc(&tap_weights_, host_tap_weights_.size() * sizeof(float))) {
        return status_;
      }
    }
    if (plan.writing != nullptr) {
      writing_ = true;
      max_segs_ = std::max<size_t>(
          1, plan.writing->segments != nullptr ? plan.writing->segments->size() : 0);
      if (!Alloc(&segs_, max_segs_ * sizeof(WriteSegment)) ||
          !Alloc(&times32_, Px(pl_.ww, pl_.wh) * 4) || !Alloc(&times16_, Px(pl_.ww, pl_.wh) * 2) ||
          !Alloc(&background_, Px(pl_.w, pl_.h) * 3)) {
        return status_;
      }
    }
    for (cudaEvent_t& e : events_) {
      if (!Ok(cudaEventCreate(&e), "cudaEventCreate")) return status_;
    }
    return Status::Ok();
  }

  const char* name() const override { return "cuda"; }
  Status status() const override { return status_; }

  // All passes on the stream, the planes staying on the device: the host
  // sends the dab list (and the photo's window) and gets the RGB back.
  void Run(const PassPlan& plan, const Textures& tex, uint8_t* rgb, Plane* ink_out, PassTimes* times) override {
    if (!status_.ok()) return;
    const CanvasPlanes& p = plan.planes;
    if (Status s = CheckPlan(plan); !s.ok()) {
      status_ = s;
      return;
    }
    if (p.w != pl_.w || p.h != pl_.h) {
      status_ = Internal("cuda passes: the plan's canvas is not the one reserved");
      return;
    }
    const std::vector<Dab>& dabs = *plan.dabs;
    if (dabs.size() > max_dabs_) {
      status_ = Internal("cuda passes: more dabs than reserved");
      return;
    }
    if (plan.photo != nullptr && (photo_ == nullptr || plan.photo->w != photo_w_ || plan.photo->h != photo_h_)) {
      status_ = Internal("cuda passes: the plan's photo window is not the one reserved");
      return;
    }
    const WritingPlan* writing = plan.writing;
    if (writing != nullptr && (!writing_ || writing->segments->size() > max_segs_)) {
      status_ = Internal("cuda passes: the writing was not reserved");
      return;
    }
    const dim3 block(32, 8);
    if (!Ok(cudaEventRecord(events_[0], stream_), "cudaEventRecord")) return;
    // Background wash.
    if (plan.landscape != nullptr) {
      if (!Landscape(*plan.landscape, tex)) return;
    } else if (!PhotoWash(*plan.photo)) {
      return;
    }
    if (!Ok(cudaEventRecord(events_[1], stream_), "cudaEventRecord")) return;
    // Ink.
    if (!dabs.empty() && !Ok(cudaMemcpyAsync(dabs_, dabs.data(), dabs.size() * sizeof(Dab), cudaMemcpyHostToDevice,
                                             stream_), "upload dabs")) {
      return;
    }
    if (!Ok(cudaMemsetAsync(ink_, 0, Px(p.w, p.h) * 4, stream_), "clear ink")) return;
    if (!dabs.empty()) {
      DQ_LAUNCH(StampKernel, static_cast<unsigned>(dabs.size()), 128, stream_, dabs_, ctx_->tex, ink_, p.w, p.h);
      if (!Ok(cudaGetLastError(), "StampKernel")) return;
    }
    if (writing != nullptr) {
      if (!Ok(cudaMemsetAsync(times32_, 0xff, Px(p.ww, p.wh) * 4, stream_), "clear write times"))
        return;
      const std::vector<WriteSegment>& segs = *writing->segments;
      if (!segs.empty()) {
        if (!Ok(cudaMemcpyAsync(segs_, segs.data(), segs.size() * sizeof(WriteSegment),
                                cudaMemcpyHostToDevice, stream_),
                "upload write segments")) {
          return;
        }
        DQ_LAUNCH(WriteTimeKernel, static_cast<unsigned>(segs.size()), 128, stream_, segs_,
                  times32_, p.ww, p.wh);
        if (!Ok(cudaGetLastError(), "WriteTimeKernel")) return;
      }
      const int n = static_cast<int>(Px(p.ww, p.wh));
      DQ_LAUNCH(NarrowTimesKernel, static_cast<unsigned>((n + 255) / 256), 256, stream_, times32_,
                times16_, n);
      if (!Ok(cudaGetLastError(), "NarrowTimesKernel")) return;
    }
    if (!Ok(cudaEventRecord(events_[2], stream_), "cudaEventRecord")) return;
    // Wet ink and its diffusion, over the box the dabs can have wetted grown
    // by the spread (outside it both planes stay zero, as on the CPU).
    const size_t wet_bytes = Px(p.ww, p.wh) * 4;
    if (!Ok(cudaMemsetAsync(wet_[0], 0, wet_bytes, stream_), "clear wet") ||
        !Ok(cudaMemsetAsync(wet_[1], 0, wet_bytes, stream_), "clear wet")) {
      return;
    }
    int cur = 0;
    const PixelBox box = WetBounds(dabs, p.wet_scale(), p.ww, p.wh);
    if (!box.empty()) {
      DQ_LAUNCH(WetKernel, static_cast<unsigned>(dabs.size()), 128, stream_, dabs_, p.wet_scale(), wet_[0], p.ww,
                p.wh);
      if (!Ok(cudaGetLastError(), "WetKernel")) return;
      const int it = std::max(0, plan.diffuse_iterations);
      const PixelBox area = box.Grown(it, p.ww, p.wh);
      const int bx0 = area.x0, bx1 = area.x1, by0 = area.y0, by1 = area.y1;
      const dim3 grid = Grid2(bx1 - bx0 + 1, by1 - by0 + 1, block);
      for (int i = 0; i < it; ++i) {
        DQ_LAUNCH(DiffuseKernel, grid, block, stream_, wet_[cur], wet_[1 - cur], p.ww, p.wh, ctx_->tex, bx0, bx1,
                  by0, by1);
        if (!Ok(cudaGetLastError(), "DiffuseKernel")) return;
        cur = 1 - cur;
      }
    }
    if (!Ok(cudaEventRecord(events_[3], stream_), "cudaEventRecord")) return;
    // Paper blotches, then everything to RGB.
    const float bscale = static_cast<float>(p.w) / static_cast<float>(p.lw) / 220.0f;
    DQ_LAUNCH(BlotchKernel, Grid2(p.lw, p.lh, block), block, stream_, ctx_->tex, blotch_, p.lw,
              p.lh, bscale);
    if (!Ok(cudaGetLastError(), "BlotchKernel")) return;
    ComposeArgs a{};
    for (int c = 0; c < 3; ++c) {
      a.paper[c] = plan.look.paper_rgb[c];
      a.wash[c] = plan.look.wash_rgb[c];
      a.wash_light[c] = plan.look.wash_light_rgb[c];
      a.ink[c] = plan.look.ink_rgb[c];
    }
    a.fibre_dx = plan.look.fibre_dx;
    a.fibre_dy = plan.look.fibre_dy;
    a.has_wet = 1;
    LowPlane lwash{wash_, p.lw, p.lh}, lblotch{blotch_, p.lw, p.lh}, lwet{wet_[cur], p.ww, p.wh};
    DQ_LAUNCH(ComposeKernel, Grid2(p.w, p.h, block), block, stream_, lwash, lblotch, lwet, ink_, a,
              ctx_->tex, rgb_,
              writing != nullptr ? BackgroundArgs{background_, times16_, p.ww, p.wh}
                                 : BackgroundArgs{nullptr, nullptr, 1, 1},
              p.w, p.h);
    if (!Ok(cudaGetLastError(), "ComposeKernel")) return;
    if (!Ok(cudaMemcpyAsync(rgb, rgb_, Px(p.w, p.h) * 3, cudaMemcpyDeviceToHost, stream_), "download rgb")) return;
    if (writing != nullptr &&
        (!Ok(cudaMemcpyAsync(writing->ms_out, times16_, Px(p.ww, p.wh) * 2, cudaMemcpyDeviceToHost,
                             stream_),
             "download write times") ||
         !Ok(cudaMemcpyAsync(writing->background_out, background_, Px(p.w, p.h) * 3,
                             cudaMemcpyDeviceToHost, stream_),
             "download background"))) {
      return;
    }
    if (!Ok(cudaEventRecord(events_[4], stream_), "cudaEventRecord")) return;
    if (ink_out != nullptr) {
      ink_out->Reset(p.w, p.h);
      if (!Ok(cudaMemcpyAsync(ink_out->v.data(), ink_, Px(p.w, p.h) * 4, cudaMemcpyDeviceToHost, stream_),
              "download ink")) {
        return;
      }
    }
    if (!Ok(cudaStreamSynchronize(stream_), "render")) return;
    if (times != nullptr) {
      // Timing is a nicety: an error here does not throw the finished image away.
      float ms[4] = {0, 0, 0, 0};
      for (int i = 0; i < 4; ++i) {
        if (cudaEventElapsedTime(&ms[i], events_[i], events_[i + 1]) != cudaSuccess) {
          cudaGetLastError();
          ms[i] = 0;
        }
      }
      *times = PassTimes{ms[0], ms[1], ms[2], ms[3]};
    }
  }

 private:
  static size_t Px(int w, int h) { return static_cast<size_t>(w) * static_cast<size_t>(h); }

  // Records the first error and stops the render: waits for what is already
  // queued (nothing then writes into host memory after Run returns) and
  // clears the thread's last error, so it does not fail the next render.
  bool Ok(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    if (status_.ok()) {
      const std::string msg = CudaMessage(e, what);
      status_ = e == cudaErrorMemoryAllocation ? ResourceExhausted(msg) : Unavailable(msg);
      if (CudaContextLost(e)) ctx_->Lose(msg);
    }
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    cudaGetLastError();
    return false;
  }
  template <typename T>
  bool Alloc(T** p, size_t bytes) {
    void* v = nullptr;
    if (!Ok(ctx_->pools ? cudaMallocAsync(&v, bytes, stream_) : cudaMalloc(&v, bytes), "cudaMalloc")) return false;
    *p = static_cast<T*>(v);
    return true;
  }
  // Ridge heights per column are cheap and 1-D: computed on the host as on
  // the CPU, then the per-pixel wash on the device (CheckPlan bounds the
  // ridges by the table's size).
  bool Landscape(const LandscapeParams& lp, const Textures& tex) {
    host_ridge_y_ = RidgeTable(lp, tex, pl_.lw);
    // host_ridge_y_ outlives the copies: Run synchronises the stream before it returns.
    if (!lp.ridges.empty() &&
        (!Ok(cudaMemcpyAsync(ridge_y_, host_ridge_y_.data(), host_ridge_y_.size() * 4, cudaMemcpyHostToDevice,
                             stream_), "upload ridge heights") ||
         !Ok(cudaMemcpyAsync(ridges_, lp.ridges.data(), lp.ridges.size() * sizeof(Ridge), cudaMemcpyHostToDevice,
                             stream_), "upload ridges"))) {
      return false;
    }
    LandArgs a{static_cast<int>(lp.ridges.size()), lp.water_top, lp.water_phase, lp.sky};
    const dim3 block(32, 8);
    DQ_LAUNCH(LandscapeKernel, Grid2(pl_.lw, pl_.lh, block), block, stream_, ridges_, ridge_y_, a,
              ctx_->tex, wash_, pl_.lw, pl_.lh);
    return Ok(cudaGetLastError(), "LandscapeKernel");
  }

  // The photo's window up (only its rows, straight from the decoded image),
  // then resample and luminance, the blurs, tone and edges on the device.
  // The scratch planes are the wet planes, which the ink stage clears after.
  bool PhotoWash(const PhotoInput& ph) {
    const image::Image& im = *ph.image;
    const size_t row_bytes = static_cast<size_t>(ph.w) * 3;
    // host_tap_* outlive the copies: Run synchronises the stream before it returns.
    if (!Ok(cudaMemcpy2DAsync(photo_, row_bytes, im.row(ph.y0) + static_cast<size_t>(ph.x0) * 3,
                              static_cast<size_t>(im.width) * 3, row_bytes, static_cast<size_t>(ph.h),
                              cudaMemcpyHostToDevice, stream_), "upload photo") ||
        !Ok(cudaMemcpyAsync(tap_index_, host_tap_index_.data(), host_tap_index_.size() * sizeof(int),
                            cudaMemcpyHostToDevice, stream_), "upload resampling tables") ||
        !Ok(cudaMemcpyAsync(tap_weights_, host_tap_weights_.data(), host_tap_weights_.size() * sizeof(float),
                            cudaMemcpyHostToDevice, stream_), "upload resampling tables")) {
      return false;
    }
    const int lw = pl_.lw, lh = pl_.lh;
    const int* idx = tap_index_;
    ResampleArgs r{photo_, ph.w, idx, idx + lw, idx + 2 * lw, idx + 3 * lw, idx + 3 * lw + lh,
                   idx + 3 * lw + 2 * lh, tap_weights_};
    const dim3 block(32, 8), grid = Grid2(lw, lh, block);
    // Scratch: the wet planes and the blotch plane, which the later stages
    // clear or overwrite before they read them; the bleeding goes into the
    // wash itself, which PhotoInkKernel reads only at the pixel it writes.
    float *lum = wet_[0], *smooth = wet_[1], *tone = blotch_, *bleed = wash_;
    DQ_LAUNCH(PhotoLumKernel, grid, block, stream_, r, lum, lw, lh);
    if (!Ok(cudaGetLastError(), "PhotoLumKernel")) return false;
    DQ_LAUNCH(PhotoSmoothKernel, grid, block, stream_, lum, smooth, lw, lh);
    if (!Ok(cudaGetLastError(), "PhotoSmoothKernel")) return false;
    DQ_LAUNCH(PhotoToneKernel, grid, block, stream_, smooth, tone, lw, lh, ph.lum_lo, ph.lum_hi);
    if (!Ok(cudaGetLastError(), "PhotoToneKernel")) return false;
    DQ_LAUNCH(BoxBlurKernel, grid, block, stream_, tone, lum, lw, lh, 1, paint::kBleedRadius);
    if (!Ok(cudaGetLastError(), "BoxBlurKernel")) return false;
    DQ_LAUNCH(BoxBlurKernel, grid, block, stream_, lum, bleed, lw, lh, 0, paint::kBleedRadius);
    if (!Ok(cudaGetLastError(), "BoxBlurKernel")) return false;
    paint::PhotoText text{};
    text.sx = static_cast<float>(lw) / static_cast<float>(pl_.w);
    text.sy = static_cast<float>(lh) / static_cast<float>(pl_.h);
    text.margin = 0.04f * static_cast<float>(lw) / text.sx;
    text.x0 = ph.text_x0;
    text.y0 = ph.text_y0;
    text.x1 = ph.text_x1;
    text.y1 = ph.text_y1;
    DQ_LAUNCH(PhotoInkKernel, grid, block, stream_, smooth, tone, bleed, text, wash_, lw, lh);
    return Ok(cudaGetLastError(), "PhotoInkKernel");
  }

  CudaContext::Impl* ctx_;
  size_t reserved_;
  Status status_;
  cudaStream_t stream_ = nullptr;
  CanvasPlanes pl_;
  size_t max_dabs_ = 0;
  cudaEvent_t events_[5] = {nullptr, nullptr, nullptr, nullptr, nullptr};
  float* ink_ = nullptr;
  float* wet_[2] = {nullptr, nullptr};
  float* wash_ = nullptr;
  float* blotch_ = nullptr;
  uint8_t* rgb_ = nullptr;
  Dab* dabs_ = nullptr;
  float* ridge_y_ = nullptr;
  Ridge* ridges_ = nullptr;
  std::vector<float> host_ridge_y_;
  uint8_t* photo_ = nullptr;  // the photo's window, photo_w_ x photo_h_ x 3 bytes
  int photo_w_ = 0, photo_h_ = 0;
  int* tap_index_ = nullptr;
  float* tap_weights_ = nullptr;
  // The writing (issue 28), when the plan asks for it.
  bool writing_ = false;
  WriteSegment* segs_ = nullptr;
  size_t max_segs_ = 0;
  unsigned int* times32_ = nullptr;
  uint16_t* times16_ = nullptr;
  uint8_t* background_ = nullptr;
  std::vector<int> host_tap_index_;
  std::vector<float> host_tap_weights_;
};

}  // namespace

CudaProbe ProbeCuda() {
  CudaProbe p;
  p.compiled = true;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    p.error = CudaMessage(e, "cudaGetDeviceCount");
    cudaGetLastError();  // clear
    return p;
  }
  p.devices = n;
  cudaDeviceProp prop{};
  if (n > 0 && cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    p.name = prop.name;
    p.major = prop.major;
    p.minor = prop.minor;
  }
  return p;
}

CudaContext::CudaContext(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CudaContext::~CudaContext() {
  if (impl_ != nullptr && impl_->tex_mem != nullptr) cudaFree(impl_->tex_mem);
}

Result<std::unique_ptr<CudaContext>> CudaContext::Create(const Textures& tex, size_t budget_bytes) {
  auto impl = std::make_unique<Impl>();
  cudaError_t e = cudaSetDevice(impl->device);
  if (e != cudaSuccess) return Unavailable(CudaMessage(e, "cudaSetDevice"));
  size_t free_b = 0, total_b = 0;
  e = cudaMemGetInfo(&free_b, &total_b);
  if (e != cudaSuccess) return Unavailable(CudaMessage(e, "cudaMemGetInfo"));
  impl->budget = budget_bytes != 0 ? budget_bytes : free_b / 10 * 8;
  int pools = 0;
  if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, impl->device) == cudaSuccess && pools != 0) {
    // Keep up to the budget of freed planes in the pool between renders
    // (the default threshold, 0, hands them back to the driver at every sync).
    cudaMemPool_t pool = nullptr;
    uint64_t keep = impl->budget;
    impl->pools = cudaDeviceGetDefaultMemPool(&pool, impl->device) == cudaSuccess &&
                  cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) == cudaSuccess;
  }
  cudaGetLastError();
  const size_t nf = tex.fibre.size(), n2 = tex.noise2.size(), n1 = tex.noise1.size();
  void* mem = nullptr;
  e = cudaMalloc(&mem, (nf + n2 + n1) * sizeof(float) + tex.paper.size());
  if (e != cudaSuccess) return Unavailable(CudaMessage(e, "cudaMalloc textures"));
  impl->tex_mem = static_cast<float*>(mem);
  std::unique_ptr<CudaContext> ctx(new CudaContext(std::move(impl)));
  float* base = ctx->impl_->tex_mem;
  uint8_t* paper = reinterpret_cast<uint8_t*>(base + nf + n2 + n1);
  // From pageable memory, cudaMemcpy returns once the bytes are staged; the
  // DMA may still be running on the legacy stream, which the renders'
  // non-blocking streams do not wait for: the device is synchronised before
  // any render can read the textures.
  if ((e = cudaMemcpy(base, tex.fibre.data(), nf * 4, cudaMemcpyHostToDevice)) != cudaSuccess ||
      (e = cudaMemcpy(base + nf, tex.noise2.data(), n2 * 4, cudaMemcpyHostToDevice)) !=
          cudaSuccess ||
      (e = cudaMemcpy(base + nf + n2, tex.noise1.data(), n1 * 4, cudaMemcpyHostToDevice)) !=
          cudaSuccess ||
      (e = cudaMemcpy(paper, tex.paper.data(), tex.paper.size(), cudaMemcpyHostToDevice)) !=
          cudaSuccess ||
      (e = cudaDeviceSynchronize()) != cudaSuccess) {
    return Unavailable(CudaMessage(e, "upload textures"));
  }
  ctx->impl_->tex = DevTex{base, base + nf, base + nf + n2, paper};
  return Result<std::unique_ptr<CudaContext>>(std::move(ctx));
}

size_t CudaContext::budget_bytes() const { return impl_->budget; }

std::string CudaContext::lost_reason() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->lost;
}

size_t CudaContext::in_use_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->used;
}

Result<std::unique_ptr<Passes>> CudaContext::MakePasses(const PassPlan& plan) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (!impl_->lost.empty()) return Unavailable("the CUDA context is unusable since: " + impl_->lost);
  }
  // A malformed plan (an empty or outside photo window, say) would size the
  // allocations wrongly: refused before anything is reserved.
  if (Status s = CheckPlan(plan); !s.ok()) return s;
  const size_t need = DeviceBytesPerRender(plan);
  if (need > impl_->budget) {
    return ResourceExhausted("render needs " + std::to_string(need >> 20) + " MiB of device memory, budget is " +
                             std::to_string(impl_->budget >> 20) + " MiB");
  }
  {
    std::unique_lock<std::mutex> lock(impl_->mu);
    impl_->cv.wait(lock, [&] { return impl_->used + need <= impl_->budget; });
    impl_->used += need;
  }
  auto p = std::make_unique<CudaPasses>(impl_.get(), need);  // releases `need` when destroyed
  Status s = p->Init(plan);
  if (!s.ok()) return s;
  return std::unique_ptr<Passes>(std::move(p));
}

}  // namespace DANQING_CUDA_BACKEND_NS
}  // namespace danqing::render
