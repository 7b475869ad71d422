//! The codes a stored event writes its type and status as, and the steps it leaves out
//! (`EVENT_CODES`, `STATUS_CODES` and `DEFAULT_STEPS` in `lua/record.lua`: the same lists).

/// Each event type's code in a stored event (`EVENT_CODES` in `lua/record.lua`, the same
/// list); a type without a code is stored whole.
pub const EVENT_CODES: &[(&str, &str)] = &[
    ("created", "c"),
    ("started", "s"),
    ("progress", "p"),
    ("cancel_requested", "x"),
    ("released", "g"),
    ("requeued", "q"),
    ("lost", "l"),
    ("restored", "r"),
    ("superseded", "o"),
    ("finished", "f"),
];

/// The step an event of each type usually carries, stored empty in an event that carries it
/// (`DEFAULT_STEPS` in `lua/record.lua`, the same list; these types never carry an empty one).
pub const DEFAULT_STEPS: &[(&str, &str)] = &[
    ("created", "queued"),
    ("started", "starting"),
    ("finished", "finished"),
];

/// The step a record implies when it stores none, by its status (`USUAL_STEPS` in
/// `lua/record.lua`, the same list): a create stores no `queued`, a claim at its create no
/// `starting`.
pub const USUAL_STEPS: &[(&str, &str)] = &[("queued", "queued"), ("running", "starting")];

/// Each status's code in a stored event (`STATUS_CODES` in `lua/record.lua`).
pub const STATUS_CODES: &[(&str, &str)] = &[
    ("queued", "q"),
    ("running", "r"),
    ("done", "d"),
    ("failed", "f"),
    ("cancelled", "c"),
    ("cancelling", "x"),
    ("lost", "l"),
];

/// The word `stored` is the code of in `codes`, or `stored` itself (a word stored whole).
pub(super) fn decoded(codes: &[(&'static str, &'static str)], stored: &str) -> String {
    codes
        .iter()
        .find(|(_, code)| *code == stored)
        .map_or(stored, |(word, _)| word)
        .to_owned()
}
