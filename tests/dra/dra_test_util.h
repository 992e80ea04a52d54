// Builders shared by the DRA node tests: a temp tree with short paths (unix
// sockets allow 108 bytes), a device table of whole GPUs, allocations.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "dra/claims.h"
#include "dra/node_devices.h"

namespace danqing::dra::test {

inline constexpr char kDriver[] = "gpu.danqing.io";
inline constexpr char kPool[] = "node-a";

class TempTree {
 public:
  TempTree() {
    char tmpl[] = "/tmp/dqdraXXXXXX";
    root_ = ::mkdtemp(tmpl);
  }
  ~TempTree() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  std::string operator/(const std::string& sub) const { return root_ + "/" + sub; }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

// GPUs 0..n-1: gpu-<i>, UUID GPU-<i>, minor i, all healthy.
inline std::shared_ptr<const DeviceTable> Gpus(int n) {
  auto t = std::make_shared<DeviceTable>();
  t->pool = kPool;
  t->driver_version = "550.54.15";
  for (int i = 0; i < n; ++i) {
    NodeDevice d;
    d.name = "gpu-" + std::to_string(i);
    d.device.id = d.device.device_uuid = d.device.gpu_uuid = "GPU-" + std::to_string(i);
    d.device.index = std::to_string(i);
    d.device.minor = static_cast<uint32_t>(i);
    t->devices[d.name] = d;
  }
  return t;
}

inline ClaimAllocation Claim(const std::string& name, const std::string& uid,
                             std::vector<std::string> devices, std::string pool = kPool) {
  ClaimAllocation a;
  a.ns = "default";
  a.name = name;
  a.uid = uid;
  for (size_t i = 0; i < devices.size(); ++i) {
    a.devices.push_back({"gpu", kDriver, pool, devices[i], std::nullopt});
  }
  return a;
}

}  // namespace danqing::dra::test
