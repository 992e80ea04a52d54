// danqing-device-plugin: the GPU node agent. Thin main: flags, wiring and
// signals only; the logic lives in the libraries under src/.
//
//   danqing-device-plugin [flags]          serve the kubelet (the DaemonSet's command)
//   danqing-device-plugin gpus [--json]    show what the agent sees on this node
//   danqing-device-plugin doctor           check the node and say how to fix it
//
// Flags, environment variables and the config file follow NVIDIA's
// k8s-device-plugin (flags > environment > file); see docs/configuration.md.
// Signals: SIGTERM/SIGINT stop cleanly (sockets removed); SIGHUP reloads.
//
// Exit codes: 0 success; 1 failure; 2 usage or configuration error; 3 NVML
// unavailable (no library, or nvmlInit failed).
#include <CLI/CLI.hpp>
#include <malloc.h>
#include <signal.h>
#include <unistd.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "agent/agent.h"
#include "agent/doctor.h"
#include "common/log.h"
#include "config/config.h"
#include "config/watch.h"
#include "gpu/nvml_backend.h"
#include "gpu/report.h"
#include "metrics/agent_metrics.h"

namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoNvml = 3;

int ExitCodeFor(const danqing::Status& st) {
  switch (st.code()) {
    case danqing::StatusCode::kInvalidArgument: return kExitUsage;
    case danqing::StatusCode::kUnavailable: return kExitNoNvml;
    default: return kExitFailure;
  }
}

int Fail(const danqing::Status& st) {
  std::fprintf(stderr, "danqing-device-plugin: %s\n", st.ToString().c_str());
  return ExitCodeFor(st);
}

// Whether `name` (without "--") is a boolean flag of the configuration table.
bool IsBoolFlag(std::string_view name) {
  for (const auto& spec : danqing::config::FlagTable()) {
    if (spec.kind == danqing::config::FlagKind::kBool && (spec.name == name || spec.alias == name)) return true;
  }
  return false;
}

// Registers every flag of the configuration table (NVIDIA's names plus
// Danqing's) so that its value lands in `cl`.
void AddConfigFlags(CLI::App& app, danqing::config::CommandLine& cl) {
  using danqing::config::FlagKind;
  for (const auto& spec : danqing::config::FlagTable()) {
    std::string names = "--" + std::string(spec.name);
    if (!spec.alias.empty()) names += ",--" + std::string(spec.alias);
    std::string help(spec.help);
    if (!spec.env.empty()) help += " [env " + std::string(spec.env) + "]";
    if (!spec.default_value.empty()) help += " (default " + spec.default_value + ")";
    auto field = spec.field;
    CLI::Option* opt = nullptr;
    // Pass the help with description(): add_option(name, std::string&) would
    // take the help string as the option's target variable.
    if (spec.kind == FlagKind::kBool) {
      opt = app.add_flag(names + "{true}");
    } else {
      opt = app.add_option(names);
    }
    opt->description(help);
    if (spec.kind == FlagKind::kList) {
      opt->each([&cl, field](const std::string& v) {
        auto& slot = cl.*field;
        slot = slot && !slot->empty() ? *slot + "," + v : v;
      });
    } else {
      opt->each([&cl, field](const std::string& v) { cl.*field = v; });
    }
  }
}

std::string Join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "(none)" : out;
}

