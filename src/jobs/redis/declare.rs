//! What each script call names in `KEYS`: its slot group's two keys (`Route`), then the keys
//! the step may touch. A script (`scripts.rs`) touches no other, so the names here
//! are the ones the prelude's builders make (`k_job`, `k_lock`, …), from what the caller
//! knows or reads first: a run's `Facts`, written at its create and never changed. The keys a
//! step touches most come first (its group's lease index, waiting set and stats bucket, its
//! job's record, lock and lane, a create's listing): a script compares the first nine by
//! identity and makes a set of the rest only when it meets one (`declared` in the prelude).

use std::collections::{BTreeMap, HashMap};
use std::sync::PoisonError;

use futures_util::future::try_join_all;

use super::super::keys::Group;
use super::super::store::{NewJob, RunId, StoreError};
use super::super::{now_ms, JobId, Kind, TenantId};
use super::record::Field;
use super::scripts;
use super::{bounded_on, RedisStore};
use crate::topology::{Connection, Primary};

/// How many calls a step whose keys keep changing under it (each answered `stale`: the keys
/// it met that the call left out) is given before it counts as the store being unavailable.
/// A lane or a lease index that changed between two calls costs one more; five in a row is
/// not a race but a store that answers nonsense.
pub(super) const STALE_TRIES: usize = 5;

/// How many jobs this process's creates add to a queue's head kept here: HEAD_NAMED in
/// lua/prelude.lua, the head a claim answers at least.
const HEAD_KEPT: usize = 4;

/// The names a `stale` answer lists, or none for any other answer. Only the first word is
/// read of any other answer (a finish's carries the next job's whole record).
fn stale_names(answer: &redis::Value) -> Option<Vec<String>> {
    let redis::Value::Array(items) = answer else {
        return None;
    };
    let (first, names) = items.split_first()?;
    let stale = match first {
        redis::Value::BulkString(word) => word == b"stale",
        redis::Value::SimpleString(word) => word == "stale",
        _ => false,
    };
    if !stale {
        return None;
    }
    names
        .iter()
        .map(|name| redis::from_redis_value_ref(name).ok())
        .collect()
}

/// A step's answer read as `T`; none when it was `stale`, its names added to `declared` for
/// the next call (`STALE_TRIES` at most: then `stale_too_often`).
pub(super) fn read_unless_stale<T: redis::FromRedisValue>(
    answer: redis::Value,
    declared: &mut Vec<String>,
) -> Option<Result<T, StoreError>> {
    let Some(names) = stale_names(&answer) else {
        return Some(
            redis::from_redis_value(answer).map_err(|e| StoreError::Corrupt(e.to_string())),
        );
    };
    for name in names {
        if !declared.contains(&name) {
            declared.push(name);
        }
    }
    None
}

/// A step that answered `stale` at each of `STALE_TRIES` calls: not a race but a store that
/// answers nonsense, counted as unavailable.
pub(super) fn stale_too_often(function: &str) -> StoreError {
    StoreError::Unavailable(format!(
        "{function} met other keys at each of {STALE_TRIES} calls"
    ))
}

/// The fields `Facts` are read from, in its order.
const FACT_FIELDS: [Field; 4] = [Field::Tenant, Field::Kind, Field::InOrder, Field::Pipeline];

/// What a job's record says of it, written at its create and never changed since, that
/// names the keys a step about it touches: its tenant and kind (its lock), whether it runs in
/// its tenant's order (its lane), the pipeline it is a step of (that record).
pub(super) struct Facts {
    pub(super) tenant: TenantId,
    kind: Kind,
    in_order: bool,
    pipeline: Option<JobId>,
}

impl Facts {
    /// A job's facts as the run that holds it knows them (its claim carried them).
    pub(super) fn of(job: &NewJob) -> Self {
        Self {
            tenant: job.tenant.clone(),
            kind: job.kind.clone(),
            in_order: job.in_order,
            pipeline: job.pipeline,
        }
    }

    /// From `FACT_FIELDS` as read; none for a missing record (or one this build cannot read:
    /// its step then touches nothing but its record, and its guard says so if it would).
    fn from_fields([tenant, kind, in_order, pipeline]: [Option<String>; 4]) -> Option<Self> {
        Some(Self {
            tenant: TenantId::parse(&tenant?).ok()?,
            kind: Kind::parse(&kind?).ok()?,
            in_order: in_order.is_some(),
            pipeline: pipeline.and_then(|p| JobId::parse(&p).ok()),
        })
    }
}

impl RedisStore {
    /// The route of a call in `group`, declaring no key beyond the group's (its queue, and on
    /// a cluster its migrating key: a single Redis's calls name none, `Route`).
    pub(super) fn route(&self, group: Group) -> scripts::Route {
        let cluster = self.on_cluster();
        scripts::Route {
            queue: self.keys.queue(group),
            migrating: match cluster {
                true => self.keys.migrating(group),
                false => String::new(),
            },
            declared: Vec::new(),
            cluster,
        }
    }

