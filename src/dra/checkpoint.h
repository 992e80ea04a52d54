// Checkpoint: the node plugin's prepared claims on persistent storage, so an
// agent restart or a node reboot neither loses nor leaks them.
//
// One file, <dir>/checkpoint.json, replaced atomically (temp + fsync +
// rename: WriteFileAtomically) on every change:
//   {"version": 1, "checksum": "fnv1a64:<16 hex>", "claims": [<PreparedClaim>...]}
// The checksum is FNV-1a 64 over claims.dump() (compact): a truncated,
// overwritten or hand-edited file is told from a good one.
//
// Thread-safety: not thread-safe; the node plugin calls it under its lock.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "common/status.h"
#include "dra/prepared.h"

namespace danqing::dra {

// Writes a file so that readers see the old content or the new (the
// default is WriteFileAtomically). A seam for tests: a full disk.
using FileWriter = std::function<Status(const std::string& path, std::string_view content)>;
FileWriter AtomicFileWriter();

inline constexpr int kCheckpointVersion = 1;
inline constexpr std::string_view kCheckpointFile = "checkpoint.json";

class Checkpoint {
 public:
  Checkpoint(std::string dir, FileWriter writer = AtomicFileWriter());

  std::string path() const;

  // The claims recorded. NOT_FOUND when there is no file (a first start);
  // FAILED_PRECONDITION naming the path and what is wrong when the file
  // cannot be read, is not JSON, has another version, a wrong checksum, or a
  // claim that does not parse: the caller rebuilds and Saves.
  Result<std::map<std::string, PreparedClaim>> Load() const;

  // Records `claims` (by UID), creating the directory if needed. UNAVAILABLE
  // (with the path and the system's reason, e.g. "No space left on device")
  // when it cannot be written; the file then still holds what it held.
  Status Save(const std::map<std::string, PreparedClaim>& claims) const;

 private:
  std::string dir_;
  FileWriter writer_;
};

// FNV-1a 64 of `s`, as 16 lower-case hex digits.
std::string Fnv1a64Hex(std::string_view s);

}  // namespace danqing::dra
