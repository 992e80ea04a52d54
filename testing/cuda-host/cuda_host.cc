// The host emulation of the CUDA runtime (see cuda_runtime.h).
#include "cuda_runtime.h"
#include "render/cuda_context_lost.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <vector>

thread_local uint3 blockIdx;
thread_local uint3 threadIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

// A unit of queued work: run(true) does it; run(false) drops it (the context
// was lost first), releasing only what the emulation itself holds.
using Work = std::function<void(bool run)>;

struct CUstream_st {
  std::mutex mu;
  std::deque<Work> queue;
};
struct CUevent_st {
  std::mutex mu;
  std::chrono::steady_clock::time_point at{};
  enum { kNever, kQueued, kDone } state = kNever;
  int queued = 0;          // records still in a stream's queue
  bool destroyed = false;  // destroyed while queued: the last record deletes it
};
struct CUmemPoolHandle_st {
  uint64_t release_threshold = 0;
};

namespace {

struct State {
  std::mutex mu;
  cudahost::Config config;
  std::map<uintptr_t, size_t> allocations;  // base -> bytes
  size_t in_use = 0;
  size_t peak = 0;  // the most in_use since Reset or ResetPeak
  std::map<std::string, int> calls;
  struct Fault {
    cudaError_t error;
    int skip;
  };
  std::multimap<std::string, Fault> faults;
  cudaError_t sticky = cudaSuccess;  // a lost context: every call returns it
  uint64_t launches = 0;             // since Reset: varies kShuffled's permutations
  int violations = 0;
  std::string last_violation;
  CUmemPoolHandle_st pool;
  // The legacy default stream's DMA: what cudaMemcpy from host memory has
  // staged and not yet written to the device.
  CUstream_st legacy;
};

State& S() {
  static State* s = new State;  // outlives every static that may free device memory
  return *s;
}

thread_local cudaError_t last_error = cudaSuccess;

// As on a device: an error that loses the context is returned by every later call.
bool Sticky(cudaError_t e) { return danqing::render::CudaContextLost(e); }

// Counts the call, then returns the error it must fail with (a lost context,
// or an injected fault), or cudaSuccess. Caller holds no lock.
cudaError_t Enter(const char* api) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  ++s.calls[api];
  if (s.sticky != cudaSuccess) return s.sticky;
  auto it = s.faults.lower_bound(api);  // the earliest fault set on this API
  if (it == s.faults.end() || it->first != api) return cudaSuccess;
  if (it->second.skip > 0) {
    --it->second.skip;
    return cudaSuccess;
  }
  const cudaError_t e = it->second.error;
  s.faults.erase(it);
  if (Sticky(e)) s.sticky = e;
  return e;
}

// Counts a call that runs even on a lost context (clean-up).
void Count(const char* api) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  ++s.calls[api];
}

cudahost::Config ConfigNow() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.config;
}

cudaError_t Fail(cudaError_t e) {
  last_error = e;
  return e;
}

// The context is lost (first error wins), as by a fault in queued work.
void Lose(cudaError_t e) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.sticky == cudaSuccess) s.sticky = e;
}

cudaError_t StickyNow() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.sticky;
}

// Queues work on a stream; the null stream runs it at once.
void Enqueue(cudaStream_t stream, Work work) {
  if (stream == nullptr) {
    work(StickyNow() == cudaSuccess);
    return;
  }
  std::lock_guard<std::mutex> lock(stream->mu);
  stream->queue.push_back(std::move(work));
}

// Runs the stream's queue in order on this thread; once the context is lost
// (before or by one of them), the rest is dropped.
void Drain(cudaStream_t stream) {
  if (stream == nullptr) return;
  for (;;) {
    Work work;
    {
      std::lock_guard<std::mutex> lock(stream->mu);
      if (stream->queue.empty()) return;
      work = std::move(stream->queue.front());
      stream->queue.pop_front();
    }
    work(StickyNow() == cudaSuccess);
  }
}

void Violation(const std::string& what) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  ++s.violations;
  s.last_violation = what;
  std::fprintf(stderr, "cuda-host: %s\n", what.c_str());
}

