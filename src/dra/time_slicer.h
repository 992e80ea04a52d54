// NvidiaSmiTimeSlicer: sets a GPU's compute time-slice the way the driver
// offers it, `nvidia-smi compute-policy -i <uuid> --set-timeslice <n>`
// (0 Default, 1 Short, 2 Medium, 3 Long; R455+ drivers), as NVIDIA's own
// DRA driver does: NVML has no public call for it.
//
// nvidia-smi is run from the host's driver root (containerDriverRoot) with
// LD_LIBRARY_PATH naming the directory of its libnvidia-ml, bounded by a
// deadline (killed after it). Results:
//   OK             exit 0
//   NOT_SUPPORTED  no nvidia-smi at the path, or it says "Not Supported"
//                  (the preparer then logs and goes on at the default slice)
//   UNAVAILABLE    any other failure, with nvidia-smi's output
//   DEADLINE_EXCEEDED  it ran past the deadline
//
// Thread-safety: Set may be called from several threads (one process each).
#pragma once

#include <chrono>
#include <string>

#include "dra/claim_preparer.h"

namespace danqing::dra {

class NvidiaSmiTimeSlicer : public TimeSlicer {
 public:
  // `library_dir` empty: LD_LIBRARY_PATH left as it is.
  NvidiaSmiTimeSlicer(std::string nvidia_smi, std::string library_dir,
                      std::chrono::milliseconds deadline = std::chrono::seconds(10));
  Status Set(const std::string& gpu_uuid, TimeSlice slice) override;

 private:
  std::string nvidia_smi_;
  std::string library_dir_;
  std::chrono::milliseconds deadline_;
};

}  // namespace danqing::dra
