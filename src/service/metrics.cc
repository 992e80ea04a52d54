#include "service/metrics.h"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace danqing::service {
namespace {

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

void Header(std::string* out, const std::string& name, const std::string& help, const char* type) {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

Histogram::Histogram(std::string name, std::string help, std::string label,
                     std::vector<double> bounds)
    : name_(std::move(name)),
      help_(std::move(help)),
      label_(std::move(label)),
      bounds_(std::move(bounds)) {}

void Histogram::Observe(const std::string& label_value, double value) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = series_[label_value];
  if (s.buckets.empty()) s.buckets.assign(bounds_.size(), 0);
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (value <= bounds_[i]) {
      ++s.buckets[i];
      break;
    }
  }
  ++s.count;
  s.sum += value;
}

void Histogram::Write(std::string* out) const {
  Header(out, name_, help_, "histogram");
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [lv, s] : series_) {
    const std::string l = label_ + "=\"" + lv + "\"";
    uint64_t cum = 0;
    for (size_t i = 0; i < bounds_.size(); ++i) {
      cum += s.buckets[i];
      *out +=
          name_ + "_bucket{" + l + ",le=\"" + Num(bounds_[i]) + "\"} " + std::to_string(cum) + "\n";
    }
    *out += name_ + "_bucket{" + l + ",le=\"+Inf\"} " + std::to_string(s.count) + "\n";
    *out += name_ + "_sum{" + l + "} " + Num(s.sum) + "\n";
    *out += name_ + "_count{" + l + "} " + std::to_string(s.count) + "\n";
  }
}

LabeledCounter::LabeledCounter(std::string name, std::string help)
    : name_(std::move(name)), help_(std::move(help)) {}

void LabeledCounter::Add(const std::string& labels, uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  values_[labels] += n;
}

uint64_t LabeledCounter::Get(const std::string& labels) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = values_.find(labels);
  return it == values_.end() ? 0 : it->second;
}

void LabeledCounter::Write(std::string* out) const {
  Header(out, name_, help_, "counter");
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [labels, v] : values_) {
    *out += name_ + "{" + labels + "} " + std::to_string(v) + "\n";
  }
}

SecondsCounter::SecondsCounter(std::string name, std::string help, std::string label)
    : name_(std::move(name)), help_(std::move(help)), label_(std::move(label)) {}

void SecondsCounter::Add(const std::string& label_value, double seconds) {
  if (!(seconds > 0)) return;  // a counter never goes down (nor takes NaN)
  std::lock_guard<std::mutex> lock(mu_);
  values_[label_value] += seconds;
}

double SecondsCounter::Get(const std::string& label_value) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = values_.find(label_value);
  return it == values_.end() ? 0 : it->second;
}

void SecondsCounter::Write(std::string* out) const {
  Header(out, name_, help_, "counter");
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [lv, v] : values_)
    *out += name_ + "{" + label_ + "=\"" + lv + "\"} " + Num(v) + "\n";
}

BusyWindow::BusyWindow(Clock::duration window) : window_(window), created_(Clock::now()) {}

void BusyWindow::Record(Clock::time_point begin, Clock::time_point end, bool gpu) {
  if (end <= begin) return;
  std::lock_guard<std::mutex> lock(mu_);
  intervals_.push_back({begin, end, gpu});
  // Renders end in about the order they are recorded: drop from the front
  // what ended before any window a reader can ask for now.
  const Clock::time_point horizon = end - window_;
  while (!intervals_.empty() &&
         (intervals_.front().end < horizon || intervals_.size() > kMaxIntervals)) {
    intervals_.pop_front();
  }
}

double BusyWindow::Ratio(Clock::time_point now, bool gpu_only) const {
  const Clock::time_point from = std::max(now - window_, created_);
  if (now <= from) return 0;
  std::vector<std::pair<Clock::time_point, Clock::time_point>> spans;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Interval& i : intervals_) {
      if (gpu_only && !i.gpu) continue;
      const auto b = std::max(i.begin, from), e = std::min(i.end, now);
      if (b < e) spans.emplace_back(b, e);
    }
  }
  std::sort(spans.begin(), spans.end());
  Clock::duration busy{0};
  Clock::time_point covered = from;  // the union so far ends here
  for (const auto& [b, e] : spans) {
    const auto start = std::max(b, covered);
    if (e > start) {
      busy += e - start;
      covered = e;
    }
  }
  return std::chrono::duration<double>(busy).count() /
         std::chrono::duration<double>(now - from).count();
}

void Metrics::ObserveStage(const std::string& stage, double seconds) {
  stage_seconds.Observe(stage, seconds);
  stage_busy.Add(stage, seconds);
}

void Metrics::ObserveRender(BusyWindow::Clock::time_point begin, BusyWindow::Clock::time_point end,
                            const std::string& render_backend) {
  render_busy.Record(begin, end, render_backend != "cpu");
}

