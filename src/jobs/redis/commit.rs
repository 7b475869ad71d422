//! Group commit of creates and of finishes: while `IN_FLIGHT_MAX` calls of a lane are in
//! flight, the steps that arrive meanwhile wait, and go as one call (`creates` in
//! lua/creates.lua, `finishes` in lua/finishes.lua) when one returns, up to `BATCH_MAX` a
//! call. A step that finds a call's place free goes at once, alone (`create`, `finish`):
//! batching adds no wait to a store that is not saturated, and Redis always has the next call
//! queued behind the one it runs (with one call in flight it idled for each round trip:
//! accepted creates fell from ~13,300/s to ~8,400/s in the harness). Each request is answered
//! as a call of its own would answer it; one call's entry cost, TIME and wake-up are paid for
//! the batch.
//!
//! Creates and finishes wait in lanes of their own. A call's keys share one hash slot on a
//! Redis Cluster, so there a batch holds the steps of one slot group (a lane a group); on a
//! single Redis, one lane takes every group's. A call that fails (Redis out of reach, no
//! answer in time) fails each of its steps as a lone call's failure would; the script ran
//! whole or not at all.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

use super::super::keys::{Group, NameHash, GROUPS};
use super::super::store::StoreError;
use super::scripts;
use super::{bounded_on, store_error, RedisStore};

/// The most steps one call carries: Redis's instructions a create fall ~12 % at 4 a call
/// and ~15 % at 8 against one a call, and rise again at 16 (scripts/lua_cost.py,
/// docs/performance.md), while a bigger call holds Redis longer in one go.
const BATCH_MAX: usize = 8;

/// The most calls of one lane in flight at once: enough that Redis runs the next while
/// this process reads one's answer and sends another, few enough that a burst still batches.
const IN_FLIGHT_MAX: usize = 4;

/// What a lane's calls run: creates (create.lua, creates.lua) or finishes that claim no next
/// job (finish.lua, finishes.lua).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Step {
    Create,
    Finish,
}

impl Step {
    /// The function a lone step's call runs, and the one that runs several.
    fn functions(self) -> (&'static scripts::Function, &'static scripts::Function) {
        match self {
            Step::Create => (&scripts::CREATE, &scripts::CREATES),
            Step::Finish => (&scripts::FINISH, &scripts::FINISHES),
        }
    }
}

/// One step's call as it would go alone: what it runs, its slot group, the keys it names
/// after its group's two (`Route::declared`), and its own arguments (its script's header).
pub(super) struct StepCall {
    pub(super) step: Step,
    pub(super) group: Group,
    pub(super) declared: Arc<Vec<String>>,
    pub(super) args: Arc<scripts::Call>,
}

/// What a step's script answered it (its answer, `stale` included), or why its call failed.
type Answer = Result<redis::Value, StoreError>;

struct Waiting {
    call: StepCall,
    answer: oneshot::Sender<Answer>,
}

/// A lane's steps: how many calls of it are in flight, and the steps waiting for the next.
#[derive(Default)]
struct Lane {
    in_flight: usize,
    waiting: Vec<Waiting>,
}

impl Lane {
    /// The next batch: the oldest `BATCH_MAX` waiting steps.
    fn next(&mut self) -> Vec<Waiting> {
        let n = self.waiting.len().min(BATCH_MAX);
        self.waiting.drain(..n).collect()
    }
}

/// The steps waiting for a call, by lane: creates' lanes, then finishes', one a slot group
/// each (a cluster uses each; a single Redis only each step's first).
pub(super) struct Commits {
    lanes: Vec<Mutex<Lane>>,
}

impl Default for Commits {
    fn default() -> Self {
        Self {
            lanes: (0..2 * GROUPS).map(|_| Mutex::default()).collect(),
        }
    }
}

impl Commits {
    fn lane(&self, at: usize) -> std::sync::MutexGuard<'_, Lane> {
        self.lanes[at]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Ends a lane's run of calls however its task ends: a task dropped mid-call (its runtime shut
/// down) gives its place back, and when it was the lane's last the steps waiting then fail
/// as unanswered, rather than wait for ever for a call no task will make.
struct Draining<'a> {
    commits: &'a Commits,
    at: usize,
    done: bool,
}

impl Drop for Draining<'_> {
    fn drop(&mut self) {
        if !self.done {
            let mut lane = self.commits.lane(self.at);
            lane.in_flight -= 1;
            if lane.in_flight == 0 {
                lane.waiting.clear();
            }
        }
    }
}

