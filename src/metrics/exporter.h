// Exporter: the node agent's /metrics endpoint.
//
// A collector thread runs Collector::Collect() every `interval` (1 s by
// default) and keeps the newest snapshot; each scrape renders that snapshot
// (cached per format until the next collection) plus the exporter's own
// registry and DefaultRegistry() (the agent's counters). A scrape never
// touches NVML or the kubelet, so it stays cheap however often Prometheus
// comes. The format follows the Accept header: Prometheus text 0.0.4, or
// OpenMetrics 1.0 when asked for.
//
// Wiring (the agent):
//   metrics::Sources src;
//   src.inventory = [&] { return agent.inventory(); };
//   src.read_sensors = [&](const std::string& u) { return backend.ReadSensors(u); };
//   src.health = [&] { return monitor.DeviceHealths(); };
//   auto exp = metrics::Exporter::Start({.listen = cfg.danqing.metrics_addr, ...}, src);
//
// Thread-safety: Start/Stop from one thread; port(), registry(), Render()
// and CollectNow() from any thread. The Sources callbacks run on the thread
// calling Start() (the first collection, before Start returns) and then only
// on the collector thread, never two at once.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"
#include "metrics/collector.h"
#include "metrics/registry.h"

namespace danqing::http {
class BoundedServer;
}

namespace danqing::metrics {

struct ExporterOptions {
  // "[host]:port"; ":9400" listens on every address, "127.0.0.1:0" on a free
  // loopback port (see port()).
  std::string listen = ":9400";
  std::chrono::milliseconds interval{1000};
  CollectorOptions collector;
  // GET /readyz answers 200 while this returns true (empty: always), else
  // 503. GET /healthz answers 200 while the server runs.
  std::function<bool()> ready;
};

// Splits "[host]:port" / "host:port" / ":port". INVALID_ARGUMENT when malformed.
Result<std::pair<std::string, int>> ParseListenAddress(const std::string& addr);

class Exporter {
 public:
  // Collects once, then listens and starts the collector thread.
  // INVALID_ARGUMENT for a bad address, UNAVAILABLE when it cannot listen.
  static Result<std::unique_ptr<Exporter>> Start(ExporterOptions options, Sources sources);
  ~Exporter();  // Stop()
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  // Stops serving and collecting. Idempotent.
  void Stop();

  int port() const { return port_; }
  // The exporter's own metrics (collections, scrapes, pod resources errors).
  Registry& registry() { return registry_; }

  // The body of a scrape in `format`.
  std::string Render(Format format);

  // Runs a collection on the collector thread now and waits for it (tests,
  // or right after a reload). OK once a collection newer than the call has
  // finished; UNAVAILABLE after Stop().
  Status CollectNow();

 private:
  Exporter(ExporterOptions options, Sources sources);
  void Loop();

  ExporterOptions options_;
  Registry registry_;  // before collector_: the collector registers into it
  Collector collector_;
  Family<Counter>* scrapes_ = nullptr;
  int port_ = 0;
  std::unique_ptr<http::BoundedServer> server_;
  std::thread http_thread_;
  std::atomic<bool> http_done_{false};
  std::thread collect_thread_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                 // guarded by mu_
  uint64_t requested_ = 0;                // guarded by mu_: CollectNow requests
  uint64_t completed_ = 0;                // guarded by mu_: collections finished
  std::shared_ptr<const Snapshot> snap_;  // guarded by mu_
  // Rendered snapshot per format, for snap_->generation; guarded by mu_.
  std::string cached_[2];
  uint64_t cached_generation_[2] = {0, 0};
};

}  // namespace danqing::metrics
