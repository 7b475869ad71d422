//! The store's writes: each operation is one script call (`scripts.rs`), its arguments built
//! from the job's fields by name (`record.rs`) and its answer read into the store's values.
//!
//! The keys each call names are `declare.rs`'s: its slot group's queue and never-written
//! `migrating` key, then every key its step may touch (a `stale` answer adds those it learnt
//! as it ran). A call about a tenant or one of its jobs goes to the tenant's group; a
//! heartbeat, a recovery sweep and the dispatcher's claims go to each group they concern.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures_util::future::try_join_all;
use serde_json::Value;

use super::super::browse::{self, Position};
use super::super::keys::Group;
use super::super::store::{
    Cancel, Claim, Finish, Live, Outcome, Purge, Recovered, Release, Renewal, Restore, RunEnd,
    RunId, RunRef, StoreError, Tick,
};
use super::super::{worker_name, JobId, Kind, TenantId};
use super::claims::claim_from;
use super::commit::{Step, StepCall};
use super::declare::{read_unless_stale, Facts};
use super::record::{Field, Pairs};
use super::scripts::{self, unexpected, Code};
use super::RedisStore;

/// How many expired leases one recovery step handles: bounds the script's run time; the
/// rest wait for the next sweep.
const RECOVER_BATCH: usize = 100;

impl RedisStore {
    /// unlist.lua once for each group the entries' ids name, all in flight together: each
    /// drops an entry of its group's index only while the job's record does not exist. An id
    /// naming no group (made before groups) is left to the index's trim.
    pub(super) async fn unlist_gone(&self, gone: &[Position]) -> Result<u64, StoreError> {
        let mut groups: BTreeMap<Group, Vec<&Position>> = BTreeMap::new();
        for entry in gone {
            if let Some(group) = Group::of_job(&entry.1) {
                groups.entry(group).or_default().push(entry);
            }
        }
        let calls = groups.into_iter().map(|(group, entries)| {
            let mut declared = vec![self.keys.everyone(group)];
            declared.extend(entries.iter().map(|e| self.record_in(group, &e.1)));
            self.call_declaring::<u64>(&scripts::UNLIST, group, declared, move |inv| {
                for (ms, id) in &entries {
                    inv.arg(browse::index_member(*ms, id));
                }
            })
        });
        Ok(try_join_all(calls).await?.into_iter().sum())
    }

    /// Notes that `group`'s queue may have work: this process's own step may have put a job
    /// there (a create, a release, an end that let the next job of its tenant go), which
    /// its dispatcher claims without waiting for the wake-up to come back.
    pub(super) fn mark(&self, group: Group) {
        self.pending.fetch_or(1 << group.index(), Ordering::AcqRel);
    }

    /// Runs a script that answers one code word, on the shared connection.
    async fn code(&self, inv: scripts::Call) -> Result<Code, StoreError> {
        let mut conn = self.connection().await?;
        let word: String = self.bounded(inv.invoke_async(&mut conn)).await?;
        Code::parse(&word)
    }

    pub(super) async fn tick_run(
        &self,
        run: &RunId,
        percent: u8,
        step: &str,
    ) -> Result<Tick, StoreError> {
        let mut inv = self.call_for(&scripts::TICK, &run.id);
        inv.arg(run.id.to_string())
            .arg(run.claim)
            .arg(percent.min(100))
            .arg(step);
        Ok(match self.code(inv).await? {
            Code::Applied => Tick::Applied,
            Code::Missing => Tick::Missing,
            Code::Ended | Code::Fenced => Tick::Fenced,
            other => return Err(unexpected(other)),
        })
    }

