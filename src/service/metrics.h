// The service's Prometheus metrics (text exposition format 0.0.4), names
// prefixed danqing_. Counters and gauges are atomics; histograms take a lock.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
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

struct Metrics {
  Metrics();

  Histogram request_seconds;               // danqing_http_request_duration_seconds{route}
  Histogram inscription_seconds;           // danqing_inscription_request_duration_seconds{outcome}
  LabeledCounter requests;                 // danqing_http_requests_total{route,code}
  Histogram stage_seconds;                 // danqing_inscription_stage_seconds{stage}
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

  std::string Render() const;
};

}  // namespace danqing::service
