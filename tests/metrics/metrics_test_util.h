// Shared pieces of the exporter tests: a fake node behind NvmlBackend, pods
// for the pod resources emulator, a fake /proc tree, HTTP scrapes.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gpu/nvml_backend.h"
#include "metrics/collector.h"
#include "podresources/v1/api.pb.h"
#include "testing/support/fake_node.h"
#include "testing/support/temp_dir.h"

namespace danqing::metrics::test {

using danqing::testing::TempDir;

// A fake node, its NvmlBackend and one discovery.
struct Node {
  explicit Node(const std::string& profile) : fake(profile) {
    auto b = gpu::NvmlBackend::Create(danqing::testing::FakeNvmlLibrary());
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    if (!b.ok()) return;
    backend = std::move(b).value();
    auto d = backend->Discover();
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    if (d.ok()) inventory = std::make_shared<const gpu::NodeInventory>(std::move(d).value());
  }

  Sources MakeSources() {
    Sources s;
    s.inventory = [this] { return inventory; };
    s.read_sensors = [this](const std::string& uuid) { return backend->ReadSensors(uuid); };
    return s;
  }

  danqing::testing::FakeNode fake;
  std::unique_ptr<gpu::NvmlBackend> backend;
  std::shared_ptr<const gpu::NodeInventory> inventory;
};

struct Holding {
  std::string resource;
  std::vector<std::string> ids;
};

inline v1::PodResources MakePod(const std::string& ns, const std::string& name,
                                const std::string& container, const std::vector<Holding>& holds) {
  v1::PodResources pod;
  pod.set_namespace_(ns);
  pod.set_name(name);
  auto* c = pod.add_containers();
  c->set_name(container);
  for (const auto& h : holds) {
    auto* d = c->add_devices();
    d->set_resource_name(h.resource);
    for (const auto& id : h.ids) d->add_device_ids(id);
  }
  return pod;
}

inline void WriteFile(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

struct Scrape {
  int status = 0;
  std::string content_type;
  std::string body;
};

inline Scrape Get(int port, const std::string& accept = "") {
  httplib::Client cli("127.0.0.1", port);
  cli.set_connection_timeout(5);
  cli.set_read_timeout(10);
  httplib::Headers headers;
  if (!accept.empty()) headers.emplace("Accept", accept);
  auto res = cli.Get("/metrics", headers);
  if (!res) return {};
  return {res->status, res->get_header_value("Content-Type"), res->body};
}

inline constexpr char kPrometheusAccept[] =
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

}  // namespace danqing::metrics::test