    /// renew.lua once for each group the runs are in, and for the first group (it holds the
    /// process registry, renewed there), the calls in flight together; each names the keys
    /// its runs' records say they touch (`facts_of`, read first).
    pub(super) async fn renew_runs(&self, runs: &[RunId]) -> Result<Vec<Renewal>, StoreError> {
        let first = Group::at(0).expect("there is a first group");
        let mut groups: BTreeMap<Group, Vec<(&RunId, Option<Facts>)>> =
            BTreeMap::from([(first, Vec::new())]);
        for (run, facts) in runs.iter().zip(self.facts_of(runs).await?) {
            // A job whose id names no group (a single Redis's, made before groups) is renewed
            // in its tenant's group, where its lock and lease are.
            let group = Group::of_job(&run.id)
                .or(facts.as_ref().map(|f| Group::of(&f.tenant)))
                .unwrap_or(first);
            groups.entry(group).or_default().push((run, facts));
        }
        let calls = groups.into_iter().map(|(group, runs)| async move {
            let mut route = self.route(group);
            if group == first {
                route = route.with(self.keys.processes());
            }
            if !runs.is_empty() {
                route = route.with(self.keys.leases(group));
            }
            for (run, facts) in &runs {
                route = route.with(self.record(&run.id));
                if let Some(facts) = facts {
                    route.declared.extend(self.run_keys(facts));
                }
            }
            let mut inv = scripts::invocation(&scripts::RENEW, &self.settings, route);
            match group == first {
                true => inv.arg(self.process.member()),
                false => inv.arg(""),
            };
            for (run, _) in &runs {
                inv.arg(run.id.to_string()).arg(run.claim);
            }
            let mut conn = self.connection().await?;
            let words: Vec<String> = self.bounded(inv.invoke_async(&mut conn)).await?;
            if words.len() != runs.len() {
                return Err(StoreError::Corrupt("renew answered a run short".into()));
            }
            Ok(runs
                .iter()
                .map(|(run, _)| run.id)
                .zip(words)
                .collect::<Vec<_>>())
        });
        let answered: BTreeMap<JobId, String> =
            try_join_all(calls).await?.into_iter().flatten().collect();
        runs.iter()
            .map(|run| match Code::parse(&answered[&run.id])? {
                Code::Held => Ok(Renewal::Held),
                Code::CancelRequested => Ok(Renewal::CancelRequested),
                Code::Missing => Ok(Renewal::Missing),
                Code::Fenced => Ok(Renewal::Fenced),
                other => Err(unexpected(other)),
            })
            .collect()
    }

    /// finish.lua; with `next` (a worker and the kinds it runs), the worker's next job is
    /// claimed in the same step.
    pub(super) async fn finish_run(
        &self,
        end: RunEnd<'_>,
        next: Option<(&str, &[Kind])>,
    ) -> Result<(Finish, Option<Claim>), StoreError> {
        let ended = outcome_pairs(end.outcome);
        let group = Self::run_group(end.of.job);
        let claim = next.and_then(|(worker, kinds)| self.finish_claim(group, worker, kinds));
        let mut declared = self.ending(group, &end.of.job.id);
        declared.extend(self.run_keys(&Facts::of(end.of.job)));
        if let Some(claim) = &claim {
            declared.extend(self.claim_keys(group, claim));
        }
        let mut conn = self.write_connection().await?;
        // A finish that claims nothing goes in its lane's next call (`commit.rs`), beside the
        // finishes sent meanwhile; one that met keys it did not name, or whose record is
        // missing, wrote nothing and is made again alone.
        let mut answer = match claim {
            None => self
                .finish_committed(group, &mut declared, end.of, end.percent, &ended)
                .await
                .transpose(),
            Some(_) => None,
        };
        let missing = |answer: &Result<Vec<redis::Value>, StoreError>| matches!(answer.as_deref(), Ok([redis::Value::BulkString(w), ..]) if w == b"missing");
        // The job's own fields go only to a finish whose record is missing (it answers
        // `missing`, having written nothing), to write the record back.
        let wholes: &[bool] = match &answer {
            None => &[false, true],
            Some(answered) if missing(answered) => &[true],
            Some(_) => &[],
        };
        for &whole in wholes {
            let on = (self.writer(), &mut conn);
            let answered = self
                .call_declaring_on(on, &scripts::FINISH, group, declared.clone(), |inv| {
                    scripts::append_run(inv, end.of, end.percent, whole);
                    ended.append_to(inv);
                    held_fields(inv, end.of);
                    self.claim_args(group, claim.as_ref(), inv);
                })
                .await;
            let done = !missing(&answered);
            answer = Some(answered);
            if done {
                break;
            }
        }
        let answer = answer.expect("a finish is called at least once");
        // A call that failed may or may not have claimed: its group's mark is set again.
        let (finish, claimed, head, released) =
            answer.and_then(finish_answer).inspect_err(|_| {
                if let Some(claim) = &claim {
                    self.mark(claim.from);
                }
            })?;
        if released {
            self.mark(group);
        }
        let next = match claimed.is_empty() {
            true => None,
            false => Some(claim_from(&claimed)?),
        };
        // A finish that did not apply claimed nothing and read no queue: its group's mark is
        // set again, as before the call.
        match &claim {
            Some(claim) if finish == Finish::Applied => {
                self.claimed_in(claim.from, next.is_some(), &head)?
            }
            Some(claim) => self.mark(claim.from),
            None => {}
        }
        // Not acknowledged: the runner retries, the script answers `AlreadyEnded` and
        // this waits again, until the outcome is on the replicas or the retries end.
        if finish != Finish::Fenced {
            self.replicated(&mut conn, &self.keys.job(&end.of.job.id), None)
                .await?;
        }
        Ok((finish, next))
    }

