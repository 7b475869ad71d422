//! The job scripts (`lua/*.lua`), loaded into Redis once as one Redis Function library
//! (`lua/record.lua`, `lua/prelude.lua`, `lua/order.lua` and `lua/walks.lua`, then each script
//! as a function of it) and called by name with `FCALL`; the settings every call ends with; and the code
//! words scripts answer with, read into named values ([`Code`], [`CreateCode`]).
//!
//! A library, unlike a script sent with `EVALSHA`, runs its head once when it is loaded: the
//! prelude's tables and functions are not made again at every call, which measured most of a
//! small script's cost (`docs/performance.md`). The library is named after a hash of its
//! source, so replicas of two versions during a deploy each call their own; a Redis that lost
//! it (restarted empty, or a `FUNCTION FLUSH`) is given it again by the first call that finds
//! it missing.
//!
//! A script's own arguments and answer are in the header of its file; job fields travel as
//! named lists ([`super::record::Pairs`]), never by position.

use std::cell::RefCell;
use std::sync::{Arc, LazyLock, OnceLock};

use redis::{FromRedisValue, RedisError, RedisResult, ToRedisArgs};

use super::super::store::{RunRef, StoreError, StoreSettings};
use super::record::{Field, Pairs};

/// The job record's Lua side: its field list and the helpers that read and write it by name.
/// The head of the job library, and put in front of a script on the same Redis that fences a
/// write by a run (`jobs::fence::RECORD_LUA`).
pub const RECORD_LUA: &str = include_str!("../lua/record.lua");
const PRELUDE: &str = include_str!("../lua/prelude.lua");
/// A tenant's order and its pipelines: what follows a job's end (`after_end`).
const ORDER: &str = include_str!("../lua/order.lua");
/// What create.lua and finish.lua reach, made once at load rather than as closures a call.
const WALKS: &str = include_str!("../lua/walks.lua");

/// A job script: a function of the library, by its name there.
pub struct Function {
    script: &'static str,
    /// `<library>_<script>`, made at its first call: a `format!` at every call was ~1k
    /// instructions a create-burst job (callgrind).
    name: OnceLock<String>,
}

/// Each script, by its file's name in `lua/`, and its body: one list for both. Every script
/// is guarded: its call names in `KEYS` every key it touches, and the prelude's `key` refuses
/// any other before the step writes anything (docs/operations.md, "Redis Cluster"). The guard
/// is part of the library, not a setting: nothing switches it off.
macro_rules! functions {
    ($($script:ident = $file:literal,)*) => {
        $(pub static $script: Function = Function::new($file);)*
        const BODIES: &[(&str, &str)] = &[$(($file, include_str!(concat!("../lua/", $file, ".lua"))),)*];
    };
}

functions! {
    CLAIM = "claim",
    TICK = "tick",
    RENEW = "renew",
    RESTORE = "restore",
    RELEASE = "release",
    RECOVER = "recover",
    CANCEL = "cancel",
    PURGE = "purge",
    AWAITED = "awaited",
    UNLIST = "unlist",
}

/// create.lua's body, which the library holds as the Lua function `create_one(at, last)` (put
/// after the head; the request's arguments are `A[at..=last]`): the `create` function runs it
/// for its call's one request, `creates` (creates.lua) for each request of its call, in turn.
const CREATE_ONE: &str = include_str!("../lua/create.lua");
/// One create (create.lua's header says its arguments and answers).
pub static CREATE: Function = Function::new("create");
/// Several independent creates in one call (creates.lua).
pub static CREATES: Function = Function::new("creates");
/// finish.lua's body, which the library holds as the Lua function `finish_one()` (its
/// request's arguments are `A`): the `finish` function runs it for its call, `finishes`
/// (finishes.lua) for each request of its call, in turn, `A` each request's own.
const FINISH_ONE: &str = include_str!("../lua/finish.lua");
/// One finish (finish.lua's header says its arguments and answers).
pub static FINISH: Function = Function::new("finish");
/// Several independent finishes in one call (finishes.lua).
pub static FINISHES: Function = Function::new("finishes");
/// The functions made of a step's body held in the head, registered like the scripts'
/// (`BODIES`).
const STEP_BODIES: [(&str, &str); 4] = [
    ("create", "return create_one(1, #A)"),
    ("creates", include_str!("../lua/creates.lua")),
    ("finish", "return finish_one()"),
    ("finishes", include_str!("../lua/finishes.lua")),
];

impl Function {
    const fn new(script: &'static str) -> Self {
        Self {
            script,
            name: OnceLock::new(),
        }
    }

    /// The function's name in Redis (`<library>_<script>`).
    pub fn name(&self) -> String {
        self.called().to_owned()
    }