// Queued work found its device memory gone when it ran: on a device, an
// illegal address, which loses the context.
void FaultWhenRun(const std::string& what) {
  Violation(what + ", when it ran");
  Lose(cudaErrorIllegalAddress);
}

// Waits for `queue` (runs it), then returns the call's own error (injected),
// or the one queued work lost the context with.
cudaError_t Synchronize(const char* api, cudaStream_t queue) {
  const cudaError_t e = Enter(api);
  Drain(queue);
  if (e != cudaSuccess) return Fail(e);
  if (cudaError_t lost = StickyNow(); lost != cudaSuccess) return Fail(lost);
  return cudaSuccess;
}

// Whether [p, p+bytes) lies inside one live device allocation.
bool InDevice(const void* p, size_t bytes) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = s.allocations.upper_bound(a);
  if (it == s.allocations.begin()) return false;
  --it;
  return a >= it->first && a + bytes <= it->first + it->second;
}

cudaError_t Allocate(void** p, size_t bytes) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (bytes == 0) {  // as CUDA: success, and no memory
    *p = nullptr;
    return cudaSuccess;
  }
  if (s.in_use + bytes > s.config.total_bytes) return cudaErrorMemoryAllocation;
  void* mem = std::malloc(bytes);
  if (mem == nullptr) return cudaErrorMemoryAllocation;
  s.allocations[reinterpret_cast<uintptr_t>(mem)] = bytes;
  s.in_use += bytes;
  s.peak = std::max(s.peak, s.in_use);
  *p = mem;
  return cudaSuccess;
}

cudaError_t Release(void* p) {
  if (p == nullptr) return cudaSuccess;
  State& s = S();
  std::unique_lock<std::mutex> lock(s.mu);
  auto it = s.allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == s.allocations.end()) {
    lock.unlock();
    Violation("free of a pointer that is not a live device allocation");
    return cudaErrorInvalidValue;
  }
  s.in_use -= it->second;
  s.allocations.erase(it);
  std::free(p);
  return cudaSuccess;
}

// Whether the device side of a copy of `rows` rows of `width` bytes, each
// `pitch` apart, lies in one live allocation (the span from the first row's
// start to the last row's end).
bool CopyInDevice(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t rows,
                  cudaMemcpyKind kind) {
  const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  return (!dst_dev || InDevice(dst, dpitch * (rows - 1) + width)) &&
         (!src_dev || InDevice(src, spitch * (rows - 1) + width));
}

// A copy checked when it is called and queued on `stream` (the null stream:
// done now). When it runs, its device memory is checked again: freed meanwhile,
// it is an illegal address, which loses the context. `staged`: the host rows
// are copied aside now and the device written from that copy when it runs.
cudaError_t Copy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t rows,
                   cudaMemcpyKind kind, cudaStream_t stream, const char* api, bool staged = false) {
  if (cudaError_t e = Enter(api); e != cudaSuccess) return Fail(e);
  if (dpitch < width || spitch < width) return Fail(cudaErrorInvalidValue);
  if (width == 0 || rows == 0) return cudaSuccess;
  const std::string what = std::string(api) + ": " + (rows > 1 ? std::to_string(rows) + " rows of " : "") +
                           std::to_string(width) + " bytes outside a device allocation";
  if (!CopyInDevice(dst, dpitch, src, spitch, width, rows, kind)) {
    Violation(what);
    return Fail(cudaErrorInvalidValue);
  }
  std::shared_ptr<std::vector<char>> staging;
  if (staged) {
    staging = std::make_shared<std::vector<char>>(width * rows);
    for (size_t r = 0; r < rows; ++r) {
      std::memcpy(staging->data() + r * width, static_cast<const char*>(src) + r * spitch, width);
    }
    src = staging->data();
    spitch = width;
  }
  Enqueue(stream, [=, staging = std::move(staging)](bool run) {  // the staged bytes live as long as the copy
    if (!run) return;
    if (!CopyInDevice(dst, dpitch, src, spitch, width, rows, kind)) return FaultWhenRun(what);
    for (size_t r = 0; r < rows; ++r) {
      std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
    }
  });
  return cudaSuccess;
}

}  // namespace

