// The service's Prometheus metrics (text exposition format 0.0.4), names
// prefixed danqing_. Counters and gauges are atomics; histograms take a lock.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace danqing::service {

// A cumulative histogram with fixed upper bounds (seconds), one series per label value.
class Histogram {
 public:
  Histogram(std::string name, std::string help, std::string label, std::vector<double> bounds);
  void Observe(const std::string& label_value, double value);
  void Write(std::string* out) const;

 private:
  struct Series {
    std::vector<uint64_t> buckets;  // per bound, not cumulative
    uint64_t count = 0;
    double sum = 0;
  };
  const std::string name_, help_, label_;
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::map<std::string, Series> series_;  // guarded by mu_
};

// Counts by label set, e.g. {route="/v1/inscriptions",code="200"}.
class LabeledCounter {
 public:
  LabeledCounter(std::string name, std::string help);
  void Add(const std::string& labels, uint64_t n = 1);  // labels: `a="x",b="y"`
  uint64_t Get(const std::string& labels) const;
  void Write(std::string* out) const;

 private:
  const std::string name_, help_;
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> values_;  // guarded by mu_
};

// Seconds by label value, a counter (only grows): e.g. the busy seconds of
// each stage, whose rate is the cores that stage keeps busy.
class SecondsCounter {
 public:
  SecondsCounter(std::string name, std::string help, std::string label);
  void Add(const std::string& label_value, double seconds);
  double Get(const std::string& label_value) const;
  void Write(std::string* out) const;

 private:
  const std::string name_, help_, label_;
  mutable std::mutex mu_;
  std::map<std::string, double> values_;  // guarded by mu_
};

// The share of the recent wall time (the last `window`) during which at least
// one render was running, on any backend and on a GPU backend only. Renders
// are recorded when they end (the backend is known then), as the interval
// they ran; overlapping renders (several workers, one device) count once, so
// the share is at most 1 and reads as a device's utilisation does: the time
// it had work. At most kMaxIntervals are kept (older ones are dropped first).
class BusyWindow {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kMaxIntervals = 16384;
  explicit BusyWindow(Clock::duration window = std::chrono::seconds(30));
  void Record(Clock::time_point begin, Clock::time_point end, bool gpu);
  // Over [now - window, now], clipped to the time since construction (a
  // fresh process is not idle for the 30 s before it started).
  double Ratio(Clock::time_point now, bool gpu_only) const;
  Clock::duration window() const { return window_; }

 private:
  struct Interval {
    Clock::time_point begin, end;
    bool gpu;
  };
  const Clock::duration window_;
  const Clock::time_point created_;
  mutable std::mutex mu_;
  std::deque<Interval> intervals_;  // by end time; guarded by mu_
};

struct Metrics {
  Metrics();

  Histogram request_seconds;               // danqing_http_request_duration_seconds{route}
  Histogram inscription_seconds;           // danqing_inscription_request_duration_seconds{outcome}
  LabeledCounter requests;                 // danqing_http_requests_total{route,code}
  Histogram stage_seconds;                 // danqing_inscription_stage_seconds{stage}
  SecondsCounter stage_busy;               // danqing_stage_seconds_total{stage}
  BusyWindow render_busy;                  // danqing_gpu_busy_ratio, danqing_render_busy_ratio
  LabeledCounter rejected;                 // danqing_inscriptions_rejected_total{reason}
  LabeledCounter renders;                  // danqing_renders_total{backend,gpu_fallback}
  std::atomic<int64_t> queue_depth{0};     // danqing_render_queue_depth
  std::atomic<int64_t> queue_capacity{0};  // danqing_render_queue_capacity
  std::atomic<int64_t> in_flight{0};       // danqing_renders_in_flight
  std::atomic<int64_t> workers{0};         // danqing_render_workers
  std::atomic<int64_t> draining{0};        // danqing_draining
  std::atomic<int64_t> gpu_lost{0};        // danqing_render_gpu_lost
  std::string backend = "cpu";             // danqing_render_backend_info{backend}
  std::string perceiver = "opencv-classic";  // danqing_perceiver_info{perceiver}
  // The writing as a video (issue 28).
  Histogram video_seconds;               // danqing_video_encode_seconds{encoder}
  LabeledCounter videos;                 // danqing_videos_total{encoder,result}
  LabeledCounter video_bytes;            // danqing_video_bytes_total{encoder}
  LabeledCounter video_nvenc_fallbacks;  // danqing_video_nvenc_fallbacks_total{reason}
  Histogram video_compose_seconds;       // danqing_video_compose_seconds{composer}
  LabeledCounter video_compose_fallbacks;  // danqing_video_compose_fallbacks_total{composer}

  // One stage of an inscription: its histogram and its busy seconds.
  void ObserveStage(const std::string& stage, double seconds);
  // One render that ran from begin to end on `backend` ("cpu" or a GPU's).
  void ObserveRender(BusyWindow::Clock::time_point begin, BusyWindow::Clock::time_point end,
                     const std::string& render_backend);

  std::string Render() const;
};

}  // namespace danqing::service
