#!/usr/bin/env python3
"""What the job library costs Redis a job, counted in instructions (deterministic, unlike CPU
time on a shared machine): loads `src/jobs/lua` of a git revision (or of the working tree)
into a redis-server run under valgrind's callgrind, replays a harness job's life N times —
create (an ordered enrich job with the default rate limit, claimed for the accepting
worker), one poll (HGETALL), finish (which claims the worker's next job where that revision's
service would ask it to: a harness job's queue is empty and, since a finish trusts the
dispatcher's marks, unasked) — with the
arguments the service sends (captured with MONITOR), 16 calls pipelined, and prints Redis's
instructions a job after a warm-up.

    scripts/lua_cost.py HEAD              # or a revision, or a checkout's directory (`.`)
    N=1000 scripts/lua_cost.py 12c0efa
    SPLIT=1 scripts/lua_cost.py .         # and each call's share: N creates, N polls, N finishes
                                          # and N finishes that claim a queued job (see `claiming`)
    BATCH=1,4,16 scripts/lua_cost.py .    # and N creates of one slot group's tenants, 1, 4 and 16
                                          # requests a call: the service's own `create` and
                                          # `creates` calls (jobs/redis/commit.rs) where the
                                          # revision has them, else create.lua wrapped to take
                                          # several (`batched`: a measurement, not a protocol)
    FBATCH=1,4,8 scripts/lua_cost.py .    # and N finishes (claiming nothing) of one slot
                                          # group's jobs, 1, 4 and 8 a call: the service's
                                          # `finish` and `finishes` calls, where it has them


The library is assembled as jobs/redis/scripts.rs assembles it (record, prelude, order, then
each script as a function), and called as that revision calls it: with the call's slot group
named as its one key (`FCALL <fn> 1 <prefix>:{<tag>}:queue …`, each job's id naming its
tenant's group) where its prelude reads the group from its key, and with the group's
`migrating` key second where its jobs/keys.rs has one, else with no key. Keep the dump (OUT=path) and read it with
`callgrind_annotate --inclusive=yes` for where the instructions go. Needs valgrind and
redis-server; nothing else.
"""
import itertools
import os
import re
import socket
import subprocess
import sys
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = ["create", "claim", "tick", "renew", "finish", "restore", "release", "recover",
           "cancel", "purge", "queued", "awaited"]
# The settings every call starts with (`invocation` in jobs/redis/scripts.rs), at defaults.
SETTINGS = ["job", "86400", "300000", "100", "1000000", "3", "5000"]
FINGERPRINT = "80eb6a3f04273ff5137d233576d17bff1e9064ca18eda08b4dafc49b08c45ef6"
WORKER, RUNS = "vm/1", ["enrich", "pair", "sync"]
PIPELINED = 16
# The fields a create sends first, unnamed, where its revision reads them so.
UNNAMED = ["tenant", "kind", "created_by", "request_id"]
WARM_UP = 300


def source(rev: str, path: str) -> str:
    if os.path.isdir(rev):
        with open(os.path.join(rev, path)) as f:
            return f.read()
    return subprocess.check_output(["git", "-C", ROOT, "show", f"{rev}:{path}"], text=True)


def grouped(rev: str) -> bool:
    """Whether the revision's scripts read their slot group from their one key."""
    return "function begin(keys, args" in source(rev, "src/jobs/lua/prelude.lua")


def functions(rev: str) -> list:
    """The revision's scripts and whether each is guarded (every key it touches named in its
    call's KEYS): its `functions!` list in jobs/redis/scripts.rs, else SCRIPTS unguarded."""
    try:
        listed = source(rev, "src/jobs/redis/scripts.rs")
    except subprocess.CalledProcessError:
        listed = ""
    found = re.findall(r'^\s+[A-Z_]+ = "(\w+)", (true|false);$', listed, re.M)
    # Where create.lua is the library's `create_one` (CREATE_ONE), it is not in the list.
    create = ["create"] if real_creates(rev) else []
    create += ["finish"] if real_finishes(rev) else []
    if found:
        return [(script, guarded == "true") for script, guarded in found]
    # Every script guarded (its begin builds the declared set), or none.
    prelude = source(rev, "src/jobs/lua/prelude.lua")
    every = ("DECLARED[keys[i]] = true" in prelude or "DECLARED[KEYS_[i]] = true" in prelude) \
        and "begin(keys, args, guarded)" not in prelude
    named = create + re.findall(r'^\s+[A-Z_]+ = "(\w+)",$', listed, re.M) or SCRIPTS
    return [(script, every) for script in named]