cudaError_t cudaGetDeviceCount(int* count) {
  if (cudaError_t e = Enter("cudaGetDeviceCount"); e != cudaSuccess) return Fail(e);
  const int n = ConfigNow().devices;
  *count = n;
  return n > 0 ? cudaSuccess : Fail(cudaErrorNoDevice);
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (cudaError_t e = Enter("cudaGetDeviceProperties"); e != cudaSuccess) return Fail(e);
  if (device < 0 || device >= ConfigNow().devices) return Fail(cudaErrorInvalidDevice);
  std::snprintf(prop->name, sizeof prop->name, "host emulation (testing/cuda-host)");
  prop->totalGlobalMem = ConfigNow().total_bytes;
  prop->major = 0;  // no capability: video::GpuNvenc goes by the name
  prop->minor = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (cudaError_t e = Enter("cudaDeviceGetAttribute"); e != cudaSuccess) return Fail(e);
  if (device < 0 || device >= ConfigNow().devices) return Fail(cudaErrorInvalidDevice);
  *value = attr == cudaDevAttrMemoryPoolsSupported && ConfigNow().pools ? 1 : 0;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (cudaError_t e = Enter("cudaSetDevice"); e != cudaSuccess) return Fail(e);
  return device >= 0 && device < ConfigNow().devices ? cudaSuccess : Fail(cudaErrorInvalidDevice);
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (cudaError_t e = Enter("cudaMemGetInfo"); e != cudaSuccess) return Fail(e);
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  *total_bytes = s.config.total_bytes;
  *free_bytes = s.config.total_bytes - s.in_use;
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  cudaError_t sticky;
  {
    std::lock_guard<std::mutex> lock(S().mu);
    sticky = S().sticky;  // a lost context stays lost
  }
  if (sticky != cudaSuccess) return sticky;
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorECCUncorrectable: return "cudaErrorECCUncorrectable";
    case cudaErrorDevicesUnavailable: return "cudaErrorDevicesUnavailable";
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaSuccess ? "no error" : "injected or detected by the host emulation";
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  if (cudaError_t e = Enter("cudaMalloc"); e != cudaSuccess) return Fail(e);
  cudaError_t e = Allocate(p, bytes);
  return e == cudaSuccess ? e : Fail(e);
}

// cudaFree waits for the device first.
cudaError_t cudaFree(void* p) {
  if (cudaError_t e = Enter("cudaFree"); e != cudaSuccess) return Fail(e);
  Drain(&S().legacy);
  cudaError_t e = Release(p);
  return e == cudaSuccess ? e : Fail(e);
}

cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t stream) {
  if (cudaError_t e = Enter("cudaMallocAsync"); e != cudaSuccess) return Fail(e);
  (void)stream;  // the memory exists at once (on a device: from this point in the stream's order)
  cudaError_t e = Allocate(p, bytes);
  return e == cudaSuccess ? e : Fail(e);
}

// The memory goes when the stream reaches the free.
cudaError_t cudaFreeAsync(void* p, cudaStream_t stream) {
  if (cudaError_t e = Enter("cudaFreeAsync"); e != cudaSuccess) return Fail(e);
  Enqueue(stream, [p](bool run) {
    if (run) Release(p);
  });
  return cudaSuccess;
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (cudaError_t e = Enter("cudaDeviceGetDefaultMemPool"); e != cudaSuccess) return Fail(e);
  if (device < 0 || device >= ConfigNow().devices) return Fail(cudaErrorInvalidDevice);
  *pool = &S().pool;
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  if (cudaError_t e = Enter("cudaMemPoolSetAttribute"); e != cudaSuccess) return Fail(e);
  if (pool == nullptr || attr != cudaMemPoolAttrReleaseThreshold) return Fail(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(S().mu);
  std::memcpy(&pool->release_threshold, value, sizeof(uint64_t));
  return cudaSuccess;
}

// On the legacy default stream, which the non-blocking streams the backend
// uses do not wait for. As CUDA documents for pageable host memory: the
// legacy stream's earlier work is finished first; a copy to the host returns
// when it is done; a copy from the host returns once the bytes are staged,
// and the DMA to the device may still be running, so a kernel on another
// stream may read the old bytes until something synchronises the device
// (here: the legacy stream's work runs at cudaDeviceSynchronize, at
// cudaStreamSynchronize(0), at the next cudaMemcpy or at a cudaFree).
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  Drain(&S().legacy);
  if (kind == cudaMemcpyHostToDevice) {
    return Copy2D(dst, bytes, src, bytes, bytes, 1, kind, &S().legacy, "cudaMemcpy", /*staged=*/true);
  }
  return Copy2D(dst, bytes, src, bytes, bytes, 1, kind, nullptr, "cudaMemcpy");
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  return Copy2D(dst, bytes, src, bytes, bytes, 1, kind, stream, "cudaMemcpyAsync");
}

