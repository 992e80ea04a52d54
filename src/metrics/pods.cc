#include "metrics/pods.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "common/printable.h"
#include "common/read_file.h"
#include "podresources/v1/api.grpc.pb.h"

namespace danqing::metrics {

namespace {

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// "8dd4b4c9-3b6e-4d0e-9c62-9b1b3b1a2f10" (systemd writes '_' for '-').
std::optional<std::string> AsUid(std::string_view s) {
  if (s.size() != 36) return std::nullopt;
  std::string out(s);
  for (size_t i = 0; i < out.size(); ++i) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (out[i] != '-' && out[i] != '_') return std::nullopt;
      out[i] = '-';
    } else if (!IsHex(out[i])) {
      return std::nullopt;
    } else {
      out[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(out[i])));
    }
  }
  return out;
}

// The pod UID in one path segment: "pod<uid>" (cgroupfs) or
// "...-pod<uid>.slice" (systemd).
std::optional<std::string> PodUidOfSegment(std::string_view seg) {
  if (seg.size() > 6 && seg.substr(seg.size() - 6) == ".slice") {
    seg.remove_suffix(6);
    size_t at = seg.rfind("-pod");
    if (at == std::string_view::npos) return std::nullopt;
    return AsUid(seg.substr(at + 4));
  }
  if (seg.substr(0, 3) == "pod") return AsUid(seg.substr(3));
  return std::nullopt;
}

// The container ID in the segment after the pod's: "<64 hex>" (cgroupfs),
// "cri-containerd-<id>.scope", "crio-<id>.scope", "docker-<id>.scope".
std::string ContainerIdOfSegment(std::string_view seg) {
  if (seg.size() > 6 && seg.substr(seg.size() - 6) == ".scope") {
    seg.remove_suffix(6);
    if (seg.find("conmon") != std::string_view::npos) return "";
    size_t dash = seg.rfind('-');
    if (dash != std::string_view::npos) seg = seg.substr(dash + 1);
  } else if (size_t colon = seg.rfind(':'); colon != std::string_view::npos) {
    seg = seg.substr(colon + 1);  // "cri-containerd:<id>" style (systemd driver, cgroupfs path)
  }
  if (seg.size() != 64 || !std::all_of(seg.begin(), seg.end(), IsHex)) return "";
  return std::string(seg);
}

}  // namespace

std::optional<CgroupIdentity> ParseCgroup(std::string_view text) {
  std::optional<CgroupIdentity> best;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    // hierarchy-ID:controller-list:path
    size_t c1 = line.find(':');
    if (c1 == std::string_view::npos) continue;
    size_t c2 = line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    std::string_view path = line.substr(c2 + 1);
    if (path.find("kubepods") == std::string_view::npos) continue;
    std::vector<std::string_view> segs;
    while (!path.empty()) {
      size_t slash = path.find('/');
      std::string_view seg = path.substr(0, slash);
      if (!seg.empty()) segs.push_back(seg);
      path = slash == std::string_view::npos ? std::string_view() : path.substr(slash + 1);
    }
    for (size_t i = 0; i < segs.size(); ++i) {
      auto uid = PodUidOfSegment(segs[i]);
      if (!uid) continue;
      CgroupIdentity id{*uid, i + 1 < segs.size() ? ContainerIdOfSegment(segs[i + 1]) : ""};
      if (!best || (best->container_id.empty() && !id.container_id.empty())) best = id;
      break;
    }
  }
  return best;
}

Result<std::optional<CgroupIdentity>> ReadProcessCgroup(const std::string& proc_root,
                                                        uint32_t pid) {
  std::string path = proc_root + "/" + std::to_string(pid) + "/cgroup";
  const auto text = ReadTextFile(path);
  if (!text) return NotFound("cannot read " + path);
  return ParseCgroup(*text);
}

std::string DeviceUuidOf(std::string_view device_id) {
  size_t sep = device_id.find("::");
  return std::string(device_id.substr(0, sep));
}

HolderMap HoldersFrom(const v1::ListPodResourcesResponse& list, std::string_view resource_prefix,
                      const DraDevices* dra) {
  HolderMap out;
  for (const auto& pod : list.pod_resources()) {
    for (const auto& c : pod.containers()) {
      if (dra != nullptr) {
        for (const auto& claim : c.dynamic_resources()) {
          for (const auto& r : claim.claim_resources()) {
            if (r.driver_name() != dra->driver || r.pool_name() != dra->pool) continue;
            const auto it = dra->uuid_by_device.find(r.device_name());
            if (it == dra->uuid_by_device.end()) continue;
            std::string id = r.pool_name() + "/" + r.device_name();
            if (r.has_share_id()) id += "/" + r.share_id();
            out[it->second].push_back({{pod.namespace_(), pod.name(), c.name()}, dra->driver, id});
          }
        }
      }
      for (const auto& dev : c.devices()) {
        if (dev.resource_name().rfind(resource_prefix, 0) != 0) continue;
        for (const auto& id : dev.device_ids()) {
          out[DeviceUuidOf(id)].push_back(
              {{pod.namespace_(), pod.name(), c.name()}, dev.resource_name(), id});
        }
      }
    }
  }
  return out;
}

