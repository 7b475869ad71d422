//! Reading the crate's own source as text, for the checks on the house (its floors and the
//! size of its files and functions).

use std::path::{Path, PathBuf};

/// The source with comments and the contents of string and char literals blanked (newlines
/// kept, so line numbers hold).
pub fn code_only(source: &str) -> String {
    let s: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < s.len() {
        let rest = |k: usize| s.get(i + k).copied().unwrap_or('\0');
        let skip_to = |end: usize, out: &mut String| {
            out.extend(s[i..end].iter().map(|&c| blank(c)));
            end
        };
        if s[i] == '/' && rest(1) == '/' {
            let end = (i..s.len()).find(|&j| s[j] == '\n').unwrap_or(s.len());
            i = skip_to(end, &mut out);
        } else if s[i] == '/' && rest(1) == '*' {
            let (mut depth, mut j) = (0usize, i);
            while j < s.len() {
                if s[j] == '/' && s.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if s[j] == '*' && s.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            i = skip_to(j, &mut out);
        } else if s[i] == 'r' && (rest(1) == '"' || (rest(1) == '#' && !is_ident(rest(2)))) {
            // A raw string: r"…" or r#"…"# with as many #s.
            let hashes = (i + 1..s.len()).take_while(|&j| s[j] == '#').count();
            let open = i + 1 + hashes;
            let close: String = std::iter::once('"')
                .chain("#".repeat(hashes).chars())
                .collect();
            let body: String = s[open + 1..].iter().collect();
            let end = body
                .find(&close)
                .map(|k| open + 1 + body[..k].chars().count() + close.chars().count())
                .unwrap_or(s.len());
            i = skip_to(end, &mut out);
        } else if s[i] == '"' {
            let mut j = i + 1;
            while j < s.len() && s[j] != '"' {
                j += if s[j] == '\\' { 2 } else { 1 };
            }
            i = skip_to((j + 1).min(s.len()), &mut out);
        } else if s[i] == '\'' && (rest(1) == '\\' || rest(2) == '\'') {
            // A char literal ('x', '\n', '\u{..}'); a lifetime ('a) has no closing quote.
            let from = if rest(1) == '\\' { i + 3 } else { i + 2 };
            let end = (from..s.len()).find(|&j| s[j] == '\'').unwrap_or(s.len());
            i = skip_to(end + 1, &mut out);
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

pub fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Every `.rs` file below `dir`, in no particular order.
pub fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder can be listed") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}
