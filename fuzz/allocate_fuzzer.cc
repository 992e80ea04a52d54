// Fuzzes Allocate's device-ID handling, deviceplugin::BuildContainerResponse,
// directly (no gRPC): the kubelet's requested IDs are mapped to devices,
// validated (unknown, unhealthy, too many for a shared resource) and turned
// into the runtime's environment, mounts, device nodes and CDI names.
//
// Input: byte 0 selects the options and the resource (exclusive GPUs + a MIG
// device, or time-slicing replicas); the rest is the ID list, one per line.
// Oracle: a response is only built for known, healthy IDs, and
// NVIDIA_VISIBLE_DEVICES (or, with volume-mounts, the mounts) names each
// requested device exactly once. A refusal, by BuildContainerResponse or by
// the request bounds (CheckAllocateRequest), has a message of bounded size
// on one line whatever bytes the IDs hold (issue 31).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "deviceplugin/allocate.h"

namespace dp = danqing::deviceplugin;

namespace {

std::string Uuid(const char* prefix, int n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%08d-0000-0000-0000-%012d", prefix, n, n);
  return buf;
}

dp::Resource MakeResource(bool replicated) {
  dp::Resource r;
  r.name = replicated ? "nvidia.com/gpu.shared" : "nvidia.com/gpu";
  r.replicas = replicated ? 3 : 1;
  for (int g = 0; g < 3; ++g) {
    dp::Device d;
    d.device_uuid = d.gpu_uuid = Uuid("GPU", g);
    d.index = std::to_string(g);
    d.gpu_position = g;
    d.numa_node = g % 2;
    d.minor = static_cast<uint32_t>(g);
    d.healthy = g != 2;
    if (!d.healthy) d.unhealthy_reason = "XID 79";
    if (replicated) {
      for (int k = 0; k < r.replicas; ++k) {
        dp::Device rep = d;
        rep.id = d.device_uuid + "::" + std::to_string(k);
        rep.replica = k;
        r.devices.push_back(rep);
      }
    } else {
      d.id = d.device_uuid;
      r.devices.push_back(d);
    }
  }
  if (!replicated) {  // a MIG device on GPU 1
    dp::Device m;
    m.id = m.device_uuid = Uuid("MIG", 7);
    m.gpu_uuid = Uuid("GPU", 1);
    m.index = "1:0";
    m.gpu_position = 1;
    m.minor = 1;
    m.gpu_instance_id = 2;
    m.compute_instance_id = 0;
    r.devices.push_back(m);
  }
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const dp::Resource kExclusive = MakeResource(false);
  static const dp::Resource kReplicated = MakeResource(true);
  const uint8_t bits = data[0];
  dp::Resource resource = (bits & 0x80) ? kReplicated : kExclusive;
  resource.fail_requests_greater_than_one = (bits & 0x40) != 0;

  dp::AllocateOptions options;
  options.device_list_strategies.clear();
  const dp::DeviceListStrategy all[] = {dp::DeviceListStrategy::kEnvvar,
                                        dp::DeviceListStrategy::kVolumeMounts,
                                        dp::DeviceListStrategy::kCdiAnnotations,
                                        dp::DeviceListStrategy::kCdiCri};
  for (int i = 0; i < 4; ++i) {
    if (bits & (1 << i)) options.device_list_strategies.push_back(all[i]);
  }
  if (options.device_list_strategies.empty()) {
    options.device_list_strategies.push_back(dp::DeviceListStrategy::kEnvvar);
  }
  options.device_id_strategy =
      (bits & 0x10) ? dp::DeviceIdStrategy::kIndex : dp::DeviceIdStrategy::kUuid;
  options.pass_device_specs = (bits & 0x20) != 0;
  options.mig_cap_minors = {{"gpu1/gi2/access", 21}, {"gpu1/gi2/ci0/access", 22}};

  std::vector<std::string> ids;
  std::string cur;
  for (size_t i = 1; i < size; ++i) {
    if (data[i] == '\n') {
      ids.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  if (size > 1) ids.push_back(cur);

  // Client bytes reach a message only escaped and cut (common/printable.h).
  const auto check_message = [](const std::string& m) {
    if (m.empty() || m.size() > 2048) std::abort();
    for (char c : m) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) std::abort();
    }
  };
  v1beta1::AllocateRequest req;
  auto* creq = req.add_container_requests();
  for (const auto& id : ids) creq->add_devices_ids(id);
  if (danqing::Status st = dp::CheckAllocateRequest(req); !st.ok()) check_message(st.message());

  auto resp = dp::BuildContainerResponse(resource, ids, options);
  if (!resp.ok()) {
    check_message(resp.status().message());
    return 0;
  }
  if (ids.empty()) std::abort();
  std::set<std::string> targets;
  for (const auto& id : ids) {
    const dp::Device* d = resource.Find(id);
    if (d == nullptr || !d->healthy) std::abort();
    targets.insert(options.device_id_strategy == dp::DeviceIdStrategy::kIndex ? d->index
                                                                             : d->device_uuid);
  }
  if (resource.fail_requests_greater_than_one && ids.size() > 1) std::abort();
  const auto& envs = resp->envs();
  auto it = envs.find(std::string(dp::kVisibleDevicesEnv));
  bool want_env = false, want_mounts = false;
  for (auto s : options.device_list_strategies) {
    want_env |= s == dp::DeviceListStrategy::kEnvvar;
    want_mounts |= s == dp::DeviceListStrategy::kVolumeMounts;
  }
  if (want_mounts) {
    // NVIDIA's convention: the variable points at the mount directory, and
    // there is one mount per device, named by the device.
    if (it == envs.end() || it->second != dp::kVolumeMountDir) std::abort();
    std::set<std::string> mounted;
    for (const auto& m : resp->mounts()) {
      mounted.insert(m.container_path().substr(dp::kVolumeMountDir.size() + 1));
    }
    if (mounted != targets || static_cast<size_t>(resp->mounts_size()) != targets.size()) {
      std::abort();
    }
  } else if (want_env) {
    if (it == envs.end()) std::abort();
    std::set<std::string> listed;
    size_t count = 0, start = 0;
    const std::string& v = it->second;
    while (start <= v.size()) {
      size_t comma = v.find(',', start);
      if (comma == std::string::npos) comma = v.size();
      listed.insert(v.substr(start, comma - start));
      ++count;
      start = comma + 1;
    }
    if (listed != targets || count != targets.size()) std::abort();
  }
  return 0;
}
