// passes_cuda.cu itself, compiled as C++ against the host emulation of the
// CUDA runtime. Its names live in their own inline namespace
// (render/cuda_backend_ns.h), so it shares a binary with danqing_render, which
// links the real backend (or its stub), without sharing a symbol.
#define DANQING_CUDA_BACKEND_NS cuda_host_emulation
#include "render/passes_cuda.cu"

#include "testing/cuda-host/emulated_cuda.h"

namespace danqing::render {

struct EmulatedCuda::Impl {
  Textures tex;
  std::unique_ptr<CudaContext> ctx;
};

EmulatedCuda::EmulatedCuda(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EmulatedCuda::~EmulatedCuda() = default;

Result<std::unique_ptr<EmulatedCuda>> EmulatedCuda::Create(size_t budget_bytes) {
  auto impl = std::make_unique<Impl>();
  impl->tex = Textures::Build();
  auto ctx = CudaContext::Create(impl->tex, budget_bytes);
  if (!ctx.ok()) return ctx.status();
  impl->ctx = std::move(ctx).value();
  return std::unique_ptr<EmulatedCuda>(new EmulatedCuda(std::move(impl)));
}

Result<std::unique_ptr<Passes>> EmulatedCuda::MakePasses(const PassPlan& plan) {
  return impl_->ctx->MakePasses(plan);
}
size_t EmulatedCuda::budget_bytes() const { return impl_->ctx->budget_bytes(); }
size_t EmulatedCuda::in_use_bytes() const { return impl_->ctx->in_use_bytes(); }
std::string EmulatedCuda::lost_reason() const { return impl_->ctx->lost_reason(); }

}  // namespace danqing::render
