#!/usr/bin/env python3
"""The same-run table of catalog-jobs against the BullMQ peer, from the shared harness's
results.jsonl: each figure (median over the group's runs) and its ratio to BullMQ's.

    bench_ratios.py RESULTS_JSONL GROUP [--ours catalog-jobs] [--peer bullmq]
                    [--ceiling mock-ceiling]

Accepted creates/s are the create scenario's requests less its non-2xx, per second. When
the group also ran the harness's mock (canned answers, no Redis, no work: what the load
generators drive on this machine), two more columns show its figures and their ratio to the
peer's. Where the mock serves far more than the client asks of it (the lifecycle scenario's
Python client asks ~4,000 requests/s of a mock that answers ~25,000 polls/s), that is the
most any service could show here: a target above it is bound by the load generator. Where
the mock's own single Node thread binds (polls), it is no ceiling. Stdlib only."""
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
    ap.add_argument("--ceiling", default="mock-ceiling")
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
    ceiling = any(r["label"] == a.ceiling for r in rows)
    head = f"| | {a.peer} | {a.ours} | ratio | target |"
    print(head + (f" {a.ceiling} | its ratio |" if ceiling else ""))
    print("|---|---|---|---|---|" + ("---|---|" if ceiling else ""))
    for name, scenario, get, target in figures:
        peer = median(of(a.peer, scenario), get)
        line = f"| {name} | {fmt(peer)} |"
        for label in [a.ours, a.ceiling] if ceiling else [a.ours]:
            value = median(of(label, scenario), get)
            line += f" {fmt(value)} | {ratio(value, peer)} |" + (f" {target} |" if label == a.ours else "")
        print(line)


def fmt(value) -> str:
    return "–" if value is None else f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def ratio(value, peer) -> str:
    return f"{value / peer:.2f}×" if peer and value is not None else "–"


if __name__ == "__main__":
    main()
