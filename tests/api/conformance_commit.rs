//! Group commit of creates and finishes (issue 20): a process's creates that arrive while its
//! create calls are in flight go as one call (`creates`, lua/creates.lua), each answered as a
//! call of its own would answer it, in order; one request's refusal or error changes nothing
//! for it and leaves the others created. Finishes that claim nothing go so too (`finishes`,
//! lua/finishes.lua).

use std::sync::Arc;
use std::time::Duration;

use catalog_jobs::jobs::keys::Group;
use catalog_jobs::jobs::redis::record::Pairs;
use catalog_jobs::jobs::redis::scripts::{self, Call, Route};
use catalog_jobs::jobs::redis::RedisStore;
use catalog_jobs::jobs::store::{
    params_fingerprint, Created, Finish, JobStore, NewJob, Outcome, StoreError, StoreSettings,
};
use catalog_jobs::jobs::{Kind, Status, TenantId};
use futures_util::future::join_all;
use serde_json::json;

use crate::helpers::{
    clear_of_a_minute_edge, command_counts, config_set, create, created, eventually, finish,
    new_job, settings, start, tenant, tenant_beside, RedisServer,
};

/// Two creates of each test kind (`sync`, `enrich`) for each of `tenants`: the second round
/// after the first.
fn twice_each(tenants: &[TenantId]) -> Vec<NewJob> {
    let round = || {
        let kinds = tenants
            .iter()
            .flat_map(|t| [new_job(t, "sync"), new_job(t, "enrich")]);
        kinds.collect::<Vec<_>>()
    };
    [round(), round()].concat()
}

/// Creates `jobs` all at once through `s`: what the store answered each, in their order.
async fn create_all(s: &Arc<dyn JobStore>, jobs: &[NewJob]) -> Vec<Created> {
    let creates = jobs.iter().map(|job| {
        let s = s.clone();
        let job = job.clone();
        tokio::spawn(async move { s.create(job).await.expect("the store answers") })
    });
    join_all(creates)
        .await
        .into_iter()
        .map(|done| done.expect("the create ran to its end"))
        .collect()
}

/// 64 creates at once, of 16 tenants, two kinds each and each kind twice: every tenant and
/// kind gets one job, the other create of it is answered `AlreadyRunning` with that job (as
/// two calls in turn), and Redis ran fewer create calls than there were creates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_go_in_fewer_calls_and_each_is_answered_as_if_alone() {
    let redis = RedisServer::start(false);
    let s: Arc<dyn JobStore> = Arc::new(RedisStore::open(&redis.url(), settings()).unwrap());
    // The library is loaded (a first call) before the counts start.
    created(&*s, &tenant(), "sync").await;
    let mut conn = redis.connection().await;
    let before = command_counts(&mut conn).await["fcall"];
    let tenants: Vec<TenantId> = (0..16).map(|_| tenant()).collect();
    let jobs = twice_each(&tenants);
    let answers = create_all(&s, &jobs).await;
    let fcalls = command_counts(&mut conn).await["fcall"] - before;
    assert!(
        fcalls < jobs.len() as u64 / 2,
        "{fcalls} create calls for {} creates",
        jobs.len()
    );
    one_job_each_and_the_other_held(&*s, &tenants, &jobs, &answers).await;
}

