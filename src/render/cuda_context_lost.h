// Which CUDA errors leave the context unusable for the rest of the process:
// the ones driver_types.h says need the process "terminated and relaunched",
// plus those that mean the context is gone or corrupted. Include after
// <cuda_runtime.h> (the real one, or the host emulation of testing/cuda-host,
// which makes exactly these errors sticky, as a device does).
#pragma once

#include "render/cuda_backend_ns.h"

namespace danqing::render {
inline namespace DANQING_CUDA_BACKEND_NS {

inline bool CudaContextLost(cudaError_t e) {
  switch (e) {
    // driver_types.h: "the process must be terminated and relaunched".
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorLaunchTimeout:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorTensorMemoryLeak:
    case cudaErrorMpsClientTerminated:
    case cudaErrorContained:
    case cudaErrorExternalDevice:
    // The context is corrupted or gone.
    case cudaErrorECCUncorrectable:
    case cudaErrorContextIsDestroyed:
    case cudaErrorDeviceUninitialized:
    case cudaErrorCudartUnloading:
      return true;
    default:
      return false;
  }
}

}  // namespace DANQING_CUDA_BACKEND_NS
}  // namespace danqing::render