int RunGpus(const danqing::config::Config& cfg, bool json, bool no_sensors) {
  auto backend = danqing::gpu::NvmlBackend::Create(danqing::agent::NvmlLibraryFor(cfg), cfg.danqing.sysfs_root);
  if (!backend.ok()) return Fail(backend.status());
  auto snap = danqing::gpu::TakeSnapshot(**backend, !no_sensors);
  if (!snap.ok()) return Fail(snap.status());
  // Which front end serves each GPU under the configured mode (docs/dra.md).
  auto dra = danqing::agent::DraGpuUuids(cfg, snap->inventory);
  if (!dra.ok()) return Fail(dra.status());
  auto by_dra = [&dra](const std::string& uuid) {
    return std::find(dra->begin(), dra->end(), uuid) != dra->end();
  };
  // The devices a DRA GPU is published as: itself, or, in MIG mode, its MIG
  // devices only (docs/dra.md).
  auto dra_devices = [](const danqing::gpu::Gpu& g) {
    std::vector<std::string> names;
    if (g.mig_mode == danqing::gpu::MigMode::kEnabled) {
      for (const auto& m : g.mig_devices) names.push_back(danqing::dra::DeviceNameFor(g, m));
    } else {
      names.push_back(danqing::dra::DeviceNameFor(g));
    }
    return names;
  };
  if (json) {
    nlohmann::json out = danqing::gpu::ToJson(*snap);
    nlohmann::json served = nlohmann::json::array();
    for (const auto& g : snap->inventory.gpus) {
      nlohmann::json e = {
          {"index", g.index}, {"uuid", g.uuid}, {"by", by_dra(g.uuid) ? "dra" : "device-plugin"}};
      if (by_dra(g.uuid)) {
        if (g.mig_mode != danqing::gpu::MigMode::kEnabled)
          e["draDevice"] = danqing::dra::DeviceNameFor(g);
        e["draDevices"] = dra_devices(g);
      }
      served.push_back(std::move(e));
    }
    out["serving"] = {
        {"mode", cfg.danqing.mode}, {"draDriver", cfg.danqing.dra_driver_name}, {"gpus", served}};
    std::cout << out.dump(2) << '\n';
  } else {
    std::cout << danqing::gpu::RenderTable(*snap);
    std::cout << "\nServed (mode " << cfg.danqing.mode << "):\n";
    for (const auto& g : snap->inventory.gpus) {
      std::cout << "  GPU " << g.index << "  " << g.uuid << "  "
                << (by_dra(g.uuid)
                        ? "DRA " + cfg.danqing.dra_driver_name +
                              (g.mig_mode == danqing::gpu::MigMode::kEnabled ? " MIG devices "
                                                                             : " device ") +
                              Join(dra_devices(g))
                        : std::string("device plugin"))
                << '\n';
    }
  }
  return 0;
}