/// Each tenant and kind of `tenants` has one job of the creates `jobs` (answered `answers`),
/// queued, and every other create of it was answered `AlreadyRunning` with that job.
async fn one_job_each_and_the_other_held(
    s: &dyn JobStore,
    tenants: &[TenantId],
    jobs: &[NewJob],
    answers: &[Created],
) {
    for t in tenants {
        for kind in ["sync", "enrich"] {
            let of = |job: &&NewJob| job.tenant == *t && job.kind.as_str() == kind;
            let mine: Vec<_> = jobs.iter().zip(answers).filter(|(j, _)| of(j)).collect();
            let made: Vec<_> = mine
                .iter()
                .filter(|(_, a)| matches!(a, Created::Created(..)))
                .collect();
            assert_eq!(made.len(), 1, "{t}/{kind}: {mine:?}");
            let holder = made[0].0.id;
            for (job, answer) in &mine {
                match answer {
                    Created::Created(snapshot, _) => {
                        assert_eq!((snapshot.job_id, snapshot.status), (job.id, Status::Queued))
                    }
                    Created::AlreadyRunning(id) => assert_eq!(*id, holder, "{t}/{kind}"),
                    other => panic!("{t}/{kind}: {other:?}"),
                }
            }
            let read = s.get(&holder).await.unwrap().expect("the job reads");
            assert_eq!(read.status, Status::Queued);
        }
    }
}

/// A create that finds a free place among its lane's calls in flight goes at once, alone:
/// batching waits only when Redis already has calls queued, so it never leaves Redis idle for
/// a round trip. Four creates sent while Redis is paused are four `create` calls (with one call
/// in flight at a time, the three behind the first went as one `creates` call after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_go_alone_while_their_lane_has_room_for_more_calls_in_flight() {
    let redis = RedisServer::start(false);
    let s: Arc<dyn JobStore> = Arc::new(RedisStore::open(&redis.url(), settings()).unwrap());
    created(&*s, &tenant(), "sync").await;
    let mut conn = redis.connection().await;
    logged_and_paused(&mut conn, PAUSE_MS).await;
    let jobs: Vec<NewJob> = (0..4).map(|_| new_job(&tenant(), "sync")).collect();
    for answer in create_all(&s, &jobs).await {
        assert!(matches!(answer, Created::Created(..)), "{answer:?}");
    }
    let calls = function_calls(&mut conn).await;
    // The library's functions are named `<prefix>_create` and `<prefix>_creates`.
    let alone = calls
        .iter()
        .filter(|name| name.ends_with("_create"))
        .count();
    assert!(
        alone >= jobs.len() && !calls.iter().any(|name| name.ends_with("_creates")),
        "each of {} creates in a call of its own: {calls:?}",
        jobs.len()
    );
}

/// How long Redis holds every command while the creates are sent: far longer than spawning
/// four tasks takes, far shorter than the store's deadline for a call.
const PAUSE_MS: u64 = 500;

/// Redis logs every command from now on (`function_calls` reads them) and holds every
/// command for `ms`.
async fn logged_and_paused(conn: &mut redis::aio::MultiplexedConnection, ms: u64) {
    config_set(conn, "slowlog-log-slower-than", "0").await;
    config_set(conn, "slowlog-max-len", "1024").await;
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(conn)
        .await
        .unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(ms)
        .arg("ALL")
        .query_async(conn)
        .await
        .unwrap();
}

/// The names of the functions Redis ran, by its slow log (every command, at a threshold of 0).
async fn function_calls(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(1024)
        .query_async(conn)
        .await
        .unwrap();
    log.iter()
        .filter_map(|entry| {
            let redis::Value::Array(fields) = entry else {
                return None;
            };
            let redis::Value::Array(args) = fields.get(3)? else {
                return None;
            };
            let words: Vec<String> = args
                .iter()
                .filter_map(|a| redis::from_redis_value::<String>(a.clone()).ok())
                .collect();
            (words.first()?.eq_ignore_ascii_case("fcall")).then(|| words.get(1).cloned())?
        })
        .collect()
}

