// Built instead of passes_cuda.cu when DANQING_CUDA is OFF: no device, ever.
#include "render/passes_cuda.h"

namespace danqing::render {
inline namespace DANQING_CUDA_BACKEND_NS {

struct CudaContext::Impl {};

CudaProbe ProbeCuda() { return CudaProbe{}; }

CudaContext::CudaContext(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaContext::~CudaContext() = default;
Result<std::unique_ptr<CudaContext>> CudaContext::Create(const Textures&, size_t) {
  return Unavailable("built without CUDA (DANQING_CUDA=OFF)");
}
size_t CudaContext::budget_bytes() const { return 0; }
size_t CudaContext::in_use_bytes() const { return 0; }
std::string CudaContext::lost_reason() const { return ""; }
Result<std::unique_ptr<Passes>> CudaContext::MakePasses(const PassPlan&) {
  return Unavailable("built without CUDA (DANQING_CUDA=OFF)");
}

}  // namespace DANQING_CUDA_BACKEND_NS
}  // namespace danqing::render
