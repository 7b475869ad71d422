//! The house's floors, checked on the source: every path into another room of the crate
//! (`crate::…`, `catalog_jobs::…`, or `super::` climbing out of the room; in a `use` or in
//! code) must go down a floor. Comments and string literals are not code and are skipped.
//! The table below is the layering lib.rs's Layout section describes; a new room gets a row.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::helpers::source::{code_only, is_ident, source_files};

/// Each room and the rooms it may import, top floor first. `api` and `cli` are the two
/// boundaries: only `startup` and the binary may know them.
const FLOORS: &[(&str, &str)] = &[
    ("main", "allocator startup cli config telemetry"),
    (
        "startup",
        "api catalog config jobs metrics nearest strict_json telemetry topology",
    ),
    (
        "api",
        "catalog config jobs metrics nearest strict_json telemetry topology",
    ),
    ("cli", "catalog config nearest strict_json telemetry"),
    // The settings, parsed into the values the rooms below use.
    (
        "config",
        "catalog jobs nearest strict_json telemetry topology",
    ),
    // Observes the runner and the store through the seams `jobs` defines.
    ("metrics", "jobs"),
    ("catalog", "jobs nearest strict_json telemetry topology"),
    ("jobs", "nearest strict_json telemetry topology"),
    // The ground floor: each knows no other room.
    // The binary's global allocator (a module of main.rs, not of the library).
    ("allocator", ""),
    ("nearest", ""),
    ("strict_json", ""),
    ("telemetry", ""),
    ("topology", ""),
];

/// One path from a file into a room of the crate.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Reference {
    line: usize,
    room: String,
}

/// The module path of a source file (`src/jobs/runner.rs` → `jobs::runner`; `main` for the
/// binary, empty for lib.rs).
fn module_of(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// Tokens with their line: identifiers, `::`, and single punctuation characters.
fn tokens(code: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut line = 1;
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if is_ident(c) {
            let start = i;
            while i < chars.len() && is_ident(chars[i]) {
                i += 1;
            }
            out.push((line, chars[start..i].iter().collect()));
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push((line, "::".to_owned()));
            i += 2;
        } else {
            out.push((line, c.to_string()));
            i += 1;
        }
    }
    out
}

/// Every path of `source` (a file of module `module`) that reaches a top-level room.
fn references(module: &[String], source: &str) -> Vec<Reference> {
    let toks = tokens(&code_only(source));
    let text = |k: usize| toks.get(k).map(|(_, t)| t.as_str()).unwrap_or("");
    let mut here: Vec<String> = module.to_vec();
    // Inline modules (`mod tests { … }`) deepen the path `super` climbs from.
    let mut opened: Vec<Option<usize>> = Vec::new();
    let mut found = Vec::new();
    let mut k = 0;
    while k < toks.len() {
        let (line, t) = (toks[k].0, text(k));
        match t {
            "mod" if text(k + 2) == "{" => {
                here.push(text(k + 1).to_owned());
                opened.push(Some(here.len()));
                k += 3;
                continue;
            }
            "{" => opened.push(None),
            "}" => {
                if let Some(Some(_)) = opened.pop() {
                    here.pop();
                }
            }
            "crate" | "catalog_jobs" | "super" if text(k + 1) == "::" => {
                let starts_path = k == 0 || !matches!(text(k - 1), "::" | "$");
                if starts_path {
                    let (rooms, next) = path_rooms(&toks, k, &here);
                    found.extend(rooms.into_iter().map(|room| Reference { line, room }));
                    k = next;
                    continue;
                }
            }
            _ => {}
        }
        k += 1;
    }
    found
}

/// The rooms a path starting at token `k` reaches from module `here`, once it leaves the
/// room (`super` climbing to the crate root, or a crate-absolute path), and where it ends.
fn path_rooms(toks: &[(usize, String)], mut k: usize, here: &[String]) -> (Vec<String>, usize) {
    let text = |k: usize| toks.get(k).map(|(_, t)| t.as_str()).unwrap_or("");
    let mut depth = here.len();
    if text(k) == "super" {
        while text(k) == "super" && text(k + 1) == "::" {
            depth = depth.saturating_sub(1);
            k += 2;
        }
        if depth > 0 {
            return (Vec::new(), k);
        }
    } else {
        k += 2;
    }
    // At the crate root: one room, or a `{…}` group of them.
    if text(k) != "{" {
        return (vec![text(k).to_owned()], k + 1);
    }
    let mut rooms = Vec::new();
    let (mut level, mut item_start) = (0usize, true);
    loop {
        match text(k) {
            "{" => {
                level += 1;
                item_start = level == 1;
            }
            "}" => {
                level -= 1;
                if level == 0 {
                    return (rooms, k + 1);
                }
            }
            "," if level == 1 => item_start = true,
            "" => return (rooms, k),
            name if item_start => {
                rooms.push(name.to_owned());
                item_start = false;
            }
            _ => {}
        }
        k += 1;
    }
}

