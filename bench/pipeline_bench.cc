// The request pipeline's stages on this machine (issue 30): a 4 MP JPEG photo
// (2560x1600, made from a bundled photo, JPEG quality 92) to a 1920x1080 xing
// inscription, one request at a time on one core, through the same Pipeline
// the service runs. Prints the median of each stage over --runs requests per
// case, and the host share (decode + perceive + verse + encode).
//
// With --workers N: throughput instead. N threads run requests back to back
// for --seconds (a saturated service with N render workers and nothing else:
// no HTTP, no queue) on one case (--background, --format), and it prints
// inscriptions/s, the latency p50/p99, each stage's busy seconds per
// inscription, and the share of the wall time in which at least one render
// ran (on a GPU backend: the GPU busy share, as danqing_gpu_busy_ratio).
//
// With --device-ms D (and --workers, --seconds): the service's RenderQueue
// instead, saturated, with a stand-in device whose render takes D ms of
// waiting (no CPU), as a GPU render does from the host's side: once with the
// host stages of the next request run while the current one renders
// (SubmitPrepared, the service's path) and once with them before the render
// on the worker (SubmitStaged with RunToCanvas, the path before); it prints
// inscriptions/s and the device busy share of each.
//
//   build/default/bench/pipeline_bench [--runs 5] [--photo FILE] [--size WxH]
//       [--backend cpu|gpu|auto] [--cascade-dir DIR]
//       [--workers N --seconds S --background B --format F [--device-ms D]]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "image/image.h"
#include "perceive/perceiver.h"
#include "service/assets.h"
#include "service/inscription_renderer.h"
#include "service/metrics.h"
#include "service/pipeline.h"
#include "service/render_queue.h"
#include "verse/corpus.h"
#include "verse/selector.h"

namespace {

using namespace danqing;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "pipeline_bench: %s\n", what.c_str());
  std::exit(1);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0;
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

// N threads, each running requests back to back until `seconds` pass.
void Throughput(const service::Pipeline& pipeline, std::span<const uint8_t> bytes,
                const service::InscribeOptions& o, int workers, double seconds) {
  using Clock = std::chrono::steady_clock;
  std::mutex mu;
  std::vector<double> latency;
  service::Timings busy;  // summed over every inscription
  std::string backend;
  service::BusyWindow renders(std::chrono::hours(1));
  std::atomic<bool> failed{false};
  const auto start = Clock::now();
  const auto stop =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      while (Clock::now() < stop && !failed) {
        auto r = pipeline.Run(bytes, o);
        if (!r.ok()) {
          std::fprintf(stderr, "pipeline_bench: %s\n", r.status().ToString().c_str());
          failed = true;
          return;
        }
        renders.Record(r->render_began, r->render_ended, r->backend != "cpu");
        std::lock_guard<std::mutex> lock(mu);
        latency.push_back(r->timings.total_ms);
        const auto& t = r->timings;
        busy.decode_ms += t.decode_ms;
        busy.perceive_ms += t.perceive_ms;
        busy.verse_ms += t.verse_ms;
        busy.render_ms += t.render_ms;
        busy.encode_ms += t.encode_ms;
        backend = r->backend;
      }
    });
  }
  for (auto& t : threads) t.join();
  if (failed) std::exit(1);
  const auto end = Clock::now();
  const double wall = std::chrono::duration<double>(end - start).count();
  const double n = static_cast<double>(latency.size());
  std::printf(
      "throughput: %s %s %dx%d, %d workers, %.1f s: %zu inscriptions, %.2f /s, latency p50 %.1f "
      "p99 %.1f ms; per inscription (ms) decode %.1f perceive %.1f verse %.2f render %.1f encode "
      "%.1f; render busy share %.3f, GPU busy share %.3f (backend %s)\n",
      o.background.c_str(), o.format.c_str(), o.width, o.height, workers, wall, latency.size(),
      n / wall, Quantile(latency, 0.5), Quantile(latency, 0.99), busy.decode_ms / n,
      busy.perceive_ms / n, busy.verse_ms / n, busy.render_ms / n, busy.encode_ms / n,
      renders.Ratio(end, false), renders.Ratio(end, true), backend.c_str());
}

// A device that takes `ms` per render and no host CPU (it waits), drawing a
// blank canvas: the host's view of a GPU render.
class StandInDevice final : public service::InscriptionRenderer {
 public:
  StandInDevice(const service::InscriptionRenderer* real, double ms) : real_(real), ms_(ms) {}
  Result<image::Image> Render(const service::InscriptionJob& job,
                              service::RenderOutcome* outcome) const override {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms_));
    if (outcome != nullptr) *outcome = {"stand-in", ""};
    return image::Image::Filled(job.width, job.height);
  }
  bool CanRender(char32_t c) const override { return real_->CanRender(c); }
  std::string Backend() const override { return "stand-in"; }

 private:
  const service::InscriptionRenderer* real_;
  double ms_;
};