/// A place of a lane that a lone step's call holds in its caller's task: given back when
/// the call ends, or when the caller drops it mid-call. The steps that waited meanwhile then
/// go as the next call of a run of calls on a task of their own (failed as unanswered if no
/// runtime is left to run it).
struct Place<'a> {
    store: &'a RedisStore,
    at: usize,
    held: bool,
}

impl Place<'_> {
    fn give_back(&mut self) {
        if !std::mem::take(&mut self.held) {
            return;
        }
        let batch = {
            let mut lane = self.store.commits.lane(self.at);
            if lane.waiting.is_empty() {
                lane.in_flight -= 1;
                return;
            }
            lane.next()
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let (store, at) = (self.store.clone(), self.at);
                runtime.spawn(async move { store.drain(at, batch).await });
            }
            Err(_) => {
                let mut lane = self.store.commits.lane(self.at);
                lane.in_flight -= 1;
                if lane.in_flight == 0 {
                    lane.waiting.clear();
                }
            }
        }
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.give_back();
    }
}

impl RedisStore {
    /// Runs one step's call: at once, in the caller's task, when fewer than `IN_FLIGHT_MAX`
    /// calls of its lane are in flight, else in the next call of its lane, with the steps
    /// that waited beside it. Answers what its script answered it.
    pub(super) async fn step_call(&self, call: StepCall) -> Answer {
        let group = match self.on_cluster() {
            true => call.group.index(),
            false => 0,
        };
        let at = match call.step {
            Step::Create => group,
            Step::Finish => GROUPS + group,
        };
        let (answered, first) = {
            let mut lane = self.commits.lane(at);
            if lane.in_flight < IN_FLIGHT_MAX && lane.waiting.is_empty() {
                lane.in_flight += 1;
                (Err(call), None)
            } else {
                let (answer, answered) = oneshot::channel();
                lane.waiting.push(Waiting { call, answer });
                // A lane with room and steps waiting: its last run of calls ended mid-way.
                let first = (lane.in_flight < IN_FLIGHT_MAX).then(|| {
                    lane.in_flight += 1;
                    lane.next()
                });
                (Ok(answered), first)
            }
        };
        let answered = match answered {
            Err(call) => return self.call_alone(at, call).await,
            Ok(answered) => answered,
        };
        if let Some(batch) = first {
            let store = self.clone();
            tokio::spawn(async move { store.drain(at, batch).await });
        }
        answered.await.unwrap_or_else(|_| {
            Err(StoreError::Unavailable(
                "the step's call ended unanswered".into(),
            ))
        })
    }

    /// One step's call on a place of lane `at` it holds, made in the caller's task (no task,
    /// channel or wake-up of its own); the place goes on to the steps that waited meanwhile
    /// as it ends, the call answered or the caller gone.
    async fn call_alone(&self, at: usize, call: StepCall) -> Answer {
        let mut place = Place {
            store: self,
            at,
            held: true,
        };
        let answer = match self.send_steps(&[&call]).await {
            Ok(mut answers) => answers
                .pop()
                .unwrap_or_else(|| Err(StoreError::Corrupt("a step answered nothing".into()))),
            Err(e) => Err(e),
        };
        place.give_back();
        answer
    }

    /// Makes one of lane `at`'s runs of calls, `batch` first, then each batch that waited
    /// meanwhile, until none waits.
    async fn drain(self, at: usize, mut batch: Vec<Waiting>) {
        let mut draining = Draining {
            commits: &self.commits,
            at,
            done: false,
        };
        loop {
            let calls: Vec<&StepCall> = batch.iter().map(|w| &w.call).collect();
            match self.send_steps(&calls).await {
                Ok(answers) => {
                    for (waiting, answer) in batch.into_iter().zip(answers) {
                        let _ = waiting.answer.send(answer);
                    }
                }
                Err(e) => {
                    for waiting in batch {
                        let _ = waiting.answer.send(Err(e.clone()));
                    }
                }
            }
            let mut lane = self.commits.lane(at);
            if lane.waiting.is_empty() {
                lane.in_flight -= 1;
                draining.done = true;
                return;
            }
            batch = lane.next();
        }
    }

