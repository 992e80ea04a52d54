// Composing the writing's video frames (issue 28): the per-block rule both
// composers share, and the device composer's interface.
//
// A frame is YUV 4:2:0; one write-time plane pixel is one 2x2 luma block and
// one chroma sample. At writing time t a block shows
//   the background            where its time is later than t,
//   the final image           where it has no time or its ink dried
//                             (t - time >= kSheenMs),
//   the final image wet       else: pulled toward the sheen colour by
//                             kSheenStrength * (1 - age / kSheenMs), times how
//                             much darker than the background each pixel is.
// The seal has its own time in the plane (render::Writing::seal_ms, the last
// one), so it is stamped last by the same rule.
//
// The CPU composer (writing_video.cc) and the CUDA kernel (compose_cuda.cu)
// call the functions below, compiled without fused multiply-add on both
// sides (--fmad=false, -ffp-contract=off), so they give the same bytes; the
// host emulation of the CUDA runtime (testing/cuda-host) runs the kernel in
// the parity tests.
//
// Thread-safety: the functions are pure; a FrameComposer is one clip's.
#pragma once

#include <math.h>
#include <stdint.h>

#include <memory>

#include "common/status.h"

#if defined(__CUDACC__)
#define DANQING_VIDEO_HD __host__ __device__
#else
#define DANQING_VIDEO_HD
#endif

// The namespace of the CUDA composer's names (compose_cuda.cu or its stub):
// the host emulation compiles compose_cuda.cu again under another name, so
// both link into one test binary (as render/cuda_backend_ns.h does).
#ifndef DANQING_VIDEO_CUDA_NS
#define DANQING_VIDEO_CUDA_NS cuda_compose
#endif

namespace danqing::video {

inline constexpr uint32_t kSheenMs = 350;

namespace rule {

inline constexpr uint16_t kNever = 0xFFFF;
inline constexpr float kSheenStrength = 0.35f;
// The wet sheen: freshly laid ink, darker and a little blue (RGB).
inline constexpr float kSheenRgb[3] = {10.0f, 12.0f, 22.0f};

enum BlockState : int { kFinal = 0, kBackground = 1, kWet = 2 };

DANQING_VIDEO_HD inline int StateAt(uint16_t at, uint32_t t) {
  if (at == kNever) return kFinal;
  if (at > t) return kBackground;
  return t - at >= kSheenMs ? kFinal : kWet;
}

// The sheen's strength of a wet block (StateAt == kWet).
DANQING_VIDEO_HD inline float SheenK(uint16_t at, uint32_t t) {
  const uint32_t age = t - at;
  return kSheenStrength * (1.0f - static_cast<float>(age) / static_cast<float>(kSheenMs));
}

// How much ink a luma pixel carries: how much darker than the background.
DANQING_VIDEO_HD inline float InkOf(uint8_t bg_y, uint8_t fin_y) {
  return fminf(fmaxf((static_cast<float>(bg_y) - static_cast<float>(fin_y)) / 219.0f, 0.0f), 1.0f);
}

// A wet luma pixel: fin pulled toward the sheen's luma by k * ink.
DANQING_VIDEO_HD inline uint8_t WetLuma(uint8_t fin_y, float sheen_y, float k, float ink) {
  const float f = static_cast<float>(fin_y);
  return static_cast<uint8_t>(lroundf(f + (sheen_y - f) * k * ink));
}

// A wet chroma sample: the block's four inks summed in ink_sum.
DANQING_VIDEO_HD inline uint8_t WetChroma(uint8_t fin_c, float sheen_c, float k, float ink_sum) {
  const float f = static_cast<float>(fin_c);
  const float kc = k * ink_sum / 4.0f;
  return static_cast<uint8_t>(lroundf(f + (sheen_c - f) * kc));
}

}  // namespace rule

// What a composer composes from: w x h (both even) final image and
// background as packed YUV 4:2:0 planes (Y w*h, U and V (w/2)*(h/2)), the
// write-time plane (at least w/2 x h/2, `ms_stride` values a row) and the
// sheen colour in the same YUV.
struct ComposeInputs {
  int w = 0, h = 0;
  const uint8_t* fin[3] = {nullptr, nullptr, nullptr};
  const uint8_t* bg[3] = {nullptr, nullptr, nullptr};
  const uint16_t* ms = nullptr;
  int ms_stride = 0;
  float sheen[3] = {0, 0, 0};
};

// Writes the frames of one clip.
class FrameComposer {
 public:
  virtual ~FrameComposer() = default;
  // The frame at writing time t into planes dst[0..2] (Y, U, V) of row
  // strides stride[0..2]. t must not decrease from one call to the next.
  virtual Status Frame(uint32_t t, uint8_t* const* dst, const int* stride) = 0;
  virtual const char* name() const = 0;  // "cpu", "cuda"
};

// Makes a device composer for a clip (uploads its inputs); the error when the
// device cannot (the caller then composes on the CPU).
using DeviceComposerFactory = Result<std::unique_ptr<FrameComposer>> (*)(const ComposeInputs&);

inline namespace DANQING_VIDEO_CUDA_NS {
// The CUDA composer (compose_cuda.cu): uploads the final image, background
// and write-time plane once; each Frame runs one kernel that writes the YUV
// frame and copies it into dst. Without DANQING_CUDA (compose_cuda_stub.cc):
// UNAVAILABLE. UNAVAILABLE/INTERNAL naming the CUDA call that failed.
Result<std::unique_ptr<FrameComposer>> MakeCudaComposer(const ComposeInputs& in);
}  // namespace DANQING_VIDEO_CUDA_NS

}  // namespace danqing::video
