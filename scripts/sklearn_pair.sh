#!/usr/bin/env bash
# scikit-learn's exhaustive cosine kNN on the same hard catalogue catalog_bench pairs, side by
# side with it.
#
#   scripts/sklearn_pair.sh [PRODUCTS]     # default 100000
#
# Creates a Python venv (target/sklearn-venv, scikit-learn + numpy + sparse-dot-topn from PyPI) on first use,
# writes the hard catalogue (seed 42, as catalog_bench) with `catalog-jobs gen-feed`, runs
# scripts/sklearn_pair.py: sparse_dot_topn per category, scikit-learn over the whole
# catalogue and per category, then catalog_bench at the same size, all in one run. Each line:
# time (wall and CPU), products/s, recall@5, peak RSS.
set -euo pipefail
cd "$(dirname "$0")/.."

N="${1:-100000}"
SEED=42
VENV="${VENV:-target/sklearn-venv}"

if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --upgrade pip
    "$VENV/bin/pip" install --quiet scikit-learn numpy sparse-dot-topn
fi
"$VENV/bin/python" -c 'import sparse_dot_topn' 2>/dev/null ||
    "$VENV/bin/pip" install --quiet sparse-dot-topn

cargo build --quiet --release --bin catalog-jobs --example catalog_bench
FEED="target/hard-$N.jsonl"
target/release/catalog-jobs gen-feed --hard "$N" "$SEED" > "$FEED"

"$VENV/bin/python" scripts/sklearn_pair.py "$FEED" --topn
"$VENV/bin/python" scripts/sklearn_pair.py "$FEED"
"$VENV/bin/python" scripts/sklearn_pair.py "$FEED" --per-category
target/release/examples/catalog_bench "$N"
