#!/usr/bin/env bash
# Runs a real Prometheus (Debian's `prometheus` package) in the foreground for
# tests and local checks: loopback only, a free port, everything under DIR.
#
#   testing/prometheus/run-prometheus.sh DIR TARGET [PORT] [INTERVAL]
#
# DIR       a directory it may write to (config, TSDB, the chosen port)
# TARGET    host:port of the /metrics endpoint to scrape (job "danqing")
# PORT      port to listen on; default: a free one probed on 127.0.0.1,
#           below the ephemeral port range
# INTERVAL  scrape interval; default 1s
#
# Writes DIR/prometheus.yml and, once the port is chosen, DIR/port, then
# execs prometheus (so killing this process stops Prometheus). Query it at
# http://127.0.0.1:$(cat DIR/port)/api/v1/query?query=...
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 DIR TARGET [PORT] [INTERVAL]" >&2
  exit 2
fi
dir=$1
target=$2
port=${3:-}
interval=${4:-1s}
bin=${PROMETHEUS_BIN:-prometheus}
command -v "$bin" >/dev/null || { echo "$0: $bin not found (apt-get install prometheus)" >&2; exit 3; }
mkdir -p "$dir/data"

if [ -z "$port" ]; then
  # A port nobody answers on, outside the kernel's ephemeral range: inside it,
  # the local end of any outgoing connection (a scrape, a test's client) can
  # hold the port a moment later, and Prometheus then fails to bind. Whoever
  # starts this should still retry on "address already in use".
  read -r eph_lo eph_hi < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null ||
    { eph_lo=32768; eph_hi=60999; }
  if [ "$eph_lo" -gt 11024 ]; then lo=10000; span=$((eph_lo - 10000))
  else lo=$((eph_hi + 1)); span=$((65536 - lo)); fi
  [ "$span" -gt 0 ] || { echo "$0: no port range outside the ephemeral one" >&2; exit 1; }
  for _ in $(seq 1 100); do
    p=$((lo + RANDOM % span))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then port=$p; break; fi
  done
  [ -n "$port" ] || { echo "$0: no free port found" >&2; exit 1; }
fi

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

echo "$port" > "$dir/port.tmp" && mv "$dir/port.tmp" "$dir/port"
exec "$bin" \
  --config.file="$dir/prometheus.yml" \
  --storage.tsdb.path="$dir/data" \
  --web.listen-address="127.0.0.1:$port" \
  --log.level=warn
