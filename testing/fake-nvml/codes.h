// Fake NVML: tables of names shared by the library, its profile loader and its
// control server: return-code names ("GPU_IS_LOST"), NVML's error strings, and
// the list of functions the library exports.
//
// Thread-safety: everything here is immutable data and pure functions; safe to
// call from any thread without locking.
#pragma once

#include <optional>
#include <span>
#include <string_view>

#include "gpu/nvml_abi.h"

namespace fake_nvml {

// The NVML error string for a return code, as nvmlErrorString() returns it.
// Never null; unknown codes map to "Unknown Error". Takes the raw integer: C
// callers may pass values outside the C++ enum's range.
const char* error_string(int code);

// The enumerator name without its prefix: NVML_ERROR_GPU_IS_LOST -> "GPU_IS_LOST",
// NVML_SUCCESS -> "SUCCESS". Unknown codes map to "UNKNOWN".
std::string_view return_code_name(nvmlReturn_t code);

// Parses a return-code name as profiles and control commands write it. Accepts
// the bare name ("GPU_IS_LOST"), the full enumerator ("NVML_ERROR_GPU_IS_LOST",
// "NVML_SUCCESS"); case-sensitive. Returns nullopt for anything else.
std::optional<nvmlReturn_t> parse_return_code(std::string_view name);

// Every function name the library can export (the full build; the legacy build
// exports all of them except legacy_omitted_functions()).
std::span<const std::string_view> exported_functions();

// The newer, optional entry points the FAKE_NVML_LEGACY build leaves out.
std::span<const std::string_view> legacy_omitted_functions();

// True when `name` is one of exported_functions().
bool is_exported_function(std::string_view name);

// Strips a version suffix: "nvmlDeviceGetPciInfo_v3" -> "nvmlDeviceGetPciInfo".
// Names without a "_vN" suffix come back unchanged.
std::string_view base_function_name(std::string_view name);

}  // namespace fake_nvml
