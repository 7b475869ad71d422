#!/usr/bin/env bash
# Load figures for docs/performance.md: the release binary against a local redis-server, loaded by wrk
# on loopback only, ~10 s a scenario. Needs redis-server and wrk (apt-get install -y redis-server wrk).
#   scripts/bench.sh                  # all scenarios, 10 s each, 2 threads, 16 connections
#   DURATION=5s CONNECTIONS=32 scripts/bench.sh
#   REDIS_SOCKET=1 scripts/bench.sh   # the service talks to Redis over a unix socket
# The create scenario also prints the CPU each process spent per request, counted until the
# jobs it started have all ended (the service runs them while wrk keeps creating more).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-16}
KIND=${KIND:-pair}

for tool in redis-server wrk curl; do
  command -v "$tool" >/dev/null || { echo "bench.sh needs $tool (apt-get install -y redis-server wrk curl)" >&2; exit 1; }
done

cargo build --release --locked --quiet
work=$(mktemp -d)
redis_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
app_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$redis_port" --bind 127.0.0.1 --unixsocket "$work/redis.sock" --dir "$work" --save '' --appendonly no --daemonize no --loglevel warning >/dev/null &
redis_pid=$!
redis_url=redis://127.0.0.1:$redis_port/
if [ -n "${REDIS_SOCKET:-}" ]; then redis_url=unix://$work/redis.sock; fi
for _ in $(seq 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
BIND_ADDR=127.0.0.1:$app_port REDIS_URL=$redis_url RUST_LOG=${RUST_LOG:-error} \
  MAX_CONCURRENT_JOBS=${MAX_CONCURRENT_JOBS:-8} MAX_QUEUED_JOBS=${MAX_QUEUED_JOBS:-100000} \
  ./target/release/catalog-jobs >"$work/service.log" 2>&1 &
app_pid=$!
trap 'kill $app_pid $redis_pid 2>/dev/null; wait 2>/dev/null; cp "$work/service.log" /tmp/bench-service.log; rm -rf "$work"' EXIT
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$app_port/readyz" >/dev/null && break; sleep 0.1; done
base="http://127.0.0.1:$app_port"

cat >"$work/create.lua" <<'LUA'
-- A fresh tenant per request, so every POST creates a job (no 409s).
-- setup() runs in the main Lua state and hands each thread its number as the global `tid`.
local threads = 0
function setup(thread) threads = threads + 1; thread:set("tid", threads) end
local counter = 0
function init(args) prefix = "bench-" .. os.time() .. "-" .. tostring(tid) .. "-" end
function request()
  counter = counter + 1
  return wrk.format("POST", "/catalog/" .. os.getenv("KIND") .. "?tenant_id=" .. prefix .. counter)
end
function done(summary, latency, requests)
  io.write(string.format("non-2xx or errors: %d\n", summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
LUA
cat >"$work/poll.lua" <<'LUA'
function done(summary, latency, requests)
  io.write(string.format("non-2xx or errors: %d\n", summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
LUA

echo "== machine: $(nproc) cores, $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "== create: POST /catalog/$KIND with a fresh tenant per request ($DURATION, $THREADS threads, $CONNECTIONS connections, Redis at $redis_url)"
# CPU time (user + system, in clock ticks) of a process and all its threads.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
commands() { redis-cli -p "$redis_port" info stats | awk -F: '/^total_commands_processed/ {print $2 + 0}'; }
redis0=$(ticks $redis_pid); app0=$(ticks $app_pid)
KIND=$KIND wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s "$work/create.lua" "$base" >"$work/create.out" &
wrk_pid=$!
sleep 1; wrk0=$(ticks $wrk_pid 2>/dev/null || echo 0); sleep 3; wrk1=$(ticks $wrk_pid 2>/dev/null || echo 0)
wait $wrk_pid
stopped=$(date +%s.%N)
cat "$work/create.out"
# The jobs still queued when the load stopped run now; count their cost too.
previous=-1
while :; do now=$(commands); [ $((now - previous)) -le 3 ] && break; previous=$now; sleep 0.2; done
drained=$(python3 -c "print(f'{max(0.0, $(date +%s.%N) - $stopped - 0.4):.1f}')")
redis1=$(ticks $redis_pid); app1=$(ticks $app_pid)
created=$(grep -oE '^ *[0-9]+ requests' "$work/create.out" | grep -oE '[0-9]+')
hz=$(getconf CLK_TCK)
python3 - "$created" "$hz" $((redis1 - redis0)) $((app1 - app0)) $((wrk1 - wrk0)) "$drained" "$DURATION" <<'PY'
import sys
n, hz, redis, app, wrk = map(int, sys.argv[1:6])
drained, duration = sys.argv[6], sys.argv[7]
seconds = float(duration.rstrip("sm")) * (60 if duration.endswith("m") else 1)
per = lambda t: t / hz / n * 1e6
# wrk is sampled over 3 s of its run, against the average request rate.
wrk_per = wrk / hz / 3 / (n / seconds) * 1e6
print(f"CPU per created job, its whole life (create, run, finish): redis {per(redis):.0f} us, "
      f"service {per(app):.0f} us; wrk {wrk_per:.0f} us a request")
print(f"the jobs still queued when the load stopped had all ended {drained} s later")
PY

job=$(curl -fs -X POST "$base/catalog/$KIND?tenant_id=bench-poll&wait=true" -o /dev/null -w '%{http_code}' || true)
id=$(curl -fs "$base/catalog/jobs?tenant_id=bench-poll&limit=1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["job_id"])')
echo "== poll: GET /catalog/jobs/$id of a finished job ($DURATION, $THREADS threads, $CONNECTIONS connections)"
wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s "$work/poll.lua" "$base/catalog/jobs/$id"

# The same poll against a replica that never answers from memory: what every poll of an
# active job costs (one Redis round trip).
uncached_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
BIND_ADDR=127.0.0.1:$uncached_port REDIS_URL=$redis_url RUST_LOG=${RUST_LOG:-error} FINISHED_CACHE_SECONDS=0 \
  ./target/release/catalog-jobs >"$work/uncached.log" 2>&1 &
uncached_pid=$!
trap 'kill $app_pid $uncached_pid $redis_pid 2>/dev/null; wait 2>/dev/null; cp "$work/service.log" /tmp/bench-service.log; rm -rf "$work"' EXIT
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$uncached_port/readyz" >/dev/null && break; sleep 0.1; done
echo "== poll, uncached (FINISHED_CACHE_SECONDS=0: the cost of polling an active job)"
wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s "$work/poll.lua" "http://127.0.0.1:$uncached_port/catalog/jobs/$id"

echo "== Redis round trips: commandstats after the runs"
redis-cli -p "$redis_port" info commandstats | grep -E 'cmdstat_(evalsha|hgetall|time|eval|script)' || true
grep -ciE 'error' "$work/service.log" | xargs echo "error lines in the service log:"
