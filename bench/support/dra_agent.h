// The DRA benches' agent: the configuration they start agent::Agent with in
// dra mode over the fake NVML, and the agent wired as main wires it (claims
// read through the API client made from the kubeconfig, slices published
// through it).
//
// Thread-safety: plain functions; call from the bench's main thread.
#pragma once

#include <memory>
#include <string>

#include "agent/agent.h"
#include "config/config.h"
#include "kube/client.h"
#include "testing/support/fake_node.h"

namespace danqing::bench {

// dra mode as node `node` over the fake NVML (testing::FakeNvmlLibrary()):
// the device plugin socket, the DRA plugin registry and plugin sockets and
// the kubeconfig (`dir`/kubeconfig, written by the bench) under `dir`; the
// CDI specs and the checkpoint under `state_dir`. No metrics listener, no node
// features file; every interval at its default.
inline config::Config DraBenchConfig(const std::string& dir, const std::string& state_dir,
                                     const std::string& node) {
  config::Config cfg = *config::ParseConfig("version: v1\n", "bench.yaml");
  cfg.danqing.device_plugin_path = dir + "/dp";
  cfg.danqing.cdi_root = state_dir + "/cdi";
  cfg.danqing.nvml_lib = testing::FakeNvmlLibrary();
  cfg.danqing.node_features_file = "";
  cfg.danqing.metrics_addr = "";
  cfg.danqing.mode = "dra";
  cfg.danqing.node_name = node;
  cfg.danqing.dra_plugins_registry = dir + "/registry";
  cfg.danqing.dra_plugin_dir = dir + "/plugin";
  cfg.danqing.dra_checkpoint_dir = state_dir + "/state";
  cfg.danqing.kubeconfig = dir + "/kubeconfig";
  return cfg;
}

// The agent as main makes it in dra mode: the NVML backend, claims read
// through `client`, slices published through it. `client` must outlive it.
inline std::unique_ptr<agent::Agent> WiredDraAgent(kube::Client& client) {
  return std::make_unique<agent::Agent>(agent::NvmlBackendFactory(), nullptr,
                                        agent::ApiClaimSourceFactory(client),
                                        agent::ApiLink{.client = &client});
}

}  // namespace danqing::bench
