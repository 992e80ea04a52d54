// transfer_bench (issue 11): what the CUDA render backend's two large copies
// cost on this machine's bus, and what pinned host memory would save, before
// the backend is changed to use it. The backend downloads each render's RGB
// (24.9 MB at 4K) into the Image's pageable buffer and uploads a photo's
// cover-fit window (27 MB for a 12 MP photo) straight from the decoded image,
// also pageable; the driver then stages both through its own pinned buffers
// with the host's CPU. Each case is timed in wall time and in this thread's
// CPU time (what the host spends), median of the repetitions.
//
//   download pageable   cudaMemcpyAsync into a std::vector (the backend now)
//   download pinned     into cudaMallocHost memory (DMA only)
//   ... + copy out      the same, then memcpy into the pageable Image buffer
//   download registered cudaHostRegister the Image buffer, copy, unregister
//   upload ...          the same for the photo window: pageable rows out of a
//                       wider photo (cudaMemcpy2DAsync, as the backend), one
//                       contiguous pageable block, pinned
//
// Usage: transfer_bench [--reps N]. Without a CUDA device it says so and exits 0.
#include <cuda_runtime.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

bool Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s (%s)\n", what, cudaGetErrorName(e), cudaGetErrorString(e));
  return false;
}

struct Timing {
  double wall_ms, cpu_ms;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs op (which must finish its copy before returning) reps times after one
// warm-up; false when op fails.
bool Time(int reps, const std::function<bool()>& op, Timing* out) {
  if (!op()) return false;
  std::vector<double> wall, cpu;
  for (int i = 0; i < reps; ++i) {
    const auto w0 = std::chrono::steady_clock::now();
    const double c0 = ThreadCpuMs();
    if (!op()) return false;
    cpu.push_back(ThreadCpuMs() - c0);
    wall.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count());
  }
  *out = Timing{Median(wall), Median(cpu)};
  return true;
}

void Row(const char* name, size_t bytes, const Timing& t) {
  std::printf("%-34s %8.1f %9.2f %8.1f %9.2f\n", name, static_cast<double>(bytes) / 1e6, t.wall_ms,
              static_cast<double>(bytes) / 1e6 / t.wall_ms, t.cpu_ms);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 15;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: transfer_bench [--reps N]\n");
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: transfer rows skipped\n");
    return 0;
  }
  cudaDeviceProp prop{};
  if (!Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties")) return 1;
  std::printf("device 0: %s; median of %d, after one warm-up\n", prop.name, reps);

  const size_t rgb_bytes = size_t{3840} * 2160 * 3;  // a 4K render's RGB
  const int photo_w = 4000, photo_h = 3000;          // a 12 MP photo ...
  const int win_w = 3000, win_h = 2250;              // ... and a window narrower than it (pitched rows)
  const size_t photo_pitch = size_t{photo_w} * 3, win_row = size_t{win_w} * 3;
  const size_t win_bytes = win_row * win_h;

  cudaStream_t stream = nullptr;
  void* dev = nullptr;
  uint8_t* pinned = nullptr;
  const size_t dev_bytes = std::max(rgb_bytes, win_bytes);
  if (!Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate") ||
      !Check(cudaMalloc(&dev, dev_bytes), "cudaMalloc") ||
      !Check(cudaMallocHost(reinterpret_cast<void**>(&pinned), dev_bytes), "cudaMallocHost") ||
      !Check(cudaMemset(dev, 7, dev_bytes), "cudaMemset")) {
    return 1;
  }
  std::vector<uint8_t> image(rgb_bytes, 1);                      // the Image's pageable buffer, touched
  std::vector<uint8_t> photo(photo_pitch * photo_h, 2);          // a decoded photo, pageable
  auto sync = [&] { return Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize"); };

  std::printf("%-34s %8s %9s %8s %9s\n", "case", "MB", "wall ms", "GB/s", "host ms");
  bool ok = true;
  // One row: op timed, unless an earlier case failed.
  auto run_case = [&](const char* name, size_t bytes, const std::function<bool()>& op) {
    Timing t{};
    ok = ok && Time(reps, op, &t);
    if (ok) Row(name, bytes, t);
  };
  run_case("download 4K RGB, pageable", rgb_bytes, [&] {
    return Check(cudaMemcpyAsync(image.data(), dev, rgb_bytes, cudaMemcpyDeviceToHost, stream), "d2h") && sync();
  });
  run_case("download 4K RGB, pinned", rgb_bytes, [&] {
    return Check(cudaMemcpyAsync(pinned, dev, rgb_bytes, cudaMemcpyDeviceToHost, stream), "d2h") && sync();
  });
  run_case("download 4K RGB, pinned + copy out", rgb_bytes, [&] {
    if (!Check(cudaMemcpyAsync(pinned, dev, rgb_bytes, cudaMemcpyDeviceToHost, stream), "d2h") || !sync()) return false;
    std::memcpy(image.data(), pinned, rgb_bytes);
    return true;
  });
  run_case("download 4K RGB, registered", rgb_bytes, [&] {
    if (!Check(cudaHostRegister(image.data(), rgb_bytes, cudaHostRegisterDefault), "cudaHostRegister")) return false;
    const bool copied =
        Check(cudaMemcpyAsync(image.data(), dev, rgb_bytes, cudaMemcpyDeviceToHost, stream), "d2h") && sync();
    return Check(cudaHostUnregister(image.data()), "cudaHostUnregister") && copied;
  });

  const uint8_t* window = photo.data() + size_t{(photo_h - win_h) / 2} * photo_pitch + size_t{(photo_w - win_w) / 2} * 3;
  run_case("upload 12 MP window, pageable 2-D", win_bytes, [&] {
    return Check(cudaMemcpy2DAsync(dev, win_row, window, photo_pitch, win_row, win_h, cudaMemcpyHostToDevice, stream),
                 "h2d 2d") &&
           sync();
  });
  run_case("upload 12 MP window, pageable 1-D", win_bytes, [&] {
    return Check(cudaMemcpyAsync(dev, photo.data(), win_bytes, cudaMemcpyHostToDevice, stream), "h2d") && sync();
  });
  run_case("upload 12 MP window, pinned", win_bytes, [&] {
    return Check(cudaMemcpyAsync(dev, pinned, win_bytes, cudaMemcpyHostToDevice, stream), "h2d") && sync();
  });

  cudaFreeHost(pinned);
  cudaFree(dev);
  cudaStreamDestroy(stream);
  return ok ? 0 : 1;
}
