#!/usr/bin/env bash
# Load test of `danqing serve` at 1x, 2x and 4x saturation with wrk (Debian's
# `wrk`). Saturation = as many connections as render workers (every worker
# busy, nothing queued); 2x and 4x multiply the connections. Each level runs
# against a fresh server so its peak memory (VmHWM) and metrics are its own.
#
#   bench/load/run.sh                      # defaults below
#   DURATION=60s QUERY='width=1920&height=1080' bench/load/run.sh
#
# Per level it prints wrk's summary (throughput, latency of all answers,
# status mix) and, from the server's /metrics, the accepted requests'
# latency bounds, how many refusals took <= 10 ms, and the peak RSS.
set -euo pipefail
cd "$(dirname "$0")/../.."

BIN=${BIN:-build/default/cmd/danqing/danqing}
WORKERS=${WORKERS:-$(nproc)}
DURATION=${DURATION:-30s}
PHOTO=${PHOTO:-tests/data/photos/rocket.jpg}
QUERY=${QUERY:-width=1024&height=768}
DEADLINE_MS=${DEADLINE_MS:-20000}
LEVELS=${LEVELS:-1 2 4}

command -v wrk >/dev/null || { echo "bench/load: wrk is not installed (apt-get install wrk)"; exit 1; }
[ -x "$BIN" ] || { echo "bench/load: $BIN not built (cmake --build build/default --target danqing)"; exit 1; }

metric() {  # metric NAME_AND_LABELS FILE -> value or 0
  awk -v k="$1" 'index($0, k" ") == 1 { print $2; found=1 } END { if (!found) print 0 }' "$2"
}

echo "danqing load test: $WORKERS workers, photo $PHOTO, $QUERY, $DURATION per level, deadline $DEADLINE_MS ms"
for level in $LEVELS; do
  conns=$((WORKERS * level))
  log=$(mktemp)
  "$BIN" serve --host 127.0.0.1 --port 0 --workers "$WORKERS" --deadline-ms "$DEADLINE_MS" >"$log" 2>&1 &
  pid=$!
  port=""
  for _ in $(seq 1 100); do
    port=$(sed -n 's/.*serving on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -1)
    [ -n "$port" ] && break
    sleep 0.1
  done
  [ -n "$port" ] || { cat "$log"; kill "$pid"; exit 1; }
  echo
  echo "== ${level}x saturation: $conns connections"
  wrk -t"$(( conns < WORKERS ? conns : WORKERS ))" -c"$conns" -d"$DURATION" --timeout 60s \
    -s bench/load/upload.lua "http://127.0.0.1:$port/v1/inscriptions?$QUERY" -- "$PHOTO" |
    grep -E 'Requests/sec|Transfer|requests in|Non-2xx|Socket errors|^status|^p50'
  m=$(mktemp)
  curl -s "http://127.0.0.1:$port/metrics" >"$m"
  h=danqing_inscription_request_duration_seconds
  ok=$(metric "${h}_count{outcome=\"ok\"}" "$m")
  ok_1s=$(metric "${h}_bucket{outcome=\"ok\",le=\"1\"}" "$m")
  ok_5s=$(metric "${h}_bucket{outcome=\"ok\",le=\"5\"}" "$m")
  ok_deadline=$(metric "${h}_bucket{outcome=\"ok\",le=\"$((DEADLINE_MS / 1000))\"}" "$m")
  refused=$(metric "${h}_count{outcome=\"refused\"}" "$m")
  refused_10ms=$(metric "${h}_bucket{outcome=\"refused\",le=\"0.01\"}" "$m")
  refused_1ms=$(metric "${h}_bucket{outcome=\"refused\",le=\"0.001\"}" "$m")
  hwm=$(awk '/VmHWM/ {print $2 " " $3}' "/proc/$pid/status")
  echo "server: accepted $ok (<=1 s: $ok_1s, <=5 s: $ok_5s, within deadline: $ok_deadline);" \
       "refused $refused (<=1 ms: $refused_1ms, <=10 ms: $refused_10ms); peak RSS $hwm"
  # The server's CPU time (user + system, /proc/PID/stat fields 14 and 15)
  # per accepted inscription, and what the machine's cores would then serve
  # if the service had them to itself: the figure that survives a machine
  # shared with other work, where wrk's req/s does not.
  ticks=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
  awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" -v n="$ok" -v cores="$(nproc)" 'BEGIN {
    if (n > 0) { ms = t * 1000 / hz / n; printf "server CPU: %.1f ms per accepted inscription; %d cores to itself: %.1f /s\n", ms, cores, cores * 1000 / ms }
  }'
  # Busy seconds per stage (danqing_stage_seconds_total) per accepted inscription.
  awk -v n="$ok" '/^danqing_stage_seconds_total\{/ && n > 0 { split($1, a, "\""); printf "  %s %.1f ms", a[2], $2 * 1000 / n } END { print "" }' "$m"
  kill -TERM "$pid"
  wait "$pid" || true
  rm -f "$log" "$m"
done
