// danqing-device-plugin: the GPU node agent. Thin main: flags and wiring only;
// the logic lives in the libraries under src/.
//
// Exit codes: 0 success; 1 failure; 2 usage error; 3 NVML unavailable (no
// library, or nvmlInit failed).
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "common/log.h"
#include "gpu/nvml_backend.h"
#include "gpu/report.h"

namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoNvml = 3;

struct GlobalFlags {
  std::string nvml_lib;
  std::string log_level;
};

int RunGpus(const GlobalFlags& g, bool json, bool no_sensors) {
  auto backend = danqing::gpu::NvmlBackend::Create(g.nvml_lib);
  if (!backend.ok()) {
    std::fprintf(stderr, "danqing-device-plugin: %s\n", backend.status().ToString().c_str());
    const auto code = backend.status().code();
    return code == danqing::StatusCode::kUnavailable ? kExitNoNvml : kExitFailure;
  }
  auto snap = danqing::gpu::TakeSnapshot(**backend, !no_sensors);
  if (!snap.ok()) {
    std::fprintf(stderr, "danqing-device-plugin: %s\n", snap.status().ToString().c_str());
    return kExitFailure;
  }
  if (json) {
    std::cout << danqing::gpu::ToJson(*snap).dump(2) << '\n';
  } else {
    std::cout << danqing::gpu::RenderTable(*snap);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"danqing-device-plugin: the Danqing GPU node agent for Kubernetes"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags may follow the subcommand too
  GlobalFlags g;
  app.add_option("--nvml-lib", g.nvml_lib,
                 "Path of libnvidia-ml.so.1 (default: $DANQING_NVML_LIB, else the dynamic "
                 "linker's search path)");
  app.add_option("--log-level", g.log_level,
                 "trace, debug, info, warn, error, critical or off (default: "
                 "$DANQING_LOG_LEVEL, else info)");

  bool json = false;
  bool no_sensors = false;
  CLI::App* gpus = app.add_subcommand(
      "gpus", "Show the GPUs, MIG devices, topology and health sensors this node agent sees");
  gpus->add_flag("--json", json, "Machine-readable JSON instead of a table");
  gpus->add_flag("--no-sensors", no_sensors, "Inventory and topology only");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  if (auto st = danqing::log::Configure(g.log_level); !st.ok()) {
    std::fprintf(stderr, "danqing-device-plugin: %s\n", st.ToString().c_str());
    return kExitUsage;
  }
  if (*gpus) return RunGpus(g, json, no_sensors);
  return kExitUsage;
}
