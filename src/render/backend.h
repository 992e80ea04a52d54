// Which implementation of the heavy passes (passes.h) a Renderer uses: the
// CUDA backend (issue 11) when a device is visible, else the CPU reference.
//
// Selection (RendererConfig::backend, else $DANQING_RENDER_BACKEND, else auto):
//   cpu   always the CPU;
//   gpu   the GPU or Renderer::Create fails (FAILED_PRECONDITION with the reason);
//   auto  the GPU when the build has CUDA, NVIDIA_VISIBLE_DEVICES is not
//         void/none and cudaGetDeviceCount reports a device; else the CPU.
// The decision and its reason are logged once per Renderer.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "render/cuda_backend_ns.h"

namespace danqing::render {

enum class BackendChoice { kAuto, kCpu, kGpu };
std::optional<BackendChoice> ParseBackendChoice(std::string_view name);  // auto|cpu|gpu

// What the CUDA runtime says about this machine.
struct CudaProbe {
  bool compiled = false;  // the binary was built with DANQING_CUDA
  int devices = 0;        // cudaGetDeviceCount
  std::string error;      // why there are none (cudaGetDeviceCount's error), if any
  std::string name;       // device 0's name, when there is one
  int major = 0, minor = 0;  // device 0's compute capability (0.0: unknown)
};
inline namespace DANQING_CUDA_BACKEND_NS {
CudaProbe ProbeCuda();  // passes_cuda.cu, or the stub without CUDA
}  // namespace DANQING_CUDA_BACKEND_NS

struct BackendDecision {
  bool gpu = false;
  std::string reason;  // one line: why this backend
  Status status;       // not OK only for a forced gpu that cannot be had
};
// Pure: `visible` is $NVIDIA_VISIBLE_DEVICES (nullptr when unset).
BackendDecision DecideBackend(BackendChoice choice, const char* visible, const CudaProbe& probe);

// Device memory one render of w x h with `dabs` brush imprints holds on the
// GPU (planes, RGB output, dab list; the shared textures not included):
// ink w*h*4, wet 2*(w/2)*(h/2)*4 (ping-pong; also the photo wash's scratch,
// so at least the wash's size), wash and blotch 2*(w/3)*(h/3)*4, RGB w*h*3,
// dabs*sizeof(Dab) (40), plus the ridge table. A photo background adds its
// photo_w x photo_h window (3 bytes a pixel) and the resampling tables.
size_t DeviceBytesPerRender(int w, int h, size_t dabs, int photo_w = 0, int photo_h = 0);
struct PassPlan;
// The same for a plan (its canvas, dab count and photo window).
size_t DeviceBytesPerRender(const PassPlan& plan);
// Bytes of the resampling tables (image::MakeResampleTaps) for a src_w x src_h
// window to dst_w x dst_h, both axes: a bound the tables never exceed.
size_t ResampleTapsBytes(int src_w, int src_h, int dst_w, int dst_h);
// The textures every render on a device shares (uploaded once).
size_t DeviceTextureBytes();

}  // namespace danqing::render