/// Every import that does not go down a floor, as `file:line: room → room`.
fn violations(src: &Path, floors: &BTreeMap<&str, BTreeSet<&str>>) -> Vec<String> {
    let mut files = Vec::new();
    source_files(src, &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let relative = file.strip_prefix(src).expect("a file under src/");
        let module = module_of(relative);
        let Some(room) = module.first() else {
            continue; // lib.rs: the list of rooms
        };
        let allowed = floors
            .get(room.as_str())
            .unwrap_or_else(|| panic!("room `{room}` has no floor in FLOORS: give it one"));
        let source = std::fs::read_to_string(&file).expect("a source file reads as text");
        for r in references(&module, &source) {
            let known = floors.contains_key(r.room.as_str());
            if known && r.room != *room && !allowed.contains(r.room.as_str()) {
                found.push(format!(
                    "{}:{}: {room} → {}",
                    relative.display(),
                    r.line,
                    r.room
                ));
            }
        }
    }
    found
}

fn floors() -> BTreeMap<&'static str, BTreeSet<&'static str>> {
    FLOORS
        .iter()
        .map(|(room, below)| (*room, below.split_whitespace().collect()))
        .collect()
}

#[test]
fn every_import_goes_down_a_floor() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&src, &floors());
    assert!(
        found.is_empty(),
        "imports against the floors (FLOORS in tests/api/layers.rs, lib.rs's Layout):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_floors_have_no_circle_and_only_startup_and_the_binary_know_the_boundaries() {
    // Rooms listed top floor first: each may import only rooms listed after it.
    let order: Vec<&str> = FLOORS.iter().map(|(room, _)| *room).collect();
    for (i, (room, below)) in FLOORS.iter().enumerate() {
        for b in below.split_whitespace() {
            let at = order.iter().position(|r| *r == b);
            assert!(
                at.is_some_and(|at| at > i),
                "{room} may import {b}, which is not on a lower floor"
            );
        }
        let knows_a_boundary = below.split_whitespace().any(|b| matches!(b, "api" | "cli"));
        assert!(
            !knows_a_boundary || matches!(*room, "main" | "startup"),
            "{room} may import api or cli"
        );
    }
}

#[test]
fn the_check_sees_every_way_of_naming_another_room() {
    let module = |m: &str| m.split("::").map(str::to_owned).collect::<Vec<_>>();
    // (module, source, rooms found)
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "jobs::registry",
            "use crate::api::extract::Fields;",
            &["api"],
        ),
        ("jobs::registry", "let f = crate::api::x();", &["api"]),
        (
            "jobs::registry",
            "use crate::{api::a, jobs::{b, c}, cli};",
            &["api", "jobs", "cli"],
        ),
        ("jobs::registry", "use super::super::api::Fields;", &["api"]),
        ("jobs::registry", "use super::{fence, store};", &[]),
        ("jobs", "use super::cli;", &["cli"]),
        ("jobs::runner", "mod tests { use super::super::Kind; }", &[]),
        (
            "jobs::runner",
            "mod tests { use super::super::super::api; }",
            &["api"],
        ),
        (
            "metrics::store",
            "fn f() { super::super::api::x() }",
            &["api"],
        ),
        ("main", "use catalog_jobs::api::auth;", &["api"]),
        (
            "catalog::sync",
            "// use crate::api::x;\n/* crate::api */ let s = \"crate::api\";",
            &[],
        ),
        (
            "catalog::sync",
            "let r = r#\"crate::api\"#; let c = '\"'; crate::cli::x();",
            &["cli"],
        ),
        (
            "catalog::sync",
            "let q = '\\''; let s = \"\\\"crate::api\"; crate::cli::x();",
            &["cli"],
        ),
        (
            "catalog::sync",
            "fn f<'a>(x: &'a str) { crate::api::y(x) }",
            &["api"],
        ),
        (
            "catalog::sync",
            "macro_rules! m { () => { $crate::jobs::x() } }",
            &[],
        ),
        (
            "jobs::queue",
            "use self::super::x; use crate::jobs::runner;",
            &["jobs"],
        ),
    ];
    for (m, source, expected) in cases {
        let found: Vec<String> = references(&module(m), source)
            .into_iter()
            .map(|r| r.room)
            .collect();
        assert_eq!(found, *expected, "{m}: {source}");
    }
}

#[test]
fn a_planted_upward_import_is_caught() {
    let dir = std::env::temp_dir().join(format!("layers-{}", std::process::id()));
    let jobs = dir.join("jobs");
    std::fs::create_dir_all(&jobs).unwrap();
    std::fs::write(jobs.join("mod.rs"), "pub mod planted;\n").unwrap();
    std::fs::write(
        jobs.join("planted.rs"),
        "//! A seam that speaks HTTP.\nuse super::super::api::extract::Fields;\n",
    )
    .unwrap();
    let found = violations(&dir, &floors());
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(found, ["jobs/planted.rs:2: jobs → api"]);
}
