// The real CUDA render backend (src/render/passes_cuda.cu), compiled for the
// host emulation of the CUDA runtime (cuda_runtime.h here): its kernels and
// its host code run on the CPU, so tests can compare it with the CPU
// reference, inject CUDA errors, and run it under the sanitizers. Used through
// RendererConfig::accelerator, exactly as a Renderer uses its CudaContext.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "common/status.h"
#include "render/passes.h"

namespace danqing::render {

class EmulatedCuda {
 public:
  // Uploads the textures (Textures::Build, as every Renderer has) to the
  // emulated device. budget_bytes 0: 80% of its free memory.
  static Result<std::unique_ptr<EmulatedCuda>> Create(size_t budget_bytes);
  ~EmulatedCuda();
  EmulatedCuda(const EmulatedCuda&) = delete;
  EmulatedCuda& operator=(const EmulatedCuda&) = delete;

  // CudaContext::MakePasses of the backend.
  Result<std::unique_ptr<Passes>> MakePasses(const PassPlan& plan);
  size_t budget_bytes() const;
  size_t in_use_bytes() const;
  std::string lost_reason() const;

  struct Impl;

 private:
  explicit EmulatedCuda(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace danqing::render
