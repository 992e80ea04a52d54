#!/usr/bin/env bash
# start-tinyproxy.sh DIR PORT [USER PASS] [CONNECT_PORT]: a real HTTP forward
# proxy (tinyproxy, from Debian) for the tests, on 127.0.0.1:PORT, daemonized,
# its config, pid file and log (LogLevel Info: one "Established connection"
# line per CONNECT tunnel) in DIR; returns once it accepts connections.
# USER and PASS (both non-empty): Basic proxy authentication is required (a
# request without it is answered 407). CONNECT_PORT: the only port CONNECT may
# reach (any other is answered 403); default: every port.
# Stop: kill "$(cat DIR/tinyproxy.pid)".
set -euo pipefail
usage="usage: start-tinyproxy.sh DIR PORT [USER PASS] [CONNECT_PORT]"
dir=${1:?$usage}
port=${2:?$usage}
user=${3:-}
pass=${4:-}
connect_port=${5:-}
bin=$(command -v tinyproxy || echo /usr/bin/tinyproxy)
[ -x "$bin" ] || { echo "start-tinyproxy: tinyproxy not found (run scripts/setup.sh)" >&2; exit 3; }
mkdir -p "$dir"
: > "$dir/tinyproxy.log"
{
  echo "Port $port"
  echo "Listen 127.0.0.1"
  echo "Timeout 60"
  echo "MaxClients 64"
  echo "Allow 127.0.0.1"
  echo "LogFile \"$dir/tinyproxy.log\""
  echo "LogLevel Info"
  echo "PidFile \"$dir/tinyproxy.pid\""
  echo "DisableViaHeader Yes"
  if [ -n "$user" ] && [ -n "$pass" ]; then echo "BasicAuth $user $pass"; fi
  if [ -n "$connect_port" ]; then echo "ConnectPort $connect_port"; fi
} > "$dir/tinyproxy.conf"
"$bin" -c "$dir/tinyproxy.conf"
for _ in $(seq 1 200); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then exit 0; fi
  sleep 0.05
done
echo "start-tinyproxy: tinyproxy on port $port did not accept; its log:" >&2
tail -20 "$dir/tinyproxy.log" >&2 || true
exit 1
