#include "common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <string>

namespace danqing::log {

Status Configure(std::string_view level) {
  std::string name(level);
  if (name.empty()) {
    const char* env = std::getenv("DANQING_LOG_LEVEL");
    name = env != nullptr && *env != '\0' ? env : "info";
  }
  const auto parsed = spdlog::level::from_str(name);
  // from_str maps unknown names to "off"; only accept "off" when asked for.
  if (parsed == spdlog::level::off && name != "off") {
    return InvalidArgument("unknown log level '" + name +
                           "' (want trace, debug, info, warn, error, critical or off)");
  }
  auto logger = spdlog::stderr_color_mt("danqing");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %^%l%$ %v");
  logger->set_level(parsed);
  spdlog::set_default_logger(std::move(logger));
  return Status::Ok();
}

}  // namespace danqing::log
