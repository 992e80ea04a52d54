#!/usr/bin/env bash
# The node agent against this machine's real NVML (no kubelet needed):
# `gpus` (discovery and sensors), `doctor`, then the agent itself for 8 s with
# its /metrics read once. Run by scripts/gpu-run.sh; alone:
#   scripts/gpu-agent-check.sh AGENT_BINARY [LOG_DIR]
# Exit status: 0 when discovery found a GPU and /metrics answered with it.
set -u
A=${1:?usage: scripts/gpu-agent-check.sh AGENT_BINARY [LOG_DIR]}
LOG=${2:-/tmp/gpu-agent}
mkdir -p "$LOG" /tmp/dq-dp
COMMON=(--container-driver-root / --nvidia-driver-root / --node-features-file "" --cdi-root /tmp/dq-cdi
        --device-plugin-path /tmp/dq-dp --pod-resources-socket /tmp/dq-none.sock)
rc=0
echo "== agent: gpus"
timeout 30 "$A" "${COMMON[@]}" gpus 2>&1 | tee "$LOG/agent_gpus.log"
grep -E "^Driver .* GPUs [1-9]" "$LOG/agent_gpus.log" >/dev/null || { echo "FAIL: the agent found no GPU"; rc=1; }
echo "== agent: doctor (no kubelet here: that check fails)"
timeout 30 "$A" "${COMMON[@]}" doctor 2>&1 | tee "$LOG/agent_doctor.log"
echo "== agent: 8 s of serving, /metrics on 127.0.0.1:19400"
timeout 20 "$A" "${COMMON[@]}" --metrics-addr 127.0.0.1:19400 > "$LOG/agent.log" 2>&1 &
agent=$!
sleep 6
if exec 3<>/dev/tcp/127.0.0.1/19400; then
  printf 'GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n' >&3
  cat <&3 > "$LOG/agent_metrics.txt"
  exec 3<&-
fi
sleep 2
kill -TERM "$agent" 2>/dev/null
wait "$agent"
head -20 "$LOG/agent.log"
grep -E "^(DCGM_FI_DEV_(GPU_TEMP|POWER_USAGE|FB_USED|SM_CLOCK|XID_ERRORS)|danqing_gpu_(healthy|sensors_up))" \
  "$LOG/agent_metrics.txt" 2>/dev/null | head -12
grep -E '^danqing_gpu_sensors_up\{.*\} 1' "$LOG/agent_metrics.txt" >/dev/null 2>&1 ||
  { echo "FAIL: no GPU with sensors in the agent's /metrics"; rc=1; }
exit $rc
