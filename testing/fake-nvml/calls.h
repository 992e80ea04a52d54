// Fake NVML: what the entry points of fake_nvml.cc and mig_instances.cc
// share. The export marker; what each does before it answers from a handle,
// in one place so that every entry point answers a bad handle with the same
// return code: take the state mutex, refuse before nvmlInit (UNINITIALIZED),
// and resolve the handle through State::resolve (unknown, stale and freed
// handles: INVALID_ARGUMENT; then the GPU's checks: lost, injected failure,
// unsupported function); and small helpers both files use.
//
// Thread-safety: with_handle() holds the state mutex while it runs `body`;
// the rest are pure functions.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>

#include "gpu/nvml_abi.h"
#include "state.h"

// Marks an exported NVML entry point; everything else in the library is built
// with hidden visibility.
#define FAKE_NVML_API __attribute__((visibility("default")))

namespace fake_nvml {

// Runs `body(state, device)` with the state mutex held once NVML is
// initialised and `handle` (a device, GPU-instance or compute-instance handle)
// resolved for `function`; otherwise returns the code that stopped it.
template <typename Handle, typename Body>
nvmlReturn_t with_handle(std::string_view function, Handle handle, Body&& body) {
  State& state = State::instance();
  const auto held = state.lock();
  if (!state.initialised()) return NVML_ERROR_UNINITIALIZED;
  DeviceRef device;
  if (const nvmlReturn_t rc = state.resolve(handle, function, device); rc != NVML_SUCCESS)
    return rc;
  return body(state, device);
}

// Copies `value` into a fixed NVML name buffer, truncated to fit, always
// NUL-terminated.
template <std::size_t N>
void copy_truncated(const std::string& value, char (&buffer)[N]) {
  const std::size_t n = std::min(value.size(), N - 1);
  std::memcpy(buffer, value.data(), n);
  buffer[n] = '\0';
}

// The NVML_COMPUTE_INSTANCE_PROFILE_*_SLICE constant of a compute instance
// spanning `slices` compute slices; NVML_COMPUTE_INSTANCE_PROFILE_COUNT where
// none does. Defined in mig_instances.cc.
unsigned spanning_ci_profile(unsigned slices);

}  // namespace fake_nvml