    /// One call of `calls` (of one step): `create` or `finish` for one, `creates` or
    /// `finishes` for several. Answers each its answer, or the call's failure; a request whose
    /// step raised an error (the call answers it in its place) is answered that error, as a
    /// call of its own would have failed.
    async fn send_steps(&self, calls: &[&StepCall]) -> Result<Vec<Answer>, StoreError> {
        let (first, rest) = calls.split_first().expect("a batch holds a step");
        let (one, many) = first.step.functions();
        let mut route = self.route(first.group);
        route.declared.clone_from(&*first.declared);
        let inv = match rest.is_empty() {
            true => {
                let mut inv = scripts::invocation(one, &self.settings, route);
                for arg in first.args.each_argument() {
                    inv.arg(arg);
                }
                inv
            }
            false => self.batch_invocation(many, route, calls),
        };
        let mut conn = self.write_connection().await?;
        let answer: redis::Value = bounded_on(self.writer(), inv.invoke_async(&mut conn)).await?;
        if rest.is_empty() {
            return Ok(vec![Ok(answer)]);
        }
        // A call whose every request answered the usual word answers it alone
        // (lua/finishes.lua).
        if let redis::Value::BulkString(_) = answer {
            return Ok(calls.iter().map(|_| Ok(answer.clone())).collect());
        }
        let answers: Vec<redis::Value> = redis::from_redis_value(answer)
            .map_err(|e| StoreError::Corrupt(format!("{} answered no list: {e}", many.name())))?;
        if answers.len() != calls.len() {
            return Err(StoreError::Corrupt(format!(
                "{} answered a request short",
                many.name()
            )));
        }
        Ok(answers.into_iter().map(step_failed).collect())
    }

    /// A call of `many` (`creates`, `finishes`) of `calls`, along `route` (the first's): its
    /// KEYS every key a request names, each once (its group's two, then its own), and for
    /// each request its group's queue and its arguments (lua/creates.lua, lua/finishes.lua).
    fn batch_invocation(
        &self,
        many: &scripts::Function,
        mut route: scripts::Route,
        calls: &[&StepCall],
    ) -> scripts::Call {
        let queues: Vec<String> = calls
            .iter()
            .map(|call| self.keys.queue(call.group))
            .collect();
        // Each group's migrating key on a cluster only (`Route`).
        let migrating: Vec<String> = match route.cluster {
            true => calls[1..]
                .iter()
                .map(|call| self.keys.migrating(call.group))
                .collect(),
            false => Vec::new(),
        };
        let mut more = Vec::new();
        {
            let mut named: HashSet<&str, NameHash> =
                route.declared.iter().map(String::as_str).collect();
            named.extend([route.queue.as_str(), route.migrating.as_str()]);
            for (i, call) in calls.iter().enumerate().skip(1) {
                let group = std::iter::once(&queues[i]).chain(migrating.get(i - 1));
                for key in group.chain(call.declared.iter()) {
                    if named.insert(key) {
                        more.push(key.clone());
                    }
                }
            }
        }
        route.declared.append(&mut more);
        // Each request's queue, its count and its arguments (`scripts::CALL_ARGS`, with a
        // queue key's room more).
        let mut inv = scripts::invocation_sized(
            many,
            &self.settings,
            route,
            1 + calls.len() * (2 + scripts::CALL_ARGS),
            calls.len() * (QUEUE_ROOM + scripts::CALL_BYTES),
        );
        inv.arg(calls.len());
        for (call, queue) in calls.iter().zip(&queues) {
            let args = call.args.each_argument();
            inv.arg(queue).arg(args.len());
            for arg in args {
                inv.arg(arg);
            }
        }
        inv
    }
}

/// The bytes of a request's queue key and argument count in a call of several, with room.
const QUEUE_ROOM: usize = 64;

/// A request's answer in a call of several, or the error its step raised (`{'error', message}`)
/// as the store reads a lone call's failure with it (`store_error`: a WRONGTYPE is `Refused`).
fn step_failed(answer: redis::Value) -> Answer {
    let redis::Value::Array(words) = &answer else {
        return Ok(answer);
    };
    match words.as_slice() {
        [redis::Value::BulkString(word), redis::Value::BulkString(message)] if word == b"error" => {
            let line = String::from_utf8_lossy(message).replace(['\r', '\n'], " ");
            let error = match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()) {
                Ok(redis::Value::ServerError(e)) => e.into(),
                Ok(_) | Err(_) => return Err(StoreError::Corrupt(line)),
            };
            Err(store_error(&error))
        }
        _ => Ok(answer),
    }
}