Metrics::Metrics()
    : request_seconds("danqing_http_request_duration_seconds",
                      "Time from request read to response, by route.", "route",
                      {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      inscription_seconds(
          "danqing_inscription_request_duration_seconds",
          "POST /v1/inscriptions time by outcome: ok, refused (429/503), "
          "client_error (4xx), error (5xx other than 503).",
          "outcome",
          {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60}),
      requests("danqing_http_requests_total", "HTTP requests answered, by route and status code."),
      stage_seconds("danqing_inscription_stage_seconds",
                    "Time spent in each stage of an inscription.", "stage",
                    {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}),
      stage_busy("danqing_stage_seconds_total",
                 "Busy seconds of each stage of an inscription (queue: waiting for a render "
                 "worker); its rate is the cores (for render on a GPU backend: the workers "
                 "feeding the device) that stage keeps busy.",
                 "stage"),
      rejected("danqing_inscriptions_rejected_total",
               "Inscription requests refused before rendering, by reason."),
      renders(
          "danqing_renders_total",
          "Inscriptions rendered, by the backend that ran the heavy passes; gpu_fallback=\"true\": "
          "the GPU could not take or finish the render and the CPU did."),
      video_seconds("danqing_video_encode_seconds",
                    "Time to encode the writing as a video, by encoder.", "encoder",
                    {0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60}),
      videos("danqing_videos_total",
             "Video requests by encoder (libx264, h264_nvenc; cache: served from the inscription's "
             "cache; none: "
             "refused) and result (ok, error, bad_request, busy, queue_full, deadline, draining)."),
      video_bytes("danqing_video_bytes_total", "Bytes of video encoded, by encoder."),
      video_nvenc_fallbacks(
          "danqing_video_nvenc_fallbacks_total",
          "Videos that asked for h264_nvenc (a GPU in use) and were encoded with libx264 "
          "because NVENC did not open (no NVENC on the GPU, e.g. Hopper H100/H200, or no "
          "driver)."),
      video_compose_seconds(
          "danqing_video_compose_seconds",
          "Time to compose a video's frames (the encoder's input, part of the encode time), by "
          "the composer of its last frame: cuda (on the GPU, with the CUDA render backend) or cpu.",
          "composer", {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10}),
      video_compose_fallbacks(
          "danqing_video_compose_fallbacks_total",
          "Videos whose frames were to be composed on the GPU (CUDA render backend) and were, "
          "from the start or from a frame on, composed on the CPU after a CUDA error (logged).") {}

std::string Metrics::Render() const {
  std::string out;
  request_seconds.Write(&out);
  inscription_seconds.Write(&out);
  requests.Write(&out);
  stage_seconds.Write(&out);
  stage_busy.Write(&out);
  rejected.Write(&out);
  renders.Write(&out);
  video_seconds.Write(&out);
  videos.Write(&out);
  video_bytes.Write(&out);
  video_nvenc_fallbacks.Write(&out);
  video_compose_seconds.Write(&out);
  video_compose_fallbacks.Write(&out);
  const auto gauge = [&](const char* name, const char* help, int64_t v) {
    Header(&out, name, help, "gauge");
    out += std::string(name) + " " + std::to_string(v) + "\n";
  };
  gauge("danqing_render_queue_depth", "Inscriptions waiting for a render worker.",
        queue_depth.load());
  gauge("danqing_render_queue_capacity", "Inscriptions that may wait before new ones are refused.",
        queue_capacity.load());
  gauge("danqing_renders_in_flight", "Inscriptions being rendered now.", in_flight.load());
  gauge("danqing_render_workers", "Render worker threads.", workers.load());
  gauge("danqing_draining", "1 while the service drains for shutdown.", draining.load());
  gauge("danqing_render_gpu_lost",
        "1 when the GPU's CUDA context is lost: renders run on the CPU until the process restarts.",
        gpu_lost.load());
  const auto ratio = [&](const char* name, const char* help, double v) {
    Header(&out, name, help, "gauge");
    out += std::string(name) + " " + Num(v) + "\n";
  };
  const auto now = BusyWindow::Clock::now();
  ratio("danqing_gpu_busy_ratio",
        "Share of the last 30 s in which at least one render ran on a GPU backend (renders "
        "counted when they end); 0 on the CPU backend.",
        render_busy.Ratio(now, true));
  ratio("danqing_render_busy_ratio",
        "Share of the last 30 s in which at least one render ran, on any backend.",
        render_busy.Ratio(now, false));
  Header(&out, "danqing_render_backend_info", "The render backend in use.", "gauge");
  out += "danqing_render_backend_info{backend=\"" + backend + "\"} 1\n";
  Header(&out, "danqing_perceiver_info", "The perceiver in use.", "gauge");
  out += "danqing_perceiver_info{perceiver=\"" + perceiver + "\"} 1\n";
  return out;
}

}  // namespace danqing::service
