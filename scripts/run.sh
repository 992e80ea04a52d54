#!/usr/bin/env bash
# `make run`: show what the node agent sees. On a GPU node this is the real
# driver; elsewhere the fake NVML library stands in with an 8xA100 node.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/default/cmd/danqing-device-plugin/danqing-device-plugin
FAKE_LIB=build/default/testing/fake-nvml/lib/libnvidia-ml.so.1
rc=0
"$BIN" gpus 2>/tmp/danqing-run.$$ || rc=$?
if [ "$rc" -eq 3 ]; then
  echo "No NVIDIA driver on this machine:"
  sed 's/^/  /' /tmp/danqing-run.$$
  echo "Showing the fake 8x A100-SXM4-80GB node (testing/fake-nvml/profiles/a100-8x-nvswitch.json):"
  echo
  FAKE_NVML_PROFILE=testing/fake-nvml/profiles/a100-8x-nvswitch.json \
    "$BIN" --nvml-lib "$FAKE_LIB" gpus
  rc=$?
else
  cat /tmp/danqing-run.$$ >&2
fi
rm -f /tmp/danqing-run.$$
exit "$rc"
