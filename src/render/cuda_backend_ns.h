// The namespace that holds every name with external linkage of the CUDA
// backend (passes_cuda.cu, its stub, ProbeCuda and CudaContext). It is an
// inline namespace of danqing::render, so callers write render::CudaContext.
// The host emulation (testing/cuda-host) compiles passes_cuda.cu a second
// time under another name, so both copies link into one test binary without
// sharing a symbol, whatever names the backend adds later.
//
// Headers outside the backend that only forward-declare its classes (the
// Renderer's CudaContext member) use the build's name, ..._DEFAULT_NS: in the
// emulation's translation unit a use of them is then ambiguous, a compile
// error, instead of a class laid out differently there than in danqing_render.
#pragma once

#define DANQING_CUDA_BACKEND_DEFAULT_NS cuda_backend
#ifndef DANQING_CUDA_BACKEND_NS
#define DANQING_CUDA_BACKEND_NS DANQING_CUDA_BACKEND_DEFAULT_NS
#endif
