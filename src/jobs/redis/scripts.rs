//! The job scripts (`lua/*.lua`, each loaded once behind `lua/record.lua` and
//! `lua/prelude.lua` and called by its hash), the arguments every call starts with, and the
//! code words scripts answer with, read into named values ([`Code`], [`CreateCode`]).
//!
//! A script's own arguments and answer are in the header of its file; job fields travel as
//! named lists ([`super::record::Pairs`]), never by position.

use std::sync::LazyLock;

use redis::{Script, ScriptInvocation};

use super::super::store::{NewJob, RunId, StoreError, StoreSettings};
use super::record::{Field, Pairs};

/// The job record's Lua side: its field list and the helpers that read and write it by name.
/// Put in front of the job scripts, and of a script on the same Redis that fences a write by
/// a run (`jobs::fence::RECORD_LUA`).
pub const RECORD_LUA: &str = include_str!("../lua/record.lua");
const PRELUDE: &str = include_str!("../lua/prelude.lua");
/// A tenant's order and its pipelines: what follows a job's end (`after_end`).
const ORDER: &str = include_str!("../lua/order.lua");

/// A job script with the record schema, the shared prelude and the order in front of it.
fn script(body: &str) -> Script {
    Script::new(&format!("{RECORD_LUA}\n{PRELUDE}\n{ORDER}\n{body}"))
}

pub static CREATE: LazyLock<Script> = LazyLock::new(|| script(include_str!("../lua/create.lua")));
pub static CLAIM: LazyLock<Script> = LazyLock::new(|| script(include_str!("../lua/claim.lua")));
pub static TICK: LazyLock<Script> = LazyLock::new(|| script(include_str!("../lua/tick.lua")));
pub static RENEW: LazyLock<Script> = LazyLock::new(|| script(include_str!("../lua/renew.lua")));
pub static FINISH: LazyLock<Script> = LazyLock::new(|| script(include_str!("../lua/finish.lua")));
pub static RESTORE: LazyLock<Script> = LazyLock::new(|| script(include_str!("../lua/restore.lua")));
pub static RELEASE: LazyLock<Script> = LazyLock::new(|| script(include_str!("../lua/release.lua")));
pub static RECOVER: LazyLock<Script> = LazyLock::new(|| script(include_str!("../lua/recover.lua")));
pub static CANCEL: LazyLock<Script> = LazyLock::new(|| script(include_str!("../lua/cancel.lua")));
pub static PURGE: LazyLock<Script> = LazyLock::new(|| script(include_str!("../lua/purge.lua")));
pub static QUEUED: LazyLock<Script> = LazyLock::new(|| script(include_str!("../lua/queued.lua")));
pub static AWAITED: LazyLock<Script> = LazyLock::new(|| script(include_str!("../lua/awaited.lua")));
pub static RETRIED: LazyLock<Script> = LazyLock::new(|| script(include_str!("../lua/retried.lua")));

/// A script call with the settings every script reads first (see `lua/prelude.lua`).
pub fn invocation<'s>(script: &'s Script, settings: &StoreSettings) -> ScriptInvocation<'s> {
    let mut inv = script.prepare_invoke();
    inv.arg(&settings.prefix)
        .arg(settings.ttl_secs())
        .arg(settings.stale_ms())
        .arg(settings.list_cap)
        .arg(settings.max_queued)
        .arg(settings.max_attempts.max(1))
        .arg(settings.progress_sample_ms());
    inv
}

/// A script call about a run's job, laid out as `run_args` in the prelude reads it: the run,
/// its last percent, then the job's fields by name (all a script needs to write it back).
pub fn run_invocation<'s>(
    script: &'s Script,
    settings: &StoreSettings,
    job: &NewJob,
    run: &RunId,
    created_at: u64,
    percent: u8,
) -> ScriptInvocation<'s> {
    let mut inv = invocation(script, settings);
    inv.arg(job.id.to_string())
        .arg(run.claim)
        .arg(percent.min(100));
    Pairs::origin(job)
        .with(Field::CreatedMs, created_at)
        .append_to(&mut inv);
    inv
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
    }
}

codes! {
    /// What create.lua answers first.
    CreateCode {
        Queued = "queued",
        Claimed = "claimed",
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
            include_str!("../lua/prelude.lua"),
            include_str!("../lua/order.lua"),
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
