#include "health/xid_policy.h"

#include <charconv>
#include <map>

namespace danqing::health {
namespace {

struct XidSelection {
  bool all = false;
  std::set<uint64_t> xids;
};

std::string Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return std::string(s);
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return s;
}

Result<XidSelection> ParseSelection(std::string_view name, std::string_view text) {
  XidSelection sel;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string item = Lower(Trim(text.substr(start, comma - start)));
    start = comma + 1;
    if (item.empty()) continue;
    if (item == "all" || item == "xids") {
      sel.all = true;
      continue;
    }
    uint64_t v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || end != item.data() + item.size()) {
      return InvalidArgument(std::string(name) + ": \"" + item +
                             "\" is not an XID; expected \"all\", \"xids\" or comma-separated XID numbers "
                             "such as \"13,31,43\"");
    }
    sel.xids.insert(v);
  }
  return sel;
}

std::string Join(const std::set<uint64_t>& s) {
  std::string out;
  for (uint64_t x : s) {
    if (!out.empty()) out += ',';
    out += std::to_string(x);
  }
  return out.empty() ? "none" : out;
}

}  // namespace

std::string_view XidActionName(XidAction a) {
  switch (a) {
    case XidAction::kIgnore: return "ignore";
    case XidAction::kUnhealthy: return "unhealthy";
    case XidAction::kReset: return "reset";
  }
  return "?";
}

std::string_view XidDescription(uint64_t xid) {
  // NVIDIA's XID catalogue, abbreviated.
  static const std::map<uint64_t, std::string_view> kText = {
      {13, "graphics engine exception (application)"},
      {31, "GPU memory page fault (application)"},
      {32, "invalid or corrupted push buffer stream"},
      {38, "driver firmware error"},
      {43, "GPU stopped processing (application)"},
      {45, "preemptive cleanup after an earlier error"},
      {48, "double-bit ECC error"},
      {56, "display engine error"},
      {57, "error programming video memory interface"},
      {61, "internal micro-controller breakpoint/warning"},
      {62, "internal micro-controller halt"},
      {63, "ECC page retirement or row remapping recorded"},
      {64, "ECC page retirement or row remapping failure"},
      {68, "video processor exception (application)"},
      {69, "graphics engine class error"},
      {74, "NVLink error"},
      {79, "GPU has fallen off the bus"},
      {92, "high single-bit ECC error rate"},
      {94, "contained ECC error"},
      {95, "uncontained ECC error"},
      {109, "context switch timeout (application)"},
      {119, "GSP RPC timeout"},
      {120, "GSP error"},
      {121, "C2C link error"},
      {140, "unrecovered ECC error"},
      {154, "GPU recovery action changed: reset required"},
  };
  auto it = kText.find(xid);
  return it == kText.end() ? std::string_view{} : it->second;
}

const std::set<uint64_t>& DefaultApplicationXids() {
  static const std::set<uint64_t> kApp = {13, 31, 43, 45, 68, 109};
  return kApp;
}

const std::set<uint64_t>& DefaultResetXids() {
  static const std::set<uint64_t> kReset = {48, 64, 74, 79, 95, 119, 120, 140, 154};
  return kReset;
}

XidPolicy::XidPolicy() : ignored_(DefaultApplicationXids()), reset_(DefaultResetXids()) {}

Result<XidPolicy> XidPolicy::Make(std::string_view disable_health_checks,
                                  std::string_view enable_health_checks,
                                  const std::vector<int>& reset_xids) {
  XidPolicy p;
  auto disable = ParseSelection("DP_DISABLE_HEALTHCHECKS", disable_health_checks);
  if (!disable.ok()) return disable.status();
  auto enable = ParseSelection("DP_ENABLE_HEALTHCHECKS", enable_health_checks);
  if (!enable.ok()) return enable.status();
  p.all_xids_ignored_ = disable->all;
  // NVIDIA's "all" switched off every check it had; Danqing's polled checks
  // go with it, "xids" leaves them on.
  p.polled_checks_ = Lower(std::string(disable_health_checks)).find("all") == std::string::npos;
  p.ignored_.insert(disable->xids.begin(), disable->xids.end());
  p.all_xids_enabled_ = enable->all;
  p.enabled_ = enable->xids;
  for (int x : reset_xids) {
    if (x < 0) return InvalidArgument("danqing.resetXids: XID " + std::to_string(x) + " is negative");
    p.reset_.insert(static_cast<uint64_t>(x));
  }
  return p;
}

XidAction XidPolicy::Classify(uint64_t xid) const {
  const bool counts = all_xids_enabled_ || enabled_.contains(xid) ||
                      (!all_xids_ignored_ && !ignored_.contains(xid));
  if (!counts) return XidAction::kIgnore;
  return reset_.contains(xid) ? XidAction::kReset : XidAction::kUnhealthy;
}

bool XidPolicy::any_xid_counts() const {
  return all_xids_enabled_ || !enabled_.empty() || !all_xids_ignored_;
}

std::string XidPolicy::Describe() const {
  std::string out;
  if (all_xids_enabled_) {
    out = "every XID counts";
  } else if (all_xids_ignored_) {
    out = "XIDs ignored: all";
    if (!enabled_.empty()) out += " except " + Join(enabled_);
  } else {
    std::set<uint64_t> ignored;
    for (uint64_t x : ignored_) {
      if (!enabled_.contains(x)) ignored.insert(x);
    }
    out = "XIDs ignored: " + Join(ignored);
  }
  out += "; reset class: " + Join(reset_);
  out += polled_checks_ ? "; polled checks on" : "; polled checks off";
  return out;
}

}  // namespace danqing::health
