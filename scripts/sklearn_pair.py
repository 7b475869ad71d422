"""scikit-learn's exhaustive cosine kNN on a generated catalogue, for comparison with pair.

    python scripts/sklearn_pair.py hard.jsonl [--per-category] [--topn] [--k 5]

Reads JSON Lines products (as `catalog-jobs gen-feed --hard N` writes
them), embeds name + brand with TfidfVectorizer, finds each product's k nearest neighbours
with NearestNeighbors(metric='cosine', algorithm='brute') -- over the whole catalogue, or
within each top-level category with --per-category (pair's category rule) -- or, with
--topn, with sparse_dot_topn's sp_matmul_topn(top_n=k+1, n_threads=2) per category on the
same (L2-normalised) TF-IDF, the product itself dropped from its row -- and prints the
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


def top_n(x, members, k, neighbours):
    """Each row's k best by cosine (TF-IDF rows are L2-normalised: cosine is the dot
    product), with sparse_dot_topn on two threads; the row itself is dropped."""
    from sparse_dot_topn import sp_matmul_topn

    m = sp_matmul_topn(x, x.T.tocsr(), top_n=k + 1, n_threads=2, sort=True)
    for row in range(m.shape[0]):
        start, end = m.indptr[row], m.indptr[row + 1]
        found = [int(members[j]) for j in m.indices[start:end] if j != row]
        neighbours[members[row]] = found[:k]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("feed")
    ap.add_argument("--per-category", action="store_true")
    ap.add_argument("--topn", action="store_true")
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
    if args.per_category or args.topn:
        for i, c in enumerate(cats):
            blocks[c].append(i)
    else:
        blocks[""] = list(range(n))
    neighbours = [[] for _ in range(n)]
    for members in blocks.values():
        members = np.asarray(members)
        if args.topn:
            top_n(x[members], members, args.k, neighbours)
            continue
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
    if args.topn:
        method = "sparse_dot_topn sp_matmul_topn (per category, 2 threads)"
    elif args.per_category:
        method = "sklearn brute cosine kNN (per category)"
    else:
        method = "sklearn brute cosine kNN (whole catalogue)"
    print(
        f"{n:>8} products | {method} {elapsed:7.2f} s "
        f"({n / elapsed:8.0f} products/s, CPU {cpu:.2f} s) | recall@{args.k} {hit / max(want, 1):.3f} "
        f"| peak RSS {peak_mib:.0f} MiB"
    )


if __name__ == "__main__":
    main()
