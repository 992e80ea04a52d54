// render_gpu_bench (issue 11): 1080p and 4K render time and throughput with 1,
// 4 and 16 concurrent renders, GPU (CUDA backend) against the CPU (one thread
// per render) on the same machine. Without a CUDA device it says so and runs
// the CPU rows only. --host-only: the host's share of a render alone (the heavy
// passes skipped), the floor no accelerator goes below. On GPU rows, "dev MiB"
// is the device memory pool's high-water mark of memory in use by the renders
// of that row (their planes; read from the CUDA runtime), which sizes a MIG
// slice or DANQING_GPU_MEMORY_MB.
// --photo FILE: every render on that photo (Background::kPhoto, the service's
// usual case) instead of the landscape. --photo-size WxH: on a synthetic
// photo of that size (testing_fixtures::ColourPhoto), e.g. a 12 MP phone
// photo, whose window upload then shows in the GPU rows.
// Usage: render_gpu_bench [--renders N] [--photo FILE | --photo-size WxH] [--cpu-only | --host-only]
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <latch>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "image/image.h"
#include "render/backend.h"
#include "render/passes.h"
#include "render/renderer.h"
#include "testing/support/render_fixtures.h"

#ifdef DANQING_HAVE_CUDA
#include <cuda_runtime.h>
#endif

using danqing::render::Renderer;
using Clock = std::chrono::steady_clock;

namespace {

struct Row {
  double mean_ms;      // per render
  double passes_ms;    // of which the heavy passes (RenderStats::passes_ms)
  double per_second;   // throughput
  int on_backend;      // renders the wanted backend ran
  double stage_ms[4];  // means of RenderStats background, strokes, diffusion, compose
  size_t max_dabs;     // the most brush imprints of one render
};

// What the CUDA runtime says about device 0's memory. pool_peak: the default
// memory pool's high-water mark of bytes in use since ResetPoolPeak (the
// backend takes every plane from that pool); -1 when unknown (no CUDA, or no
// pool support: then the backend uses cudaMalloc). device_used: total minus
// free (this process's context, textures and pool, and any other process).
struct DeviceMemory {
  double pool_peak_mib = -1, device_used_mib = -1;
};

#ifdef DANQING_HAVE_CUDA
cudaMemPool_t DefaultPool() {
  cudaMemPool_t pool = nullptr;
  int supported = 0;
  if (cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0) != cudaSuccess || supported == 0 ||
      cudaDeviceGetDefaultMemPool(&pool, 0) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return pool;
}
// Resets the high-water mark. trim: also hands the pool's idle memory back
// to the device (the backend keeps up to its whole budget there between
// renders), so that "device in use" after the row holds only that row's.
void ResetPoolPeak(bool trim) {
  if (cudaMemPool_t pool = DefaultPool()) {
    if (trim && (cudaDeviceSynchronize() != cudaSuccess || cudaMemPoolTrimTo(pool, 0) != cudaSuccess)) {
      cudaGetLastError();
    }
    uint64_t zero = 0;  // the high-water mark can only be reset to zero
    if (cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero) != cudaSuccess) cudaGetLastError();
  }
}
DeviceMemory ReadDeviceMemory() {
  DeviceMemory m;
  if (cudaMemPool_t pool = DefaultPool()) {
    uint64_t peak = 0;
    // 0: nothing came from the pool (the backend fell back to cudaMalloc).
    if (cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &peak) == cudaSuccess && peak > 0) {
      m.pool_peak_mib = static_cast<double>(peak) / 1048576.0;
    }
  }
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
    m.device_used_mib = static_cast<double>(total_b - free_b) / 1048576.0;
  }
  cudaGetLastError();
  return m;
}
#else
void ResetPoolPeak(bool) {}
DeviceMemory ReadDeviceMemory() { return {}; }
#endif

const danqing::image::Image* g_photo = nullptr;  // --photo

