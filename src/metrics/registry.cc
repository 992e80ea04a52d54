#include "metrics/registry.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <variant>

namespace danqing::metrics {

namespace {

void AtomicAdd(std::atomic<double>& a, double v) {
  double cur = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(cur, cur + v, std::memory_order_relaxed)) {
  }
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The name written on the sample lines of a family.
std::string SampleBase(const MetricFamily& f, Format format) {
  if (f.type == MetricType::kCounter) return f.name + "_total";
  if (f.type == MetricType::kInfo) return f.name + "_info";
  (void)format;
  return f.name;
}

// The name written on HELP/TYPE/UNIT lines.
std::string MetadataName(const MetricFamily& f, Format format) {
  if (format == Format::kOpenMetrics100) return f.name;  // counters/info: without the suffix
  return SampleBase(f, format);
}

std::string_view TypeName(const MetricFamily& f, Format format) {
  const bool om = format == Format::kOpenMetrics100;
  switch (f.type) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
    case MetricType::kInfo: return om ? "info" : "gauge";
    case MetricType::kUnknown: return om ? "unknown" : "untyped";
  }
  return "untyped";
}

void AppendLabels(const Labels& labels, std::string& out) {
  if (labels.empty()) return;
  out += '{';
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out += ',';
    first = false;
    out += k;
    out += "=\"";
    for (char c : v) {
      switch (c) {
        case '\\': out += "\\\\"; break;
        case '"': out += "\\\""; break;
        case '\n': out += "\\n"; break;
        default: out += c;
      }
    }
    out += '"';
  }
  out += '}';
}

void AppendValue(double v, std::string& out) {
  if (std::isnan(v)) {
    out += "NaN";
  } else if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
  } else {
    char buf[32];
    auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, ec == std::errc() ? p : buf);
  }
}

}  // namespace

std::string_view ContentType(Format format) {
  return format == Format::kOpenMetrics100
             ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
             : "text/plain; version=0.0.4; charset=utf-8";
}

Format NegotiateFormat(std::string_view accept) {
  double q_om = -1, q_text = -1;
  while (!accept.empty()) {
    size_t comma = accept.find(',');
    std::string_view range = accept.substr(0, comma);
    accept = comma == std::string_view::npos ? std::string_view() : accept.substr(comma + 1);
    size_t semi = range.find(';');
    std::string type = Lower(Trim(range.substr(0, semi)));
    double q = 1;
    std::string version;
    while (semi != std::string_view::npos) {
      range = range.substr(semi + 1);
      semi = range.find(';');
      std::string_view param = Trim(range.substr(0, semi));
      size_t eq = param.find('=');
      if (eq == std::string_view::npos) continue;
      std::string key = Lower(Trim(param.substr(0, eq)));
      std::string_view val = Trim(param.substr(eq + 1));
      if (key == "q") {
        double parsed = 0;
        auto [p, ec] = std::from_chars(val.data(), val.data() + val.size(), parsed);
        q = ec == std::errc() ? parsed : 0;
      } else if (key == "version") {
        version = std::string(val);
      }
    }
    if (type == "application/openmetrics-text") {
      if (version.empty() || version == "1.0.0") q_om = std::max(q_om, q);
    } else if (type == "text/plain" || type == "*/*" || type == "text/*") {
      q_text = std::max(q_text, q);
    }
  }
  return q_om > 0 && q_om >= q_text ? Format::kOpenMetrics100 : Format::kText004;
}

std::string EscapeLabelValue(std::string_view v) {
  std::string out;
  AppendLabels({{"", std::string(v)}}, out);  // {="..."}
  return out.substr(3, out.size() - 5);
}

std::string EscapeHelp(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double v) {
  std::string out;
  AppendValue(v, out);
  return out;
}

bool ValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

bool ValidLabelName(std::string_view name) {
  return ValidMetricName(name) && name.find(':') == std::string_view::npos;
}

void Render(const std::vector<MetricFamily>& families, Format format, std::string& out) {
  const bool om = format == Format::kOpenMetrics100;
  for (const auto& f : families) {
    const std::string meta = MetadataName(f, format);
    out += "# HELP ";
    out += meta;
    out += ' ';
    out += om ? EscapeLabelValue(f.help) : EscapeHelp(f.help);  // OpenMetrics also escapes '"'
    out += "\n# TYPE ";
    out += meta;
    out += ' ';
    out += TypeName(f, format);
    out += '\n';
    if (om && !f.unit.empty() && EndsWith(f.name, "_" + f.unit)) {
      out += "# UNIT ";
      out += meta;
      out += ' ';
      out += f.unit;
      out += '\n';
    }
    const std::string base = SampleBase(f, format);
    for (const auto& s : f.samples) {
      out += base;
      out += s.suffix;
      AppendLabels(s.labels, out);
      out += ' ';
      AppendValue(s.value, out);
      out += '\n';
    }
  }
}

void RenderEof(Format format, std::string& out) {
  if (format == Format::kOpenMetrics100) out += "# EOF\n";
}

void Counter::Inc(double v) {
  if (v > 0) AtomicAdd(value_, v);
}

void Gauge::Inc(double v) {
  AtomicAdd(value_, v);
}

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
  std::sort(bounds_.begin(), bounds_.end());
  bounds_.erase(std::unique(bounds_.begin(), bounds_.end()), bounds_.end());
  if (!bounds_.empty() && std::isinf(bounds_.back())) bounds_.pop_back();
  counts_ = std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0);
}

void Histogram::Observe(double v) {
  size_t i =
      static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, v);
}

