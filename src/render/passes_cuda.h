// The CUDA backend of the heavy passes (issue 11): the same math as
// passes_cpu.cc (float, no fused multiply-add), one device per process.
//
// A CudaContext owns the device copies of the Textures and a budget of device
// bytes; each render takes a CudaPasses for its canvas, which reserves
// DeviceBytesPerRender() from the budget (waiting while other renders hold it),
// allocates its planes and runs on its own stream. Its Run keeps every plane
// on the device: the host sends the dab list (and a photo's window) and gets
// the RGB back. A 4K landscape render with 25k dabs moves 26 MB over PCIe
// (a photo adds its window, 3 bytes a pixel: 27 MB for a 12 MP photo);
// sending each plane back and forth around every pass moved 175 MB. A CUDA error is
// sticky: the rest of the render does nothing and status() reports it, so
// the Renderer redoes that render on the CPU.
//
// Without DANQING_CUDA the stub (passes_cuda_stub.cc) reports UNAVAILABLE.
// Thread-safety: CudaContext is thread-safe; a CudaPasses is one render's.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "common/status.h"
#include "render/backend.h"
#include "render/cuda_backend_ns.h"
#include "render/passes.h"

namespace danqing::render {
inline namespace DANQING_CUDA_BACKEND_NS {

class CudaContext {
 public:
  // budget_bytes 0: 80% of the device's free memory now.
  static Result<std::unique_ptr<CudaContext>> Create(const Textures& tex, size_t budget_bytes);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  size_t budget_bytes() const;
  size_t in_use_bytes() const;
  // Empty, or the CUDA error that left the context unusable: renders then run
  // on the CPU, and only a new process can use the GPU again.
  std::string lost_reason() const;
  // Passes for one render of `plan` (its canvas, dab count and photo
  // window), to Run with that plan. INTERNAL for a plan CheckPlan refuses;
  // RESOURCE_EXHAUSTED when one render alone exceeds the budget;
  // UNAVAILABLE/INTERNAL on a CUDA error.
  Result<std::unique_ptr<Passes>> MakePasses(const PassPlan& plan);

  struct Impl;

 private:
  explicit CudaContext(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace DANQING_CUDA_BACKEND_NS
}  // namespace danqing::render
