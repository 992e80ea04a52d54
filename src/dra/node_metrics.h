// The DRA node side's metrics, registered in metrics::DefaultRegistry() on
// first use (names in docs/metrics.md):
//   danqing_dra_prepare_duration_seconds     histogram, per claim (claim read included)
//   danqing_dra_unprepare_duration_seconds   histogram, per claim
//   danqing_dra_prepare_errors_total         claims answered with an error
//   danqing_dra_unprepare_errors_total
//   danqing_dra_checkpoint_corrupt_total     corrupt checkpoints found at start (rebuilt)
//   danqing_dra_prepared_claims              gauge: claims prepared on this node now
//   danqing_dra_registration_notices_total{result="registered|refused"}
//   danqing_dra_split_reload_refused_total{held_by="dra|device-plugin|unknown"}
//                                            split reloads refused: a moving GPU in use
//   danqing_dra_split_moves_total{to="dra|device-plugin"}  GPUs moved by split reloads
//
// Thread-safety: safe from any thread.
#pragma once

#include "metrics/registry.h"

namespace danqing::dra {

struct NodeMetricFamilies {
  metrics::Family<metrics::Histogram>& prepare_seconds;
  metrics::Family<metrics::Histogram>& unprepare_seconds;
  metrics::Family<metrics::Counter>& prepare_errors;
  metrics::Family<metrics::Counter>& unprepare_errors;
  metrics::Family<metrics::Counter>& checkpoint_corrupt;
  metrics::Family<metrics::Counter>& registration_notices;
  metrics::Family<metrics::Counter>& split_reload_refused;
  metrics::Family<metrics::Counter>& split_moves;
  metrics::Family<metrics::Gauge>& prepared_claims;
};

NodeMetricFamilies& NodeMetrics();

}  // namespace danqing::dra
