// The CUDA frame composer of the writing's video (see compose.h): the inputs
// go to the device once; each frame is one kernel, one thread per 2x2 luma
// block and its chroma sample, writing YUV 4:2:0 straight into a device
// frame, copied (row by row into the encoder's strided planes) to the host.
// Compiled with --fmad=false, as the CPU composer without contraction.
#include <cuda_runtime.h>

// Launches go through this macro so that the host emulation (testing/cuda-host,
// which defines it first) runs the same kernel.
#ifndef DQ_LAUNCH
#define DQ_LAUNCH(kernel, grid, block, stream, ...) \
  kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#endif

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "video/compose.h"

namespace danqing::video {
inline namespace DANQING_VIDEO_CUDA_NS {
namespace {

struct KernelArgs {
  const uint8_t* fin[3];
  const uint8_t* bg[3];
  const uint16_t* ms;
  int ms_stride, w, h;
  float sheen[3];
  uint8_t* out[3];
};

__global__ void ComposeKernel(KernelArgs a, uint32_t t) {
  const int bx = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  const int by = static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y);
  const int bw = a.w / 2, bh = a.h / 2;
  if (bx >= bw || by >= bh) return;
  const uint16_t at = a.ms[static_cast<size_t>(by) * a.ms_stride + bx];
  const size_t c = static_cast<size_t>(by) * bw + bx;
  const size_t o = static_cast<size_t>(by) * 2 * a.w + static_cast<size_t>(bx) * 2;
  const size_t luma[4] = {o, o + 1, o + a.w, o + a.w + 1};
  const int state = rule::StateAt(at, t);
  if (state != rule::kWet) {
    const uint8_t* const* src = state == rule::kBackground ? a.bg : a.fin;
    for (int k = 0; k < 4; ++k) a.out[0][luma[k]] = src[0][luma[k]];
    a.out[1][c] = src[1][c];
    a.out[2][c] = src[2][c];
    return;
  }
  const float k0 = rule::SheenK(at, t);
  float ink_sum = 0;
  for (int k = 0; k < 4; ++k) {
    const float ink = rule::InkOf(a.bg[0][luma[k]], a.fin[0][luma[k]]);
    ink_sum += ink;
    a.out[0][luma[k]] = rule::WetLuma(a.fin[0][luma[k]], a.sheen[0], k0, ink);
  }
  a.out[1][c] = rule::WetChroma(a.fin[1][c], a.sheen[1], k0, ink_sum);
  a.out[2][c] = rule::WetChroma(a.fin[2][c], a.sheen[2], k0, ink_sum);
}

std::string CudaMessage(cudaError_t e, const char* what) {
  return std::string("CUDA frame composer: ") + what + ": " + cudaGetErrorName(e) + " (" +
         cudaGetErrorString(e) + ")";
}

class CudaComposer final : public FrameComposer {
 public:
  ~CudaComposer() override {
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    if (buf_ != nullptr) cudaFree(buf_);
    if (ms_ != nullptr) cudaFree(ms_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    cudaGetLastError();  // a failed clean-up must not fail this thread's next call
  }

  Status Init(const ComposeInputs& in) {
    cudaGetLastError();  // start from a clean slate on this thread
    w_ = in.w;
    h_ = in.h;
    const size_t ny = static_cast<size_t>(w_) * static_cast<size_t>(h_);
    const size_t nc = ny / 4;
    const int bw = w_ / 2, bh = h_ / 2;
    if (Status s = Check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                         "cudaStreamCreateWithFlags");
        !s.ok())
      return s;
    // One allocation: final, background and output frames, each Y U V.
    void* p = nullptr;
    if (Status s = Check(cudaMalloc(&p, 3 * (ny + 2 * nc)), "cudaMalloc"); !s.ok()) return s;
    buf_ = static_cast<uint8_t*>(p);
    if (Status s = Check(cudaMalloc(&p, static_cast<size_t>(bw) * bh * 2), "cudaMalloc"); !s.ok())
      return s;
    ms_ = static_cast<uint16_t*>(p);
    const size_t sizes[3] = {ny, nc, nc};
    uint8_t* at = buf_;
    for (int k = 0; k < 3; ++k) {
      args_.fin[k] = at;
      at += sizes[k];
    }
    for (int k = 0; k < 3; ++k) {
      args_.bg[k] = at;
      at += sizes[k];
    }
    for (int k = 0; k < 3; ++k) {
      args_.out[k] = at;
      at += sizes[k];
    }
    for (int k = 0; k < 3; ++k) {
      if (Status s = Check(cudaMemcpyAsync(const_cast<uint8_t*>(args_.fin[k]), in.fin[k], sizes[k],
                                           cudaMemcpyHostToDevice, stream_),
                           "cudaMemcpyAsync");
          !s.ok())
        return s;
      if (Status s = Check(cudaMemcpyAsync(const_cast<uint8_t*>(args_.bg[k]), in.bg[k], sizes[k],
                                           cudaMemcpyHostToDevice, stream_),
                           "cudaMemcpyAsync");
          !s.ok())
        return s;
    }
    if (Status s = Check(
            cudaMemcpy2DAsync(ms_, static_cast<size_t>(bw) * 2, in.ms,
                              static_cast<size_t>(in.ms_stride) * 2, static_cast<size_t>(bw) * 2,
                              static_cast<size_t>(bh), cudaMemcpyHostToDevice, stream_),
            "cudaMemcpy2DAsync");
        !s.ok())
      return s;
    args_.ms = ms_;
    args_.ms_stride = bw;
    args_.w = w_;
    args_.h = h_;
    for (int k = 0; k < 3; ++k) args_.sheen[k] = in.sheen[k];
    // The host planes may go once this returns.
    return Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  Status Frame(uint32_t t, uint8_t* const* dst, const int* stride) override {
    const dim3 block(16, 16);
    const dim3 grid(static_cast<unsigned>((w_ / 2 + 15) / 16),
                    static_cast<unsigned>((h_ / 2 + 15) / 16));
    DQ_LAUNCH(ComposeKernel, grid, block, stream_, args_, t);
    if (Status s = Check(cudaGetLastError(), "ComposeKernel"); !s.ok()) return s;
    const int widths[3] = {w_, w_ / 2, w_ / 2}, heights[3] = {h_, h_ / 2, h_ / 2};
    for (int k = 0; k < 3; ++k) {
      if (Status s = Check(
              cudaMemcpy2DAsync(dst[k], static_cast<size_t>(stride[k]), args_.out[k],
                                static_cast<size_t>(widths[k]), static_cast<size_t>(widths[k]),
                                static_cast<size_t>(heights[k]), cudaMemcpyDeviceToHost, stream_),
              "cudaMemcpy2DAsync");
          !s.ok())
        return s;
    }
    return Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  const char* name() const override { return "cuda"; }

 private:
  Status Check(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return Status::Ok();
    return e == cudaErrorMemoryAllocation || e == cudaErrorNoDevice ||
                   e == cudaErrorInsufficientDriver || e == cudaErrorDevicesUnavailable
               ? Unavailable(CudaMessage(e, what))
               : Internal(CudaMessage(e, what));
  }

  int w_ = 0, h_ = 0;
  cudaStream_t stream_ = nullptr;
  uint8_t* buf_ = nullptr;
  uint16_t* ms_ = nullptr;
  KernelArgs args_{};
};

}  // namespace

Result<std::unique_ptr<FrameComposer>> MakeCudaComposer(const ComposeInputs& in) {
  if (in.w < 2 || in.h < 2 || (in.w & 1) != 0 || (in.h & 1) != 0 || in.ms == nullptr ||
      in.ms_stride < in.w / 2) {
    return InvalidArgument("CUDA frame composer: the inputs do not fit together");
  }
  auto c = std::make_unique<CudaComposer>();
  if (Status s = c->Init(in); !s.ok()) return s;
  return std::unique_ptr<FrameComposer>(std::move(c));
}

}  // namespace DANQING_VIDEO_CUDA_NS
}  // namespace danqing::video