    /// A finish that claims nothing (finish.lua, without the job's fields), in its lane's next
    /// call (`Step::Finish`): its answer, or none when it answered `stale` (the names it met
    /// are added to `declared`) and wrote nothing.
    async fn finish_committed(
        &self,
        group: Group,
        declared: &mut Vec<String>,
        of: RunRef<'_>,
        percent: u8,
        ended: &Pairs,
    ) -> Result<Option<Vec<redis::Value>>, StoreError> {
        let mut args = scripts::Call::arguments();
        scripts::append_run(&mut args, of, percent, false);
        ended.append_to(&mut args);
        held_fields(&mut args, of);
        let call = StepCall {
            step: Step::Finish,
            group,
            declared: Arc::new(declared.clone()),
            args: Arc::new(args),
        };
        let answer = self.step_call(call).await?;
        read_unless_stale(answer, declared).transpose()
    }

    pub(super) async fn expect_end_of(&self, id: &JobId) -> Result<(), StoreError> {
        let mut inv = self.call_for(&scripts::AWAITED, id);
        inv.arg(id.to_string());
        match self.code(inv).await? {
            Code::Applied | Code::Missing => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    pub(super) async fn restore_run(
        &self,
        run: RunRef<'_>,
        live: &Live,
    ) -> Result<Restore, StoreError> {
        let run_percent = live.percent;
        let group = Self::run_group(run.job);
        let (tenant, kind) = (&run.job.tenant, &run.job.kind);
        let declared = vec![
            self.record(&run.job.id),
            self.keys.leases(group),
            self.keys.everyone(group),
            self.keys.lock(tenant, kind),
            self.keys.gone(tenant),
            self.keys.tenant(tenant),
        ];
        let live = Pairs::default()
            .with(Field::Step, &live.step)
            .with(Field::Attempt, live.attempt)
            .with(Field::Worker, worker_name());
        let word: String = self
            .call_declaring(&scripts::RESTORE, group, declared, |inv| {
                scripts::append_run(inv, run, run_percent, true);
                live.append_to(inv);
            })
            .await?;
        Ok(match Code::parse(&word)? {
            Code::Restored => Restore::Restored,
            Code::Present => Restore::Present,
            Code::Fenced => Restore::Fenced,
            other => return Err(unexpected(other)),
        })
    }

    pub(super) async fn release_run(&self, run: &RunId) -> Result<Release, StoreError> {
        let group = Group::of_job_or_first(&run.id);
        let declared = self.ending(group, &run.id);
        let word: String = self
            .call_declaring(&scripts::RELEASE, group, declared, |inv| {
                inv.arg(run.id.to_string()).arg(run.claim);
            })
            .await?;
        let code = Code::parse(&word)?;
        self.mark(group);
        Ok(match code {
            Code::Requeued => Release::Requeued,
            Code::Fenced => Release::Fenced,
            other => return Err(unexpected(other)),
        })
    }

    /// recover.lua in each group whose earliest lease has expired: each group's earliest
    /// lease (`ZRANGE … 0 0 WITHSCORES`, a plain read) and the store's `TIME` are read first,
    /// all in flight together, so a sweep that finds nothing costs one read a group, not a
    /// script call a group.
    pub(super) async fn recover_leases(&self) -> Result<Vec<Recovered>, StoreError> {
        let conn = self.connection().await?;
        let earliest = Group::all().map(|group| {
            let mut conn = conn.clone();
            let key = self.keys.leases(group);
            async move {
                let first: Vec<(String, f64)> = self
                    .bounded(
                        redis::cmd("ZRANGE")
                            .arg(key)
                            .arg(0)
                            .arg(0)
                            .arg("WITHSCORES")
                            .query_async(&mut conn),
                    )
                    .await?;
                Ok::<_, StoreError>((group, first.first().map(|(_, at)| *at as u64)))
            }
        });
        let time = async {
            let mut conn = conn.clone();
            self.bounded::<(u64, u64)>(redis::cmd("TIME").query_async(&mut conn))
                .await
        };
        let (earliest, (secs, micros)) =
            futures_util::future::try_join(try_join_all(earliest), time).await?;
        let now = secs * 1000 + micros / 1000;
        let due = earliest
            .into_iter()
            .filter(|(_, first)| first.is_some_and(|at| at <= now))
            .map(|(group, _)| group);
        // The expired runs' records and what their ends touch are learnt from recover.lua's
        // `stale` answer: a sweep is rare, and one more call costs it nothing it waits for.
        let calls = due.map(|group| async move {
            let declared = vec![
                self.keys.leases(group),
                self.keys.waiting(group),
                self.stats_now(group),
            ];
            let answer = self
                .call_declaring::<Vec<String>>(&scripts::RECOVER, group, declared, |inv| {
                    inv.arg(RECOVER_BATCH);
                })
                .await;
            self.mark(group);
            answer
        });
        let flat: Vec<String> = try_join_all(calls).await?.concat();
        flat.chunks(2)
            .map(|pair| {
                let id = pair
                    .get(1)
                    .and_then(|raw| JobId::parse(raw).ok())
                    .ok_or_else(|| StoreError::Corrupt("recover answered no id".into()))?;
                match Code::parse(&pair[0])? {
                    Code::Requeued => Ok(Recovered::Requeued(id)),
                    Code::Lost => Ok(Recovered::Lost(id)),
                    Code::LeftLost => Ok(Recovered::LeftLost(id)),
                    other => Err(unexpected(other)),
                }
            })
            .collect()
    }

    pub(super) async fn cancel_job(&self, id: &JobId, by: &str) -> Result<Cancel, StoreError> {
        let group = Group::of_job_or_first(id);
        let declared = self.ending(group, id);
        let word: String = self
            .call_declaring(&scripts::CANCEL, group, declared, |inv| {
                inv.arg(id.to_string()).arg(by);
            })
            .await?;
        let code = Code::parse(&word)?;
        self.mark(group);
        Ok(match code {
            Code::Requested => Cancel::Requested,
            Code::NotActive => Cancel::NotActive,
            Code::Missing => Cancel::Missing,
            other => return Err(unexpected(other)),
        })
    }

    pub(super) async fn purge_tenant(
        &self,
        tenant: &TenantId,
        kinds: &[Kind],
        hashes: &[String],
    ) -> Result<Purge, StoreError> {
        let group = Group::of(tenant);
        let mut declared = vec![
            self.keys.tenant(tenant),
            self.keys.lane(tenant),
            self.keys.gone(tenant),
            self.keys.tenant_idem(tenant),
            self.keys.recent_tenants(group),
        ];
        declared.extend(kinds.iter().map(|kind| self.keys.lock(tenant, kind)));
        declared.extend(hashes.iter().cloned());
        let answer: Vec<String> = self
            .call_declaring(&scripts::PURGE, group, declared, |inv| {
                inv.arg(tenant.as_str()).arg(kinds.len());
                for kind in kinds {
                    inv.arg(kind.as_str());
                }
                for hash in hashes {
                    inv.arg(hash);
                }
            })
            .await?;
        let corrupt = |what: &str| StoreError::Corrupt(format!("purge answered {what}"));
        let (word, rest) = answer.split_first().ok_or_else(|| corrupt("nothing"))?;
        let value = rest.first().ok_or_else(|| corrupt("no value"))?;
        match Code::parse(word)? {
            Code::Active => JobId::parse(value)
                .map(Purge::StillActive)
                .map_err(|_| corrupt("no job id")),
            Code::Removed => {
                let mut numbers = rest
                    .iter()
                    .map(|n| n.parse::<u64>().map_err(|_| corrupt("no count")));
                let jobs = numbers.next().ok_or_else(|| corrupt("no count"))??;
                Ok(Purge::Removed {
                    jobs,
                    hashes: numbers.collect::<Result<_, _>>()?,
                })
            }
            other => Err(unexpected(other)),
        }
    }
}

/// What finish.lua takes of the job from its run, not from its record: its tenant, kind,
/// created_ms and pipeline ('' for none), written at its create and never changed since (an
/// argument costs Redis ~1,150 instructions, a field asked of the record ~2,500).
fn held_fields(inv: &mut scripts::Call, of: RunRef<'_>) {
    inv.arg(of.job.tenant.as_str())
        .arg(of.job.kind.as_str())
        .arg(of.created_at);
    match of.job.pipeline {
        Some(pipeline) => inv.arg(pipeline.to_string()),
        None => inv.arg(""),
    };
}

/// A finish's outcome as the named list finish.lua reads: status and step (neither for done),
/// error and result.
fn outcome_pairs(outcome: &Outcome) -> Pairs {
    let (result, error) = match outcome {
        Outcome::Done(report) => (Some(report), None),
        Outcome::Failed(class, report) => (report.as_ref(), Some(class.as_str())),
        Outcome::Cancelled(Value::Null) => (None, None),
        Outcome::Cancelled(report) => (Some(report), None),
    };
    // A done job's status and step (`finished`) are not sent: finish.lua implies them (four
    // arguments less).
    let done = matches!(outcome, Outcome::Done(_));
    let status = (!done).then(|| outcome.status().as_str());
    let step = (!done).then(|| outcome.step());
    let ended = Pairs::default()
        .with_some(Field::Status, status)
        .with_some(Field::Step, step)
        .with_some(Field::Error, error);
    match result {
        Some(result) => ended.with_long(Field::Result, &report_text(result)),
        None => ended,
    }
}

/// A report as the JSON text a job's `result` holds: the bytes `Value`'s `Display` writes,
/// written straight into a `String`'s buffer instead of through a `fmt::Formatter`.
fn report_text(report: &Value) -> String {
    serde_json::to_string(report).expect("a JSON value always serialises: its keys are strings")
}

/// finish.lua's answer: its code, the claim it made (empty for none), the head of the queue it
/// claimed from (`{'head', id…}`; empty when it claimed nothing) and whether the end put a job
/// of its group in the ready queue. Its usual answer, a lone word (`applied`, `ended`), reads
/// as a list of that word (redis-rs reads a bulk string as a list of one), so as the code alone.
fn finish_answer(
    answer: Vec<redis::Value>,
) -> Result<(Finish, Vec<String>, Vec<String>, bool), StoreError> {
    let corrupt = |e: redis::ParsingError| StoreError::Corrupt(e.to_string());
    let mut parts = answer.into_iter();
    let word: String = match parts.next() {
        Some(word) => redis::from_redis_value(word).map_err(corrupt)?,
        None => return Err(StoreError::Corrupt("finish answered nothing".into())),
    };
    let finish = match Code::parse(&word)? {
        Code::Applied => Finish::Applied,
        Code::Ended => Finish::AlreadyEnded,
        Code::Fenced => Finish::Fenced,
        other => return Err(unexpected(other)),
    };
    let mut list = || -> Result<Vec<String>, StoreError> {
        match parts.next() {
            None | Some(redis::Value::Nil) => Ok(Vec::new()),
            Some(value) => redis::from_redis_value(value).map_err(corrupt),
        }
    };
    let (claimed, head) = (list()?, list()?);
    let released = match parts.next() {
        None | Some(redis::Value::Nil) => false,
        Some(flag) => redis::from_redis_value::<i64>(flag).map_err(corrupt)? == 1,
    };
    Ok((finish, claimed, head, released))
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::report_text;

    #[test]
    fn a_report_is_written_as_display_writes_it() {
        let reports = [
            Value::Null,
            json!({}),
            json!({"products": 0, "extracted": 0, "unextractable": 0, "skipped": 0, "batches": 0}),
            json!({"mode": "full", "reason": null, "scored": 12_345_678_901_u64, "ratio": -0.125}),
            json!({"sources": [{"source": "s3://b/k é \"q\" \\ \n\t\u{1}", "status": "ok",
                "error": null, "http_status": 503, "read": 3}], "totals": {"read": 1e300},
                "sources_failed": 1, "nested": [[], [true, false], {"": ""}], "big": i64::MIN}),
            json!("a text with \u{7f} \u{2028} and 🦀"),
            json!([1.5, 2, "x", null]),
        ];
        for report in &reports {
            assert_eq!(report_text(report), report.to_string(), "{report:?}");
        }
    }
}
