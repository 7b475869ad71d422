//! `Keys`: every Redis key and channel name of the job store, built under one prefix, and
//! the slot groups that spread tenants over a Redis Cluster.
//!
//! Every key of one tenant carries its slot group's hash tag (`<prefix>:{<tag>}:…`), and so
//! does every job of it (a job id names its group: [`JobId::for_tenant`]): one script's keys
//! are always in one hash slot. What was one global key (the ready queue, the lease index,
//! the waiting set, the cross-tenant index and tenant picker, the per-minute counters) is one
//! per group; readers merge the groups. Inside a step, `lua/prelude.lua` builds the same
//! names from the group's base and checks each against the call's `KEYS` (every key a script
//! touches is named there: `jobs/redis/declare.rs`). Nothing here knows what a key holds
//! beyond its one-line doc.

use std::fmt::Write as _;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use super::{JobId, Kind, TenantId};

/// How many slot groups tenants are spread over. Fixed for good: a tenant's group decides
/// where all its keys live, so changing it (or [`Group::of`]'s hash) would lose every key.
pub const GROUPS: usize = 48;

/// Each group's hash tag: the shortest string (digits and lower-case letters) whose Redis
/// Cluster slot (CRC16 mod 16384) is the centre of the group's share of the slots, group `g`
/// at `(2g + 1) · 16384 / (2 · GROUPS)`. A cluster whose masters hold contiguous slot ranges
/// of equal size (as `redis-cli --cluster create` and `rebalance` leave them) then holds an
/// equal share of the groups on each master, for any number of masters up to 48 that divides
/// them evenly, and within one group of it otherwise. Data, never recomputed (a test checks
/// each slot).
const TAGS: [&str; GROUPS] = [
    "0nl", "04s", "g3n", "8c4", "003", "og", "4ba", "pt6", "653", "alq", "4x6", "61s", "8vv",
    "0ay", "2l4", "8r6", "0e9", "2ht", "47k", "4mt", "cji", "i0c", "4i4", "6dy", "gfz", "265",
    "8vh", "2hj", "22u", "e5h", "cjw", "c0h", "47u", "6dg", "6zp", "435", "k9", "gio", "0nr", "oy",
    "5f", "0j2", "k6e", "6o2", "ia7", "61m", "6kr", "alo",
];

/// A slot group: the tenants whose keys share one hash tag (one Redis Cluster slot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Group(u8);

