#!/usr/bin/env bash
# The shared harness's lifecycle scenario (its load/lifecycle.py: N jobs, each
# POSTed then polled to its end, 32 at a time) against catalog-jobs on one Redis, then on a
# three-primary Redis Cluster, the same binary in the same run; Redis CPU (used_cpu_user +
# used_cpu_sys) and used_memory read from every primary before and after, per job.
#   BENCH=/tmp/x/bench BIN=target/release/catalog-jobs scripts/cluster_lifecycle.sh
# BENCH is a copy of the harness on which scripts/bench-side-by-side.sh has run once (it made
# the harness's Python venv). Ports 31000-31003 and 8199 must be free.
set -euo pipefail
BIN=${BIN:?the catalog-jobs binary (a release build)}
BENCH=${BENCH:?a copy of the shared harness with its .venv}
PY=$BENCH/.venv/bin/python
LC=$BENCH/load/lifecycle.py
N=${N:-4000}
W=$(mktemp -d)
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%FT%TZ); load $(cut -d' ' -f1-3 /proc/loadavg)"

snap() { # ports... -> "cpu_total calls_total mem_total"
  local cpu=0 mem=0
  for p in "$@"; do
    c=$(redis-cli -p "$p" info cpu | awk -F: '/used_cpu_user:|used_cpu_sys:/{s+=$2} END{printf "%.6f", s}')
    m=$(redis-cli -p "$p" info memory | awk -F: '/^used_memory:/{print $2+0}')
    echo -n "$p:$c:$m "
  done
}

measure() { # label ports...
  local label=$1; shift
  local before; before=$(snap "$@")
  "$PY" "$LC" "http://127.0.0.1:$SVC_PORT" --n "$N" --concurrency 32 --poll-ms 10 > "$W/$label.json"
  local after; after=$(snap "$@")
  echo "== $label: $(jq -c "{jobs_finished, jobs_per_s, e2e_p50_ms, polls_per_job, deadline_hit}" "$W/$label.json" 2>/dev/null || cat "$W/$label.json")"
  paste <(tr ' ' '\n' <<<"$before") <(tr ' ' '\n' <<<"$after") | awk -F'[:\t]' -v n="$N" 'NF>=6 {cpu=($5-$2)*1e6/n; mem=($6-$3)/n; tc+=cpu; tm+=mem; printf "  primary %s: Redis CPU %.0f us/job, memory %.0f B/job\n", $1, cpu, mem} END {printf "  all primaries: %.0f us/job, %.0f B/job\n", tc, tm}'
}

start_svc() { # env...
  SVC_PORT=8199
  env -i PATH="$PATH" BIND_ADDR=127.0.0.1:$SVC_PORT RUST_LOG=warn MAX_QUEUED_JOBS=100000 "$@" "$BIN" > "$W/svc.log" 2>&1 &
  SVC=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$SVC_PORT/readyz" >/dev/null && break; sleep 0.2; done
  # warm-up: every slot group's library loaded, connections made
  "$PY" "$LC" "http://127.0.0.1:$SVC_PORT" --n 500 --concurrency 32 --poll-ms 10 > /dev/null
}

# One Redis
redis-server --port 31000 --save '' --appendonly no --daemonize yes --dir "$W" --logfile "$W/r1.log"
sleep 0.5
start_svc REDIS_URL=redis://127.0.0.1:31000/0
measure one-redis 31000
kill $SVC; wait $SVC 2>/dev/null || true
redis-cli -p 31000 shutdown nosave >/dev/null 2>&1 || true

# Three primaries
for p in 31001 31002 31003; do
  mkdir -p "$W/$p"
  redis-server --port $p --cluster-enabled yes --cluster-config-file "$W/$p/nodes.conf" --save '' --appendonly no --daemonize yes --dir "$W/$p" --logfile "$W/$p/log"
done
sleep 0.5
redis-cli --cluster create 127.0.0.1:31001 127.0.0.1:31002 127.0.0.1:31003 --cluster-yes > "$W/create.log"
for _ in $(seq 50); do redis-cli -p 31001 cluster info | grep -q 'cluster_state:ok' && break; sleep 0.2; done
start_svc REDIS_CLUSTER_NODES=127.0.0.1:31001,127.0.0.1:31002,127.0.0.1:31003
measure cluster 31001 31002 31003
kill $SVC; wait $SVC 2>/dev/null || true
for p in 31001 31002 31003; do redis-cli -p $p shutdown nosave >/dev/null 2>&1 || true; done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
