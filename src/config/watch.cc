#include "config/watch.h"

namespace danqing::config {

Status WatchConfig(FileWatcher& watcher, const Config& loaded,
                   const std::function<Result<Config>()>& resolve, std::function<void()> on_change) {
  if (loaded.source.empty()) return Status::Ok();
  if (auto st = watcher.Start(loaded.source, on_change); !st.ok()) return st;
  const auto now = resolve();
  if (!now.ok() || *now != loaded) on_change();
  return Status::Ok();
}

}  // namespace danqing::config
