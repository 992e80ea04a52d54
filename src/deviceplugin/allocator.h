// PreferredAllocator: answers the kubelet's GetPreferredAllocation.
//
// Given the devices the kubelet may use (`available`), those it has already
// chosen (`must_include`) and the container's full request (`size`), it picks
// the best set:
//   1. as many NVLink lanes as possible between the chosen GPUs;
//   2. then the nearest PCIe paths between them (same switch > several
//      switches > same host bridge > same NUMA node > across sockets);
//   3. then, among equally good sets, the one that leaves the remaining free
//      GPUs best connected for later requests;
//   4. then the lowest device positions, so the answer is deterministic.
// Several devices may live on one GPU (time-slicing replicas "<uuid>::<n>",
// MIG devices). Where they go is the ReplicaPolicy:
//   kDistributed (the default): a request larger than one spreads over
//     distinct GPUs when it can, the GPUs with the most free devices (the
//     least loaded) first, as NVIDIA's distributed allocation does; criteria
//     1-4 choose only among GPUs with equal free counts. Extra devices then
//     go to the GPUs with the most free devices left. This spreads
//     time-sliced load; with one device per GPU, or all GPUs equally free,
//     the topology alone decides.
//   kPacked: fill one GPU before using the next. The request takes devices
//     from the GPU with the fewest free devices that still has any, all of
//     them, then continues on the next such GPU, until it is satisfied. Among
//     GPUs with equal free counts, criteria 1-4 choose which GPUs are emptied
//     (together with the must_include GPUs and those already emptied), and
//     then which one gives the last, partial share. This keeps whole GPUs
//     free for large requests.
// With one device per GPU (whole-GPU resources) both policies give the same
// answers. must_include devices are always returned and are not moved; under
// kPacked their GPUs are filled like any other, by free count.
//
// It works only from the topology cached at construction (no NVML calls) and
// never fails: unknown IDs in `available` are ignored, unknown `must_include`
// IDs are kept (the kubelet requires them), and when fewer than `size`
// devices are usable it returns what there is (the kubelet fills the rest).
//
// Thread-safety: immutable after construction; Choose() may run concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gpu/types.h"

namespace danqing::deviceplugin {

// A device the kubelet can hand out: its advertised ID and the GPU it lives on
// (a position in the Topology the allocator was given).
struct AllocatableDevice {
  std::string id;
  int gpu = -1;
};

// How devices that share a GPU are handed out (see above).
enum class ReplicaPolicy {
  kDistributed,  // spread over distinct GPUs, the GPUs with most free first
  kPacked,       // fill the GPUs with the fewest free devices first
};

class PreferredAllocator {
 public:
  PreferredAllocator(gpu::Topology topology, std::vector<AllocatableDevice> devices,
                     ReplicaPolicy policy = ReplicaPolicy::kDistributed);

  ReplicaPolicy policy() const { return policy_; }

  // Returns up to `size` IDs (all of `must_include` first, then the chosen
  // ones, in device order), each from `available` or `must_include`.
  std::vector<std::string> Choose(const std::vector<std::string>& available,
                                  const std::vector<std::string>& must_include, int size) const;

 private:
  struct Impl;  // the per-call search, defined in allocator.cc

  // How many devices to take from each entity (`take`, all zero on entry),
  // given the free devices per entity, the entities holding must_include
  // devices, the entities with a free device (`avail`, ascending) and the
  // number still wanted (less than the free total). One per ReplicaPolicy.
  void TakeDistributed(const std::vector<int64_t>& free, const std::vector<char>& has_must,
                       const std::vector<int>& avail, const std::vector<int>& must_es,
                       int64_t wanted, std::vector<int64_t>& take) const;
  void TakePacked(const std::vector<int64_t>& free, const std::vector<char>& has_must,
                  const std::vector<int>& avail, const std::vector<int>& must_es, int64_t wanted,
                  std::vector<int64_t>& take) const;

  gpu::Topology topology_;
  std::vector<AllocatableDevice> devices_;
  ReplicaPolicy policy_ = ReplicaPolicy::kDistributed;
  // topology_.size()² pair scores, higher is better:
  //   nvlinks * pcie_scale_ + PCIe score (0..6).
  // pcie_scale_ exceeds any sum of PCIe scores over a set of pairs, so a sum
  // of pair scores compares exactly as (total lanes, total PCIe score).
  std::vector<int64_t> pair_score_;
  int64_t pcie_scale_ = 1;
  std::vector<std::pair<std::string, int>> index_;  // sorted (id, device position)
  // An "entity" is one physical GPU as far as the allocator knows: all devices
  // with the same non-negative `gpu` share one; each device with gpu < 0 is its
  // own. Entities are numbered by their first device in devices_, which is the
  // order "lowest positions" breaks ties in.
  std::vector<int> entity_of_;   // device position → entity
  std::vector<int> entity_gpu_;  // entity → topology position, -1 when unconnected
};

}  // namespace danqing::deviceplugin
