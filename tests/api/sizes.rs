//! The house's sizes, checked on the source: no file in `src/` over `FILE_LINES` lines (data
//! tables aside) and no function anywhere in the crate over `FN_LINES`, so each file and each
//! function can be held in one's head. A function is counted from its `fn` line to its
//! closing brace; comments and string literals are blanked first, so braces in them do not
//! count.

use std::path::{Path, PathBuf};

use crate::helpers::source::{code_only, is_ident, source_files};

/// The most lines a file in `src/` may have.
const FILE_LINES: usize = 600;
/// The most lines a function may have, its signature and closing brace included.
const FN_LINES: usize = 80;
/// Files in `src/` that are data tables, not code, and may be longer.
const DATA_TABLES: &[&str] = &[];
/// The folders whose functions are held to `FN_LINES`.
const CODE_FOLDERS: &[&str] = &["src", "tests", "examples", "benches"];

/// A function: its name, the line of its `fn` and its length in lines.
#[derive(Debug, PartialEq)]
struct Function {
    name: String,
    line: usize,
    lines: usize,
}

/// The name a line declares a function of, if it does (`pub(crate) async fn name`, …).
fn declared_fn(line: &str) -> Option<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "fn")?;
    let before_are_qualifiers = words[..at].iter().all(|w| {
        w.starts_with("pub") || ["const", "async", "unsafe", "extern", "\"C\""].contains(w)
    });
    let name: String = words
        .get(at + 1)?
        .chars()
        .take_while(|&c| is_ident(c))
        .collect();
    (before_are_qualifiers && !name.is_empty()).then_some(name)
}

/// Every function with a body in `source`, with its length.
fn functions(source: &str) -> Vec<Function> {
    let lines: Vec<String> = code_only(source).lines().map(str::to_owned).collect();
    let mut found = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let Some(name) = declared_fn(line) else {
            continue;
        };
        if let Some(end) = body_end(&lines[start..]) {
            found.push(Function {
                name,
                line: start + 1,
                lines: end + 1,
            });
        }
    }
    found
}

/// The index of the line that closes the body opened after `lines[0]`'s signature, or
/// `None` for a declaration without a body (`fn f();` in a trait).
fn body_end(lines: &[String]) -> Option<usize> {
    let mut depth = 0usize;
    let mut opened = false;
    for (k, line) in lines.iter().enumerate() {
        for c in line.chars() {
            match c {
                '{' => (depth, opened) = (depth + 1, true),
                '}' => depth = depth.saturating_sub(1),
                ';' if !opened && depth == 0 => return None,
                _ => {}
            }
        }
        if opened && depth == 0 {
            return Some(k);
        }
    }
    None
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file below `folder` of the crate, sorted; none if the folder is absent.
fn files_in(folder: &str) -> Vec<PathBuf> {
    let dir = root().join(folder);
    let mut files = Vec::new();
    if dir.is_dir() {
        source_files(&dir, &mut files);
    }
    files.sort();
    files
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

#[test]
fn no_file_in_src_is_longer_than_600_lines_except_data_tables() {
    let long: Vec<String> = files_in("src")
        .iter()
        .filter(|f| !DATA_TABLES.contains(&relative(f).as_str()))
        .filter_map(|f| {
            let n = std::fs::read_to_string(f)
                .expect("a source file")
                .lines()
                .count();
            (n > FILE_LINES).then(|| format!("{}: {n} lines", relative(f)))
        })
        .collect();
    assert!(
        long.is_empty(),
        "files over {FILE_LINES} lines (split them by what they do):\n{}",
        long.join("\n")
    );
}

#[test]
fn no_function_in_the_crate_is_longer_than_80_lines() {
    let mut long = Vec::new();
    for file in CODE_FOLDERS.iter().flat_map(|f| files_in(f)) {
        let source = std::fs::read_to_string(&file).expect("a source file");
        for f in functions(&source)
            .into_iter()
            .filter(|f| f.lines > FN_LINES)
        {
            long.push(format!(
                "{}:{} {}: {} lines",
                relative(&file),
                f.line,
                f.name,
                f.lines
            ));
        }
    }
    assert!(
        long.is_empty(),
        "functions over {FN_LINES} lines (name their parts as functions, or make the cases data):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_size_check_counts_bodies_and_not_braces_in_strings_or_comments() {
    let long_body: String = (0..90).map(|i| format!("    let x{i} = {i};\n")).collect();
    let source = format!(
        "pub(crate) async fn planted() {{\n{long_body}}}\n\
         trait T {{\n    fn declared(&self);\n}}\n\
         fn braces_in_text() -> &'static str {{\n    // }} {{ {{\n    \"}}}}{{\"\n}}\n\
         const fn short(\n    a: u8,\n) -> u8 {{\n    a\n}}\n"
    );
    let found = functions(&source);
    let sizes: Vec<(&str, usize, usize)> = found
        .iter()
        .map(|f| (f.name.as_str(), f.line, f.lines))
        .collect();
    assert_eq!(
        sizes,
        [
            ("planted", 1, 92),
            ("braces_in_text", 96, 4),
            ("short", 100, 5)
        ],
        "the planted function is over the limit; the trait declaration has no body"
    );
    assert!(found[0].lines > FN_LINES);
}
