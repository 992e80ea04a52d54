// WatchConfig: reloads when the config file changes, including a change made
// before the watch began.
//
// The agent reads its config, starts serving, and only then watches the file.
// An edit landing in between raises no inotify event, so the node would keep
// the old configuration until the next edit. After the watch is in place, the
// config is therefore resolved once more and compared with the one loaded: a
// difference (or a file that no longer parses) is reported as a change at
// once, and the reload path handles it as it would any other edit.
#pragma once

#include <functional>

#include "common/file_watcher.h"
#include "common/status.h"
#include "config/config.h"

namespace danqing::config {

// Watches `loaded.source` with `watcher`; `on_change` runs on the watcher's
// thread for later edits, and on the calling thread, before this returns, when
// `resolve()` no longer gives `loaded`. A config without a file is not watched.
Status WatchConfig(FileWatcher& watcher, const Config& loaded,
                   const std::function<Result<Config>()>& resolve, std::function<void()> on_change);

}  // namespace danqing::config
