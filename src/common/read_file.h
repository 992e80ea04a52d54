// Reading files whose path an operator or the node controls (the config
// file, the kubelet's checkpoint, /proc, /sys and cgroup entries, runtime
// configs, the NVML library).
//
// Such a path may name anything. open() of a FIFO blocks until a writer
// comes, and a reload (or start) that blocks there blocks the thread that
// takes SIGTERM too; a device (/dev/zero) never ends. So every file is
// opened O_RDONLY | O_NONBLOCK | O_CLOEXEC (open never waits for a FIFO's
// writer) and fstat'ed; anything but a regular file, links resolved, is
// refused before one byte is read, and no more than a given size is read.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "common/status.h"

namespace danqing {

// What ReadTextFile reads at most.
inline constexpr std::size_t kMaxTextFileBytes = 16 << 20;  // 16 MiB

// The whole of the regular file at `path`, at most `max_bytes`. Errors, with
// the reason alone as the message (the caller names the file):
//   NOT_FOUND           missing ("No such file or directory")
//   PERMISSION_DENIED   not readable
//   FAILED_PRECONDITION not a regular file ("not a regular file: a FIFO")
//   RESOURCE_EXHAUSTED  more than `max_bytes` bytes
//   INVALID_ARGUMENT    any other failure to open or read
Result<std::string> ReadRegularFile(const std::string& path, std::size_t max_bytes);

// OK when `path`, links resolved, is a regular file; otherwise the error
// ReadRegularFile would give. For paths handed to code that opens them
// itself (dlopen).
Status CheckRegularFile(const std::string& path);

// ReadRegularFile with kMaxTextFileBytes, or nullopt on any error: for the
// small files the agent reads where "absent" and "unusable" mean the same.
std::optional<std::string> ReadTextFile(const std::string& path);

}  // namespace danqing
