"""scikit-learn's exhaustive cosine kNN on a generated catalogue, for comparison with pair.

    python scripts/sklearn_pair.py hard.jsonl [--per-category] [--k 5]

Reads JSON Lines products (as `catalog-jobs gen-feed --hard N` writes
them), embeds name + brand with TfidfVectorizer, finds each product's k nearest neighbours
with NearestNeighbors(metric='cosine', algorithm='brute') -- over the whole catalogue, or
within each top-level category with --per-category (pair's category rule) -- and prints the
time (wall and CPU), the peak RSS of this process and family recall@k (a family is the key up to its first
'-': `fam0000123-v2` -> `fam0000123`; noise products are families of one).
"""

import argparse
import json
import resource
import time
from collections import defaultdict

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.neighbors import NearestNeighbors


def cpu_seconds():
    """User + system CPU of this process, all threads (BLAS included)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def family(key):
    return key.split("-")[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("feed")
    ap.add_argument("--per-category", action="store_true")
    ap.add_argument("--k", type=int, default=5)
    args = ap.parse_args()

    keys, texts, cats = [], [], []
    with open(args.feed) as f:
        for line in f:
            p = json.loads(line)
            keys.append(p["product_key"])
            texts.append(p["name"] + " " + (p.get("brand") or ""))
            path = p.get("taxonomy_path") or [""]
            cats.append(path[0].lower())
    n = len(keys)

    started = time.perf_counter()
    cpu_started = cpu_seconds()
    x = TfidfVectorizer().fit_transform(texts)
    blocks = defaultdict(list)
    if args.per_category:
        for i, c in enumerate(cats):
            blocks[c].append(i)
    else:
        blocks[""] = list(range(n))
    neighbours = [[] for _ in range(n)]
    for members in blocks.values():
        members = np.asarray(members)
        k = min(args.k + 1, len(members))
        nn = NearestNeighbors(n_neighbors=k, metric="cosine", algorithm="brute")
        nn.fit(x[members])
        _, idx = nn.kneighbors(x[members])
        for row, i in enumerate(members):
            found = [int(members[j]) for j in idx[row] if members[j] != i]
            neighbours[i] = found[: args.k]
    elapsed = time.perf_counter() - started
    cpu = cpu_seconds() - cpu_started
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    by_family = defaultdict(set)
    for i, key in enumerate(keys):
        by_family[family(key)].add(i)
    hit = want = 0
    for i, key in enumerate(keys):
        siblings = by_family[family(key)] - {i}
        wanted = min(len(siblings), args.k)
        if wanted == 0:
            continue
        want += wanted
        hit += min(wanted, sum(1 for j in neighbours[i] if j in siblings))
    scope = "per category" if args.per_category else "whole catalogue"
    print(
        f"{n:>8} products | sklearn brute cosine kNN ({scope}) {elapsed:7.2f} s "
        f"({n / elapsed:8.0f} products/s, CPU {cpu:.2f} s) | recall@{args.k} {hit / max(want, 1):.3f} "
        f"| peak RSS {peak_mib:.0f} MiB"
    )


if __name__ == "__main__":
    main()