// height rows of width bytes, each pitch apart; as on a device, a pitch
// below the width is refused, and every byte of every row must lie in one
// allocation.
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream) {
  return Copy2D(dst, dpitch, src, spitch, width, height, kind, stream, "cudaMemcpy2DAsync");
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  if (cudaError_t e = Enter("cudaMemsetAsync"); e != cudaSuccess) return Fail(e);
  (void)stream;
  const std::string what = "cudaMemsetAsync: " + std::to_string(bytes) + " bytes outside a device allocation";
  if (!InDevice(p, bytes)) {
    Violation(what);
    return Fail(cudaErrorInvalidValue);
  }
  Enqueue(stream, [=](bool run) {
    if (!run) return;
    if (!InDevice(p, bytes)) return FaultWhenRun(what);
    std::memset(p, value, bytes);
  });
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  if (cudaError_t e = Enter("cudaStreamCreate"); e != cudaSuccess) return Fail(e);
  *stream = new CUstream_st;
  return cudaSuccess;
}

// Runs what is queued; then returns the injected error, or the one queued
// work lost the context with. On a lost context the queue is dropped.
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return Synchronize("cudaStreamSynchronize", stream == nullptr ? &S().legacy : stream);
}

// The legacy stream's work (other streams' queues belong to the threads that
// synchronise them, and run then).
cudaError_t cudaDeviceSynchronize() { return Synchronize("cudaDeviceSynchronize", &S().legacy); }

// As on a device, what is queued still completes (or is dropped, on a lost context).
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  Count("cudaStreamDestroy");  // runs even on a lost context, as clean-up does
  Drain(stream);
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  if (cudaError_t e = Enter("cudaEventCreate"); e != cudaSuccess) return Fail(e);
  *event = new CUevent_st;
  return cudaSuccess;
}

// The event takes the time when the stream reaches the record.
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (cudaError_t e = Enter("cudaEventRecord"); e != cudaSuccess) return Fail(e);
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  {
    std::lock_guard<std::mutex> lock(event->mu);
    event->state = CUevent_st::kQueued;
    ++event->queued;
  }
  Enqueue(stream, [event](bool run) {
    bool last;
    {
      std::lock_guard<std::mutex> lock(event->mu);
      last = --event->queued == 0;
      if (run && event->state == CUevent_st::kQueued && last) {
        event->at = std::chrono::steady_clock::now();
        event->state = CUevent_st::kDone;
      }
      last = last && event->destroyed;
    }
    if (last) delete event;
  });
  return cudaSuccess;
}

// As CUDA: an event never recorded is an invalid handle; one whose record
// has not run yet is not ready.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (cudaError_t e = Enter("cudaEventElapsedTime"); e != cudaSuccess) return Fail(e);
  if (start == nullptr || end == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  std::chrono::steady_clock::time_point at[2];
  cudaError_t e = cudaSuccess;
  for (int i = 0; i < 2; ++i) {
    CUevent_st* ev = i == 0 ? start : end;
    std::lock_guard<std::mutex> lock(ev->mu);
    if (ev->state == CUevent_st::kNever)
      e = cudaErrorInvalidResourceHandle;
    else if (ev->state == CUevent_st::kQueued && e == cudaSuccess)
      e = cudaErrorNotReady;
    at[i] = ev->at;
  }
  if (e != cudaSuccess) return Fail(e);
  *ms = std::chrono::duration<float, std::milli>(at[1] - at[0]).count();
  return cudaSuccess;
}