    /// The function's name in Redis, as each call names it.
    fn called(&self) -> &str {
        self.name
            .get_or_init(|| format!("{}_{}", LIBRARY.name, self.script))
    }
}

/// The function a listener names the tenant channels it follows with (`watch` in
/// `lua/prelude.lua`; `listen.rs`): part of the library, but no script of its own.
const WATCH: &str = "watch";

/// The library: its name (`catalog_jobs_<hash of its source>`) and its code for
/// `FUNCTION LOAD`. Each script is registered as `<library>_<script>`, since function names
/// are one namespace across a Redis's libraries.
struct Library {
    name: String,
    code: String,
}

static LIBRARY: LazyLock<Library> = LazyLock::new(|| {
    let head = format!(
        "{RECORD_LUA}\n{PRELUDE}\n{ORDER}\n{WALKS}\nlocal function create_one(at, last)\n{CREATE_ONE}\nend\nlocal function finish_one()\n{FINISH_ONE}\nend\n"
    );
    let bodies = || BODIES.iter().chain(&STEP_BODIES);
    let mut source = head.clone();
    for &(script, body) in bodies() {
        source.push_str(script);
        source.push_str(body);
    }
    let name = format!("catalog_jobs_{:016x}", fnv1a(source.as_bytes()));
    let mut code = format!("#!lua name={name}\n{head}");
    for &(script, body) in bodies() {
        code.push_str(&format!(
            "redis.register_function('{name}_{script}', function(keys, args)\nbegin(keys, args)\n{body}\nend)\n"
        ));
    }
    // A listener's call, about no job: no key, no settings (`watch` in the prelude); it
    // writes nothing, so Redis runs it even out of memory.
    code.push_str(&format!(
        "redis.register_function{{function_name = '{name}_{WATCH}', flags = {{'no-writes'}}, \
         callback = function(keys, args) return watch(args) end}}\n"
    ));
    Library { name, code }
});

/// The 64-bit FNV-1a hash: stable across builds, enough to tell two sources apart.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A prepared call of a job script: `FCALL <function> <n> <its group's queue> <its group's
/// migrating key> <the keys the step touches…> <args…> <settings>` (`Route`; the settings are
/// one argument, added last when the call is sent).
pub struct Call {
    cmd: redis::Cmd,
    /// None for a call that reads no settings (`watching`).
    settings: Option<Arc<str>>,
}

impl Call {
    /// The arguments of a call to come, made before its keys are known: one create's, sent
    /// alone or with others (`creates`; jobs/redis/commit.rs).
    pub fn arguments() -> Self {
        Self {
            cmd: redis::Cmd::with_capacity(CALL_ARGS, CALL_BYTES),
            settings: None,
        }
    }

    /// The arguments added, each as Redis is sent it, read in place from the command's one
    /// buffer (a `Vec` copied out of it for each, ~20 a create, was ~2k instructions a
    /// create-burst job). A call made with `arguments` holds no cursor argument.
    pub fn each_argument(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.cmd.args_iter().map(|arg| match arg {
            redis::Arg::Simple(bytes) => bytes,
            _ => &[],
        })
    }

    /// Adds an argument.
    pub fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        self.cmd.arg(arg);
        self
    }

    /// Calls the function; when Redis does not have the library (the first call, or Redis
    /// came back without it), loads it and calls again. Takes the call: its settings go last
    /// into its own command, not into a copy of it (~0.6k instructions a job's finish).
    pub async fn invoke_async<T: FromRedisValue>(
        self,
        conn: &mut impl redis::aio::ConnectionLike,
    ) -> RedisResult<T> {
        let mut cmd = self.cmd;
        if let Some(settings) = &self.settings {
            cmd.arg(&**settings);
        }
        match cmd.query_async(conn).await {
            Err(e) if library_missing(&e) => {
                redis::cmd("FUNCTION")
                    .arg("LOAD")
                    .arg("REPLACE")
                    .arg(&LIBRARY.code)
                    .query_async::<()>(conn)
                    .await?;
                cmd.query_async(conn).await
            }
            answer => answer,
        }
    }
}

/// Whether Redis refused a call because it has no function of that name.
fn library_missing(e: &RedisError) -> bool {
    e.detail()
        .is_some_and(|d| d.starts_with("Function not found"))
}

/// Where a script call goes and what it touches: its slot group's ready queue
/// (`Keys::queue`: the key it names first, which routes it on a cluster), the group's
/// `Keys::migrating` (named second on a cluster only, never there: a cluster refuses the call
/// while the group's slot is moved, rather than running it on half the group's keys; a single
/// Redis moves no slot, and a key named costs it ~1,150 instructions a call), the other keys
/// the step may touch (`declared`; the script touches no other), and whether the store is a
/// Redis Cluster.
pub struct Route {
    pub queue: String,
    pub migrating: String,
    pub declared: Vec<String>,
    pub cluster: bool,
}

