// The CDI spec of one prepared claim: <cdi_root>/<vendor>-<class>_<claim uid>.json,
// kind "<driver>/claim", one CDI device per allocated device named
// "<claim uid>-<device>" (so the CDI ID is "gpu.danqing.io/claim=<uid>-gpu-0")
// with its device nodes, and the spec-wide edits of the device plugin's CDI
// mode: the driver's control nodes and its files (cdi_driver.h). The
// PreparedClaim rides along in the spec's annotations, from which a lost
// checkpoint is rebuilt (ReadClaimSpecs).
//
// Thread-safety: pure functions over the file system; different claims may
// be written at once.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "deviceplugin/allocate.h"
#include "deviceplugin/cdi_driver.h"
#include "dra/checkpoint.h"
#include "dra/node_devices.h"
#include "dra/prepared.h"

namespace danqing::dra {

inline constexpr std::string_view kPreparedClaimAnnotation = "gpu.danqing.io/prepared-claim";

struct ClaimCdiOptions {
  std::string cdi_root = "/var/run/cdi";
  std::string kind;  // "<driver>/claim"
  std::string dev_root = "/";
  deviceplugin::MigCapMinors mig_cap_minors;
  deviceplugin::DriverFiles driver_files;  // found once (FindDriverFiles); empty: none
};

// "<uid>-<device>".
std::string CdiDeviceName(const std::string& claim_uid, const std::string& device);
// "<kind>=<uid>-<device>".
std::string CdiId(const std::string& kind, const std::string& claim_uid, const std::string& device);
// <cdi_root>/<vendor>-<class>_<uid>.json
std::string ClaimSpecPath(const ClaimCdiOptions& options, const std::string& claim_uid);

// Writes the spec of `claim`; `devices[i]` is the node device of
// claim.devices[i]. INVALID_ARGUMENT for a kind that is not vendor/class;
// UNAVAILABLE when the file cannot be written.
Status WriteClaimSpec(const ClaimCdiOptions& options, const PreparedClaim& claim,
                      const std::vector<const NodeDevice*>& devices, const FileWriter& writer);

// Removes the spec of claim `uid`; OK when there is none.
Status RemoveClaimSpec(const ClaimCdiOptions& options, const std::string& claim_uid);

// The PreparedClaims found in the claim specs of options.kind under
// cdi_root, by UID; specs that do not parse are listed in `skipped`.
std::map<std::string, PreparedClaim> ReadClaimSpecs(const ClaimCdiOptions& options,
                                                    std::vector<std::string>* skipped);

}  // namespace danqing::dra
