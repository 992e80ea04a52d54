// A small Prometheus metrics registry and the two exposition formats.
//
// Debian has no prometheus-cpp, so this is the minimum the node agent needs:
// counters, gauges and histograms with labels, collected into plain
// MetricFamily values, and rendered either as the Prometheus text format
// 0.0.4 or as OpenMetrics 1.0 (chosen per scrape from the Accept header).
// Anything that produces MetricFamily values (the GPU collector's snapshot)
// renders through the same code, so escaping and naming are done once.
//
// Naming: a counter family is named WITHOUT the `_total` suffix; rendering
// adds it to the sample (and, in the text format, to HELP/TYPE as Prometheus
// clients do). DCGM's counters whose names end in `_TOTAL` are exported as
// kUnknown (untyped) so their names stay exactly DCGM's.
//
// Thread-safety: Counter, Gauge and Histogram are lock-free and may be
// updated from any thread; Family::WithLabels and Registry methods take a
// mutex and may be called from any thread. References returned by
// WithLabels and the Add* methods stay valid for the registry's life.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace danqing::metrics {

enum class MetricType { kCounter, kGauge, kHistogram, kInfo, kUnknown };

using Labels = std::vector<std::pair<std::string, std::string>>;

struct Sample {
  std::string suffix;  // appended to the family name: "", "_bucket", "_sum", "_count"
  Labels labels;
  double value = 0;
};

struct MetricFamily {
  std::string name;  // counters: without "_total"; info: without "_info"
  std::string help;
  MetricType type = MetricType::kGauge;
  std::string
      unit;  // OpenMetrics UNIT ("bytes", "seconds"); written only when it suffixes the name
  std::vector<Sample> samples;
};

enum class Format { kText004, kOpenMetrics100 };

// Content-Type header value of a format.
std::string_view ContentType(Format format);

// Picks the format for an HTTP Accept header: OpenMetrics 1.0 when the
// scraper asks for application/openmetrics-text (version 1.0.0 or none) with a
// q-value at least that of text/plain; the text format otherwise.
Format NegotiateFormat(std::string_view accept);

// Appends families to `out` in the given format. Families with no samples
// still get HELP and TYPE. RenderEof appends OpenMetrics' "# EOF" line.
void Render(const std::vector<MetricFamily>& families, Format format, std::string& out);
void RenderEof(Format format, std::string& out);

// Escapes a label value (\\, \", \n) and a HELP text (\\, \n).
std::string EscapeLabelValue(std::string_view v);
std::string EscapeHelp(std::string_view v);
// The shortest text that reads back as the same double; "+Inf", "-Inf", "NaN".
std::string FormatValue(double v);
// [a-zA-Z_:][a-zA-Z0-9_:]* for metric names, [a-zA-Z_][a-zA-Z0-9_]* for labels.
bool ValidMetricName(std::string_view name);
bool ValidLabelName(std::string_view name);

class Counter {
 public:
  void Inc(double v = 1);  // v < 0 is ignored (counters never go down)
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Inc(double v = 1);
  void Dec(double v = 1) { Inc(-v); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);  // sorted upper bounds, +Inf implied
  void Observe(double v);

  const std::vector<double>& bounds() const { return bounds_; }
  // Cumulative counts per bound plus +Inf last, and the sum; read together.
  void Read(std::vector<uint64_t>& cumulative, double& sum) const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1, not cumulative
  std::atomic<double> sum_{0};
};

// Latency buckets for calls the kubelet makes: 50 µs .. 10 s.
std::vector<double> LatencyBuckets();

// One metric name with a fixed set of label names; one child per label-value tuple.
template <typename T>
class Family {
 public:
  Family(MetricFamily desc, std::vector<std::string> label_names, std::vector<double> bounds = {})
      : desc_(std::move(desc)), label_names_(std::move(label_names)), bounds_(std::move(bounds)) {}

  // The child for these label values (in the order of the label names;
  // missing values are empty, extra ones ignored). Created on first use.
  T& WithLabels(const std::vector<std::string>& values);
  T& Get() { return WithLabels({}); }

  // Drops every child (e.g. label values that no longer exist).
  void Clear();

  MetricFamily Collect() const;

 private:
  std::unique_ptr<T> Create() const;
  MetricFamily desc_;
  std::vector<std::string> label_names_;
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_;  // guarded by mu_
};

// A set of families rendered together.
class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Registering the same name twice returns the first family (its help and
  // labels win). `name` is the base name (no `_total` for counters).
  Family<Counter>& AddCounter(const std::string& name, const std::string& help,
                              std::vector<std::string> label_names = {});
  Family<Gauge>& AddGauge(const std::string& name, const std::string& help,
                          std::vector<std::string> label_names = {}, std::string unit = "");
  Family<Histogram>& AddHistogram(const std::string& name, const std::string& help,
                                  std::vector<std::string> label_names, std::vector<double> bounds,
                                  std::string unit = "");
  // An info family: `name` without "_info"; set each child to 1.
  Family<Gauge>& AddInfo(const std::string& name, const std::string& help,
                         std::vector<std::string> label_names);

  // Every family, in registration order.
  std::vector<MetricFamily> Collect() const;

 private:
  struct Entry;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_;  // guarded by mu_ (append only)
};

// The node agent's own metrics (Allocate latency, registrations, reloads,
// NVML errors, build info). One per process; the exporter renders it.
Registry& DefaultRegistry();

}  // namespace danqing::metrics
