#!/usr/bin/env bash
# The long soak: three replicas of the built binary (debug; --release for the release build)
# on one loopback Redis, each with the allocator settings the binary sets itself (the harness
# clears their environment: no MIMALLOC_* setting reaches them); mixed load across hundreds of
# tenants, a replica killed, paused and stopped and Redis restarted in turn, then the invariant
# checker (tests/api/soak). Prints one line per round (the untouched replica's idle RSS and
# open files) and the checker's figures; docs/reliability.md records the last run.
#   scripts/soak.sh --minutes 30 [--release]
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=30
profile=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --minutes) minutes="$2"; shift 2 ;;
    --release) profile=(--release); shift ;;
    *) echo "usage: scripts/soak.sh [--minutes N] [--release]" >&2; exit 2 ;;
  esac
done

echo "soak: ${minutes} min on $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
SOAK_MINUTES="$minutes" cargo test --locked "${profile[@]}" --test api \
  soak::the_long_soak_keeps_every_invariant -- --ignored --nocapture
echo "soak: load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