def real_creates(rev: str) -> bool:
    """Whether the revision's library holds create.lua as `create_one`, run by `create` once
    and by `creates` (lua/creates.lua: the service's group commit) once a request."""
    return library_holds(rev, "CREATE_ONE")


def real_finishes(rev: str) -> bool:
    """Whether the revision's library holds finish.lua as `finish_one`, run by `finish` once
    and by `finishes` (lua/finishes.lua: the service's group commit) once a request."""
    return library_holds(rev, "FINISH_ONE")


def library_holds(rev: str, name: str) -> bool:
    """Whether the revision's scripts.rs names `name` (False when it cannot be read)."""
    try:
        return name in source(rev, "src/jobs/redis/scripts.rs")
    except (OSError, subprocess.CalledProcessError):
        return False


def library(rev: str, name: str) -> str:
    # walks.lua (the create's and the finish's reach, made once at load) where it has one.
    heads = ["record", "prelude", "order"]
    try:
        source(rev, "src/jobs/lua/walks.lua")
        heads.append("walks")
    except (OSError, subprocess.CalledProcessError):
        pass
    head = "\n".join(source(rev, f"src/jobs/lua/{f}.lua") for f in heads)
    real = real_creates(rev)
    if real:
        head += (f"\nlocal function create_one(at, last)\n"
                 f"{source(rev, 'src/jobs/lua/create.lua')}\nend\n")
    finishes = real_finishes(rev)
    if finishes:
        head += (f"\nlocal function finish_one()\n"
                 f"{source(rev, 'src/jobs/lua/finish.lua')}\nend\n")
    code = f"#!lua name={name}\n{head}\n"
    for script, guarded in functions(rev):
        begin = "begin(keys, args)" if grouped(rev) else "begin(args)"
        if guarded and "function begin(keys, args, guarded)" in head:
            begin = "begin(keys, args, true)"
        body = source(rev, f"src/jobs/lua/{script}.lua")
        if real and script == "create":
            body = "return create_one(1, #A)"
        if finishes and script == "finish":
            body = "return finish_one()"
        code += (f"redis.register_function('{name}_{script}', function(keys, args)\n"
                 f"{begin}\n{body}\nend)\n")
        if real and script == "create":
            code += (f"redis.register_function('{name}_creates', function(keys, args)\n"
                     f"{begin}\n{source(rev, 'src/jobs/lua/creates.lua')}\nend)\n")
        elif finishes and script == "finish":
            code += (f"redis.register_function('{name}_finishes', function(keys, args)\n"
                     f"{begin}\n{source(rev, 'src/jobs/lua/finishes.lua')}\nend)\n")
        elif script == "create" and os.environ.get("BATCH"):
            code += (f"redis.register_function('{name}_batch', function(keys, args)\n"
                     f"{begin}\n{batched(rev)}\nend)\n")
    return code