    /// A call of `function` about job `id`, in the group its id names, declaring its record.
    pub(super) fn call_for(&self, function: &scripts::Function, id: &JobId) -> scripts::Call {
        let group = Group::of_job_or_first(id);
        let route = self.route(group).with(self.record(id));
        scripts::invocation(function, &self.settings, route)
    }

    /// The record of job `id` as a script of its group reaches it (`k_job` in the prelude):
    /// `Keys::job`, except that on a cluster an id naming no group is looked for in the
    /// call's own slot (every job there was made with an id naming its group).
    pub(super) fn record(&self, id: &JobId) -> String {
        self.record_in(Group::of_job_or_first(id), id)
    }

    /// The record of job `id` as a script called in `group` reaches it (see `record`).
    pub(super) fn record_in(&self, group: Group, id: &JobId) -> String {
        match Group::of_job(id) {
            None if self.on_cluster() => format!("{}:{id}", self.keys.base(group)),
            _ => self.keys.job(id),
        }
    }

    /// What each run's record says of it that decides the keys a step about it touches
    /// (`Facts`), in the runs' order: one pipeline of `HMGET`s for each group the ids name,
    /// all in flight together. Written when the job was created and never changed, so what is
    /// read here still holds when the step runs; a record read as missing has none (the step
    /// then touches no key of it but its record).
    pub(super) async fn facts_of(&self, runs: &[RunId]) -> Result<Vec<Option<Facts>>, StoreError> {
        let mut groups: BTreeMap<Group, Vec<JobId>> = BTreeMap::new();
        for run in runs {
            let group = Group::of_job_or_first(&run.id);
            groups.entry(group).or_default().push(run.id);
        }
        let conn = self.connection().await?;
        let reads = groups.into_values().map(|ids| {
            let mut pipe = redis::pipe();
            for id in &ids {
                pipe.cmd("HMGET")
                    .arg(self.record(id))
                    .arg(&FACT_FIELDS.map(Field::name));
            }
            let mut conn = conn.clone();
            async move {
                let read: Vec<[Option<String>; 4]> =
                    self.bounded(pipe.query_async(&mut conn)).await?;
                Ok::<_, StoreError>(ids.into_iter().zip(read).collect::<Vec<_>>())
            }
        });
        let read: HashMap<JobId, [Option<String>; 4]> =
            try_join_all(reads).await?.into_iter().flatten().collect();
        Ok(runs
            .iter()
            .map(|run| read.get(&run.id).cloned().and_then(Facts::from_fields))
            .collect())
    }

    /// The keys of a run's tenant a step about it may touch beside its record: its lock, its
    /// tenant's lane (an ordered job), its pipeline's record (a step).
    pub(super) fn run_keys(&self, facts: &Facts) -> Vec<String> {
        let mut keys = vec![self.keys.lock(&facts.tenant, &facts.kind)];
        if facts.in_order {
            keys.push(self.keys.lane(&facts.tenant));
        }
        if let Some(pipeline) = &facts.pipeline {
            keys.push(self.record(pipeline));
        }
        keys
    }

    /// The stats bucket of this hour (by the store's clock as last read, else this
    /// process's): a step that ends a job counts it there (`count_end`); should the hour
    /// have turned, the script's `stale` answer names the next one.
    pub(super) fn stats_now(&self, group: Group) -> String {
        let ms = self.clock.now_ms().unwrap_or_else(now_ms);
        self.keys.stats(group, ms / 3_600_000)
    }

    /// Calls `function` in `group` naming `declared` (after the group's two keys), with the
    /// arguments `args` adds; a `stale` answer (the step met keys the call left out, and wrote
    /// nothing) is followed by the same call naming those too, up to `STALE_TRIES` calls.
    pub(super) async fn call_declaring<T: redis::FromRedisValue>(
        &self,
        function: &scripts::Function,
        group: Group,
        declared: Vec<String>,
        args: impl Fn(&mut scripts::Call),
    ) -> Result<T, StoreError> {
        let mut conn = self.connection().await?;
        let on = (&self.primary, &mut conn);
        self.call_declaring_on(on, function, group, declared, args)
            .await
    }

    /// `call_declaring` over `conn`, a connection of `primary` (a create's or a finish's own,
    /// which waits for replicas after it).
    pub(super) async fn call_declaring_on<T: redis::FromRedisValue>(
        &self,
        (primary, conn): (&Primary, &mut Connection),
        function: &scripts::Function,
        group: Group,
        mut declared: Vec<String>,
        args: impl Fn(&mut scripts::Call),
    ) -> Result<T, StoreError> {
        for _ in 0..STALE_TRIES {
            let mut route = self.route(group);
            route.declared.clone_from(&declared);
            let mut inv = scripts::invocation(function, &self.settings, route);
            args(&mut inv);
            let answer: redis::Value = bounded_on(primary, inv.invoke_async(conn)).await?;
            if let Some(read) = read_unless_stale(answer, &mut declared) {
                return read;
            }
        }
        Err(stale_too_often(&function.name()))
    }

