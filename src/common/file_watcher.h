// FileWatcher: calls back when a file may have changed, including the way a
// Kubernetes ConfigMap volume changes it (a new timestamped directory, then
// the `..data` symlink swapped by rename), an editor's write-and-rename, or a
// plain write.
//
// It watches the file's directory with inotify (the file itself may be
// replaced, which would orphan a watch on it) and reports, after a short
// quiet period that coalesces bursts of events, whenever the directory saw an
// event that can change what the path resolves to: on the file's own name or
// on a name beside it that the path's links lead through (a ConfigMap
// volume's `..data`, a chain of links). Other files coming and going in the
// directory (a config kept beside sockets, or in /etc) are not reported and
// do not delay a report. A directory that is removed (a ConfigMap path
// through `..data/`) is watched again once it is back, and that is reported.
//
// Thread-safety: the callback runs on the watcher's own thread; Stop() (and
// the destructor) join it and may be called from any other thread.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace danqing {

class FileWatcher {
 public:
  FileWatcher() = default;
  ~FileWatcher();
  FileWatcher(const FileWatcher&) = delete;
  FileWatcher& operator=(const FileWatcher&) = delete;

  // Starts watching `path`'s directory. UNAVAILABLE when it cannot be watched.
  Status Start(const std::string& path, std::function<void()> on_change,
               std::chrono::milliseconds quiet = std::chrono::milliseconds(20));
  void Stop();

 private:
  void Run(std::function<void()> on_change, std::chrono::milliseconds quiet);
  std::vector<std::string> NamesOfThePath() const;

  std::string path_;
  std::string dir_;
  int inotify_fd_ = -1;
  int stop_fd_ = -1;
  std::thread thread_;
};

}  // namespace danqing