std::map<std::string, int> AllocatableFrom(const v1::AllocatableResourcesResponse& resp,
                                           std::string_view resource_prefix) {
  std::map<std::string, int> out;
  for (const auto& dev : resp.devices()) {
    if (dev.resource_name().rfind(resource_prefix, 0) != 0) continue;
    for (const auto& id : dev.device_ids()) out[DeviceUuidOf(id)]++;
  }
  return out;
}

Result<std::vector<CheckpointEntry>> ParseCheckpoint(std::string_view text) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("checkpoint is not a JSON object");
  auto data = j.find("Data");
  if (data == j.end() || !data->is_object())
    return InvalidArgument("checkpoint has no Data object");
  std::vector<CheckpointEntry> out;
  auto entries = data->find("PodDeviceEntries");
  if (entries == data->end() || entries->is_null()) return out;
  if (!entries->is_array())
    return InvalidArgument("checkpoint Data.PodDeviceEntries is not a list");
  for (const auto& e : *entries) {
    if (!e.is_object()) return InvalidArgument("checkpoint entry is not an object");
    CheckpointEntry ce;
    auto str = [&e](const char* key) {
      auto it = e.find(key);
      return it != e.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    ce.pod_uid = str("PodUID");
    ce.container = str("ContainerName");
    ce.resource = str("ResourceName");
    auto ids = e.find("DeviceIDs");
    auto add = [&ce](const nlohmann::json& list) {
      if (!list.is_array()) return;
      for (const auto& id : list) {
        if (id.is_string()) ce.device_ids.push_back(id.get<std::string>());
      }
    };
    if (ids != e.end()) {
      if (ids->is_array()) {
        add(*ids);
      } else if (ids->is_object()) {
        for (const auto& [numa, list] : ids->items()) add(list);
      }
    }
    if (ce.pod_uid.empty()) return InvalidArgument("checkpoint entry without PodUID");
    out.push_back(std::move(ce));
  }
  return out;
}

std::map<std::string, PodByUid> JoinCheckpoint(const std::vector<CheckpointEntry>& entries,
                                               const HolderMap& holders) {
  // (resource, device ID) → holder
  std::map<std::pair<std::string, std::string>, const DeviceHolder*> by_id;
  for (const auto& [uuid, list] : holders) {
    for (const auto& h : list) by_id[{h.resource, h.device_id}] = &h;
  }
  std::map<std::string, PodByUid> out;
  for (const auto& e : entries) {
    for (const auto& id : e.device_ids) {
      auto it = by_id.find({e.resource, id});
      if (it == by_id.end()) continue;
      PodByUid& p = out[e.pod_uid];
      p.ns = it->second->ref.ns;
      p.pod = it->second->ref.pod;
      auto& uuids = p.containers[e.container];
      std::string uuid = DeviceUuidOf(id);
      if (std::find(uuids.begin(), uuids.end(), uuid) == uuids.end()) uuids.push_back(uuid);
    }
  }
  return out;
}

class PodResourcesClient::Impl {
 public:
  Impl(std::string socket, std::chrono::milliseconds deadline)
      : socket_(std::move(socket)), deadline_(deadline) {}

  template <typename Req, typename Resp, typename Call>
  Result<std::shared_ptr<Resp>> Do(Call call) {
    struct stat st {};
    if (::stat(socket_.c_str(), &st) != 0) {
      stub_.reset();  // a recreated socket (kubelet restart) gets a fresh channel
      return NotFound("pod resources socket " + socket_ + " does not exist");
    }
    if (!stub_) {
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_MINIMAL_STACK, 1);
      stub_ = v1::PodResourcesLister::NewStub(
          grpc::CreateCustomChannel("unix:" + socket_, grpc::InsecureChannelCredentials(), args));
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + deadline_);
    Req req;
    auto resp = std::make_shared<Resp>();
    grpc::Status s = call(*stub_, &ctx, req, resp.get());
    if (s.ok()) return resp;
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
      stub_.reset();
      return Unavailable("pod resources socket " + socket_ + ": " + Printable(s.error_message()));
    }
    if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      return Status(StatusCode::kDeadlineExceeded, "pod resources socket " + socket_ +
                                                       ": no answer within " +
                                                       std::to_string(deadline_.count()) + " ms");
    }
    return Internal("pod resources socket " + socket_ + ": " + Printable(s.error_message()));
  }

  std::string socket_;
  std::chrono::milliseconds deadline_;
  std::unique_ptr<v1::PodResourcesLister::Stub> stub_;
};

PodResourcesClient::PodResourcesClient(std::string socket_path, std::chrono::milliseconds deadline)
    : impl_(std::make_unique<Impl>(std::move(socket_path), deadline)) {}

PodResourcesClient::~PodResourcesClient() = default;

Result<std::shared_ptr<v1::ListPodResourcesResponse>> PodResourcesClient::List() {
  return impl_->Do<v1::ListPodResourcesRequest, v1::ListPodResourcesResponse>(
      [](auto& stub, auto* ctx, const auto& req, auto* resp) { return stub.List(ctx, req, resp); });
}

Result<std::shared_ptr<v1::AllocatableResourcesResponse>> PodResourcesClient::GetAllocatable() {
  return impl_->Do<v1::AllocatableResourcesRequest, v1::AllocatableResourcesResponse>(
      [](auto& stub, auto* ctx, const auto& req, auto* resp) {
        return stub.GetAllocatableResources(ctx, req, resp);
      });
}

}  // namespace danqing::metrics
