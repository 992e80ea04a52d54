// The video's CUDA frame composer (src/video/compose_cuda.cu) itself,
// compiled as C++ against the host emulation of the CUDA runtime, under its
// own inline namespace (video/compose.h), so it links next to danqing_video's
// real composer (or its stub) without sharing a symbol.
#define DANQING_VIDEO_CUDA_NS cuda_host_emulation
#include "video/compose_cuda.cu"
