// The node device of a MIG instance that dynamic MIG (dynamic_mig.h) created
// for a claim, for the claim's CDI spec (claim_cdi.h): the parent GPU's
// /dev/nvidia<minor> and the nvidia-cap nodes of the new GPU and compute
// instance, looked up in /proc/driver/nvidia-caps/mig-minors (which lists
// every possible gi/ci of every GPU, so instances created after the agent
// read it are covered).
//
// Thread-safety: pure function.
#pragma once

#include <cstdint>

#include "dra/dynamic_mig.h"
#include "dra/node_devices.h"

namespace danqing::dra {

// `parent_minor` is used when the instance does not carry its GPU's minor.
NodeDevice DynamicMigNodeDevice(const MigInstance& instance, uint32_t parent_minor);

}  // namespace danqing::dra