class Layout:
    """How a revision names a job's keys and routes its calls: by slot group (the tags listed
    in its src/jobs/keys.rs, a tenant's group FNV-1a-64 of it mod their number, the group in a
    version-8 id's last byte), or, before groups, one namespace and v4 ids."""

    def __init__(self, rev: str):
        self.rev = rev
        self.tags = None
        self.guarded = dict(functions(rev))
        self.prelude = source(rev, "src/jobs/lua/prelude.lua")
        # The settings the revision reads: the seven of SETTINGS, then whether the store is a
        # cluster ('0': a single Redis) where it reads eight.
        prelude = source(rev, "src/jobs/lua/prelude.lua")
        read = re.search(r"SETTINGS = \{unpack\(args, 1, (\d+)\)\}", prelude)
        self.settings = SETTINGS + ["0"] * (int(read.group(1)) - len(SETTINGS) if read else 0)
        # Where the revision reads them as one argument, its last (`settings_arg` in
        # jobs/redis/scripts.rs): the seven numbers, cluster '0', then the prefix.
        self.last = "args[n] = nil" in prelude
        if self.last:
            self.settings = []
            self.tail = [" ".join(SETTINGS[1:] + ["0", SETTINGS[0]])]
        else:
            self.tail = []
        # Whether its finish reads the queue it claims from before the worker ('' for its own
        # group's: the harness's replay claims from there).
        self.finish_from = re.search(r"local from, worker = A\[j[] +]", source(
            rev, "src/jobs/lua/finish.lua")) is not None
        # Whether its finish is called without the job's fields (asked for only when the
        # record is missing), as its service calls it.
        self.finish_bare = "A[4] == '0'" in source(rev, "src/jobs/lua/finish.lua")
        # Whether its finish that claims nothing is called without the claim's queue and
        # worker (two '' before).
        self.finish_claimless = "A[j] or ''" in source(rev, "src/jobs/lua/finish.lua")
        # Whether its finish takes the job's tenant, kind, created_ms and pipeline from its run
        # (after the outcome), not from the record.
        self.finish_holds = "local tenant, kind, created_ms, pipeline = A[j]" in source(
            rev, "src/jobs/lua/finish.lua")
        # Whether its finish implies a done job's step (the service sends none), and whether its
        # service's finish claims from its own group with no group marked (else it claims
        # nothing then, as a harness job's finish does: its queue is empty and unmarked).
        self.done_step_implied = "step (none for done" in source(rev, "src/jobs/lua/finish.lua")
        # Whether it implies a done job's status too (the service sends none).
        self.done_status_implied = "without a status is `done`" in source(
            rev, "src/jobs/lua/finish.lua")
        try:
            claims = source(rev, "src/jobs/redis/claims.rs")
        except (OSError, subprocess.CalledProcessError):
            claims = ""
        self.claims_unmarked = ".unwrap_or(group);" in claims or "fn finish_claim" not in claims
        # Whether its create reads the idempotency key and fingerprint last, sent only with a
        # key (the harness's creates have none).
        self.keyless = "local limit, worker, idem_key, fingerprint" in source(
            rev, "src/jobs/lua/create.lua")
        # Whether its create writes the step `queued` when none is sent (the service sends none),
        # and whether it reads a job's tenant, kind, creator and request first, unnamed.
        created = source(rev, "src/jobs/lua/create.lua")
        self.step_implied = "step unless it is `queued`" in created
        self.unnamed = "its id, tenant, kind, created_by and request_id" in created
        # Whether its calls name the group's never-written `migrating` key second.
        self.migrating = False
        if grouped(rev):
            keys = source(rev, "src/jobs/keys.rs")
            listed = keys[keys.index("const TAGS"):]
            self.tags = re.findall(r'"([0-9a-z]+)"', listed[:listed.index("];")])
            # (Where its prelude reads the step's keys after the migrating key on a cluster
            # only, a single Redis's calls name none.)
            self.migrating = "pub fn migrating(" in keys and \
                "CLUSTER and 2 or 1" not in self.prelude

    def group(self, tenant: str) -> int:
        h = 0xCBF29CE484222325
        for b in tenant.encode():
            h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
        return h % len(self.tags)

    def job_id(self, tenant: str) -> str:
        if self.tags is None:
            return str(uuid.uuid4())
        raw = bytearray(uuid.uuid4().bytes)
        raw[6] = (raw[6] & 0x0F) | 0x80
        raw[8] = (raw[8] & 0x3F) | 0x80
        raw[15] = self.group(tenant)
        return str(uuid.UUID(bytes=bytes(raw)))

    def keys(self, tenant: str) -> list:
        """The call's numkeys and keys."""
        if self.tags is None:
            return [0]
        base = f"job:{{{self.tags[self.group(tenant)]}}}"
        if self.migrating:
            return [2, f"{base}:queue", f"{base}:migrating"]
        return [1, f"{base}:queue"]

    def finish_keys(self, job: str, tenant: str) -> list:
        """A finish's numkeys and keys: where its finish.lua is guarded (every key it touches
        named, as jobs/redis/declare.rs names them), the group's two, then the job's record,
        the lease index, waiting set, this hour's stats bucket, its lock and its lane (the
        harness job is ordered; the queue is empty, so no head to name); else `keys`."""
        if not self.guarded.get("finish"):
            return self.keys(tenant)
        base = f"job:{{{self.tags[self.group(tenant)]}}}"
        hour = int(time.time() * 1000) // 3_600_000
        named = [f"{base}:queue", *self.migrating_of(base), self.record(job, tenant),
                 f"{base}:leases", f"{base}:waiting", f"{base}:stats:{hour}",
                 f"{base}:lock:{tenant}:enrich", f"{base}:lane:{tenant}"]
        return [len(named), *named]

    def create_keys(self, job: str, tenant: str) -> list:
        """A create's numkeys and keys: where its create.lua is guarded, the group's two, then
        what jobs/redis/declare.rs's `creating` names for a lone ordered job; else `keys`."""
        if not self.guarded.get("create"):
            return self.keys(tenant)
        base = f"job:{{{self.tags[self.group(tenant)]}}}"
        hour = int(time.time() * 1000) // 3_600_000
        named = [f"{base}:queue", *self.migrating_of(base), f"{base}:tenant:{tenant}",
                 f"{base}:waiting", f"{base}:leases", f"{base}:everyone", f"{base}:tenants",
                 f"{base}:stats:{hour}", self.record(job, tenant),
                 f"{base}:lock:{tenant}:enrich", f"{base}:lane:{tenant}"]
        return [len(named), *named]

    def migrating_of(self, base: str) -> list:
        """The group's migrating key, where the revision's calls name it."""
        return [f"{base}:migrating"] if self.migrating else []

    def record(self, job: str, tenant: str) -> str:
        if self.tags is None:
            return f"job:{job}"
        return f"job:{{{self.tags[self.group(tenant)]}}}:{job}"


