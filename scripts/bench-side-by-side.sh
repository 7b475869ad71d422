#!/usr/bin/env bash
# The side-by-side run the performance docs record: catalog-jobs and the BullMQ peer of the
# shared load harness (a bench/ directory kept outside this repository, named by BENCH; read
# only: it is copied to a writable place first), in one run of its harness, against one
# Redis, then the ratios of the targets (scripts/bench_ratios.py).
#   BENCH=/path/to/bench scripts/bench-side-by-side.sh     # 1 recorded run each, after a warm-up
#   BENCH=/path/to/bench RUNS=3 scripts/bench-side-by-side.sh
#   BENCH=/path/to/bench BIN=target/release/catalog-jobs scripts/bench-side-by-side.sh
#   BENCH=/path/to/bench CEILING=1 scripts/bench-side-by-side.sh   # and the harness's mock (the load generator's ceiling)
# The harness's lifecycle scenario reports Redis `mem_bytes_per_job` (used_memory after minus
# before the lifecycle run, per job) beside CPU and commands per job; the ratios below put
# each figure against BullMQ's of the same run. Needs wrk, jq, redis-server, node/npm and
# python3 (the harness makes its own venv and installs the peer's packages on first use).
set -euo pipefail
cd "$(dirname "$0")/.."
here=$PWD
BENCH=${BENCH:?the shared load harness: a bench/ directory with run_all.sh and peer-bullmq/}
RUNS=${RUNS:-1}
CEILING=${CEILING:-0}
BIN=${BIN:-}
if [ -z "$BIN" ]; then
  cargo build --release --locked --quiet
  BIN=$here/target/release/catalog-jobs
fi
work=${WORK:-$(mktemp -d)}
if [ ! -d "$work/bench" ]; then
  cp -r "$BENCH" "$work/bench"
  chmod -R u+w "$work/bench"
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -sr); $(date -u +%FT%TZ); load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
# --no-peers then the BullMQ peer as a target: the FastAPI peer is not part of the targets.
ceiling=--no-ceiling
if [ "$CEILING" = 1 ]; then ceiling=; fi
CATALOG_JOBS_BIN=$BIN "$work/bench/run_all.sh" --runs "$RUNS" --no-peers $ceiling --no-baseline \
  --target bullmq "$work/bench/peer-bullmq/run.sh" \
  --target catalog-jobs "$work/bench/start-catalog-jobs.sh" >/dev/null
group=$(jq -r .run_id "$work/bench/results.jsonl" | tail -1 | cut -d- -f1)
python3 "$here/scripts/bench_ratios.py" "$work/bench/results.jsonl" "$group"
echo "results: $work/bench/results.jsonl (group $group)" >&2