/// A lone create's call runs in its caller's task; a caller that leaves while its call is in
/// flight hands its place in the lane on to the creates queued behind it, which go as the
/// next call and are answered as ever. Four lone creates sent while Redis is paused fill the
/// lane, four more queue behind them, the first four are dropped: the four queued ones are
/// created, in one `creates` call. (Were the place only given back, nothing would ever call
/// for them.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_queued_behind_lone_calls_whose_callers_left_are_answered() {
    let redis = RedisServer::start(false);
    let s: Arc<dyn JobStore> = Arc::new(RedisStore::open(&redis.url(), settings()).unwrap());
    created(&*s, &tenant(), "sync").await;
    let mut conn = redis.connection().await;
    logged_and_paused(&mut conn, LEFT_PAUSE_MS).await;
    let create = |job: NewJob| {
        let s = s.clone();
        Box::pin(async move { s.create(job).await })
    };
    let mut alone: Vec<_> = (0..4).map(|_| create(new_job(&tenant(), "sync"))).collect();
    let mut queued: Vec<_> = (0..4).map(|_| create(new_job(&tenant(), "sync"))).collect();
    // Polled in turn: each of the first four sends its call, each of the others queues.
    for future in alone.iter_mut().chain(queued.iter_mut()) {
        for _ in 0..3 {
            let answered = futures_util::poll!(future.as_mut()).is_ready();
            assert!(!answered, "Redis answered while paused");
            tokio::task::yield_now().await;
        }
    }
    drop(alone);
    let queued = join_all(queued.into_iter().map(tokio::spawn));
    let answers = tokio::time::timeout(Duration::from_secs(30), queued)
        .await
        .expect("the queued creates are answered");
    for answer in answers {
        let answer = answer.expect("the create ran to its end");
        assert!(matches!(answer, Ok(Created::Created(..))), "{answer:?}");
    }
    let calls = function_calls(&mut conn).await;
    assert!(
        calls.iter().any(|name| name.ends_with("_creates")),
        "the queued creates went as one call: {calls:?}"
    );
}

/// How long Redis holds every command while the lone creates are dropped: far longer than
/// polling eight futures takes, shorter than the store's deadline for a call (2 s).
const LEFT_PAUSE_MS: u64 = 1500;

