// Fuzzes config::ParseConfig over YAML and JSON text (JSON is parsed by the
// same YAML front end). Oracle beyond "no crash, no sanitizer report": a
// config that parses must survive FormatConfig -> ParseConfig unchanged, as
// config.h promises, and a rejected one must say why.
//
// The parser bounds its memory on any input under its 1 MiB limit (issue 31):
// scripts/fuzz.sh runs this fuzzer under a 256 MB RSS limit, its seeds (1 MiB
// hostile shapes among them) once at full size first.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = danqing::config::ParseConfig(text, "fuzz.yaml");
  if (!parsed.ok()) {
    if (parsed.status().message().empty()) std::abort();
    return 0;
  }
  std::string formatted = danqing::config::FormatConfig(*parsed);
  auto again = danqing::config::ParseConfig(formatted, "formatted.yaml");
  if (!again.ok()) {
    std::fprintf(stderr, "FormatConfig output does not parse: %s\n---\n%s\n",
                 again.status().ToString().c_str(), formatted.c_str());
    std::abort();
  }
  // Compare the settings, not where they came from (line numbers differ).
  danqing::config::Config a = *parsed, b = *again;
  a.origin.clear();
  b.origin.clear();
  a.source = b.source = "";
  if (!(a == b)) {
    std::fprintf(stderr, "FormatConfig round trip changed the config:\n%s\n", formatted.c_str());
    std::abort();
  }
  return 0;
}
