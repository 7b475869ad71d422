#!/usr/bin/env python3
"""The same-run table of catalog-jobs against the BullMQ peer, from the shared harness's
results.jsonl: each figure (median over the group's runs) and its ratio to BullMQ's.

    bench_ratios.py RESULTS_JSONL GROUP [--ours catalog-jobs] [--peer bullmq]

Accepted creates/s are the create scenario's requests less its non-2xx, per second.
Stdlib only."""
import argparse
import json
import statistics


def median(rows, get):
    values = [v for v in (get(r) for r in rows) if isinstance(v, (int, float))]
    return statistics.median(values) if values else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("group")
    ap.add_argument("--ours", default="catalog-jobs")
    ap.add_argument("--peer", default="bullmq")
    a = ap.parse_args()
    rows = [json.loads(line) for line in open(a.results) if line.strip()]
    rows = [r for r in rows if str(r.get("run_id", "")).startswith(a.group)]

    def of(label, scenario):
        return [r for r in rows if r["label"] == label and r["scenario"] == scenario]

    figures = [
        ("accepted creates/s", "create", lambda r: (r["requests"] - r["non2xx"]) / r["duration_s"], "≥ 3×"),
        ("created→done jobs/s", "create", lambda r: r.get("completed_per_s"), "≥ 3×"),
        ("polls/s", "poll", lambda r: r.get("rps"), "≥ 4×"),
        ("lifecycle jobs/s", "lifecycle", lambda r: r.get("jobs_per_s"), "≥ 3×"),
        ("lifecycle e2e p50 ms", "lifecycle", lambda r: r.get("e2e_p50_ms"), ""),
        ("Redis CPU µs/job", "lifecycle", lambda r: r.get("redis", {}).get("cpu_us_per_job"), "≤ ⅓"),
        ("Redis commands/job", "lifecycle", lambda r: r.get("redis", {}).get("commands_per_job"), ""),
        ("Redis scripts/job", "lifecycle", lambda r: r.get("redis", {}).get("scripts_per_job"), ""),
        ("Redis bytes kept/job", "lifecycle", lambda r: r.get("redis", {}).get("mem_bytes_per_job"), "≤ ½"),
    ]
    print(f"| | {a.peer} | {a.ours} | ratio | target |")
    print("|---|---|---|---|---|")
    for name, scenario, get, target in figures:
        peer = median(of(a.peer, scenario), get)
        ours = median(of(a.ours, scenario), get)
        ratio = f"{ours / peer:.2f}×" if peer and ours is not None else "–"
        fmt = lambda v: "–" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:,.1f}"
        print(f"| {name} | {fmt(peer)} | {fmt(ours)} | {ratio} | {target} |")


if __name__ == "__main__":
    main()