    /// The keys a step in `group` that may end job `id` touches whatever the job (its record,
    /// the group's lease index, waiting set and stats bucket): what such a call names at
    /// first; the job's facts (`run_keys`) or a `stale` answer add its lock, lane, pipeline.
    pub(super) fn ending(&self, group: Group, id: &JobId) -> Vec<String> {
        vec![
            self.record(id),
            self.keys.leases(group),
            self.keys.waiting(group),
            self.stats_now(group),
        ]
    }

    /// The jobs at `group`'s queue's head, as the last claim there answered it: a call that
    /// may claim names their records.
    pub(super) fn head_of(&self, group: Group) -> Vec<JobId> {
        let heads = self.heads.lock().unwrap_or_else(PoisonError::into_inner);
        heads[group.index()].clone()
    }

    /// The records of the jobs at `group`'s queue's head (`head_of`).
    pub(super) fn head_records(&self, group: Group) -> Vec<String> {
        self.head_of(group)
            .iter()
            .map(|id| self.record(id))
            .collect()
    }

    /// Keeps `group`'s queue's head as a claim answered it (`{'head', id…}`: claim.lua), and
    /// answers it.
    pub(super) fn learn_head(
        &self,
        group: Group,
        answer: &[String],
    ) -> Result<Vec<JobId>, StoreError> {
        let head = match answer.split_first() {
            Some((word, ids)) if word == "head" => ids.iter().map(|id| JobId::parse(id)),
            _ => return Err(StoreError::Corrupt("a claim answered no queue head".into())),
        };
        let head: Vec<JobId> = head
            .collect::<Result<_, _>>()
            .map_err(|_| StoreError::Corrupt("a queue's head named no job id".into()))?;
        let mut heads = self.heads.lock().unwrap_or_else(PoisonError::into_inner);
        heads[group.index()].clone_from(&head);
        Ok(head)
    }

    /// Adds job `id` to `group`'s queue's head kept here, while it is short: this process's
    /// create put the job at the queue's tail, so the next claim there names its record and
    /// takes it in one call (a head it had not named would be answered first, and a second
    /// call made).
    pub(super) fn queued_here(&self, group: Group, id: JobId) {
        let mut heads = self.heads.lock().unwrap_or_else(PoisonError::into_inner);
        let head = &mut heads[group.index()];
        if head.len() < HEAD_KEPT && !head.contains(&id) {
            head.push(id);
        }
    }

    /// The group a call about a run's job goes to: the one its id names, or for a job whose
    /// id names none (a single Redis's, made before groups), its tenant's, where its lock and
    /// lease are.
    pub(super) fn run_group(job: &NewJob) -> Group {
        Group::of_job(&job.id).unwrap_or_else(|| Group::of(&job.tenant))
    }

    /// What a create of `jobs` (the first is `first`, the job the request named) in `group`
    /// names at first: the tenant's listing, the group's waiting set, lease index, index of
    /// everyone's jobs, tenant picker and stats bucket, each job's record and lock, the lane
    /// (an ordered job), then the idempotency key and its set and the job it retries. A lone
    /// job's keys are then all among the nine a script finds without a table (`declared` in
    /// lua/prelude.lua). A `stale` answer adds what it learns as it runs (a holder, the jobs
    /// in the lane, the jobs the listing's cap trims).
    pub(super) fn creating<'a>(
        &self,
        group: Group,
        first: &NewJob,
        jobs: impl Iterator<Item = &'a NewJob>,
    ) -> Vec<String> {
        let tenant = &first.tenant;
        let mut keys = vec![
            self.keys.tenant(tenant),
            self.keys.waiting(group),
            self.keys.leases(group),
            self.keys.everyone(group),
            self.keys.recent_tenants(group),
            self.stats_now(group),
        ];
        let mut ordered = false;
        for job in jobs {
            keys.push(self.record(&job.id));
            keys.push(self.keys.lock(tenant, &job.kind));
            ordered |= job.in_order;
        }
        if ordered {
            keys.push(self.keys.lane(tenant));
        }
        if let Some(key) = &first.idempotency_key {
            keys.push(self.keys.idem(tenant, &first.kind, key));
            keys.push(self.keys.tenant_idem(tenant));
        }
        if let Some(old) = &first.origin.retry_of {
            keys.push(self.record_in(group, old));
        }
        keys
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::stale_names;

    fn bulk(word: &str) -> Value {
        Value::BulkString(word.as_bytes().to_vec())
    }

    #[test]
    fn a_stale_answer_lists_its_names_and_no_other_answer_does() {
        let stale = Value::Array(vec![bulk("stale"), bulk("a:{x}:lock"), bulk("a:{x}:lane")]);
        assert_eq!(
            stale_names(&stale),
            Some(vec!["a:{x}:lock".to_owned(), "a:{x}:lane".to_owned()])
        );
        let simple = Value::Array(vec![Value::SimpleString("stale".into())]);
        assert_eq!(stale_names(&simple), Some(vec![]));
        // Any other answer, whatever follows its first word (a finish's next job, numbers).
        let done = Value::Array(vec![bulk("done"), Value::Int(3), bulk("stale")]);
        assert_eq!(stale_names(&done), None);
        assert_eq!(stale_names(&Value::Array(vec![])), None);
        assert_eq!(stale_names(&bulk("stale")), None);
    }
}
