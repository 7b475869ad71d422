#!/usr/bin/env python3
"""Where a harness job's Redis CPU goes: the shared harness's lifecycle run (and optionally
its create burst, drained) against each target in turn, on a Redis of its own, with Redis's
per-command profile around the recorded run.

    BENCH_DIR=/tmp/lean-bench/bench .../bench/.venv/bin/python scripts/bench_profile.py \
        --bin target/release/catalog-jobs [--n 2000] [--targets bullmq,catalog-jobs] [--create 5]

BENCH_DIR is a writable copy of the shared load harness with its .venv and the peer's node_modules
(scripts/bench-side-by-side.sh makes one); run this with that venv's python (it has redis).
Per target: start it, an unrecorded warm-up, then CONFIG RESETSTAT and the recorded run.
It prints, per job: each command's calls and `usec` (INFO commandstats: a script's usec
includes the commands inside it, which are also counted on their own lines), Redis CPU split
user/sys, socket reads (≈ client round trips: a pipeline arrives in one read), the target's
own CPU (/proc/<pid>/stat), and its Redis connections (CLIENT LIST) at the end of the run.
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import redis

SCRIPT_COMMANDS = ("eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system) of process `pid` and its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def snapshot(r: redis.Redis) -> dict:
    stats, cpu = r.info("stats"), r.info("cpu")
    calls = {k.removeprefix("cmdstat_"): (v["calls"], v["usec"]) for k, v in r.info("commandstats").items()}
    return {"calls": calls, "user": cpu["used_cpu_user"], "sys": cpu["used_cpu_sys"],
            "reads": stats["total_reads_processed"], "conns": stats["total_connections_received"]}


def wait_up(base: str, proc: subprocess.Popen) -> None:
    for _ in range(300):
        try:
            urllib.request.urlopen(f"{base}/catalog/jobs/ping", timeout=1)
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            if proc.poll() is not None:
                sys.exit(f"the target exited with {proc.returncode}")
            time.sleep(0.2)
    sys.exit("the target did not come up")


def lifecycle(bench: str, base: str, n: int, redis_url: str) -> dict:
    out = subprocess.run([f"{bench}/.venv/bin/python", f"{bench}/load/lifecycle.py", base,
                          "--n", str(n), "--redis-url", redis_url],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def create_burst(bench: str, base: str, seconds: int, redis_url: str) -> int:
    """A create burst and its drain (the harness's create scenario): the jobs it accepted."""
    out_file = f"/tmp/bench-profile-{os.getpid()}.jsonl"
    env = dict(os.environ, SCENARIOS="create", DURATION=f"{seconds}s", REDIS_URL=redis_url,
               OUT=out_file)
    subprocess.run([f"{bench}/load/run.sh", base, "profile"], check=True, env=env,
                   capture_output=True)
    with open(out_file) as f:
        row = json.loads(f.read().strip().splitlines()[-1])
    os.unlink(out_file)
    print(f"  create burst: {json.dumps({k: row.get(k) for k in ('requests', 'non2xx', 'rps', 'drain_s', 'completed_per_s')})}")
    return row["requests"] - row["non2xx"]


def report(label: str, before: dict, after: dict, jobs: int, service_s: float,
           clients: list) -> None:
    per = lambda v: v / jobs
    rows = []
    for name, (c1, u1) in after["calls"].items():
        c0, u0 = before["calls"].get(name, (0, 0))
        if c1 > c0 and name not in ("info", "config|resetstat", "client|list"):
            rows.append((name, c1 - c0, u1 - u0))
    rows.sort(key=lambda r: -r[2])
    user = (after["user"] - before["user"]) * 1e6
    sys_ = (after["sys"] - before["sys"]) * 1e6
    scripts_usec = sum(u for n, _, u in rows if n in SCRIPT_COMMANDS)
    calls = sum(c for _, c, _ in rows)
    print(f"\n### {label}: {jobs} jobs")
    print(f"Redis CPU {per(user + sys_):,.0f} µs/job (user {per(user):,.0f}, sys {per(sys_):,.0f}); "
          f"commands {per(calls):.1f}/job; socket reads {per(after['reads'] - before['reads']):.2f}/job; "
          f"scripts' usec {per(scripts_usec):,.0f}/job; the target's own CPU {per(service_s * 1e6):,.0f} µs/job")
    subs = sum(1 for c in clients if c.get("sub", "0") != "0" or c.get("psub", "0") != "0")
    print(f"connections at the end: {len(clients)} ({subs} subscribed); "
          f"opened during the run: {after['conns'] - before['conns']}")
    print("\n| command | calls/job | usec/job | usec/call |")
    print("|---|---|---|---|")
    for name, c, u in rows:
        if per(c) >= 0.01:
            print(f"| {name} | {per(c):.2f} | {per(u):.1f} | {u / c:.2f} |")


def profile(label: str, start: list, env: dict, a, bench: str, redis_url: str) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(start + [str(port), redis_url], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        wait_up(base, proc)
        lifecycle(bench, base, 300, redis_url)  # warm-up, not recorded
        for scenario in (["create"] if a.create else []) + ["lifecycle"]:
            time.sleep(1)
            r.config_resetstat()
            before, service0 = snapshot(r), cpu_of(proc.pid)
            if scenario == "lifecycle":
                row = lifecycle(bench, base, a.n, redis_url)
                jobs = row.get("jobs_finished") or a.n
                print(f"  lifecycle: {row.get('jobs_per_s')} jobs/s, e2e p50 {row.get('e2e_p50_ms')} ms, "
                      f"polls/job {row.get('polls_per_job')}")
            else:
                jobs = create_burst(bench, base, a.create, redis_url)
            after, service1 = snapshot(r), cpu_of(proc.pid)
            clients = r.client_list()
            report(f"{label}, {scenario}", before, after, jobs, service1 - service0, clients)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
        r.flushdb()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--targets", default="bullmq,catalog-jobs")
    ap.add_argument("--create", type=int, default=0, help="seconds of create burst (0: none)")
    a = ap.parse_args()
    bench = os.environ["BENCH_DIR"]
    rport = free_port()
    rproc = subprocess.Popen(["redis-server", "--port", str(rport), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    redis_url = f"redis://127.0.0.1:{rport}/0"
    try:
        for _ in range(50):
            try:
                redis.Redis.from_url(redis_url).ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        print(f"load {open('/proc/loadavg').read().split()[:3]}, {time.strftime('%FT%TZ', time.gmtime())}")
        for label in a.targets.split(","):
            if label == "bullmq":
                profile(label, [f"{bench}/peer-bullmq/run.sh"], dict(os.environ), a, bench, redis_url)
            else:
                env = dict(os.environ, CATALOG_JOBS_BIN=os.path.abspath(a.bin))
                profile(label, [f"{bench}/start-catalog-jobs.sh"], env, a, bench, redis_url)
        print(f"load {open('/proc/loadavg').read().split()[:3]}, {time.strftime('%FT%TZ', time.gmtime())}")
    finally:
        rproc.terminate()
        rproc.wait(timeout=10)


if __name__ == "__main__":
    main()
