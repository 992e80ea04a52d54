// Fuzzes deviceplugin::ParseMigCapMinors (/proc/driver/nvidia-caps/mig-minors).
// Oracle: every parsed minor is in range and every key is non-empty.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "deviceplugin/allocate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = danqing::deviceplugin::ParseMigCapMinors(
      std::string_view(reinterpret_cast<const char*>(data), size));
  if (!parsed.ok()) {
    if (parsed.status().message().empty()) std::abort();
    return 0;
  }
  for (const auto& [key, minor] : *parsed) {
    if (key.empty() || minor > 0xFFFFF) std::abort();
  }
  return 0;
}
