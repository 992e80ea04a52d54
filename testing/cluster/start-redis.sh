#!/usr/bin/env bash
# start-redis.sh DIR PORT: a redis-server for the tests and benchmarks, on
# 127.0.0.1:PORT, its data (AOF, fsync on every write: an accepted job survives
# a restart) in DIR, daemonized; returns once it answers PING. Run it again
# with the same DIR and PORT to restart it on its data.
# Stop: kill "$(cat DIR/redis.pid)".
set -euo pipefail
dir=${1:?usage: start-redis.sh DIR PORT}
port=${2:?usage: start-redis.sh DIR PORT}
server=$(command -v redis-server || echo /usr/bin/redis-server)
[ -x "$server" ] || { echo "start-redis: redis-server not found (run scripts/setup.sh)" >&2; exit 3; }
mkdir -p "$dir"
cat > "$dir/redis.conf" <<CONF
bind 127.0.0.1
port $port
dir $dir
pidfile $dir/redis.pid
logfile $dir/redis.log
daemonize yes
save ""
appendonly yes
appendfsync always
maxmemory 512mb
maxmemory-policy noeviction
CONF
"$server" "$dir/redis.conf"
for _ in $(seq 1 200); do
  if redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG; then exit 0; fi
  sleep 0.05
done
echo "start-redis: redis-server on port $port did not answer; its log:" >&2
tail -20 "$dir/redis.log" >&2 || true
exit 1