// The queue saturated for `seconds` (at most 3 jobs per worker admitted),
// with or without the host stages overlapping the render before.
void QueueThroughput(const service::Pipeline& pipeline, std::span<const uint8_t> bytes,
                     const service::InscribeOptions& o, int workers, double seconds, bool overlap) {
  using Clock = std::chrono::steady_clock;
  std::mutex mu;
  std::condition_variable done_cv;
  size_t admitted = 0, done = 0;  // guarded by mu
  service::BusyWindow renders(std::chrono::hours(1));
  std::atomic<bool> failed{false};
  const size_t cap = static_cast<size_t>(workers) * 3;
  const auto finish = [&](const Result<service::InscriptionResult>& r) {
    if (!r.ok()) {
      std::fprintf(stderr, "pipeline_bench: %s\n", r.status().ToString().c_str());
      failed = true;
    } else {
      renders.Record(r->render_began, r->render_ended, true);
    }
    std::lock_guard<std::mutex> lock(mu);
    ++done;
    done_cv.notify_all();
  };
  // What is left of a job once its canvas is rendered: the encode; nothing
  // where the render failed (the job is finished with its error).
  const auto encode = [&](Result<service::Pipeline::Rendered> r) -> service::RenderQueue::Rest {
    if (!r.ok()) {
      finish(r.status());
      return nullptr;
    }
    auto canvas = std::make_shared<service::Pipeline::Rendered>(std::move(r).value());
    return [&, canvas] { finish(pipeline.Encode(std::move(*canvas))); };
  };
  size_t at_stop = 0;
  Clock::time_point end;
  {
    service::RenderQueue q(static_cast<size_t>(workers), cap, nullptr);
    const auto start = Clock::now();
    const auto stop =
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    const auto far = start + std::chrono::hours(1);
    while (Clock::now() < stop && !failed) {
      {
        std::unique_lock<std::mutex> lock(mu);
        done_cv.wait(lock, [&] { return admitted - done < cap; });
        ++admitted;
      }
      service::RenderQueue::Admit a;
      if (overlap) {
        a = q.SubmitPrepared(
            [&]() -> service::RenderQueue::Render {
              auto p = pipeline.Prepare(bytes, o);
              if (!p.ok()) {
                finish(p.status());
                return nullptr;
              }
              auto held = std::make_shared<service::Pipeline::Prepared>(std::move(p).value());
              return [&, held]() -> service::RenderQueue::Rest {
                return encode(pipeline.Render(std::move(*held)));
              };
            },
            [] {}, far);
      } else {
        a = q.SubmitStaged(
            [&]() -> service::RenderQueue::Rest { return encode(pipeline.RunToCanvas(bytes, o)); },
            [] {}, far);
      }
      if (a != service::RenderQueue::Admit::kAccepted) Die("the queue refused a job");
    }
    end = Clock::now();
    {
      std::lock_guard<std::mutex> lock(mu);
      at_stop = done;
    }
    const double wall = std::chrono::duration<double>(end - start).count();
    std::printf(
        "queue: %s, %d workers, stand-in device, %.1f s: %zu inscriptions, %.2f /s, device busy "
        "share %.3f\n",
        overlap ? "host stages overlap the render (SubmitPrepared)"
                : "host stages before the render on the worker (SubmitStaged)",
        workers, wall, at_stop, static_cast<double>(at_stop) / wall, renders.Ratio(end, true));
  }  // the queue drains what is left
  if (failed) std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 5;
  std::string photo_path = DANQING_SOURCE_DIR "/tests/data/photos/astronaut.jpg";
  int width = 1920, height = 1080;
  std::string backend = "cpu", cascade_dir, one_background = "landscape", one_format = "auto";
  int workers = 0;
  double seconds = 10, device_ms = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--backend" && i + 1 < argc) {
      backend = argv[++i];
    } else if (a == "--cascade-dir" && i + 1 < argc) {
      cascade_dir = argv[++i];
    } else if (a == "--background" && i + 1 < argc) {
      one_background = argv[++i];
    } else if (a == "--format" && i + 1 < argc) {
      one_format = argv[++i];
    } else if (a == "--workers" && i + 1 < argc) {
      workers = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--device-ms" && i + 1 < argc) {
      device_ms = std::max(0.0, std::atof(argv[++i]));
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = std::max(0.1, std::atof(argv[++i]));
    } else if (a == "--runs" && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--photo" && i + 1 < argc) {
      photo_path = argv[++i];
    } else if (a == "--size" && i + 1 < argc) {
      if (std::sscanf(argv[++i], "%dx%d", &width, &height) != 2) Die("--size WxH");
    } else {
      Die("usage: pipeline_bench [--runs N] [--photo FILE] [--size WxH] [--backend B] "
          "[--cascade-dir DIR] [--workers N --seconds S --background B --format F "
          "[--device-ms D]]");
    }
  }
  auto small = image::ReadFile(photo_path);
  if (!small.ok()) Die(photo_path + ": " + small.status().ToString());
  // A 4 MP photo as a phone would send it (the bundled photos are small).
  auto big = image::EncodeJpeg(image::Resize(*small, 2560, 1600), 92);
  if (!big.ok()) Die(big.status().ToString());
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(big->data()), big->size());

  auto corpus = verse::Corpus::Parse(service::BundledPoems(), "bundled poems.tsv");
  if (!corpus.ok()) Die(corpus.status().ToString());
  verse::VerseSelector selector(*corpus);
  perceive::CvPerceiverOptions perceiver_options;
  if (!cascade_dir.empty()) perceiver_options.cascade_dir = cascade_dir;
  auto perceiver = perceive::CreateCvPerceiver(perceiver_options);
  if (!perceiver.ok()) Die(perceiver.status().ToString());
  auto renderer = service::CreateInscriptionRenderer(
      {.strokes_path = "", .font_path = "", .threads_per_render = 1, .backend = backend});
  if (!renderer.ok()) Die(renderer.status().ToString());
  service::PipelineLimits limits;
  limits.max_canvas_side = 8192;
  service::Pipeline pipeline(perceiver->get(), &selector, renderer->get(), limits);
  if (workers > 0) {
    service::InscribeOptions o;
    o.width = width;
    o.height = height;
    o.style = "xing";
    o.background = one_background;
    o.format = one_format;
    if (Status st = pipeline.Validate(o); !st.ok()) Die(st.ToString());
    std::printf("pipeline_bench: photo 2560x1600 JPEG (%zu bytes, from %s)\n", big->size(),
                photo_path.c_str());
    if (device_ms >= 0) {
      StandInDevice device(renderer->get(), device_ms);
      service::Pipeline stand_in(perceiver->get(), &selector, &device, limits);
      std::printf("stand-in device: %.1f ms per render\n", device_ms);
      QueueThroughput(stand_in, bytes, o, workers, seconds, false);
      QueueThroughput(stand_in, bytes, o, workers, seconds, true);
      return 0;
    }
    Throughput(pipeline, bytes, o, workers, seconds);
    return 0;
  }

  std::printf(
      "pipeline_bench: photo 2560x1600 JPEG (%zu bytes, from %s), answer %dx%d xing, "
      "median of %d, ms\n",
      big->size(), photo_path.c_str(), width, height, runs);
  std::printf("%-10s %-6s %7s %8s %6s %7s %7s %6s %6s %9s | %s\n", "background", "format", "decode",
              "perceive", "verse", "render", "encode", "total", "host", "bytes",
              "CPU ms: decode perceive verse render encode host");
  for (const char* background : {"landscape", "paper", "photo"}) {
    for (const char* format : {"png", "jpeg"}) {
      service::InscribeOptions o;
      o.width = width;
      o.height = height;
      o.style = "xing";
      o.background = background;
      o.format = format;
      std::vector<double> decode, perceive, verse, render, encode, total, host;
      std::vector<double> c_decode, c_perceive, c_verse, c_render, c_encode, c_host;
      size_t out_bytes = 0;
      for (int i = 0; i < runs; ++i) {
        auto r = pipeline.Run(bytes, o);
        if (!r.ok()) Die(r.status().ToString());
        const auto& t = r->timings;
        decode.push_back(t.decode_ms);
        perceive.push_back(t.perceive_ms);
        verse.push_back(t.verse_ms);
        render.push_back(t.render_ms);
        encode.push_back(t.encode_ms);
        total.push_back(t.total_ms);
        host.push_back(t.decode_ms + t.perceive_ms + t.verse_ms + t.encode_ms);
        c_decode.push_back(t.decode_cpu_ms);
        c_perceive.push_back(t.perceive_cpu_ms);
        c_verse.push_back(t.verse_cpu_ms);
        c_render.push_back(t.render_cpu_ms);
        c_encode.push_back(t.encode_cpu_ms);
        c_host.push_back(t.decode_cpu_ms + t.perceive_cpu_ms + t.verse_cpu_ms + t.encode_cpu_ms);
        out_bytes = r->image.size();
      }
      std::printf(
          "%-10s %-6s %7.1f %8.1f %6.2f %7.1f %7.1f %6.1f %6.1f %9zu | %.1f %.1f %.2f %.1f %.1f "
          "%.1f\n",
          background, format, Median(decode), Median(perceive), Median(verse), Median(render),
          Median(encode), Median(total), Median(host), out_bytes, Median(c_decode),
          Median(c_perceive), Median(c_verse), Median(c_render), Median(c_encode), Median(c_host));
    }
  }
  return 0;
}
