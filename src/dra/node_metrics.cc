#include "dra/node_metrics.h"

namespace danqing::dra {

NodeMetricFamilies& NodeMetrics() {
  static NodeMetricFamilies* families = [] {
    metrics::Registry& r = metrics::DefaultRegistry();
    return new NodeMetricFamilies{
        r.AddHistogram(
            "danqing_dra_prepare_duration_seconds",
            "Time to prepare one claim in NodePrepareResources (the claim read included).", {},
            metrics::LatencyBuckets(), "seconds"),
        r.AddHistogram("danqing_dra_unprepare_duration_seconds",
                       "Time to unprepare one claim in NodeUnprepareResources.", {},
                       metrics::LatencyBuckets(), "seconds"),
        r.AddCounter("danqing_dra_prepare_errors",
                     "Claims NodePrepareResources answered with an error.", {}),
        r.AddCounter("danqing_dra_unprepare_errors",
                     "Claims NodeUnprepareResources answered with an error.", {}),
        r.AddCounter(
            "danqing_dra_checkpoint_corrupt",
            "Corrupt or truncated prepared-claims checkpoints found at start (each rebuilt).", {}),
        r.AddCounter(
            "danqing_dra_registration_notices",
            "The kubelet's NotifyRegistrationStatus answers, by result (registered, refused).",
            {"result"}),
        r.AddCounter("danqing_dra_split_reload_refused",
                     "Split reloads refused because a GPU draGpus would move was in use on the "
                     "side it would leave, by holder (dra, device-plugin, unknown).",
                     {"held_by"}),
        r.AddCounter("danqing_dra_split_moves",
                     "GPUs moved between the device plugin and DRA by split reloads, by the side "
                     "they moved to.",
                     {"to"}),
        r.AddGauge("danqing_dra_prepared_claims",
                   "ResourceClaims prepared on this node now (in the checkpoint).", {}),
    };
  }();
  return *families;
}

}  // namespace danqing::dra
