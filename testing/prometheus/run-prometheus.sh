#!/usr/bin/env bash
# Runs a real Prometheus (Debian's `prometheus` package) in the foreground for
# tests and local checks: loopback only, everything under DIR.
#
#   testing/prometheus/run-prometheus.sh DIR TARGET [PORT] [INTERVAL]
#
# DIR       a directory it may write to (config, TSDB)
# TARGET    host:port of the /metrics endpoint to scrape (job "danqing")
# PORT      port to listen on on 127.0.0.1; default 0: a free one, chosen by
#           the kernel as Prometheus binds it (no probe another process could
#           race), which Prometheus logs as
#             msg="Listening on" address=127.0.0.1:PORT
# INTERVAL  scrape interval; default 1s
#
# Writes DIR/prometheus.yml, then execs prometheus (so killing this process
# stops Prometheus). Query it at http://127.0.0.1:PORT/api/v1/query?query=...
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 DIR TARGET [PORT] [INTERVAL]" >&2
  exit 2
fi
dir=$1
target=$2
port=${3:-0}
interval=${4:-1s}
bin=${PROMETHEUS_BIN:-prometheus}
command -v "$bin" >/dev/null || { echo "$0: $bin not found (apt-get install prometheus)" >&2; exit 3; }
mkdir -p "$dir/data"

cat > "$dir/prometheus.yml" <<YAML
global:
  scrape_interval: $interval
  scrape_timeout: $interval
  evaluation_interval: $interval
scrape_configs:
  - job_name: danqing
    static_configs:
      - targets: ['$target']
YAML

exec "$bin" \
  --config.file="$dir/prometheus.yml" \
  --storage.tsdb.path="$dir/data" \
  --web.listen-address="127.0.0.1:$port" \
  --log.level=info
