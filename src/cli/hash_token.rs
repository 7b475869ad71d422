//! `catalog-jobs hash-token`: reads a token on stdin and prints the `sha256:<hex>` digest a
//! token entry names it by, so a token never has to appear on a command line.

use std::io::Read;
use std::process::ExitCode;

use crate::config::tokens::hash_token;

/// Reads one token on stdin (one trailing newline dropped) and prints its digest.
pub fn run() -> ExitCode {
    let mut input = String::new();
    if std::io::stdin().read_to_string(&mut input).is_err() {
        eprintln!("hash-token: stdin is not UTF-8 text");
        return ExitCode::FAILURE;
    }
    let token = input.strip_suffix('\n').unwrap_or(&input);
    let token = token.strip_suffix('\r').unwrap_or(token);
    if token.is_empty() || token.chars().any(char::is_whitespace) {
        eprintln!("hash-token: give one token, without spaces, on stdin");
        return ExitCode::FAILURE;
    }
    say!("{}", hash_token(token));
    ExitCode::SUCCESS
}
