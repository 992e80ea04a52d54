// The node agent's own metrics, registered in DefaultRegistry() on first use.
//
// The device plugin records registrations and Allocate/GetPreferredAllocation
// latency here; the agent records config reloads, health transitions it does
// not report through the exporter's Sources, and NVML errors. Names and
// meanings are listed in docs/metrics.md.
//
// Thread-safety: AgentMetrics() is safe from any thread; the families are the
// registry's (thread-safe).
#pragma once

#include <string>

#include "metrics/registry.h"

namespace danqing::metrics {

struct AgentMetricFamilies {
  Family<Gauge>& build_info;               // danqing_build_info{version}
  Family<Counter>& registrations;          // danqing_plugin_registrations_total{resource}
  Family<Counter>& registration_failures;  // danqing_plugin_registration_failures_total{resource}
  Family<Histogram>& allocate_seconds;     // danqing_plugin_allocate_duration_seconds{resource}
  Family<Counter>& allocate_errors;        // danqing_plugin_allocate_errors_total{resource}
  Family<Histogram>&
      preferred_seconds;         // danqing_plugin_preferred_allocation_duration_seconds{resource}
  Family<Counter>& reloads;      // danqing_config_reloads_total{result="ok|failed"}
  Family<Counter>& nvml_errors;  // danqing_nvml_errors_total{code}
  Family<Histogram>& health_event_publish_seconds;  // danqing_health_event_publish_duration_seconds
};

// Registers the families in DefaultRegistry() the first time it is called
// (build_info set to 1 with this build's version) and returns them.
AgentMetricFamilies& AgentMetrics();

// The project version compiled in ("0.1.0").
std::string BuildVersion();

}  // namespace danqing::metrics
