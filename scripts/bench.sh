#!/usr/bin/env bash
# `make bench`: runs the benchmarks under bench/ on the fake NVML node profiles.
# Results are recorded by hand, with the machine, in docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
build/default/bench/inventory_bench --benchmark_min_time=0.5 "$@"
build/default/bench/allocator_bench --benchmark_min_time=0.5
build/default/bench/plugin_bench
build/default/bench/health_bench
build/default/bench/render_bench --benchmark_min_time=2
build/default/bench/render_gpu_bench --renders 8   # issue 11: GPU rows only where a CUDA device is visible
# The service under load (wrk) at 1x, 2x, 4x saturation; see bench/load/run.sh.
bench/load/run.sh
build/default/bench/metrics_bench --benchmark_min_time=0.5
