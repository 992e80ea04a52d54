// Node labels for scheduling: the GPU facts operators select on, under the
// label names NVIDIA's GPU feature discovery publishes (nvidia.com/gpu.product,
// nvidia.com/gpu.memory, nvidia.com/mig.capable, ...), written as a
// node-feature-discovery "local" features file (one key=value per line) so
// NFD puts them on the Node object.
//
// Thread-safety: pure functions, except WriteFeatureFile (atomic rename).
#pragma once

#include <map>
#include <string>

#include "common/status.h"
#include "config/config.h"
#include "deviceplugin/resource.h"
#include "gpu/types.h"

namespace danqing::agent {

using Labels = std::map<std::string, std::string>;

// Labels from the inventory (the first GPU stands for the node's model, as in
// GFD), the advertised resources and the configuration.
Labels NodeLabels(const gpu::NodeInventory& inventory, const deviceplugin::ResourceSet& set,
                  const config::Config& cfg);

// A valid Kubernetes label value: [A-Za-z0-9._-], at most 63 characters,
// alphanumeric at both ends ("NVIDIA A100-SXM4-80GB" → "NVIDIA-A100-SXM4-80GB").
std::string LabelValue(std::string_view raw);

// Writes `labels` to `path` atomically (temp + rename). UNAVAILABLE when the
// directory does not exist (NFD not installed) or the write fails.
Status WriteFeatureFile(const std::string& path, const Labels& labels);

}  // namespace danqing::agent