int Serve(const danqing::config::CommandLine& cl, danqing::config::Config cfg) {
  // Signals are taken synchronously by this thread; block them before any
  // other thread exists so that none of those receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  // File changes and MIG re-partitions arrive as SIGHUP, so every reload
  // goes through this one loop.
  auto raise_reload = [] { ::kill(::getpid(), SIGHUP); };
  // DRA modes: the API server (--kubeconfig, or the pod's service account)
  // where claims are read and this node's ResourceSlices published.
  auto api = danqing::agent::ApiClientFor(cfg);
  if (!api.ok()) return Fail(api.status());
  danqing::agent::Agent agent(danqing::agent::NvmlBackendFactory(), raise_reload,
                              *api ? danqing::agent::ApiClaimSourceFactory(**api)
                                   : danqing::agent::DefaultClaimSourceFactory(),
                              danqing::agent::ApiLink{.client = api->get()});
  if (auto st = agent.Start(cfg); !st.ok()) return Fail(st);
  danqing::FileWatcher config_watcher;
  const auto resolve = [&cl] { return danqing::config::Resolve(cl, danqing::config::ProcessEnvironment()); };
  if (auto st = danqing::config::WatchConfig(config_watcher, cfg, resolve, raise_reload); !st.ok()) {
    spdlog::warn("config: not watching {}: {} (SIGHUP still reloads)", cfg.source, st.ToString());
  }
  spdlog::info("danqing-device-plugin: serving; SIGHUP reloads, SIGTERM stops");
  for (;;) {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) continue;
    if (sig == SIGHUP) {
      auto next = resolve();
      auto& reloads = danqing::metrics::AgentMetrics().reloads;
      if (!next.ok()) {
        spdlog::error("reload: {} (keeping the running configuration)", next.status().ToString());
        reloads.WithLabels({"failed"}).Inc();
        continue;
      }
      if (auto st = agent.Reload(*next); !st.ok()) {
        spdlog::error("reload: {}", st.ToString());
        reloads.WithLabels({"failed"}).Inc();
        continue;
      }
      reloads.WithLabels({"ok"}).Inc();
      cfg = std::move(next).value();
      continue;
    }
    spdlog::info("danqing-device-plugin: signal {}; stopping", sig);
    config_watcher.Stop();
    agent.Stop();
    return 0;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // glibc gives each thread that allocates a malloc arena of its own; the
  // agent's ~20 threads (gRPC, HTTP workers) would each keep one, ~2 MiB of
  // resident memory in all for an agent that allocates little. Two suffice.
  // MALLOC_ARENA_MAX in the environment still decides when it is set.
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr) mallopt(M_ARENA_MAX, 2);
  CLI::App app{"danqing-device-plugin: the Danqing GPU node agent for Kubernetes"};
  app.set_version_flag("--version", "danqing-device-plugin " DANQING_VERSION);
  app.fallthrough();  // global flags may follow the subcommand too
  danqing::config::CommandLine cl;
  AddConfigFlags(app, cl);

  bool json = false;
  bool no_sensors = false;
  CLI::App* gpus = app.add_subcommand(
      "gpus", "Show the GPUs, MIG devices, topology and health sensors this node agent sees");
  gpus->add_flag("--json", json, "Machine-readable JSON instead of a table");
  gpus->add_flag("--no-sensors", no_sensors, "Inventory and topology only");
  CLI::App* doctor = app.add_subcommand(
      "doctor", "Check this node (driver, device nodes, kubelet, CDI, runtime, config, GPU health) "
                "and print each finding with a fix; exit 1 when something failed");
  danqing::agent::DoctorOptions doctor_options;
  if (const char* kc = std::getenv("KUBECONFIG"); kc != nullptr) doctor_options.kubeconfig = kc;
  doctor->add_option("--kubeconfig", doctor_options.kubeconfig,
                     "DRA checks: the API server from this kubeconfig (default $KUBECONFIG; "
                     "none: the pod's service account)");

  try {
    // "--name=" with nothing after the "=" is an empty value (NVIDIA's
    // command line takes it so, e.g. --node-features-file= for no labels);
    // CLI11 would take the next argument as the value instead. Given apart,
    // "--name" and "", it takes the empty string. CLI11 wants the arguments
    // last first.
    app.name(argc > 0 ? argv[0] : "danqing-device-plugin");  // parse(vector) takes no program name
    std::vector<std::string> args;
    for (int i = argc - 1; i >= 1; --i) {
      const std::string_view a = argv[i];
      if (a.size() > 3 && a.starts_with("--") && a.ends_with('=') && a.find('=') == a.size() - 1 &&
          !IsBoolFlag(a.substr(2, a.size() - 3))) {
        args.emplace_back();
        args.emplace_back(a.substr(0, a.size() - 1));
      } else {
        args.emplace_back(a);
      }
    }
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  auto cfg = danqing::config::Resolve(cl, danqing::config::ProcessEnvironment());
  if (*doctor) {
    (void)danqing::log::Configure("error");  // the findings are the output
    const auto findings =
        danqing::agent::RunDoctor(cfg, danqing::agent::NvmlBackendFactory(), doctor_options);
    std::cout << danqing::agent::RenderFindings(findings);
    return danqing::agent::AnyFailed(findings) ? kExitFailure : 0;
  }
  // Whatever kept the configuration from resolving (a config file missing or
  // unreadable as much as a bad value) is a configuration error: exit 2.
  if (!cfg.ok()) {
    std::fprintf(stderr, "danqing-device-plugin: %s\n", cfg.status().ToString().c_str());
    return kExitUsage;
  }
  if (auto st = danqing::log::Configure(cfg->danqing.log_level); !st.ok()) return Fail(st);
  if (*gpus) return RunGpus(*cfg, json, no_sensors);
  return Serve(cl, std::move(cfg).value());
}
