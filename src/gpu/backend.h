// GpuBackend: the one interface through which Danqing reads a node's GPUs.
//
// NvmlBackend (nvml_backend.h) implements it over libnvidia-ml.so.1; tests of
// higher layers may pass any other implementation. Errors are values with
// context; a failure of one device never fails calls about the others.
//
// Thread-safety: implementations must allow Discover() and ReadSensors() from
// several threads at once, and an EventStream to be waited on by one thread
// while others call the backend.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "gpu/types.h"

namespace danqing::gpu {

// A subscription to device events (XID errors, ECC errors, MIG changes).
class EventStream {
 public:
  virtual ~EventStream() = default;

  // Blocks up to `timeout` for the next event. OK with nullopt: no event
  // arrived in time. Non-OK: the stream is broken (e.g. the library failed).
  virtual Result<std::optional<GpuEvent>> Wait(std::chrono::milliseconds timeout) = 0;

  // Devices that could not be subscribed (lost, or events unsupported).
  virtual const std::vector<DeviceError>& errors() const = 0;

  // Tries again to subscribe the devices in errors() whose failure may pass
  // (a GPU lost at subscription that answers again); not those whose events
  // are unsupported. Those subscribed now leave errors(). Returns how many.
  // Call it on the thread that calls Wait.
  virtual size_t RetryErrors() = 0;
};

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;

  // Enumerates GPUs, MIG devices and the topology between GPUs. Devices that
  // cannot be read are listed in NodeInventory::errors; the call itself fails
  // only when nothing can be enumerated (e.g. the device count is unreadable).
  virtual Result<NodeInventory> Discover() = 0;

  // Reads the sensors of a GPU or MIG device by UUID. NOT_FOUND for an
  // unknown UUID, DEVICE_LOST when the device fell off the bus; otherwise OK
  // with unsupported fields absent and other failed reads in `failures`.
  virtual Result<Sensors> ReadSensors(const std::string& uuid) = 0;

  // Subscribes to events of the given GPUs (all GPUs when empty).
  virtual Result<std::unique_ptr<EventStream>> WatchEvents(
      const std::vector<std::string>& gpu_uuids) = 0;

  // "NVML 12.550.54.15 from /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
  virtual std::string Describe() const = 0;
};

}  // namespace danqing::gpu