// `total` renders on `concurrency` threads. Each thread first does one
// untimed render of its own: a fresh thread's first render pays for its
// allocator arena and its thread-local planes (fresh pages), which a
// service's long-lived workers pay once, not per render. The clock starts
// when every thread has done that.
Row Run(const Renderer& r, int w, int h, int concurrency, int total) {
  danqing::render::Inscription text{"朝辞白帝彩云间，千里江陵一日还。两岸猿声啼不住，轻舟已过万重山。", "早发白帝城",
                                    "李白", "甲辰春"};
  auto options = [&](uint64_t seed) {
    danqing::render::RenderOptions o;
    o.width = w;
    o.height = h;
    o.seed = seed;
    if (g_photo != nullptr) {
      o.background = danqing::render::Background::kPhoto;
      o.photo = g_photo;
    }
    return o;
  };
  std::atomic<int> next{0}, on{0};
  std::atomic<size_t> max_dabs{0};
  std::atomic<long long> sum_us{0}, passes_us{0};
  std::atomic<long long> stage_us[4] = {0, 0, 0, 0};
  std::latch warm(concurrency), go(1);
  std::vector<std::thread> th;
  for (int c = 0; c < concurrency; ++c) {
    th.emplace_back([&, c] {
      (void)r.Render(text, options(static_cast<uint64_t>(1000000 + c)));
      warm.count_down();
      go.wait();
      for (int i = next++; i < total; i = next++) {
        const danqing::render::RenderOptions o = options(static_cast<uint64_t>(i));
        danqing::render::RenderStats st;
        const auto a = Clock::now();
        auto img = r.Render(text, o, &st);
        sum_us += std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - a).count();
        passes_us += static_cast<long long>(st.passes_ms * 1000.0);
        const double stages[4] = {st.background_ms, st.strokes_ms, st.diffusion_ms, st.compose_ms};
        for (int k = 0; k < 4; ++k) stage_us[k] += static_cast<long long>(stages[k] * 1000.0);
        if (img.ok() && st.backend == r.backend()) ++on;
        for (size_t m = max_dabs.load(); st.dabs > m && !max_dabs.compare_exchange_weak(m, st.dabs);) {
        }
      }
    });
  }
  warm.wait();
  const auto t0 = Clock::now();
  go.count_down();
  for (auto& t : th) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  Row row{static_cast<double>(sum_us.load()) / 1000.0 / total, static_cast<double>(passes_us.load()) / 1000.0 / total,
          total / wall, on.load(), {}, max_dabs.load()};
  for (int k = 0; k < 4; ++k) row.stage_ms[k] = static_cast<double>(stage_us[k].load()) / 1000.0 / total;
  return row;
}

// DeviceBytesPerRender for a render of this bench (with --photo, its window).
size_t ReservedBytes(int w, int h, size_t dabs) {
  if (g_photo == nullptr) return danqing::render::DeviceBytesPerRender(w, h, dabs);
  const auto in = danqing::render::CoverPhoto(*g_photo, danqing::render::PlanesFor(w, h), 0, 0, 0, 0);
  return danqing::render::DeviceBytesPerRender(w, h, dabs, in.w, in.h);
}

// A stand-in for an infinitely fast accelerator: its passes do only the host
// work of the CUDA backend's, so a render's whole time is the host's share
// (--host-only). For a photo, the resampling tables and one copy of the
// photo's window (what the driver's staging of a pageable upload costs at
// least); then the image written into the host buffer, as a copy-out must.
class NoPasses final : public danqing::render::Passes {
 public:
  void Run(const danqing::render::PassPlan& plan, const danqing::render::Textures&, uint8_t* rgb,
           danqing::render::Plane*, danqing::render::PassTimes*) override {
    if (const danqing::render::PhotoInput* ph = plan.photo; ph != nullptr) {
      const auto tx = danqing::image::MakeResampleTaps(ph->w, plan.planes.lw);
      const auto ty = danqing::image::MakeResampleTaps(ph->h, plan.planes.lh);
      // The driver's staging memory is its own and stays mapped: one buffer
      // per thread, not a fresh one per render.
      static thread_local danqing::image::PixelBuffer staging;
      const size_t row = static_cast<size_t>(ph->w) * 3;
      staging.resize(row * static_cast<size_t>(ph->h));
      for (int y = 0; y < ph->h; ++y) {
        std::memcpy(staging.data() + row * static_cast<size_t>(y),
                    ph->image->row(ph->y0 + y) + static_cast<size_t>(ph->x0) * 3, row);
      }
      sink_ += tx.weights.size() + ty.weights.size() + staging[staging.size() / 2];
    }
    std::memset(rgb, 0xee, static_cast<size_t>(plan.planes.w) * static_cast<size_t>(plan.planes.h) * 3);
  }
  static inline std::atomic<size_t> sink_{0};  // keeps the work from being optimised away
  const char* name() const override { return "none"; }
};

