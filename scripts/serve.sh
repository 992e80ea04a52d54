#!/usr/bin/env bash
# Starts the Danqing service on http://localhost:8080 with the bundled data
# (verse corpus and upload page compiled in, stroke data from the build tree,
# Haar cascades from Debian's opencv-data). Extra arguments go to `danqing serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/${PRESET:-default}/cmd/danqing/danqing
[ -x "$BIN" ] || { echo "serve.sh: $BIN is not built; run 'make build' first" >&2; exit 1; }
echo "Danqing: open http://localhost:${PORT:-8080}/ (Ctrl-C drains and stops)"
# No proxy sits in front of a local run: Ctrl-C drains at once (--drain-delay 0).
exec "$BIN" serve --port "${PORT:-8080}" --drain-delay 0 "$@"
