#include "metrics/agent_metrics.h"

#ifndef DANQING_VERSION
#define DANQING_VERSION "unknown"
#endif

namespace danqing::metrics {

std::string BuildVersion() {
  return DANQING_VERSION;
}

AgentMetricFamilies& AgentMetrics() {
  static AgentMetricFamilies* families = [] {
    Registry& r = DefaultRegistry();
    auto* f = new AgentMetricFamilies{
        r.AddInfo("danqing_build", "Build of the node agent (always 1).", {"version"}),
        r.AddCounter("danqing_plugin_registrations",
                     "Successful Register calls to the kubelet, by resource.", {"resource"}),
        r.AddCounter("danqing_plugin_registration_failures",
                     "Register calls to the kubelet that failed, by resource.", {"resource"}),
        r.AddHistogram("danqing_plugin_allocate_duration_seconds",
                       "Time to answer the kubelet's Allocate, by resource.", {"resource"},
                       LatencyBuckets(), "seconds"),
        r.AddCounter("danqing_plugin_allocate_errors",
                     "Allocate calls refused (unknown or unhealthy device, ...), by resource.",
                     {"resource"}),
        r.AddHistogram("danqing_plugin_preferred_allocation_duration_seconds",
                       "Time to answer the kubelet's GetPreferredAllocation, by resource.",
                       {"resource"}, LatencyBuckets(), "seconds"),
        r.AddCounter("danqing_config_reloads", "Configuration reloads, by result (ok, failed).",
                     {"result"}),
        r.AddCounter("danqing_nvml_errors",
                     "NVML calls that failed (other than NOT_SUPPORTED), by Danqing status code.",
                     {"code"}),
        r.AddHistogram("danqing_health_event_publish_duration_seconds",
                       "Time from an NVML event that changed a device's health leaving NVML to the "
                       "new device list being handed to every ListAndWatch stream.",
                       {}, LatencyBuckets(), "seconds"),
    };
    f->build_info.WithLabels({BuildVersion()}).Set(1);
    return f;
  }();
  return *families;
}

}  // namespace danqing::metrics
