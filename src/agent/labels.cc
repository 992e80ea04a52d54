#include "agent/labels.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "common/atomic_file.h"

namespace danqing::agent {

std::string LabelValue(std::string_view raw) {
  std::string out;
  for (char c : raw) {
    const auto u = static_cast<unsigned char>(c);
    out += (std::isalnum(u) || c == '.' || c == '_' || c == '-') ? c : '-';
  }
  if (out.size() > 63) out.resize(63);
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  while (!out.empty() && !alnum(out.back())) out.pop_back();
  size_t start = 0;
  while (start < out.size() && !alnum(out[start])) ++start;
  return out.substr(start);
}

Labels NodeLabels(const gpu::NodeInventory& inv, const deviceplugin::ResourceSet& set,
                  const config::Config& cfg) {
  Labels l;
  l["nvidia.com/gpu.count"] = std::to_string(inv.gpus.size());
  l["nvidia.com/mig.strategy"] = std::string(config::Name(cfg.flags.mig_strategy));
  std::string sharing = "none";
  if (cfg.sharing.time_slicing) sharing = "time-slicing";
  l["nvidia.com/gpu.sharing-strategy"] = sharing;
  int replicas = 1;
  if (const auto* r = set.Find(deviceplugin::kDefaultResource)) replicas = r->replicas;
  for (const auto& r : set.resources) replicas = std::max(replicas, r.replicas);
  l["nvidia.com/gpu.replicas"] = std::to_string(replicas);
  if (!inv.gpus.empty()) {
    const gpu::Gpu& g = inv.gpus.front();
    l["nvidia.com/gpu.product"] = LabelValue(g.name);
    l["nvidia.com/gpu.memory"] = std::to_string(g.memory_bytes / (1024 * 1024));
    std::string family = g.architecture;
    std::transform(family.begin(), family.end(), family.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    l["nvidia.com/gpu.family"] = LabelValue(family);
    l["nvidia.com/gpu.compute.major"] = std::to_string(g.cuda_major);
    l["nvidia.com/gpu.compute.minor"] = std::to_string(g.cuda_minor);
    const bool capable = std::any_of(inv.gpus.begin(), inv.gpus.end(), [](const gpu::Gpu& x) {
      return x.mig_mode != gpu::MigMode::kUnsupported;
    });
    l["nvidia.com/mig.capable"] = capable ? "true" : "false";
  }
  if (!inv.driver_version.empty()) {
    l["nvidia.com/cuda.driver-version.full"] = LabelValue(inv.driver_version);
    std::string parts[3];
    size_t i = 0;
    for (char c : inv.driver_version) {
      if (c == '.') {
        if (++i == 3) break;
      } else {
        parts[i] += c;
      }
    }
    if (!parts[0].empty()) l["nvidia.com/cuda.driver-version.major"] = LabelValue(parts[0]);
    if (!parts[1].empty()) l["nvidia.com/cuda.driver-version.minor"] = LabelValue(parts[1]);
    if (!parts[2].empty()) l["nvidia.com/cuda.driver-version.revision"] = LabelValue(parts[2]);
  }
  if (inv.cuda_driver_version > 0) {
    const int major = inv.cuda_driver_version / 1000;
    const int minor = (inv.cuda_driver_version % 1000) / 10;
    l["nvidia.com/cuda.runtime-version.major"] = std::to_string(major);
    l["nvidia.com/cuda.runtime-version.minor"] = std::to_string(minor);
    l["nvidia.com/cuda.runtime-version.full"] = std::to_string(major) + "." + std::to_string(minor);
  }
  return l;
}

Status WriteFeatureFile(const std::string& path, const Labels& labels) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  std::error_code ec;
  if (!fs::is_directory(p.parent_path(), ec)) {
    return Unavailable("node feature directory " + p.parent_path().string() +
                       " does not exist (is node-feature-discovery installed?)");
  }
  std::string body;
  for (const auto& [k, v] : labels) body += k + '=' + v + '\n';
  return WriteFileAtomically(path, body);
}

}  // namespace danqing::agent