impl Route {
    /// Declares one more key the step may touch.
    pub fn with(mut self, key: String) -> Self {
        self.declared.push(key);
        self
    }
}

/// What a call adds to its keys, with room to spare: a finish's ~20 arguments, a create's
/// ~25 of a few hundred bytes (its params, its origin). Its command is made this big at once:
/// `redis::cmd` starts both of its buffers empty and grew them ~10 times a call on the way.
pub const CALL_ARGS: usize = 32;
/// The bytes of what a call adds to its keys (`CALL_ARGS`).
pub const CALL_BYTES: usize = 768;

/// A script call along `route`, with the settings every script reads (`begin` in
/// `lua/prelude.lua`) as its last argument.
pub fn invocation(function: &Function, settings: &StoreSettings, route: Route) -> Call {
    invocation_sized(function, settings, route, CALL_ARGS, CALL_BYTES)
}

/// A script call along `route` (`invocation`) made big enough at once for `args` arguments
/// of `bytes` bytes more than its keys.
pub fn invocation_sized(
    function: &Function,
    settings: &StoreSettings,
    route: Route,
    args: usize,
    bytes: usize,
) -> Call {
    let name = function.called();
    let settings = settings_arg(settings, route.cluster);
    let keys = [&route.queue, &route.migrating]
        .into_iter()
        .chain(&route.declared)
        .map(String::len)
        .sum::<usize>();
    // FCALL, the name, the key count and the settings, then the keys and the call's own.
    let mut cmd = redis::Cmd::with_capacity(
        4 + 2 + route.declared.len() + args,
        "FCALL".len() + name.len() + 4 + settings.len() + keys + bytes,
    );
    cmd.arg("FCALL")
        .arg(name)
        .arg(1 + usize::from(route.cluster) + route.declared.len())
        .arg(route.queue);
    // The group's migrating key on a cluster only (`Route`).
    if route.cluster {
        cmd.arg(route.migrating);
    }
    cmd.arg(route.declared);
    Call {
        cmd,
        settings: Some(settings),
    }
}

/// A listener's call naming the tenant channels it follows now (`watch` in
/// `lua/prelude.lua`): answers how long they count as followed (ms) and the library state's
/// epoch.
pub fn watching(channels: &[String]) -> Call {
    let mut cmd = redis::cmd("FCALL");
    cmd.arg(format!("{}_{WATCH}", LIBRARY.name))
        .arg(0)
        .arg(channels);
    Call {
        cmd,
        settings: None,
    }
}

/// The store's settings as one argument, `<ttl s> <stale ms> <listing cap> <max queued> <max
/// attempts> <progress sample ms> <cluster 0|1> <prefix>`: one string a call instead of eight,
/// which the library compares with the last call's (one pointer comparison: Lua interns it)
/// and splits only when it differs. The prefix is last, so it may hold spaces.
///
/// Made once a thread and reused while the settings are the same (they are a store's, which
/// do not change): `format!` of eight fields at every script call was ~6.6k instructions a
/// job (callgrind, a create burst).
fn settings_arg(settings: &StoreSettings, cluster: bool) -> Arc<str> {
    let numbers = [
        settings.ttl_secs(),
        settings.stale_ms(),
        settings.list_cap as u64,
        settings.max_queued as u64,
        u64::from(settings.max_attempts.max(1)),
        settings.progress_sample_ms(),
        u64::from(cluster),
    ];
    LAST_SETTINGS.with_borrow_mut(|last| match last {
        Some((made_of, prefix, arg)) if *made_of == numbers && *prefix == settings.prefix => {
            arg.clone()
        }
        _ => {
            let [ttl, stale, cap, queued, attempts, sample, cluster] = numbers;
            let prefix = &settings.prefix;
            let arg: Arc<str> =
                format!("{ttl} {stale} {cap} {queued} {attempts} {sample} {cluster} {prefix}")
                    .into();
            *last = Some((numbers, prefix.clone(), arg.clone()));
            arg
        }
    })
}

/// The settings argument this thread made last (`settings_arg`), with what it was made of.
type MadeSettings = Option<([u64; 7], String, Arc<str>)>;

thread_local! {
    static LAST_SETTINGS: RefCell<MadeSettings> = const { RefCell::new(None) };
}

/// Adds a script's arguments about a run's job, laid out as `run_args` in the prelude reads
/// them: the run, its last percent, then the job's fields by name (all a script needs to write
/// it back) when `whole`, else none (an empty list: a finish asks for them only when its
/// record is missing, which is rare; ~14 arguments less a job's finish).
pub fn append_run(inv: &mut Call, run: RunRef, percent: u8, whole: bool) {
    inv.arg(run.job.id.to_string())
        .arg(run.run.claim)
        .arg(percent.min(100));
    match whole {
        true => Pairs::origin(run.job)
            .with(Field::CreatedMs, run.created_at)
            .append_to(inv),
        false => Pairs::default().append_to(inv),
    }
}

