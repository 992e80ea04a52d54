// Logging set-up shared by the binaries: one line per event, level from the
// --log-level flag or the DANQING_LOG_LEVEL environment variable.
//
// Thread-safety: Configure() once at start-up, before other threads log.
#pragma once

#include <string_view>

#include "common/status.h"

namespace danqing::log {

// level: trace, debug, info, warn, error, critical, off. Empty: keep the
// DANQING_LOG_LEVEL value, else "info". Logs go to stderr.
Status Configure(std::string_view level);

}  // namespace danqing::log
