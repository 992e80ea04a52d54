// The video's CUDA frame composer (src/video/compose_cuda.cu) on the host
// emulation of the CUDA runtime: pass
// video::cuda_host_emulation::MakeCudaComposer as a ClipOptions::device_composer
// (or to ComposeYuvFrames) to run its kernel on the CPU, as a test of parity
// with the CPU composer and of its fallback on CUDA errors.
#pragma once

#include <memory>

#include "video/compose.h"

namespace danqing::video {
inline namespace cuda_host_emulation {
Result<std::unique_ptr<FrameComposer>> MakeCudaComposer(const ComposeInputs& in);
}  // namespace cuda_host_emulation
}  // namespace danqing::video