void Histogram::Read(std::vector<uint64_t>& cumulative, double& sum) const {
  cumulative.assign(bounds_.size() + 1, 0);
  uint64_t acc = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    acc += counts_[i].load(std::memory_order_relaxed);
    cumulative[i] = acc;
  }
  sum = sum_.load(std::memory_order_relaxed);
}

std::vector<double> LatencyBuckets() {
  return {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,    0.1,    0.25,    0.5,    1,     2.5,    5,     10};
}

template <typename T>
std::unique_ptr<T> Family<T>::Create() const {
  if constexpr (std::is_same_v<T, Histogram>) {
    return std::make_unique<Histogram>(bounds_);
  } else {
    return std::make_unique<T>();
  }
}

template <typename T>
T& Family<T>::WithLabels(const std::vector<std::string>& values) {
  std::vector<std::string> key(label_names_.size());
  for (size_t i = 0; i < key.size() && i < values.size(); ++i) key[i] = values[i];
  std::lock_guard<std::mutex> l(mu_);
  auto it = children_.find(key);
  if (it == children_.end()) {
    it = children_.emplace(std::move(key), Create()).first;
  }
  return *it->second;
}

template <typename T>
void Family<T>::Clear() {
  std::lock_guard<std::mutex> l(mu_);
  children_.clear();
}

template <typename T>
MetricFamily Family<T>::Collect() const {
  MetricFamily f = desc_;
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [values, child] : children_) {
    Labels labels;
    labels.reserve(values.size() + 1);
    for (size_t i = 0; i < values.size(); ++i) labels.emplace_back(label_names_[i], values[i]);
    if constexpr (std::is_same_v<T, Histogram>) {
      std::vector<uint64_t> cumulative;
      double sum = 0;
      child->Read(cumulative, sum);
      const auto& bounds = child->bounds();
      for (size_t i = 0; i <= bounds.size(); ++i) {
        Labels bl = labels;
        bl.emplace_back("le", i < bounds.size() ? FormatValue(bounds[i]) : "+Inf");
        f.samples.push_back({"_bucket", std::move(bl), static_cast<double>(cumulative[i])});
      }
      f.samples.push_back({"_sum", labels, sum});
      f.samples.push_back({"_count", std::move(labels), static_cast<double>(cumulative.back())});
    } else {
      f.samples.push_back({"", std::move(labels), child->value()});
    }
  }
  return f;
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

struct Registry::Entry {
  std::string name;
  std::variant<std::unique_ptr<Family<Counter>>, std::unique_ptr<Family<Gauge>>,
               std::unique_ptr<Family<Histogram>>>
      family;
};

Registry::Registry() = default;
Registry::~Registry() = default;

Family<Counter>& Registry::AddCounter(const std::string& name, const std::string& help,
                                      std::vector<std::string> label_names) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& e : entries_) {
    if (e->name == name) {
      if (auto* p = std::get_if<std::unique_ptr<Family<Counter>>>(&e->family)) return **p;
    }
  }
  auto fam = std::make_unique<Family<Counter>>(
      MetricFamily{name, help, MetricType::kCounter, "", {}}, std::move(label_names));
  auto& ref = *fam;
  entries_.push_back(std::make_unique<Entry>(Entry{name, std::move(fam)}));
  return ref;
}

Family<Gauge>& Registry::AddGauge(const std::string& name, const std::string& help,
                                  std::vector<std::string> label_names, std::string unit) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& e : entries_) {
    if (e->name == name) {
      if (auto* p = std::get_if<std::unique_ptr<Family<Gauge>>>(&e->family)) return **p;
    }
  }
  auto fam = std::make_unique<Family<Gauge>>(
      MetricFamily{name, help, MetricType::kGauge, std::move(unit), {}}, std::move(label_names));
  auto& ref = *fam;
  entries_.push_back(std::make_unique<Entry>(Entry{name, std::move(fam)}));
  return ref;
}

Family<Gauge>& Registry::AddInfo(const std::string& name, const std::string& help,
                                 std::vector<std::string> label_names) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& e : entries_) {
    if (e->name == name) {
      if (auto* p = std::get_if<std::unique_ptr<Family<Gauge>>>(&e->family)) return **p;
    }
  }
  auto fam = std::make_unique<Family<Gauge>>(MetricFamily{name, help, MetricType::kInfo, "", {}},
                                             std::move(label_names));
  auto& ref = *fam;
  entries_.push_back(std::make_unique<Entry>(Entry{name, std::move(fam)}));
  return ref;
}

Family<Histogram>& Registry::AddHistogram(const std::string& name, const std::string& help,
                                          std::vector<std::string> label_names,
                                          std::vector<double> bounds, std::string unit) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& e : entries_) {
    if (e->name == name) {
      if (auto* p = std::get_if<std::unique_ptr<Family<Histogram>>>(&e->family)) return **p;
    }
  }
  auto fam = std::make_unique<Family<Histogram>>(
      MetricFamily{name, help, MetricType::kHistogram, std::move(unit), {}}, std::move(label_names),
      std::move(bounds));
  auto& ref = *fam;
  entries_.push_back(std::make_unique<Entry>(Entry{name, std::move(fam)}));
  return ref;
}

std::vector<MetricFamily> Registry::Collect() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<MetricFamily> out;
  out.reserve(entries_.size());
  for (const auto& e : entries_) {
    std::visit([&out](const auto& fam) { out.push_back(fam->Collect()); }, e->family);
  }
  return out;
}

Registry& DefaultRegistry() {
  static Registry* registry = new Registry();  // never destroyed: used from any thread at exit
  return *registry;
}

}  // namespace danqing::metrics