def encode(*args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Redis:
    """A bare RESP client: enough to pipeline calls and read their answers."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.file = self.sock.makefile("rb")

    def read(self):
        line = self.file.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b":":
            return int(rest)
        if kind == b"+":
            return rest
        if kind == b"-":
            return RuntimeError(rest.decode())
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.file.read(n + 2)[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise ValueError(line)

    def pipe(self, calls: list) -> list:
        self.sock.sendall(b"".join(calls))
        return [self.read() for _ in calls]


def origin(tenant: str) -> list:
    return ["tenant", tenant, "kind", "enrich", "params", '{"force":false}',
            "created_by", "anonymous", "request_id", str(uuid.uuid4()), "in_order", "1"]


def create_args(layout: Layout, job: str, tenant: str, worker: str = WORKER) -> list:
    """A create's own arguments for one job, as the revision's service sends them (the call's
    keys and settings apart)."""
    # The step, `queued`, is sent only where the revision's create.lua does not write it itself;
    # where it reads tenant, kind, creator and request first, unnamed, they come first.
    fields = origin(tenant) + ([] if layout.step_implied else ["step", "queued"])
    tail = [600, worker] if layout.keyless else ["", FINGERPRINT, 600, worker]
    if layout.unnamed:
        lead = dict(zip(fields[::2], fields[1::2]))
        rest = [f for i in range(0, len(fields), 2) if fields[i] not in UNNAMED
                for f in fields[i:i + 2]]
        return [1, job, *(lead[name] for name in UNNAMED), len(rest) // 2, *rest, *tail]
    return [1, job, len(fields) // 2, *fields, *tail]


def create(lib: str, layout: Layout, job: str, tenant: str, worker: str = WORKER) -> bytes:
    # The settings first, or (layout.tail) as the call's last argument.
    return encode("FCALL", f"{lib}_create", *layout.create_keys(job, tenant), *layout.settings,
                  *create_args(layout, job, tenant, worker), *layout.tail)


def finish(lib: str, layout: Layout, job: str, tenant: str, heads: list = (),
           claim: bool = None) -> bytes:
    """A finish, naming `heads` (the records at the head of the queue it claims from); it
    claims the worker's next job when `claim`, by default as the revision's service would for
    a harness job (whose queue is empty and unmarked)."""
    numkeys, *keys = layout.finish_keys(job, tenant)
    return encode("FCALL", f"{lib}_finish", numkeys + len(heads), *keys, *heads, *layout.settings,
                  *finish_args(layout, job, tenant, claim), *layout.tail)


def finish_args(layout: Layout, job: str, tenant: str, claim: bool = None) -> list:
    """A finish's own arguments, as the revision's service sends them (the call's keys and
    settings apart)."""
    fields = [] if layout.finish_bare else origin(tenant) + ["created_ms", "1796207731031"]
    step = [] if layout.done_step_implied else ["step", "finished"]
    status = [] if layout.done_status_implied else ["status", "done"]
    outcome = [*status, *step, "result",
               '{"products":0,"extracted":0,"unextractable":0,"skipped":0,"batch',
               "result.2", 'es":0}']
    # The job's own, as its run holds them (its creation: about now, as the replay's are).
    held = [tenant, "enrich", int(time.time() * 1000), ""] if layout.finish_holds else []
    claim = layout.claims_unmarked if claim is None else claim
    claims = [WORKER, *RUNS] if claim else ([] if layout.finish_claimless else ["", ""])
    return [job, 1, 100, len(fields) // 2, *fields, len(outcome) // 2, *outcome, *held,
            *([""] if layout.finish_from else []), *claims]


def code(answer) -> bytes:
    """A script's answer's code word: its first entry, or the answer itself when it is a lone
    word (a finish that claimed and released nothing, since finish.lua answers so)."""
    if isinstance(answer, Exception) or answer is None:
        return b""
    # A usual create answers its time alone: an integer when it claimed the job, a string
    # when it queued it.
    if isinstance(answer, int):
        return b"claimed"
    if isinstance(answer, bytes) and answer.isdigit():
        return b"queued"
    return answer if isinstance(answer, bytes) else answer[0]


def lives(r: Redis, lib: str, layout: Layout, n: int, tag: str) -> None:
    """n harness lives, each job of its own tenant, PIPELINED at a time."""
    for start in range(0, n, PIPELINED):
        tenants = [f"lc-{tag}-{i}" for i in range(start, min(n, start + PIPELINED))]
        jobs = [(layout.job_id(t), t) for t in tenants]
        for answer in r.pipe([create(lib, layout, j, t) for j, t in jobs]):
            if code(answer) != b"claimed":
                raise SystemExit(f"create answered {answer}")
        r.pipe([encode("HGETALL", layout.record(j, t)) for j, t in jobs])
        for answer in r.pipe([finish(lib, layout, j, t) for j, t in jobs]):
            if code(answer) != b"applied":
                raise SystemExit(f"finish answered {answer}")


def split(r: Redis, lib: str, layout: Layout, n: int, pid: int) -> list:
    """Runs N creates, then their N polls, then their N finishes, each phase dumped apart (the
    jobs of one phase all live at once, where `lives` keeps PIPELINED alive): answers each
    phase's name and the number of its dump."""
    jobs = [(layout.job_id(t), t) for t in (f"lc-split-{i}" for i in range(n))]
    phases = [("create", [create(lib, layout, j, t) for j, t in jobs], b"claimed"),
              ("poll", [encode("HGETALL", layout.record(j, t)) for j, t in jobs], None),
              ("finish", [finish(lib, layout, j, t) for j, t in jobs], b"applied")]
    for part, (name, calls, word) in enumerate(phases, 2):
        subprocess.run(["callgrind_control", "-z", str(pid)], stdout=subprocess.DEVNULL)
        for start in range(0, n, PIPELINED):
            for answer in r.pipe(calls[start:start + PIPELINED]):
                if word and code(answer) != word:
                    raise SystemExit(f"{name} answered {answer}")
        subprocess.run(["callgrind_control", "-d", str(pid)], stdout=subprocess.DEVNULL)
    return [(name, part) for part, (name, _, _) in enumerate(phases, 2)]


def claiming(r: Redis, lib: str, layout: Layout, n: int, pid: int, part: int) -> int:
    """Runs N finishes that each claim the next job of their group's ready queue, as most of
    the harness's finishes do under load (its create found the workers busy and queued it),
    naming the queue's head as the service does (the revision's HEAD_NAMED records); all in
    one group. Answers the number of its dump."""
    head = int(re.search(r"^local HEAD_NAMED = (\d+)", layout.prelude, re.M).group(1))
    in_group = (t for t in (f"lc-claiming-{i}" for i in range(10 ** 9)) if layout.group(t) == 0)
    running = [(layout.job_id(t), t) for t in itertools.islice(in_group, n)]
    queued = [(layout.job_id(t), t) for t in itertools.islice(in_group, n + head)]
    for jobs, worker, word in ((running, WORKER, b"claimed"), (queued, "", b"queued")):
        for start in range(0, len(jobs), PIPELINED):
            calls = [create(lib, layout, j, t, worker) for j, t in jobs[start:start + PIPELINED]]
            if any(code(a) != word for a in r.pipe(calls)):
                raise SystemExit(f"a create for the claims did not answer {word}")
    subprocess.run(["callgrind_control", "-z", str(pid)], stdout=subprocess.DEVNULL)
    for i, (job, tenant) in enumerate(running):
        heads = [layout.record(j, t) for j, t in queued[i:i + head]]
        answer = r.pipe([finish(lib, layout, job, tenant, heads, claim=True)])[0]
        if isinstance(answer, Exception) or not answer[1] or answer[1][0] != queued[i][0].encode():
            raise SystemExit(f"a finish did not claim the next job: {answer}")
    subprocess.run(["callgrind_control", "-d", str(pid)], stdout=subprocess.DEVNULL)
    return part


def batched(rev: str) -> str:
    """The revision's create.lua wrapped so one call runs several independent requests (BATCH):
    A is their number, then each request's length and its arguments as a create takes them;
    one TIME and one LLEN a call, each request's names made afresh; answers one answer a
    request. A measurement of what creates of several requests in one call would save, not
    the service's protocol (a request's `stale` or a queue filling within the call are not
    handled)."""
    body = source(rev, "src/jobs/lua/create.lua")
    for old, new in [
            ("local jobs, i = {}, 2\nfor n = 1, A[1] + 0 do",
             "local jobs, i = {}, at + 1\nfor n = 1, A[at] + 0 do"),
            ("local limit, worker, idem_key, fingerprint = A[i] + 0, A[i + 1], A[i + 2], A[i + 3]",
             "local limit, worker, idem_key, fingerprint = A[i] + 0, A[i + 1], nil, nil"),
            ("redis.call('LLEN', K_QUEUE)", "WAITING"), ("local now = now_ms()", "local now = NOW")]:
        if old not in body:
            raise SystemExit(f"BATCH: this revision's create.lua has no `{old}`")
        body = body.replace(old, new)
    return ("local WAITING, NOW = redis.call('LLEN', K_QUEUE), now_ms()\n"
            "local function create_one(at)\n" + body + "\nend\n"
            "local out, at = {}, 2\n"
            "for r = 1, A[1] + 0 do\n"
            "  MEMO_ID, MEMO_LT, MEMO_LK, MEMO_TT, MEMO_LNT, MEMO_CT = nil, nil, nil, nil, nil, nil\n"
            "  MEMO_JOB, MEMO_LOCK, MEMO_TENANT, MEMO_LANE = nil, nil, nil, nil\n"
            "  TOP_OF, LANES, ASKED = nil, nil, nil\n"
            "  out[r] = create_one(at + 1)\n"
            "  at = at + 1 + A[at]\n"
            "end\n"
            "return out\n")


def batches(r: Redis, lib: str, layout: Layout, n: int, pid: int, sizes: list, part: int) -> list:
    """n creates (each of its own tenant, all of one slot group, claimed for the worker) for
    each batch size: size requests a call of the batched create. Answers each size and the
    number of its dump. The group is the second (SPLIT's `claiming` leaves queued jobs in the
    first, where a create would be queued, not claimed)."""
    in_group = (t for t in (f"lc-batch-{i}" for i in range(10 ** 9)) if layout.group(t) == 1)
    out = []
    for size in sizes:
        jobs = [(layout.job_id(t), t) for t in itertools.islice(in_group, n)]
        calls = []
        real = real_creates(layout.rev)
        for start in range(0, n, size):
            keys, args = [], [min(size, n - start)]
            for job, tenant in jobs[start:start + size]:
                own = create_args(layout, job, tenant)
                if real:
                    # The service's own call (jobs/redis/commit.rs): every request's keys,
                    # each once, then each request's group's queue and its arguments.
                    named = layout.create_keys(job, tenant)[1:]
                    keys += [k for k in named if k not in keys]
                    args += [named[0], len(own), *own]
                    continue
                keys += [k for k in layout.create_keys(job, tenant)[1:] if k not in keys]
                args += [len(own), *own]
            function = "create" if real and size == 1 else "creates" if real else "batch"
            if function == "create":
                args = args[3:]
            calls.append(encode("FCALL", f"{lib}_{function}", len(keys), *keys,
                                *layout.settings, *args, *layout.tail))
        subprocess.run(["callgrind_control", "-z", str(pid)], stdout=subprocess.DEVNULL)
        for start in range(0, len(calls), PIPELINED):
            for answer in r.pipe(calls[start:start + PIPELINED]):
                if size == 1 and real_creates(layout.rev) and not isinstance(answer, Exception):
                    answer = [answer]
                if isinstance(answer, Exception) or any(code(a) != b"claimed" for a in answer):
                    raise SystemExit(f"a batched create answered {answer}")
        subprocess.run(["callgrind_control", "-d", str(pid)], stdout=subprocess.DEVNULL)
        out.append((f"create ({size} a call)", part))
        part += 1
    return out


def finish_batches(r: Redis, lib: str, layout: Layout, n: int, pid: int, sizes: list,
                   part: int) -> list:
    """n finishes claiming nothing (each of a job of its own tenant, all of one slot group,
    claimed at its create) for each batch size: size requests a call of the service's
    `finishes` (one a call: `finish`). Answers each size and the number of its dump."""
    in_group = (t for t in (f"lc-fbatch-{i}" for i in range(10 ** 9)) if layout.group(t) == 2)
    out = []
    for size in sizes:
        jobs = [(layout.job_id(t), t) for t in itertools.islice(in_group, n)]
        for start in range(0, n, PIPELINED):
            calls = [create(lib, layout, j, t) for j, t in jobs[start:start + PIPELINED]]
            if any(code(a) != b"claimed" for a in r.pipe(calls)):
                raise SystemExit("a create for the finishes was not claimed")
        calls = []
        for start in range(0, n, size):
            if size == 1:
                calls.append(finish(lib, layout, *jobs[start], claim=False))
                continue
            # The service's own call (jobs/redis/commit.rs): every request's keys, each once,
            # then each request's group's queue and its arguments.
            keys, args = [], [min(size, n - start)]
            for job, tenant in jobs[start:start + size]:
                own = finish_args(layout, job, tenant, claim=False)
                named = layout.finish_keys(job, tenant)[1:]
                keys += [k for k in named if k not in keys]
                args += [named[0], len(own), *own]
            calls.append(encode("FCALL", f"{lib}_finishes", len(keys), *keys, *layout.settings,
                                *args, *layout.tail))
        subprocess.run(["callgrind_control", "-z", str(pid)], stdout=subprocess.DEVNULL)
        for start in range(0, len(calls), PIPELINED):
            for answer in r.pipe(calls[start:start + PIPELINED]):
                # (A call whose every request was applied answers the word alone.)
                answers = [answer] if size == 1 or isinstance(answer, bytes) else answer
                if isinstance(answer, Exception) or any(code(a) != b"applied" for a in answers):
                    raise SystemExit(f"a batched finish answered {answer}")
        subprocess.run(["callgrind_control", "-d", str(pid)], stdout=subprocess.DEVNULL)
        out.append((f"finish ({size} a call)", part))
        part += 1
    return out


def instructions(dump: str) -> int:
    with open(dump) as f:
        return next(int(line.split()[1]) for line in f if line.startswith("summary:"))


def main() -> None:
    rev = sys.argv[1] if len(sys.argv) > 1 else "HEAD"
    n = int(os.environ.get("N", 500))
    port = 20000 + os.getpid() % 20000
    work = f"/tmp/lua_cost.{port}"
    os.makedirs(work, exist_ok=True)
    out = os.environ.get("OUT", f"{work}/callgrind.out")
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "redis-server",
         "--port", str(port), "--save", "", "--appendonly", "no", "--dir", work,
         # A call slowed past 10 ms by valgrind (more often on a busy machine) would be
         # entered in the slow log: up to 4 % more instructions, varying with the load.
         "--slowlog-log-slower-than", "-1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                r = Redis(port)
                break
            except OSError:
                time.sleep(0.2)
        loaded = r.pipe([encode("FUNCTION", "LOAD", "REPLACE", library(rev, "cost"))])[0]
        if isinstance(loaded, Exception):
            raise SystemExit(f"the library did not load: {loaded}")
        layout = Layout(rev)
        lives(r, "cost", layout, WARM_UP, "warm")
        r.pipe([encode("CONFIG", "RESETSTAT")])
        subprocess.run(["callgrind_control", "-z", str(server.pid)], stdout=subprocess.DEVNULL)
        lives(r, "cost", layout, n, "measured")
        subprocess.run(["callgrind_control", "-d", str(server.pid)], stdout=subprocess.DEVNULL)
        stats = r.pipe([encode("INFO", "commandstats")])[0].decode()
        phases = []
        if os.environ.get("SPLIT"):
            phases = split(r, "cost", layout, n, server.pid)
            phases.append(("finish claiming", claiming(r, "cost", layout, n, server.pid, 5)))
        if os.environ.get("BATCH"):
            sizes = [int(size) for size in os.environ["BATCH"].split(",")]
            phases += batches(r, "cost", layout, n, server.pid, sizes, len(phases) + 2)
        if os.environ.get("FBATCH"):
            sizes = [int(size) for size in os.environ["FBATCH"].split(",")]
            phases += finish_batches(r, "cost", layout, n, server.pid, sizes, len(phases) + 2)
    finally:
        server.terminate()
        server.wait()
    print(f"{rev}: {instructions(f'{out}.1') // n:,} Redis instructions a job ({n} jobs; dump "
          f"{out}.1)")
    for name, part in phases:
        print(f"{rev}:   {name} {instructions(f'{out}.{part}') // n:,} a call (dump {out}.{part})")
    # Commands a job by name (INFO commandstats counts those inside a script one by one; the
    # polls' HGETALL and the FCALLs are among them).
    calls = {}
    for line in stats.splitlines():
        found = re.match(r"cmdstat_([^:]+):calls=(\d+)", line)
        if found and found.group(1) not in ("info", "config|resetstat"):
            calls[found.group(1)] = int(found.group(2)) / n
    listed = ", ".join(f"{name} {c:g}" for name, c in sorted(calls.items(), key=lambda c: -c[1]))
    print(f"{rev}: {sum(calls.values()):g} Redis commands a job: {listed}")


if __name__ == "__main__":
    main()