/// Creates whose call fails in transit (Redis gone) each fail as a lone create's call would
/// (`Unavailable`: a 503 with Retry-After), and the call frees its lane: once Redis is back,
/// a 64-create burst goes through again, each created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_whose_call_fails_in_transit_each_fail_unavailable_and_later_ones_go_through() {
    let mut redis = RedisServer::start(false);
    let s: Arc<dyn JobStore> = Arc::new(RedisStore::open(&redis.url(), settings()).unwrap());
    created(&*s, &tenant(), "sync").await;
    tokio::task::block_in_place(|| redis.stop());
    let gone: Vec<NewJob> = (0..16).map(|_| new_job(&tenant(), "sync")).collect();
    let creates = gone.iter().cloned().map(|job| {
        let s = s.clone();
        tokio::spawn(async move { s.create(job).await })
    });
    for answer in join_all(creates).await {
        let answer = answer.expect("the create ran to its end");
        assert!(
            matches!(answer, Err(StoreError::Unavailable(_))),
            "{answer:?}"
        );
    }
    tokio::task::block_in_place(|| redis.restart(true));
    eventually(Duration::from_secs(30), async || {
        match s.create(new_job(&tenant(), "sync")).await {
            Ok(Created::Created(..)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let tenants: Vec<TenantId> = (0..16).map(|_| tenant()).collect();
    let jobs = twice_each(&tenants);
    let answers = create_all(&s, &jobs).await;
    one_job_each_and_the_other_held(&*s, &tenants, &jobs, &answers).await;
}

/// On a Redis Cluster a call's keys share one slot: concurrent creates of tenants of one slot
/// group and of several go through (a batch holds one group's), each answered as if alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_concurrent_creates_of_one_group_and_of_many_are_answered_as_if_alone() {
    let s = crate::helpers::cluster_job_store(settings());
    let first = tenant();
    let mut tenants: Vec<TenantId> = (0..8).map(|_| tenant_beside(&first)).collect();
    tenants.extend((0..8).map(|_| tenant()));
    // Every group's library loaded and connection made before the creates at once.
    for t in &tenants {
        created(&*s, &tenant_beside(t), "sync").await;
    }
    let jobs = twice_each(&tenants);
    let answers = create_all(&s, &jobs).await;
    one_job_each_and_the_other_held(&*s, &tenants, &jobs, &answers).await;
}

/// One create request as the store lays it out for a call (`creating` in jobs/redis/declare.rs,
/// create.lua's arguments): its group, the keys it names after its group's two (with `more`),
/// and its arguments, under a limit of `limit` creates a minute.
fn request(s: &RedisStore, job: &NewJob, limit: u32, more: &[String]) -> Request {
    let (k, t, group) = (s.keys(), &job.tenant, Group::of(&job.tenant));
    let mut keys = vec![
        k.tenant(t),
        k.waiting(group),
        k.leases(group),
        k.everyone(group),
        k.recent_tenants(group),
        k.job(&job.id),
        k.lock(t, &job.kind),
    ];
    let mut args = Call::arguments();
    args.arg(1).arg(job.id.to_string());
    Pairs::default().append_origin_to(job, &mut args);
    args.arg(limit).arg("");
    if let Some(key) = &job.idempotency_key {
        keys.push(k.idem(t, &job.kind, key));
        keys.push(k.tenant_idem(t));
        args.arg(key).arg(params_fingerprint(&job.params));
    }
    keys.extend(more.iter().cloned());
    Request(group, keys, args)
}

struct Request(Group, Vec<String>, Call);

/// One `creates` call of `requests` (lua/creates.lua): KEYS every key a request names, each
/// once, then for each request its group's queue and its arguments.
fn creates_call(s: &RedisStore, requests: &[Request]) -> Call {
    let k = s.keys();
    let mut declared: Vec<String> = Vec::new();
    for Request(group, keys, _) in requests {
        for key in [k.queue(*group), k.migrating(*group)].iter().chain(keys) {
            if !declared.contains(key) {
                declared.push(key.clone());
            }
        }
    }
    let route = Route {
        queue: declared.remove(0),
        migrating: declared.remove(0),
        declared,
        cluster: false,
    };
    let mut inv = scripts::invocation(&scripts::CREATES, s.settings(), route);
    inv.arg(requests.len());
    for Request(group, _, args) in requests {
        let args = args.each_argument();
        inv.arg(k.queue(*group)).arg(args.len());
        for arg in args {
            inv.arg(arg);
        }
    }
    inv
}

/// A create's answer as words; its usual answer, its time alone, as the words it stands for
/// (`usual_answer` in jobs/redis/creates.rs): an integer claimed, a string queued.
fn words(answer: &redis::Value) -> Vec<String> {
    match answer {
        redis::Value::Int(now) => vec!["claimed".into(), now.to_string()],
        redis::Value::BulkString(now) => {
            vec!["queued".into(), String::from_utf8(now.clone()).unwrap()]
        }
        _ => redis::from_redis_value_ref(answer).expect("an answer of words"),
    }
}

/// A job of `t` with the idempotency key `key-1`.
fn keyed_job(t: &TenantId) -> NewJob {
    NewJob {
        idempotency_key: Some("key-1".into()),
        ..new_job(t, "sync")
    }
}

/// The job's status as the store reads it; none for a job never written.
async fn status(s: &RedisStore, job: &NewJob) -> Option<Status> {
    s.get(&job.id).await.unwrap().map(|read| read.status)
}

/// The string at `key`, if any.
async fn value_at(conn: &mut redis::aio::MultiplexedConnection, key: String) -> Option<String> {
    redis::cmd("GET").arg(key).query_async(conn).await.unwrap()
}

/// One call of several creates: a held tenant, a replayed idempotency key, a rate-limited
/// tenant, one whose step meets a key its request left out (`stale`), one whose listing is a
/// key of another type (an error), and two creates of one tenant and kind (the second sees the
/// first): each is answered as its own call would answer it, the refused change nothing, and
/// the rest are created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_call_of_several_creates_answers_each_as_alone_and_a_refusal_changes_nothing() {
    clear_of_a_minute_edge().await;
    let redis = RedisServer::start(false);
    let settings = StoreSettings {
        creates_per_minute: 2,
        ..settings()
    };
    let s = RedisStore::open(&redis.url(), settings).unwrap();
    let k = s.keys().clone();
    let (held, stale, keyed, limited) = (tenant(), tenant(), tenant(), tenant());
    let holder = created(&s, &held, "sync").await;
    let stale_holder = created(&s, &stale, "sync").await;
    let first_keyed = keyed_job(&keyed);
    create(&s, &first_keyed).await;
    created(&s, &limited, "sync").await;
    created(&s, &limited, "enrich").await;
    let wrong = tenant();
    let mut conn = redis.connection().await;
    let _: () = redis::cmd("SET")
        .arg(k.tenant(&wrong))
        .arg("not a listing")
        .query_async(&mut conn)
        .await
        .unwrap();
    let (fresh, twice) = (tenant(), tenant());
    let (a, b, c) = (
        new_job(&twice, "sync"),
        new_job(&twice, "sync"),
        new_job(&twice, "enrich"),
    );
    let jobs = [
        (new_job(&fresh, "sync"), vec![]),
        (new_job(&held, "sync"), vec![k.job(&holder.id)]),
        (a.clone(), vec![]),
        (new_job(&stale, "sync"), vec![]),
        (keyed_job(&keyed), vec![k.job(&first_keyed.id)]),
        (b.clone(), vec![k.job(&a.id)]),
        (new_job(&limited, "pair"), vec![]),
        (new_job(&wrong, "sync"), vec![]),
        (c.clone(), vec![]),
        (new_job(&fresh, "enrich"), vec![]),
    ];
    let requests: Vec<Request> = jobs
        .iter()
        .map(|(job, more)| request(&s, job, 2, more))
        .collect();
    let answer: Vec<redis::Value> = creates_call(&s, &requests)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    let answers: Vec<Vec<String>> = answer.iter().map(words).collect();
    assert_eq!(answers.len(), jobs.len(), "{answers:?}");
    let word = |n: usize| answers[n][0].as_str();
    for created in [0, 2, 8, 9] {
        // Answered its time alone, no table (lua/walks.lua's `created`).
        let alone = matches!(answer[created], redis::Value::BulkString(_));
        assert!(alone, "{created}: {:?}", answer[created]);
        assert_eq!(word(created), "queued", "{created}: {answers:?}");
        assert_eq!(status(&s, &jobs[created].0).await, Some(Status::Queued));
    }
    assert_eq!(answers[1], ["held", &holder.id.to_string()]);
    assert_eq!(answers[3], ["stale", &k.job(&stale_holder.id)]);
    assert_eq!(answers[4], ["replayed", &first_keyed.id.to_string()]);
    assert_eq!(answers[5], ["held", &a.id.to_string()]);
    assert_eq!(word(6), "rate_limited", "{answers:?}");
    assert_eq!(word(7), "error", "{answers:?}");
    assert!(answers[7][1].starts_with("WRONGTYPE "), "{answers:?}");
    for refused in [1, 3, 4, 5, 6, 7] {
        assert_eq!(status(&s, &jobs[refused].0).await, None, "{refused}");
    }
    assert_eq!(s.recent(&limited, 10).await.unwrap().len(), 2);
    assert_eq!(s.recent(&stale, 10).await.unwrap().len(), 1);
    let kept = value_at(&mut conn, k.tenant(&wrong)).await;
    assert_eq!(kept.as_deref(), Some("not a listing"));
    let lock = value_at(&mut conn, k.lock(&twice, &Kind::parse("sync").unwrap())).await;
    assert_eq!(lock, Some(a.id.to_string()));
    assert_eq!(s.recent(&twice, 10).await.unwrap().len(), 2);
}

/// Lean jobs: a call of several creates reads each group's ready queue's length once (`LLEN`,
/// ~4,000 Redis instructions), then keeps it as its requests push to it: four requests of one
/// group's fresh tenants, for no worker, ask one `LLEN` and are queued in their order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_of_several_creates_reads_its_groups_queue_length_once() {
    let redis = RedisServer::start(false);
    let s = RedisStore::open(&redis.url(), settings()).unwrap();
    let first = tenant();
    let group = Group::of(&first);
    let mut tenants = vec![first];
    while tenants.len() < 4 {
        let t = tenant();
        if Group::of(&t) == group {
            tenants.push(t);
        }
    }
    let jobs: Vec<NewJob> = tenants.iter().map(|t| new_job(t, "sync")).collect();
    let requests: Vec<Request> = jobs.iter().map(|job| request(&s, job, 0, &[])).collect();
    let mut conn = redis.connection().await;
    crate::helpers::reset_stats(&mut conn).await;
    let answer: Vec<redis::Value> = creates_call(&s, &requests)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    let llen = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_llen:calls="))
        .and_then(|rest| rest.split(',').next()?.parse::<u64>().ok());
    assert_eq!(llen, Some(1), "{stats}");
    for (n, answer) in answer.iter().enumerate() {
        assert_eq!(words(answer)[0], "queued", "{n}: {answer:?}");
    }
    let queue: Vec<String> = redis::cmd("LRANGE")
        .arg(s.keys().queue(group))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    let ids: Vec<String> = jobs.iter().map(|job| job.id.to_string()).collect();
    assert_eq!(queue, ids);
}

