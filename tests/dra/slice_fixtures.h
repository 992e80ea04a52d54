// Fixtures for the DRA API-side tests and benchmark: an emulated API server
// with a fresh PKI, a client for it, and GPU inventories (synthetic, or read
// through the fake NVML from a profile).
#pragma once

#include <stdlib.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "gpu/nvml_backend.h"
#include "kube/client.h"
#include "testing/apiserver/apiserver_emulator.h"

namespace danqing::testing {

// An API server emulator on loopback with its PKI in `dir`.
struct ApiFixture {
  TestPki pki;
  std::unique_ptr<ApiServerEmulator> server;
  std::unique_ptr<kube::Client> client;
  std::string error;  // set when something failed

  explicit ApiFixture(const std::string& dir, kube::Config tune = {}) {
    auto p = MakeTestPki(dir);
    if (!p.ok()) {
      error = p.status().ToString();
      return;
    }
    pki = *p;
    ApiServerOptions o;
    o.cert_file = pki.server_cert;
    o.key_file = pki.server_key;
    server = std::make_unique<ApiServerEmulator>(o);
    if (Status st = server->Start(); !st.ok()) {
      error = st.ToString();
      return;
    }
    kube::Config c = std::move(tune);
    c.server = server->url();
    c.ca_file = pki.ca_cert;
    if (c.token.empty() && c.token_file.empty()) c.token = "test-token";
    auto cl = kube::Client::Create(c);
    if (!cl.ok()) {
      error = cl.status().ToString();
      return;
    }
    client = std::move(cl).value();
  }

  // Writes a kubeconfig at `path` for this emulator (its URL, the PKI's CA,
  // the bearer token test-token), as an operator would give --kubeconfig.
  // Returns false when the file could not be written.
  bool WriteKubeconfig(const std::string& path) const {
    std::ofstream out(path);
    out << "apiVersion: v1\nkind: Config\nclusters:\n- name: emu\n  cluster:\n    server: "
        << server->url() << "\n    certificate-authority: " << pki.ca_cert
        << "\nusers:\n- name: agent\n  user:\n    token: test-token\ncontexts:\n- name: emu\n"
           "  context:\n    cluster: emu\n    user: agent\ncurrent-context: emu\n";
    out.close();
    return static_cast<bool>(out);
  }
};

// A ResourceClaim `ns`/`name` allocated one device: `device` of `pool`, for
// the request "gpu" by the driver gpu.danqing.io; no uid (the API server
// emulator's PutClaim gives it one).
inline nlohmann::json AllocatedClaim(const std::string& ns, const std::string& name,
                                     const std::string& pool, const std::string& device) {
  return {{"metadata", {{"namespace", ns}, {"name", name}}},
          {"status",
           {{"allocation",
             {{"devices",
               {{"results",
                 {{{"request", "gpu"},
                   {"driver", "gpu.danqing.io"},
                   {"pool", pool},
                   {"device", device}}}}}}}}}}};
}

// An 8-GPU A100 node with mixed MIG: the checked-in 4-GPU profile
// a100-mig-mixed (GPU0 3g+2g+1g+1g, GPU1 7x1g, GPU2 2x3g, GPU3 no MIG)
// twice, the second copy with its own UUIDs, minors and bus ids. Writes it to
// `path`; returns false on failure.
inline bool WriteEightGpuMigMixedProfile(const std::string& profile_dir, const std::string& path) {
  std::ifstream in(profile_dir + "/a100-mig-mixed.json");
  nlohmann::json p = nlohmann::json::parse(in, nullptr, false);
  if (p.is_discarded()) return false;
  nlohmann::json gpus = p["gpus"];
  const std::size_t n = gpus.size();
  for (std::size_t i = 0; i < n; ++i) {
    nlohmann::json g = gpus[i];
    auto bump = [](std::string s) {  // change one hex digit of a UUID
      s[s.size() - 1] = s[s.size() - 1] == '0' ? '1' : '0';
      s[s.size() - 2] = 'e';
      return s;
    };
    g["uuid"] = bump(g["uuid"].get<std::string>());
    g["minor_number"] = static_cast<int>(n + i);
    char bus[32];
    std::snprintf(bus, sizeof bus, "00000000:%02X:00.0", static_cast<unsigned>(0xE0 + i));
    g["pci"]["bus_id"] = bus;
    if (g.contains("mig") && g["mig"].contains("devices")) {
      for (auto& m : g["mig"]["devices"]) m["uuid"] = bump(m["uuid"].get<std::string>());
    }
    gpus.push_back(g);
  }
  p["gpus"] = gpus;
  std::ofstream out(path);
  out << p.dump(2);
  return static_cast<bool>(out);
}

// Discovers the node described by `profile` through the fake NVML library.
inline Result<gpu::NodeInventory> DiscoverProfile(const std::string& fake_lib,
                                                  const std::string& profile) {
  ::setenv("FAKE_NVML_PROFILE", profile.c_str(), 1);
  auto b = gpu::NvmlBackend::Create(fake_lib, "");
  if (!b.ok()) return b.status();
  return (*b)->Discover();
}

}  // namespace danqing::testing
