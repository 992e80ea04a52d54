// Fuzzes the fake NVML's profile parser (fake_nvml::parse_profile) on JSON
// text. Its contract is to throw ProfileError for any invalid profile; any
// other exception, a crash or a sanitizer report is a finding.
#include <cstddef>
#include <cstdint>

#include "profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto doc = fake_nvml::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return 0;
  try {
    fake_nvml::Node node = fake_nvml::parse_profile(doc);
    // What the control server does with a parsed node: serialise its GPUs.
    for (unsigned i = 0; i < node.gpus.size(); ++i) (void)fake_nvml::gpu_to_json(node.gpus[i], i).dump();
  } catch (const fake_nvml::ProfileError&) {
  }
  return 0;
}