/// Finishes that claim nothing, sent while their lane's calls are in flight, go as one
/// `finishes` call (lua/finishes.lua), each answered as its own call would answer it. Twelve
/// runs' finishes sent while Redis is paused, one by a run fenced off (its claim is not the
/// job's) and one of a job whose record the store lost: the fenced one answers `Fenced` and
/// changes nothing, the lost record is written back done (its batched step answered `missing`,
/// having written nothing, and went again alone with the job's fields), every other job reads
/// done, and Redis ran a `finishes` call and fewer finish calls than there were finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_finishes_go_in_fewer_calls_and_a_fenced_or_lost_one_fails_none() {
    let redis = RedisServer::start(false);
    let store = RedisStore::open(&redis.url(), settings()).unwrap();
    let s: Arc<dyn JobStore> = Arc::new(store.clone());
    let mut runs = Vec::new();
    for _ in 0..12 {
        let job = new_job(&tenant(), "sync");
        let (created, run) = start(&*s, &job).await;
        runs.push((job, created, run));
    }
    runs[0].2.claim += 1;
    let mut conn = redis.connection().await;
    let lost = &runs[1].0;
    let _: () = redis::cmd("DEL")
        .arg(store.keys().job(&lost.id))
        .query_async(&mut conn)
        .await
        .unwrap();
    logged_and_paused(&mut conn, PAUSE_MS).await;
    let finishes = runs.iter().cloned().map(|(job, created, run)| {
        let s = s.clone();
        tokio::spawn(
            async move { finish(&*s, &job, &run, &created, Outcome::Done(json!({}))).await },
        )
    });
    let answers: Vec<Finish> = join_all(finishes)
        .await
        .into_iter()
        .map(|done| done.expect("the finish ran to its end"))
        .collect();
    assert_eq!(answers[0], Finish::Fenced, "{answers:?}");
    assert!(
        answers[1..].iter().all(|a| *a == Finish::Applied),
        "{answers:?}"
    );
    assert_eq!(status(&store, &runs[0].0).await, Some(Status::Running));
    for (job, _, _) in &runs[1..] {
        assert_eq!(status(&store, job).await, Some(Status::Done), "{}", job.id);
    }
    let calls = function_calls(&mut conn).await;
    let batched = calls
        .iter()
        .filter(|name| name.ends_with("_finishes"))
        .count();
    let alone = calls
        .iter()
        .filter(|name| name.ends_with("_finish"))
        .count();
    assert!(
        batched >= 1 && batched + alone < runs.len(),
        "{} finishes in fewer calls: {calls:?}",
        runs.len()
    );
}
