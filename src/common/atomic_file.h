// WriteFileAtomically: replaces a file so that readers see the old content or
// the new, never a partial write (temp file in the same directory, fsync,
// rename). For files other programs read while we write them: CDI specs read
// by the container runtime, features files read by node-feature-discovery.
//
// Thread-safety: safe for different paths; concurrent writers of one path in
// one process race on the temp file name.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace danqing {

// UNAVAILABLE with the path and errno text when the write or rename fails
// (the temp file is removed).
Status WriteFileAtomically(const std::string& path, std::string_view content);

}  // namespace danqing
