// DraAgentConfig: the agent configuration the DRA agent tests start from (the
// fake NVML, every path under the test's own directory, a fast health check),
// in `mode` with `dra_gpus` through DRA and `node` as the pool name. Each test
// adds where claims come from (a claims file, or a kubeconfig) and validates.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "testing/support/fake_node.h"

namespace danqing::testing {

inline config::Config DraAgentConfig(const std::string& dir, const std::string& mode,
                                     std::vector<std::string> dra_gpus, const std::string& node) {
  using namespace std::chrono_literals;
  config::Config cfg = *config::ParseConfig("version: v1\n", "test.yaml");
  cfg.danqing.device_plugin_path = dir + "/dp";
  cfg.danqing.cdi_root = dir + "/cdi";
  cfg.danqing.nvml_lib = FakeNvmlLibrary();
  cfg.danqing.node_features_file = "";
  cfg.danqing.health_check_interval = 50ms;
  cfg.danqing.xid_quiet_period = 600ms;
  cfg.danqing.metrics_addr = "";
  cfg.danqing.mode = mode;
  cfg.danqing.dra_gpus = std::move(dra_gpus);
  cfg.danqing.node_name = node;
  cfg.danqing.dra_plugins_registry = dir + "/registry";
  cfg.danqing.dra_plugin_dir = dir + "/plugins";
  cfg.danqing.dra_checkpoint_dir = dir + "/state";
  return cfg;
}

}  // namespace danqing::testing