int HostOnly(int renders) {
  danqing::render::RendererConfig c;
  c.accelerator = [](const danqing::render::PassPlan&) -> danqing::Result<std::unique_ptr<danqing::render::Passes>> {
    return std::unique_ptr<danqing::render::Passes>(std::make_unique<NoPasses>());
  };
  auto r = Renderer::Create(c);
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
    return 1;
  }
  std::printf("host share: the heavy passes skipped (an infinitely fast accelerator), one render at a time\n");
  std::printf("%-6s %7s %12s\n", "size", "renders", "ms/render");
  for (auto [w, h, label] : {std::tuple{1920, 1080, "1080p"}, std::tuple{3840, 2160, "4K"}}) {
    Row row = Run(**r, w, h, 1, renders);
    std::printf("%-6s %7d %12.2f\n", label, renders, row.mean_ms);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int renders = 16;
  bool cpu_only = false, host_only = false;
  const char* photo_path = nullptr;
  const char* photo_size = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--renders") == 0 && i + 1 < argc) renders = std::max(1, std::atoi(argv[++i]));
    else if (std::strcmp(argv[i], "--photo") == 0 && i + 1 < argc) photo_path = argv[++i];
    else if (std::strcmp(argv[i], "--photo-size") == 0 && i + 1 < argc) photo_size = argv[++i];
    else if (std::strcmp(argv[i], "--cpu-only") == 0) cpu_only = true;
    else if (std::strcmp(argv[i], "--host-only") == 0) host_only = true;
    else {
      std::fprintf(stderr,
                   "usage: render_gpu_bench [--renders N] [--photo FILE | --photo-size WxH] [--cpu-only | --host-only]\n");
      return 2;
    }
  }
  danqing::image::Image photo;
  if (photo_size != nullptr) {
    int pw = 0, ph = 0;
    char x = 0, rest = 0;
    if (photo_path != nullptr || std::sscanf(photo_size, "%d%c%d%c", &pw, &x, &ph, &rest) != 3 || x != 'x' ||
        pw < 1 || ph < 1 || static_cast<int64_t>(pw) * ph > 50'000'000) {
      std::fprintf(stderr, "--photo-size %s: expected WxH, at most 50 megapixels, and no --photo\n", photo_size);
      return 2;
    }
    photo = danqing::render::testing_fixtures::ColourPhoto(pw, ph);
    g_photo = &photo;
    std::printf("background: synthetic photo %dx%d\n", pw, ph);
  }
  if (photo_path != nullptr) {
    auto decoded = danqing::image::ReadFile(photo_path);
    if (!decoded.ok()) {
      std::fprintf(stderr, "--photo %s: %s\n", photo_path, decoded.status().ToString().c_str());
      return 2;
    }
    photo = std::move(decoded).value();
    g_photo = &photo;
    std::printf("background: photo %s (%dx%d)\n", photo_path, photo.width, photo.height);
  }
  spdlog::set_level(spdlog::level::warn);
  if (host_only) return HostOnly(renders);
  const auto probe = danqing::render::ProbeCuda();
  const auto d = danqing::render::DecideBackend(danqing::render::BackendChoice::kAuto,
                                                std::getenv("NVIDIA_VISIBLE_DEVICES"), probe);
  std::printf("CUDA: %s\n", d.reason.c_str());
  std::vector<std::pair<std::string, std::string>> backends = {{"cpu", "cpu"}};
  if (d.gpu && !cpu_only) backends.insert(backends.begin(), {"gpu", "gpu"});
  if (!d.gpu) std::printf("no GPU present: GPU rows skipped, CPU rows only\n");
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  // host ms: the part of a render outside the heavy passes (layout, stroke
  // planning, the seal, the output buffer), which no accelerator shortens.
  std::printf("%-5s %-6s %5s %7s %10s %10s %8s %10s %8s %s\n", "back", "size", "conc", "renders", "ms/render",
              "passes ms", "host ms", "renders/s", "dev MiB", "on backend");
  for (const auto& [name, choice] : backends) {
    danqing::render::RendererConfig c;
    c.backend = choice;
    auto r = Renderer::Create(c);
    if (!r.ok()) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), r.status().ToString().c_str());
      return 1;
    }
    for (auto [w, h, label] : {std::tuple{1920, 1080, "1080p"}, std::tuple{3840, 2160, "4K"}}) {
      // 8: the time-sliced overlay's most (4 pods of 2 workers on one GPU).
      for (int conc : {1, 4, 8, 16}) {
        // The CPU rows run one thread per render: more renders than cores only queue.
        const int n = std::max(renders, conc);
        const bool gpu_row = name == "gpu";
        if (gpu_row) ResetPoolPeak(conc == 1);
        Row row = Run(**r, w, h, conc, n);
        const DeviceMemory mem = gpu_row ? ReadDeviceMemory() : DeviceMemory{};
        char dev[32] = "-";
        if (mem.pool_peak_mib >= 0) std::snprintf(dev, sizeof dev, "%.1f", mem.pool_peak_mib);
        std::printf("%-5s %-6s %5d %7d %10.1f %10.1f %8.1f %10.2f %8s %d/%d%s\n", name.c_str(), label, conc, n,
                    row.mean_ms, row.passes_ms, row.mean_ms - row.passes_ms, row.per_second, dev, row.on_backend, n,
                    name == "cpu" && static_cast<unsigned>(conc) > cores ? " (more renders than cores)" : "");
        if (gpu_row && conc == 1) {
          std::printf("      device memory: one render's planes peak %s MiB in the pool, reserved per render %.1f MiB "
                      "(DeviceBytesPerRender, %zu dabs); device in use after the row %.0f MiB (context, textures, pool)\n",
                      dev, static_cast<double>(ReservedBytes(w, h, row.max_dabs)) / 1048576.0,
                      row.max_dabs, mem.device_used_mib);
        }
        if (conc == 1 || gpu_row) {
          // On the GPU the stages are CUDA event times on the render's stream
          // (compose includes the RGB download); strokes includes brush planning.
          // Printed for every GPU row: where renders in flight contend.
          std::printf("      stages (ms): background %.2f, strokes %.2f, diffusion %.2f, compose %.2f\n",
                      row.stage_ms[0], row.stage_ms[1], row.stage_ms[2], row.stage_ms[3]);
        }
      }
    }
  }
  return 0;
}
