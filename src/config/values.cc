// Value rules shared by all configuration layers; see values.h and config.h.
//
// Thread-safety: pure functions over constant tables.
#include "config/values.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <limits>
#include <utility>

namespace danqing::config {
namespace {

template <typename E>
struct Spelling {
  E value;
  std::string_view name;
};

constexpr std::array<Spelling<MigStrategy>, 3> kMigStrategies{{
    {MigStrategy::kNone, "none"},
    {MigStrategy::kSingle, "single"},
    {MigStrategy::kMixed, "mixed"},
}};
constexpr std::array<Spelling<DeviceListStrategy>, 4> kDeviceListStrategies{{
    {DeviceListStrategy::kEnvvar, "envvar"},
    {DeviceListStrategy::kVolumeMounts, "volume-mounts"},
    {DeviceListStrategy::kCdiAnnotations, "cdi-annotations"},
    {DeviceListStrategy::kCdiCri, "cdi-cri"},
}};
constexpr std::array<Spelling<DeviceIdStrategy>, 2> kDeviceIdStrategies{{
    {DeviceIdStrategy::kUuid, "uuid"},
    {DeviceIdStrategy::kIndex, "index"},
}};
constexpr std::array<Spelling<DeviceDiscoveryStrategy>, 3> kDeviceDiscoveryStrategies{{
    {DeviceDiscoveryStrategy::kAuto, "auto"},
    {DeviceDiscoveryStrategy::kNvml, "nvml"},
    {DeviceDiscoveryStrategy::kTegra, "tegra"},
}};
constexpr std::array<Spelling<SharingStrategy>, 3> kSharingStrategies{{
    {SharingStrategy::kNone, "none"},
    {SharingStrategy::kTimeSlicing, "time-slicing"},
    {SharingStrategy::kMps, "mps"},
}};
// The levels common/log.h accepts.
constexpr std::array<std::string_view, 7> kLogLevels{"trace", "debug",    "info", "warn",
                                                     "error", "critical", "off"};

template <typename E, std::size_t N>
std::string_view NameOf(const std::array<Spelling<E>, N>& table, E v) {
  for (const auto& s : table) {
    if (s.value == v) return s.name;
  }
  return "?";
}

template <typename E, std::size_t N>
std::optional<E> Lookup(const std::array<Spelling<E>, N>& table, std::string_view text) {
  for (const auto& s : table) {
    if (s.name == text) return s.value;
  }
  return std::nullopt;
}

template <typename E, std::size_t N>
std::vector<std::string_view> NamesOf(const std::array<Spelling<E>, N>& table) {
  std::vector<std::string_view> out;
  for (const auto& s : table) out.push_back(s.name);
  return out;
}

char Lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}
bool IsDigit(char c) {
  return c >= '0' && c <= '9';
}
bool IsHex(char c) {
  return IsDigit(c) || (Lower(c) >= 'a' && Lower(c) <= 'f');
}

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), IsDigit);
}

// Go's strconv.ParseUint(s, 10, 0): digits only, fits 64 bits.
bool IsUint(std::string_view s) {
  if (!AllDigits(s)) return false;
  std::uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// google/uuid's Parse, in the two forms GPUs use: 8-4-4-4-12 hex digits with
// dashes, or 32 hex digits.
bool IsUuid(std::string_view s) {
  if (s.size() == 32) return std::all_of(s.begin(), s.end(), IsHex);
  if (s.size() != 36) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const bool dash = (i == 8 || i == 13 || i == 18 || i == 23);
    if (dash ? s[i] != '-' : !IsHex(s[i])) return false;
  }
  return true;
}

bool IsGpuUuid(std::string_view s) {
  return s.substr(0, 4) == "GPU-" && IsUuid(s.substr(4));
}

