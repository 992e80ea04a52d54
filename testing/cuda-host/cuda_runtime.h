// A host emulation of the small part of the CUDA runtime that the render
// backend (src/render/passes_cuda.cu) uses, so that its kernels and its host
// code run, unchanged, on a machine without a GPU: in the tests, under the
// sanitizers, and in CI. Put this directory first on the include path of a
// C++ translation unit that includes passes_cuda.cu; it then finds this file
// as <cuda_runtime.h>.
//
// What it is: device memory is host memory; events read the host clock.
// Streams are queues: an async copy, memset, free, event record or kernel
// launch on a stream is checked when it is called, but it runs only when the
// stream is synchronised (or destroyed), on the thread that does it. Host
// memory is read and written then, as a pinned buffer is on a device, so code
// that reads a result before synchronising, or lets a host buffer die or
// change while a copy from it is queued, gets the wrong bytes. (The null
// stream runs its work at once.) A launch runs every block and every thread
// of the grid one after another, in an order the Config chooses: shuffled by
// default, so a kernel whose result depends on which thread runs first shows
// up as a difference. What it checks: copies and memsets must stay inside one
// live device allocation, when called and again when they run (a queued copy
// into memory freed meanwhile is an illegal address, which loses the
// context), frees must name one, grids must not be empty (else the call fails
// with cudaErrorInvalidValue / cudaErrorInvalidConfiguration, and the
// violation is counted). What it can inject: the next call of a given API
// fails with a given error; an error that loses the context
// (cudaErrorIllegalAddress, ...) is sticky, as on a device: every later call
// returns it, and queued work is dropped.
//
// It says nothing about speed, real concurrency or the GPU's float rounding:
// the real parity and timings come from scripts/gpu-run.sh on a GPU.
#pragma once

#include <math.h>  // fminf, floorf, expf, ... in the global namespace, as the device has them

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>

#define __global__
#define __device__
#define __host__

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

// The launch coordinates of the thread the emulation is running now.
extern thread_local uint3 blockIdx;
extern thread_local uint3 threadIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorCudartUnloading = 4,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorNoDevice = 100,
  cudaErrorInsufficientDriver = 35,
  cudaErrorECCUncorrectable = 214,
  cudaErrorDeviceUninitialized = 201,
  cudaErrorContextIsDestroyed = 709,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchTimeout = 702,
  cudaErrorAssert = 710,
  cudaErrorHardwareStackError = 714,
  cudaErrorIllegalInstruction = 715,
  cudaErrorMisalignedAddress = 716,
  cudaErrorInvalidAddressSpace = 717,
  cudaErrorInvalidPc = 718,
  cudaErrorLaunchFailure = 719,
  cudaErrorDevicesUnavailable = 46,
  cudaErrorMpsClientTerminated = 810,
  cudaErrorContained = 226,
  cudaErrorExternalDevice = 911,
  cudaErrorTensorMemoryLeak = 721,
  cudaErrorUnknown = 999,
};

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
};
enum cudaDeviceAttr { cudaDevAttrMemoryPoolsSupported = 115 };
enum cudaMemPoolAttr { cudaMemPoolAttrReleaseThreshold = 4 };
constexpr unsigned cudaStreamNonBlocking = 1;

struct CUstream_st;
struct CUevent_st;
struct CUmemPoolHandle_st;
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;
using cudaMemPool_t = CUmemPoolHandle_st*;

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int major, minor;  // compute capability
};

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaGetLastError();
const char* cudaGetErrorName(cudaError_t e);
const char* cudaGetErrorString(cudaError_t e);

cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t stream);
cudaError_t cudaFreeAsync(void* p, cudaStream_t stream);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventDestroy(cudaEvent_t event);

// Device-side helpers the kernels use.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline int __float_as_int(float f) {
  int i;
  std::memcpy(&i, &f, sizeof i);
  return i;
}
// Threads run one at a time (a grid runs on one host thread), so a plain
// read-modify-write is atomic here.
inline int atomicMax(int* p, int v) {
  const int old = *p;
  if (v > old) *p = v;
  return old;
}
inline unsigned int atomicMin(unsigned int* p, unsigned int v) {
  const unsigned int old = *p;
  if (v < old) *p = v;
  return old;
}

namespace cudahost {

// The order in which a launch runs its blocks, and each block its threads.
enum class LaunchOrder {
  kInOrder,   // x fastest, then y, then z
  kReversed,  // the last thread first
  kShuffled,  // at every launch, a fresh random order of the blocks, and of the threads (the same in each block)
};
struct Config {
  int devices = 1;                     // cudaGetDeviceCount
  size_t total_bytes = size_t{8} << 30;  // cudaMemGetInfo total; free = total - in use
  bool pools = true;                   // cudaDevAttrMemoryPoolsSupported
  LaunchOrder order = LaunchOrder::kShuffled;
  uint64_t seed = 1;                   // of kShuffled's permutations
};
// Starts afresh: no allocations expected to be live, faults and counters cleared.
void Reset(const Config& config = {});
// The (skip+1)-th next call of `api` (a runtime function's name, or "launch")
// returns `error` instead of doing its work. Faults on one API fire in the
// order they were set; a later one starts counting after the earlier fired.
void FailCall(const std::string& api, cudaError_t error, int skip = 0);
int Calls(const std::string& api);   // calls of `api` since Reset
size_t BytesInUse();                 // device bytes allocated and not freed
size_t PeakBytesInUse();             // the most BytesInUse() since Reset() or ResetPeak()
void ResetPeak();                    // the peak starts again from BytesInUse()
// Frees every live allocation: what a lost context leaves behind (its frees
// fail, as on a device, where the driver reclaims the memory at exit).
void ReleaseAll();
int Violations();                    // out-of-bounds copies, bad frees, empty grids
std::string LastViolation();

// Checks the launch and queues it on `stream`: when the stream runs, body()
// runs once per thread of the grid, with the coordinates set.
void LaunchGrid(dim3 grid, dim3 block, cudaStream_t stream, std::function<void()> body);
// Work queued on `stream` and not yet run.
size_t Queued(cudaStream_t stream);

}  // namespace cudahost

// passes_cuda.cu launches its kernels through this macro (its default is the
// <<<...>>> syntax, which only nvcc parses). The arguments are evaluated once,
// at the launch, and copied into the queued launch, as <<<...>>> does; every
// emulated thread gets copies.
// Kernels that use __shared__ memory or __syncthreads() cannot run here.
#define DQ_LAUNCH(kernel, grid, block, stream, ...)                                   \
  do {                                                                                \
    const auto dq_launch_args = std::make_tuple(__VA_ARGS__);                         \
    ::cudahost::LaunchGrid((grid), (block), (stream),                                 \
                           [dq_launch_args] { std::apply(kernel, dq_launch_args); }); \
  } while (false)