impl Group {
    /// The tenant's group: the 64-bit FNV-1a hash of its id, modulo [`GROUPS`] (stable across
    /// builds and platforms).
    pub fn of(tenant: &TenantId) -> Self {
        let hash = tenant
            .as_str()
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325_u64, |hash, b| {
                (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
        Self((hash % GROUPS as u64) as u8)
    }

    /// The group a job id names, if it names one (`JobId::group`).
    pub fn of_job(id: &JobId) -> Option<Self> {
        id.group().filter(|g| usize::from(*g) < GROUPS).map(Self)
    }

    /// The group a job's keys live in; one that names none was created before groups and
    /// lives under the bare prefix (a single Redis), which any group's script reaches.
    pub fn of_job_or_first(id: &JobId) -> Self {
        Self::of_job(id).unwrap_or(Self(0))
    }

    /// Every group, in order.
    pub fn all() -> impl Iterator<Item = Self> {
        (0..GROUPS as u8).map(Self)
    }

    /// The group by its index (`0..GROUPS`).
    pub fn at(index: usize) -> Option<Self> {
        (index < GROUPS).then_some(Self(index as u8))
    }

    pub fn index(self) -> usize {
        usize::from(self.0)
    }

    /// The group's hash tag (without braces).
    pub fn tag(self) -> &'static str {
        TAGS[self.index()]
    }

    /// The group whose tag is `tag` (wake-ups name the group by its tag).
    pub fn from_tag(tag: &str) -> Option<Self> {
        TAGS.iter().position(|t| *t == tag).map(|i| Self(i as u8))
    }
}

/// Builds every Redis key the job store uses, under one configurable prefix. Each name is
/// made in one allocation of its length from pieces (`join`), never with `format!`: a job
/// names ~50 keys in its life, and `format!`'s growing and formatting were ~16 % of the
/// service's instructions a job (docs/performance.md).
#[derive(Clone, Debug)]
pub struct Keys {
    prefix: String,
    /// `<prefix>:{<tag>}` of each group, by index, made once.
    bases: Arc<[String]>,
}

/// The length of a job id as text (a hyphenated UUID).
const JOB_ID_LEN: usize = 36;

/// The most digits a `u64` takes in decimal.
const U64_DIGITS: usize = 20;

/// `head` then `rest` in a new string allocated once, with `room` bytes to spare for what its
/// caller writes after them.
fn join(head: &str, rest: &[&str], room: usize) -> String {
    let len = head.len() + rest.iter().map(|p| p.len()).sum::<usize>();
    let mut name = String::with_capacity(len + room);
    name.push_str(head);
    for part in rest {
        name.push_str(part);
    }
    name
}

/// `name` followed by `value` as it displays (a job id, a number), in the room `join` left.
fn ending_with(mut name: String, value: impl std::fmt::Display) -> String {
    // Writing to a `String` never fails.
    let _ = write!(name, "{value}");
    name
}

impl Keys {
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
            bases: Group::all()
                .map(|group| join(prefix, &[":{", group.tag(), "}"], 0))
                .collect(),
        }
    }

    /// The prefix every name starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `<prefix>:{<tag>}` — the start of every key of a group (the scripts build their names
    /// from it).
    pub fn base(&self, group: Group) -> String {
        self.base_of(group).to_owned()
    }

    fn base_of(&self, group: Group) -> &str {
        &self.bases[group.index()]
    }

    /// The base of the tenant's group, then `rest`.
    fn of(&self, tenant: &TenantId, rest: &[&str]) -> String {
        join(self.base_of(Group::of(tenant)), rest, 0)
    }

    /// `<prefix>:{<tag>}:<id>` — the job's hash: its record and its timeline. A job whose id
    /// names no group (created before groups) is `<prefix>:<id>`.
    pub fn job(&self, id: &JobId) -> String {
        let start = match Group::of_job(id) {
            Some(group) => self.base_of(group),
            None => &self.prefix,
        };
        ending_with(join(start, &[":"], JOB_ID_LEN), id)
    }

    /// `<prefix>:{<tag>}:lock:<tenant>:<kind>` — holds the active job's id.
    pub fn lock(&self, tenant: &TenantId, kind: &Kind) -> String {
        self.of(tenant, &[":lock:", tenant.as_str(), ":", kind.as_str()])
    }

    /// `<prefix>:{<tag>}:tenant:<tenant>` — the tenant's listing (a sorted set): its job ids
    /// scored in listing order, newest highest, and its creates this minute, `<minute>`
    /// scored by their count, below every job (`lua/prelude.lua`).
    pub fn tenant(&self, tenant: &TenantId) -> String {
        self.of(tenant, &[":tenant:", tenant.as_str()])
    }

    /// `<prefix>:{<tag>}:tenant:<tenant>:gone` — the tenant's tombstone: the store's time (ms)
    /// of its last delete, kept for the job TTL. Writes of runs and imports begun before it
    /// are refused (`jobs::fence`), and so is writing back a record of a job created before it.
    pub fn gone(&self, tenant: &TenantId) -> String {
        self.of(tenant, &[":tenant:", tenant.as_str(), ":gone"])
    }

    /// `<prefix>:{<tag>}:tenant:<tenant>:idem` — the names of the tenant's idempotency keys
    /// (a set), so a delete finds the keys its clients named.
    pub fn tenant_idem(&self, tenant: &TenantId) -> String {
        self.of(tenant, &[":tenant:", tenant.as_str(), ":idem"])
    }

    /// `<prefix>:{<tag>}:idem:<tenant>:<kind>:<key>` — an `Idempotency-Key`'s job id and
    /// params fingerprint (hash), with the job's TTL.
    pub fn idem(&self, tenant: &TenantId, kind: &Kind, key: &str) -> String {
        self.of(
            tenant,
            &[":idem:", tenant.as_str(), ":", kind.as_str(), ":", key],
        )
    }

    /// `<prefix>:{<tag>}:queue` — the group's ready queue: ids of queued jobs, oldest first.
    /// Every script call names it first (`FCALL … <n> <queue> <migrating> …`): a cluster routes the
    /// call by it.
    pub fn queue(&self, group: Group) -> String {
        join(self.base_of(group), &[":queue"], 0)
    }

    /// `<prefix>:{<tag>}:migrating` — never written, never read: every script call names it
    /// second (`FCALL … <n> <queue> <migrating> …`) so that a Redis Cluster never runs the call
    /// while the group's slot is being moved. Redis looks for a call's named keys only while
    /// their slot migrates, and runs a call naming several keys only on the node that holds
    /// them all. This one is absent everywhere, so the call is answered `ASK`/`TRYAGAIN` until
    /// `CLUSTER SETSLOT … NODE` ends the move, then `MOVED` to the node that now holds every
    /// key of the group (docs/operations.md, "Resharding"). On a stable slot Redis does not
    /// look it up: it costs an argument.
    pub fn migrating(&self, group: Group) -> String {
        join(self.base_of(group), &[":migrating"], 0)
    }

    /// `<prefix>:{<tag>}:waiting` — the group's jobs waiting for their tenant's job ahead of
    /// them (a set; they are not in the ready queue until it ends).
    pub fn waiting(&self, group: Group) -> String {
        join(self.base_of(group), &[":waiting"], 0)
    }

    /// `<prefix>:{<tag>}:lane:<tenant>` — the tenant's ordered jobs that have not ended,
    /// oldest first (the head may run; each other waits for the one before it).
    pub fn lane(&self, tenant: &TenantId) -> String {
        self.of(tenant, &[":lane:", tenant.as_str()])
    }

    /// `<prefix>:{<tag>}:leases` — the group's running jobs' ids scored by lease expiry (ms).
    pub fn leases(&self, group: Group) -> String {
        join(self.base_of(group), &[":leases"], 0)
    }

    /// `<prefix>:tenant:<tenant>:events` — the pub/sub channel of a tenant's job changes
    /// (one JSON message per timeline event). A channel, not a key: no slot.
    pub fn tenant_events(&self, tenant: &TenantId) -> String {
        join(&self.prefix, &[":tenant:", tenant.as_str(), ":events"], 0)
    }

    /// `<prefix>:{<tag>}:stats:<hour>` — the group's jobs ended in each minute of that hour
    /// (since the epoch): a hash of `<minute>:<kind>:<outcome>` → count, expiring 26 hours
    /// after the hour began.
    pub fn stats(&self, group: Group, hour: u64) -> String {
        ending_with(join(self.base_of(group), &[":stats:"], U64_DIGITS), hour)
    }

    /// `<prefix>:{<tag>}:everyone` — the group's newest jobs (`browse`): a sorted set of
    /// `<ms>.<id>` at one score, ordered by name, trimmed to `EVERYONE_CAP` by create.lua
    /// every 64 creates (`TRIM_EVERY` in prelude.lua); a listing's walk drops the entries of
    /// gone jobs it meets (unlist.lua). A read merges the groups' sets.
    pub fn everyone(&self, group: Group) -> String {
        join(self.base_of(group), &[":everyone"], 0)
    }

    /// `<prefix>:{<tag>}:tenants` — the group's part of the tenant picker: tenant ids scored
    /// by their last create (ms), trimmed to `PICKER_CAP` by create.lua every 64 creates;
    /// purge.lua removes a tenant. A read merges the groups' sets.
    pub fn recent_tenants(&self, group: Group) -> String {
        join(self.base_of(group), &[":tenants"], 0)
    }

    /// `<prefix>:bulk:<slot>` — a bulk call's answer kept for its `Idempotency-Key` (slot:
    /// action, caller and key): `fingerprint` and `answer`, expiring after `JOB_TTL_SECONDS`.
    /// Written and read alone, so it needs no group.
    pub fn bulk(&self, slot: &str) -> String {
        join(&self.prefix, &[":bulk:", slot], 0)
    }

    /// `<prefix>:{<tag of group 0>}:processes` — the process registry: `<started_ms>:<host/pid>`
    /// scored by its last heartbeat (ms, the store's clock); entries older than the stale
    /// threshold are dropped by every renewal. It lives in the first group: every heartbeat
    /// renews there (renew.lua).
    pub fn processes(&self) -> String {
        join(self.base_of(Group(0)), &[":processes"], 0)
    }

    /// `<prefix>:events` — the pub/sub channel (`wake:<tag>`, `cancel:<id>`, `end:<id>`).
    pub fn events(&self) -> String {
        join(&self.prefix, &[":events"], 0)
    }
}