bool IsMigUuid(std::string_view s) {
  if (s.substr(0, 4) != "MIG-") return false;
  std::string_view rest = s.substr(4);
  if (IsUuid(rest)) return true;
  // MIG-GPU-<uuid>/<gpu instance>/<compute instance>
  const auto slash1 = rest.find('/');
  if (slash1 == std::string_view::npos) return false;
  const auto slash2 = rest.find('/', slash1 + 1);
  if (slash2 == std::string_view::npos) return false;
  return IsGpuUuid(rest.substr(0, slash1)) &&
         IsUint(rest.substr(slash1 + 1, slash2 - slash1 - 1)) && IsUint(rest.substr(slash2 + 1));
}

bool IsDnsLabel(std::string_view label) {
  if (label.empty() || label.size() > 63) return false;
  auto alnum = [](char c) { return IsDigit(c) || (c >= 'a' && c <= 'z'); };
  if (!alnum(label.front()) || !alnum(label.back())) return false;
  return std::all_of(label.begin(), label.end(), [&](char c) { return alnum(c) || c == '-'; });
}

bool IsDnsSubdomain(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  std::size_t start = 0;
  while (true) {
    const auto dot = name.find('.', start);
    if (!IsDnsLabel(name.substr(start, dot == std::string_view::npos ? dot : dot - start))) {
      return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

// Fractional digits of v / 10^prec without trailing zeros ("" when none).
std::string Fraction(std::uint64_t frac, int prec) {
  std::string digits(static_cast<std::size_t>(prec), '0');
  for (int i = prec - 1; i >= 0; --i) {
    digits[static_cast<std::size_t>(i)] = static_cast<char>('0' + frac % 10);
    frac /= 10;
  }
  while (!digits.empty() && digits.back() == '0') digits.pop_back();
  return digits.empty() ? "" : "." + digits;
}

std::string WithFraction(std::uint64_t v, std::uint64_t unit, int prec) {
  return std::to_string(v / unit) + Fraction(v % unit, prec);
}

}  // namespace

std::string_view Name(MigStrategy v) {
  return NameOf(kMigStrategies, v);
}
std::string_view Name(DeviceListStrategy v) {
  return NameOf(kDeviceListStrategies, v);
}
std::string_view Name(DeviceIdStrategy v) {
  return NameOf(kDeviceIdStrategies, v);
}
std::string_view Name(DeviceDiscoveryStrategy v) {
  return NameOf(kDeviceDiscoveryStrategies, v);
}
std::string_view Name(SharingStrategy v) {
  return NameOf(kSharingStrategies, v);
}

std::optional<bool> ParseBool(std::string_view text) {
  std::string lower(internal::TrimBlanks(text));
  std::transform(lower.begin(), lower.end(), lower.begin(), Lower);
  for (std::string_view t : {"1", "t", "true", "yes", "y", "on"}) {
    if (lower == t) return true;
  }
  for (std::string_view f : {"0", "f", "false", "no", "n", "off"}) {
    if (lower == f) return false;
  }
  return std::nullopt;
}

std::optional<Duration> ParseDuration(std::string_view text) {
  // Go's time.ParseDuration: [-+]?([0-9]*(\.[0-9]*)?[a-z]+)+, or "0".
  std::string_view s = text;
  bool negative = false;
  if (!s.empty() && (s.front() == '-' || s.front() == '+')) {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  if (s == "0") return Duration::zero();
  if (s.empty()) return std::nullopt;

  constexpr std::uint64_t kLimit = std::uint64_t{1} << 63;  // |min int64|
  std::uint64_t total = 0;
  while (!s.empty()) {
    if (!(IsDigit(s.front()) || s.front() == '.')) return std::nullopt;
    std::uint64_t whole = 0;
    bool have_whole = false;
    while (!s.empty() && IsDigit(s.front())) {
      const auto d = static_cast<std::uint64_t>(s.front() - '0');
      if (whole > (kLimit - d) / 10) return std::nullopt;  // overflow
      whole = whole * 10 + d;
      have_whole = true;
      s.remove_prefix(1);
    }
    std::uint64_t frac = 0;
    long double scale = 1;
    bool have_frac = false;
    if (!s.empty() && s.front() == '.') {
      s.remove_prefix(1);
      while (!s.empty() && IsDigit(s.front())) {
        if (scale < 1e18L) {  // further digits are below a nanosecond
          frac = frac * 10 + static_cast<std::uint64_t>(s.front() - '0');
          scale *= 10;
        }
        have_frac = true;
        s.remove_prefix(1);
      }
    }
    if (!have_whole && !have_frac) return std::nullopt;
    std::size_t unit_len = 0;
    while (unit_len < s.size() && s[unit_len] != '.' && !IsDigit(s[unit_len])) ++unit_len;
    const std::string_view unit_name = s.substr(0, unit_len);
    s.remove_prefix(unit_len);
    std::uint64_t unit = 0;
    if (unit_name == "ns") {
      unit = 1;
    } else if (unit_name == "us" || unit_name == "\xC2\xB5s" || unit_name == "\xCE\xBCs") {
      unit = 1000;  // us, µs (micro sign), μs (Greek mu)
    } else if (unit_name == "ms") {
      unit = 1000 * 1000;
    } else if (unit_name == "s") {
      unit = 1000 * 1000 * 1000;
    } else if (unit_name == "m") {
      unit = std::uint64_t{60} * 1000 * 1000 * 1000;
    } else if (unit_name == "h") {
      unit = std::uint64_t{3600} * 1000 * 1000 * 1000;
    } else {
      return std::nullopt;  // missing or unknown unit
    }
    if (whole > kLimit / unit) return std::nullopt;
    std::uint64_t value = whole * unit;
    if (frac > 0) {
      const auto extra = static_cast<long double>(frac) * static_cast<long double>(unit) / scale;
      if (extra >= static_cast<long double>(kLimit)) return std::nullopt;
      value += static_cast<std::uint64_t>(extra);
      if (value > kLimit) return std::nullopt;
    }
    if (total > kLimit - value) return std::nullopt;
    total += value;
  }
  if (negative) {
    return Duration(total == kLimit ? std::numeric_limits<std::int64_t>::min()
                                    : -static_cast<std::int64_t>(total));
  }
  if (total > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    return std::nullopt;
  }
  return Duration(static_cast<std::int64_t>(total));
}

std::string FormatDuration(Duration d) {
  const std::int64_t ns = d.count();
  if (ns == 0) return "0s";
  const bool negative = ns < 0;
  // Magnitude without overflowing on INT64_MIN.
  const std::uint64_t u =
      negative ? std::uint64_t{0} - static_cast<std::uint64_t>(ns) : static_cast<std::uint64_t>(ns);
  std::string out = negative ? "-" : "";
  constexpr std::uint64_t kUs = 1000, kMs = 1000 * kUs, kS = 1000 * kMs;
  if (u < kUs) return out + std::to_string(u) + "ns";
  if (u < kMs) return out + WithFraction(u, kUs, 3) + "us";
  if (u < kS) return out + WithFraction(u, kMs, 6) + "ms";
  const std::uint64_t secs = u / kS;
  const std::uint64_t hours = secs / 3600;
  const std::uint64_t minutes = (secs / 60) % 60;
  if (hours > 0) out += std::to_string(hours) + "h";
  if (hours > 0 || minutes > 0) out += std::to_string(minutes) + "m";
  out += std::to_string(secs % 60) + Fraction(u % kS, 9) + "s";
  return out;
}

namespace internal {

PlainType ResolvePlain(std::string_view t) {
  if (t.empty() || t == "~" || t == "null" || t == "Null" || t == "NULL") return PlainType::kNull;
  if (YamlBool(t)) return PlainType::kBool;
  std::string_view body = t;
  if (body.front() == '-' || body.front() == '+') body.remove_prefix(1);
  if (AllDigits(body)) return PlainType::kInt;
  for (std::string_view special : {".inf", ".Inf", ".INF", ".nan", ".NaN", ".NAN"}) {
    if (body == special) return PlainType::kFloat;
  }
  // [0-9]+(\.[0-9]*)? or \.[0-9]+, then an optional exponent.
  std::size_t i = 0;
  std::size_t int_digits = 0;
  while (i < body.size() && IsDigit(body[i])) ++i, ++int_digits;
  std::size_t frac_digits = 0;
  bool dot = false;
  if (i < body.size() && body[i] == '.') {
    dot = true;
    ++i;
    while (i < body.size() && IsDigit(body[i])) ++i, ++frac_digits;
  }
  if (int_digits == 0 && frac_digits == 0) return PlainType::kString;
  if (int_digits == 0 && !dot) return PlainType::kString;
  if (i < body.size() && (body[i] == 'e' || body[i] == 'E')) {
    ++i;
    if (i < body.size() && (body[i] == '+' || body[i] == '-')) ++i;
    std::size_t exp_digits = 0;
    while (i < body.size() && IsDigit(body[i])) ++i, ++exp_digits;
    if (exp_digits == 0) return PlainType::kString;
  }
  return i == body.size() ? PlainType::kFloat : PlainType::kString;
}

std::optional<bool> YamlBool(std::string_view t) {
  for (std::string_view s :
       {"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"}) {
    if (t == s) return true;
  }
  for (std::string_view s :
       {"n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"}) {
    if (t == s) return false;
  }
  return std::nullopt;
}

std::optional<std::int64_t> ParseInteger(std::string_view text) {
  std::string_view body = text;
  const bool plus = !body.empty() && body.front() == '+';
  if (plus) body.remove_prefix(1);
  if (body.empty() || body.front() == '+' || (plus && body.front() == '-')) return std::nullopt;
  std::int64_t v = 0;
  auto [ptr, ec] = std::from_chars(body.data(), body.data() + body.size(), v);
  if (ec != std::errc() || ptr != body.data() + body.size()) return std::nullopt;
  return v;
}

std::string Quote(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (u < 0x20 || u == 0x7f) {
          out += "\\u00";
          out += kHex[u >> 4];
          out += kHex[u & 0xf];
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

std::string JoinAlternatives(const std::vector<std::string_view>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += (i + 1 == names.size()) ? " or " : ", ";
    out += names[i];
  }
  return out;
}

std::optional<MigStrategy> ParseMigStrategy(std::string_view t) {
  return Lookup(kMigStrategies, t);
}
std::optional<DeviceListStrategy> ParseDeviceListStrategy(std::string_view t) {
  return Lookup(kDeviceListStrategies, t);
}
std::optional<DeviceIdStrategy> ParseDeviceIdStrategy(std::string_view t) {
  return Lookup(kDeviceIdStrategies, t);
}
std::optional<DeviceDiscoveryStrategy> ParseDeviceDiscoveryStrategy(std::string_view t) {
  return Lookup(kDeviceDiscoveryStrategies, t);
}
std::vector<std::string_view> MigStrategyNames() {
  return NamesOf(kMigStrategies);
}
std::vector<std::string_view> DeviceListStrategyNames() {
  return NamesOf(kDeviceListStrategies);
}
std::vector<std::string_view> DeviceIdStrategyNames() {
  return NamesOf(kDeviceIdStrategies);
}
std::vector<std::string_view> DeviceDiscoveryStrategyNames() {
  return NamesOf(kDeviceDiscoveryStrategies);
}
std::vector<std::string_view> LogLevelNames() {
  return {kLogLevels.begin(), kLogLevels.end()};
}

std::string CheckResourceName(std::string_view name, std::string* full) {
  constexpr std::string_view kPrefix = "nvidia.com/";
  constexpr std::size_t kMaxLength = 63;
  std::string n(name);
  if (n.substr(0, kPrefix.size()) != kPrefix) n = std::string(kPrefix) + n;
  if (n.size() > kMaxLength) {
    return "resource name " + Quote(n) + " is longer than " + std::to_string(kMaxLength) +
           " characters";
  }
  const std::string_view short_name = std::string_view(n).substr(kPrefix.size());
  if (!IsDnsSubdomain(short_name)) {
    return "invalid resource name " + Quote(n) + ": the part after \"nvidia.com/\" must be " +
           "lower-case alphanumerics, '-' and '.', starting and ending with an alphanumeric "
           "(e.g. \"gpu\", \"mig-1g.10gb\", \"gpu.shared\")";
  }
  *full = std::move(n);
  return "";
}

std::optional<DeviceRefKind> ClassifyDeviceRef(std::string_view ref) {
  if (IsUint(ref)) return DeviceRefKind::kIndex;
  const auto colon = ref.find(':');
  if (colon != std::string_view::npos && IsUint(ref.substr(0, colon)) &&
      IsUint(ref.substr(colon + 1))) {
    return DeviceRefKind::kIndex;
  }
  if (IsGpuUuid(ref) || IsMigUuid(ref)) return DeviceRefKind::kUuid;
  return std::nullopt;
}

std::string CheckListenAddress(std::string_view addr) {
  const auto colon = addr.rfind(':');
  if (colon == std::string_view::npos) {
    return "listen address " + Quote(addr) + " has no port; expected \"[host]:port\" " +
           "such as \":9400\" or \"127.0.0.1:9400\"";
  }
  const std::string_view host = addr.substr(0, colon);
  const std::string_view port = addr.substr(colon + 1);
  const auto p = AllDigits(port) ? ParseInteger(port) : std::nullopt;
  if (!p || *p > 65535) {
    return "listen address " + Quote(addr) + " has an invalid port; expected 0-65535";
  }
  const bool bracketed = host.size() >= 2 && host.front() == '[' && host.back() == ']';
  if (!bracketed && host.find(':') != std::string_view::npos) {
    return "listen address " + Quote(addr) + ": write an IPv6 host in brackets, e.g. \"[::]:9400\"";
  }
  const bool blank = std::any_of(host.begin(), host.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '/' || static_cast<unsigned char>(c) < 0x20;
  });
  if (blank) return "listen address " + Quote(addr) + " has an invalid host";
  return "";
}

std::string CheckAbsolutePath(std::string_view path) {
  if (path.empty() || path.front() != '/') {
    return "expected an absolute path, got " + Quote(path);
  }
  return "";
}

std::string CheckHookPath(std::string_view path) {
  if (path.empty()) return "";  // no hooks
  const std::string_view last = path.substr(path.rfind('/') + 1);
  if (path.front() != '/' || last.empty() || last == "." || last == "..") {
    return "expected the absolute path of the CDI hook binary (or empty for none), got " + Quote(path);
  }
  return "";
}

std::string CheckSocketPath(std::string_view path) {
  if (std::string reason = CheckAbsolutePath(path); !reason.empty()) return reason;
  constexpr std::size_t kMaxSocketPath = 107;  // sizeof(sockaddr_un::sun_path) - 1
  if (path.size() > kMaxSocketPath) {
    return "socket path " + Quote(path) + " is longer than " + std::to_string(kMaxSocketPath) +
           " bytes, the limit of a unix socket address";
  }
  return "";
}

std::string CheckXidSelection(std::string_view text) {
  for (const std::string& raw : SplitList(text)) {
    std::string item = raw;
    for (char& ch : item) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (item.empty() || item == "all" || item == "xids") continue;
    if (!std::all_of(item.begin(), item.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) ||
        item.size() > 9) {
      return Quote(raw) + " is not an XID; expected \"all\", \"xids\" or comma-separated XID numbers "
             "such as \"13,31,43\"";
    }
  }
  return "";
}

std::vector<std::string> SplitList(std::string_view text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const auto comma = text.find(',', start);
    const std::string_view item =
        text.substr(start, comma == std::string_view::npos ? comma : comma - start);
    out.emplace_back(TrimBlanks(item));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string_view TrimBlanks(std::string_view text) {
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!text.empty() && blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && blank(text.back())) text.remove_suffix(1);
  return text;
}

}  // namespace internal
}  // namespace danqing::config