// An event destroyed while a record of it is queued goes when that record runs.
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  Count("cudaEventDestroy");
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  {
    std::lock_guard<std::mutex> lock(event->mu);
    if (event->queued > 0) {
      event->destroyed = true;
      return cudaSuccess;
    }
  }
  delete event;
  return cudaSuccess;
}

namespace cudahost {

void Reset(const Config& config) {
  State& s = S();
  std::deque<Work> dropped;
  {
    std::lock_guard<std::mutex> lock(s.legacy.mu);
    dropped.swap(s.legacy.queue);
  }
  for (Work& w : dropped) w(false);
  std::lock_guard<std::mutex> lock(s.mu);
  s.config = config;
  s.peak = s.in_use;
  s.calls.clear();
  s.faults.clear();
  s.sticky = cudaSuccess;
  s.launches = 0;
  s.violations = 0;
  s.last_violation.clear();
  last_error = cudaSuccess;
}

void FailCall(const std::string& api, cudaError_t error, int skip) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.faults.emplace(api, State::Fault{error, skip});
}

int Calls(const std::string& api) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.calls.find(api);
  return it == s.calls.end() ? 0 : it->second;
}

size_t BytesInUse() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.in_use;
}

size_t PeakBytesInUse() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.peak;
}

void ResetPeak() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.peak = s.in_use;
}

void ReleaseAll() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  for (const auto& [base, bytes] : s.allocations) std::free(reinterpret_cast<void*>(base));
  s.allocations.clear();
  s.in_use = 0;
}

int Violations() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.violations;
}

std::string LastViolation() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.last_violation;
}

size_t Queued(cudaStream_t stream) {
  if (stream == nullptr) stream = &S().legacy;
  std::lock_guard<std::mutex> lock(stream->mu);
  return stream->queue.size();
}

namespace {

// The indices 0..n-1 in the order `order` runs them.
void Order(std::vector<uint32_t>& v, uint32_t n, LaunchOrder order, std::mt19937_64& rng) {
  v.resize(n);
  std::iota(v.begin(), v.end(), 0u);
  if (order == LaunchOrder::kReversed) std::reverse(v.begin(), v.end());
  if (order == LaunchOrder::kShuffled) std::shuffle(v.begin(), v.end(), rng);
}

}  // namespace

void LaunchGrid(dim3 grid, dim3 block, cudaStream_t stream, std::function<void()> body) {
  if (cudaError_t e = Enter("launch"); e != cudaSuccess) {
    Fail(e);
    return;
  }
  // CUDA's limits: grid x < 2^31, y and z <= 65535; at most 1024 threads a block, z <= 64.
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535 ||
      block.x == 0 || block.y == 0 || block.z == 0 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
      static_cast<uint64_t>(block.x) * block.y * block.z > 1024) {
    Violation("launch outside CUDA's grid and block limits");
    Fail(cudaErrorInvalidConfiguration);
    return;
  }
  const uint64_t blocks = static_cast<uint64_t>(grid.x) * grid.y * grid.z;
  if (blocks > (uint64_t{1} << 26)) {  // a grid the emulation could not run in any useful time
    Violation("launch of " + std::to_string(blocks) + " blocks: too many for the host emulation");
    Fail(cudaErrorInvalidConfiguration);
    return;
  }
  LaunchOrder order;
  uint64_t seed;
  {
    State& s = S();
    std::lock_guard<std::mutex> lock(s.mu);
    order = s.config.order;
    seed = s.config.seed * 0x9e3779b97f4a7c15ull + ++s.launches;
  }
  Enqueue(stream, [grid, block, blocks, order, seed, body = std::move(body)](bool run) {
    if (!run) return;
    gridDim = grid;
    blockDim = block;
    std::mt19937_64 rng(seed);
    std::vector<uint32_t> bs, ts;
    Order(bs, static_cast<uint32_t>(blocks), order, rng);
    Order(ts, block.x * block.y * block.z, order, rng);  // one permutation for every block: cheaper
    for (uint32_t b : bs) {
      blockIdx = uint3{b % grid.x, b / grid.x % grid.y, b / grid.x / grid.y};
      for (uint32_t t : ts) {
        threadIdx = uint3{t % block.x, t / block.x % block.y, t / block.x / block.y};
        body();
      }
    }
  });
}

}  // namespace cudahost