/// A hash for tables of names this service makes (a batch's key names, metric handles by
/// label): Fx's, a word at a time. std's SipHash resists a client who fills a table with
/// colliding names, which these tables (a few dozen names, or a fixed set) do not need, at
/// ~2 % of the service's instructions a job in a create burst.
pub type NameHash = BuildHasherDefault<NameHasher>;

/// The hasher of [`NameHash`].
#[derive(Default)]
pub struct NameHasher(u64);

impl NameHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for NameHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            self.add(u64::from_le_bytes(word.try_into().unwrap_or_default()));
        }
        let mut last = [0u8; 8];
        last[..words.remainder().len()].copy_from_slice(words.remainder());
        self.add(u64::from_le_bytes(last));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Redis Cluster's key slot of a hash tag: CRC16 (XMODEM) modulo 16384.
    fn slot(tag: &str) -> u16 {
        let crc = tag.bytes().fold(0u16, |mut crc, b| {
            crc ^= u16::from(b) << 8;
            for _ in 0..8 {
                crc = if crc & 0x8000 != 0 {
                    (crc << 1) ^ 0x1021
                } else {
                    crc << 1
                };
            }
            crc
        });
        crc % 16384
    }

    #[test]
    fn the_slot_function_is_redis_clusters() {
        // Known values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(slot("123456789"), 0x31c3);
        assert_eq!(slot("foo"), 12182);
    }

    #[test]
    fn each_groups_tag_lands_at_the_centre_of_its_share_of_the_slots() {
        for group in Group::all() {
            let centre = (2 * group.index() + 1) * 16384 / (2 * GROUPS);
            assert_eq!(usize::from(slot(group.tag())), centre, "{group:?}");
            assert_eq!(Group::from_tag(group.tag()), Some(group));
        }
    }

    #[test]
    fn every_key_of_a_tenant_and_of_its_jobs_carries_its_groups_tag() {
        let keys = Keys::new("job");
        let tenant = TenantId::parse("acme").unwrap();
        let kind = Kind::parse("sync").unwrap();
        let group = Group::of(&tenant);
        let id = JobId::for_tenant(&tenant);
        assert_eq!(Group::of_job(&id), Some(group));
        let tag = format!("{{{}}}", group.tag());
        for key in [
            keys.job(&id),
            keys.lock(&tenant, &kind),
            keys.tenant(&tenant),
            keys.gone(&tenant),
            keys.tenant_idem(&tenant),
            keys.idem(&tenant, &kind, "k"),
            keys.lane(&tenant),
            keys.queue(group),
            keys.migrating(group),
            keys.leases(group),
            keys.waiting(group),
            keys.everyone(group),
            keys.recent_tenants(group),
            keys.stats(group, 7),
        ] {
            assert!(key.starts_with(&format!("job:{tag}:")), "{key}");
        }
    }

    /// Every builder against the name it gave before it was written without `format!`: a
    /// tenant of every odd character a tenant id may hold, a job id naming a group (the hash-tag
    /// form every key of a cluster has) and one naming none (under the bare prefix), a prefix
    /// with a space. A key spelled differently would lose every job already stored.
    #[test]
    fn each_builder_gives_the_very_name_it_gave_with_format() {
        let keys = Keys::new("my app");
        let odd = TenantId::parse("Ac-_.9z").unwrap();
        let kind = Kind::parse("enrich_2").unwrap();
        let grouped = JobId::parse("4f1c2d3e-1a2b-8c3d-9e4f-5a6b7c8d9e07").unwrap();
        let bare = JobId::parse("4f1c2d3e-0000-4000-8000-000000000000").unwrap();
        let group = Group::of(&odd);
        let last = Group::at(GROUPS - 1).unwrap();
        let table = [
            (keys.base(group), "my app:{6kr}"),
            (
                keys.job(&grouped),
                "my app:{pt6}:4f1c2d3e-1a2b-8c3d-9e4f-5a6b7c8d9e07",
            ),
            (
                keys.job(&bare),
                "my app:4f1c2d3e-0000-4000-8000-000000000000",
            ),
            (keys.lock(&odd, &kind), "my app:{6kr}:lock:Ac-_.9z:enrich_2"),
            (keys.tenant(&odd), "my app:{6kr}:tenant:Ac-_.9z"),
            (keys.gone(&odd), "my app:{6kr}:tenant:Ac-_.9z:gone"),
            (keys.tenant_idem(&odd), "my app:{6kr}:tenant:Ac-_.9z:idem"),
            (
                keys.idem(&odd, &kind, "k:1 é"),
                "my app:{6kr}:idem:Ac-_.9z:enrich_2:k:1 é",
            ),
            (keys.queue(group), "my app:{6kr}:queue"),
            (keys.migrating(last), "my app:{alo}:migrating"),
            (keys.waiting(group), "my app:{6kr}:waiting"),
            (keys.lane(&odd), "my app:{6kr}:lane:Ac-_.9z"),
            (keys.leases(last), "my app:{alo}:leases"),
            (keys.tenant_events(&odd), "my app:tenant:Ac-_.9z:events"),
            (keys.stats(group, 493_827), "my app:{6kr}:stats:493827"),
            (keys.stats(last, 0), "my app:{alo}:stats:0"),
            (keys.everyone(group), "my app:{6kr}:everyone"),
            (keys.recent_tenants(last), "my app:{alo}:tenants"),
            (keys.bulk("retry:ops:k1"), "my app:bulk:retry:ops:k1"),
            (keys.processes(), "my app:{0nl}:processes"),
            (keys.events(), "my app:events"),
        ];
        for (built, expected) in table {
            assert_eq!(built, expected);
        }
    }

    #[test]
    fn a_job_id_without_a_group_keeps_its_key_under_the_bare_prefix() {
        let id = JobId::parse("4f1c2d3e-0000-4000-8000-000000000000").unwrap();
        assert_eq!(Group::of_job(&id), None);
        assert_eq!(Keys::new("job").job(&id), format!("job:{id}"));
    }

    #[test]
    fn a_thousand_tenants_spread_over_the_groups_within_a_quarter_of_the_mean() {
        let mut counts = [0usize; GROUPS];
        for n in 0..1000 {
            counts[Group::of(&TenantId::parse(&format!("tenant-{n}")).unwrap()).index()] += 1;
        }
        // Over three masters (16 groups each), as the cluster balance test spreads them.
        for master in counts.chunks(GROUPS / 3) {
            let n: usize = master.iter().sum();
            assert!((250..=416).contains(&n), "{counts:?}");
        }
    }
}