macro_rules! codes {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $word:literal,)* }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $name {
            $($variant,)*
        }

        impl $name {
            /// Reads a script's code word; any other answer means the store answered nonsense.
            pub fn parse(word: &str) -> Result<Self, StoreError> {
                match word {
                    $($word => Ok(Self::$variant),)*
                    other => Err(StoreError::Corrupt(format!("a script answered `{other}`"))),
                }
            }
        }
    };
}

codes! {
    /// What a script about one job answers (each script's header says which it may).
    Code {
        Applied = "applied",
        Held = "held",
        CancelRequested = "cancel_requested",
        Missing = "missing",
        Ended = "ended",
        Fenced = "fenced",
        Restored = "restored",
        Present = "present",
        Requeued = "requeued",
        Requested = "requested",
        NotActive = "not_active",
        Lost = "lost",
        LeftLost = "left_lost",
        Active = "active",
        Removed = "removed",
        Stale = "stale",
    }
}

codes! {
    /// What create.lua answers first.
    CreateCode {
        Queued = "queued",
        Claimed = "claimed",
        // Claimed, and the key its claim probed does not exist (`creates::usual_answer`).
        ClaimedAbsent = "claimed_absent",
        Waiting = "waiting",
        Held = "held",
        QueueFull = "queue_full",
        Replayed = "replayed",
        KeyReused = "key_reused",
        RateLimited = "rate_limited",
    }
}

/// An answer a store operation does not expect from its script.
pub fn unexpected(code: Code) -> StoreError {
    StoreError::Corrupt(format!("a script answered {code:?} out of place"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every quoted word a script returns, as `return 'word'`, `return {'word', …}` or (create's
    /// answers once it created) `return created('word', …)`.
    fn returned_words(lua: &str) -> Vec<String> {
        lua.lines()
            .filter_map(|line| line.split("return ").nth(1))
            .map(|rest| rest.strip_prefix("created(").unwrap_or(rest))
            .filter_map(|rest| rest.trim_start_matches('{').strip_prefix('\''))
            .filter_map(|rest| rest.split('\'').next())
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn the_settings_argument_is_made_of_the_settings_it_is_given() {
        let one = StoreSettings::default();
        let other = StoreSettings {
            prefix: "p q".into(),
            max_attempts: 0,
            list_cap: 7,
            ..StoreSettings::default()
        };
        let expected = |s: &StoreSettings, cluster: u8| {
            format!(
                "{} {} {} {} {} {} {cluster} {}",
                s.ttl_secs(),
                s.stale_ms(),
                s.list_cap,
                s.max_queued,
                s.max_attempts.max(1),
                s.progress_sample_ms(),
                s.prefix
            )
        };
        // Alternated, so that a reused argument of other settings would show.
        for _ in 0..2 {
            assert_eq!(&*settings_arg(&one, false), expected(&one, 0));
            assert_eq!(&*settings_arg(&one, true), expected(&one, 1));
            assert_eq!(&*settings_arg(&other, false), expected(&other, 0));
            assert_eq!(&*settings_arg(&one, false), expected(&one, 0));
        }
    }

    #[test]
    fn every_code_word_a_script_returns_has_a_name_here() {
        let scripts = [
            include_str!("../lua/claim.lua"),
            include_str!("../lua/tick.lua"),
            include_str!("../lua/renew.lua"),
            include_str!("../lua/finish.lua"),
            include_str!("../lua/restore.lua"),
            include_str!("../lua/release.lua"),
            include_str!("../lua/recover.lua"),
            include_str!("../lua/cancel.lua"),
            include_str!("../lua/purge.lua"),
            include_str!("../lua/awaited.lua"),
            include_str!("../lua/unlist.lua"),
            include_str!("../lua/prelude.lua"),
            include_str!("../lua/order.lua"),
            include_str!("../lua/walks.lua"),
        ];
        let words: Vec<String> = scripts.iter().flat_map(|s| returned_words(s)).collect();
        assert!(
            words.len() >= 12,
            "the scan finds the scripts' answers: {words:?}"
        );
        for word in words {
            assert!(Code::parse(&word).is_ok(), "`{word}` has no name in Code");
        }
        let create = returned_words(include_str!("../lua/create.lua"));
        assert!(create.len() >= 7, "{create:?}");
        for word in create {
            assert!(
                CreateCode::parse(&word).is_ok(),
                "`{word}` has no name in CreateCode"
            );
        }
    }
}
