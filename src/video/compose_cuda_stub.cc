// Built instead of compose_cuda.cu when DANQING_CUDA is OFF: no device, ever;
// the frames are composed on the CPU.
#include "video/compose.h"

namespace danqing::video {
inline namespace DANQING_VIDEO_CUDA_NS {

Result<std::unique_ptr<FrameComposer>> MakeCudaComposer(const ComposeInputs&) {
  return Unavailable("CUDA frame composer: built without CUDA (DANQING_CUDA=OFF)");
}

}  // namespace DANQING_VIDEO_CUDA_NS
}  // namespace danqing::video
