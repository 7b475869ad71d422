//! feed: the one reader of product feeds — JSON Lines, CSV and JSON arrays — used by `sync`
//! and by `POST /catalog/products`, with one row report and one set of rules.
//!
//! Rows are framed first (a line, a CSV record, an array element) and kept only up to
//! `MAX_ROW_BYTES`: a longer row is one invalid row, the rest of it is read and discarded,
//! and the rows after it are still read. So memory follows one row and one batch, never the
//! feed. A bad row is reported with its line and never stops the rows around it; only a feed
//! whose structure is broken (`FeedError::Malformed`) or whose reader fails stops early, and
//! the rows read before that are saved. Knows nothing of HTTP, sources or job keys.

use std::io::{self, BufRead, BufReader, Read};

use serde::{Deserialize, Serialize};

use super::products::{Product, Upserted};

/// The largest row kept, in bytes. The largest valid product (limits in `products.rs`) is
/// well under 100 KiB even with every character escaped, so this cuts only rows that could
/// never be valid, while a hostile 100 MB line costs 256 KiB, not 100 MB.
pub const MAX_ROW_BYTES: usize = 256 * 1024;
/// How many row errors a report keeps: enough to see the pattern, small enough to read.
pub const ERROR_SAMPLE: usize = 20;
/// The read buffer under the framing: large enough that a syscall moves many rows.
const READ_BUFFER: usize = 64 * 1024;
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// How a feed is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    JsonLines,
    Csv,
    /// A JSON array of product objects (or one object).
    JsonArray,
}

impl Format {
    /// The format a request's media type names, if it is one of ours.
    pub fn from_media_type(media_type: &str) -> Option<Self> {
        match media_type {
            "application/json" => Some(Self::JsonArray),
            "application/x-ndjson"
            | "application/jsonl"
            | "application/jsonlines"
            | "application/x-jsonlines" => Some(Self::JsonLines),
            "text/csv" | "application/csv" => Some(Self::Csv),
            _ => None,
        }
    }

    /// The format of a feed by its name (`.csv`, `.json`), else JSON Lines.
    pub fn from_name(name: &str) -> Self {
        let lower = name.to_ascii_lowercase();
        if lower.ends_with(".csv") {
            Self::Csv
        } else if lower.ends_with(".json") {
            Self::JsonArray
        } else {
            Self::JsonLines
        }
    }
}

/// One row that could not be read as a product.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RowError {
    /// The line the row starts on (JSON Lines, CSV), or its position in a JSON array (1-based).
    pub line: u64,
    pub error: String,
}

/// What reading a feed did, row by row. `read` counts every non-blank row.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RowReport {
    pub read: u64,
    pub created: u64,
    pub updated: u64,
    pub unchanged: u64,
    pub invalid: u64,
    /// The first `ERROR_SAMPLE` invalid rows.
    pub errors: Vec<RowError>,
}

impl RowReport {
    fn invalid_row(&mut self, line: u64, error: String) {
        self.invalid += 1;
        if self.errors.len() < ERROR_SAMPLE {
            self.errors.push(RowError { line, error });
        }
    }

    fn saved(&mut self, counts: Upserted) {
        self.created += counts.created;
        self.updated += counts.updated;
        self.unchanged += counts.unchanged;
    }
}

/// A feed that could not be read to its end.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    /// The bytes stopped coming (the reader's error: its owner knows what it means).
    #[error("the feed could not be read: {0}")]
    Read(#[source] io::Error),
    /// The structure is broken (a JSON array never closed, a CSV without a product_key column).
    #[error("the feed is malformed: {0}")]
    Malformed(String),
}

/// Reads every row of a feed into `report`, saving valid products `batch` at a time through
/// `save`. `before_row` runs before each row (sync checks its cancellation there). The outer
/// error is theirs (it ends the load at once); the inner one says why the feed stopped
/// early, after the rows read before it were saved.
pub fn load<E>(
    reader: impl Read,
    format: Format,
    batch: usize,
    report: &mut RowReport,
    mut before_row: impl FnMut() -> Result<(), E>,
    mut save: impl FnMut(&[Product]) -> Result<Upserted, E>,
) -> Result<Result<(), FeedError>, E> {
    let mut pending: Vec<Product> = Vec::with_capacity(batch);
    let outcome = rows(reader, format, |line, parsed| {
        before_row()?;
        report.read += 1;
        match parsed {
            Ok(product) => pending.push(product),
            Err(error) => report.invalid_row(line, error),
        }
        if pending.len() >= batch {
            report.saved(save(&pending)?);
            pending.clear();
        }
        Ok(())
    })?;
    if !pending.is_empty() {
        report.saved(save(&pending)?);
    }
    Ok(outcome)
}

/// Calls `row` with each row's line and its product or the reason it is not one.
pub fn rows<E>(
    reader: impl Read,
    format: Format,
    row: impl FnMut(u64, Result<Product, String>) -> Result<(), E>,
) -> Result<Result<(), FeedError>, E> {
    let mut input = BufReader::with_capacity(READ_BUFFER, reader);
    if let Err(e) = skip_bom(&mut input) {
        return Ok(Err(FeedError::Read(e)));
    }
    match format {
        Format::JsonLines => json_lines(input, row),
        Format::Csv => csv_rows(input, row),
        Format::JsonArray => json_array(input, row),
    }
}

fn skip_bom(input: &mut impl BufRead) -> io::Result<()> {
    if input.fill_buf()?.starts_with(BOM) {
        input.consume(BOM.len());
    }
    Ok(())
}

fn too_long() -> String {
    format!(
        "the row is longer than {} KiB and was skipped",
        MAX_ROW_BYTES / 1024
    )
}

fn not_utf8() -> String {
    "the row is not UTF-8 text".to_owned()
}

mod delimited;
mod framing;
pub mod header;
mod json;

use delimited::csv_rows;
use json::{json_array, json_lines};

#[cfg(test)]
mod tests {
    use super::delimited::UNCLOSED_QUOTE;
    use super::*;

    /// Each row's line and key (or error), and why the feed stopped early, if it did.
    type Rows = Vec<(u64, Result<String, String>)>;

    fn lines(format: Format, body: &[u8]) -> (Rows, Option<String>) {
        let mut out = Vec::new();
        let end = rows(body, format, |line, p| {
            out.push((line, p.map(|p| p.product_key.as_str().to_owned())));
            Ok::<_, ()>(())
        })
        .expect("the row callback never fails here");
        (out, end.err().map(|e| e.to_string()))
    }

    /// A CSV body, and the keys of its rows, each with the line the row starts on.
    type CsvCase = (&'static [u8], &'static [(u64, &'static str)]);

    #[test]
    fn quotes_line_ends_a_bom_and_semicolons_read_as_plain_rows_each_with_its_first_line() {
        let cases: [CsvCase; 3] = [
            // A quote inside an unquoted field is text; a quoted newline is no row end.
            (
                b"product_key,name\na1,55\" TV\na2,\"Two\nlines, \"\"quoted\"\"\"\na3,x\n",
                &[(2, "a1"), (3, "a2"), (5, "a3")],
            ),
            // A lone CR ends a line and counts as one.
            (
                b"product_key,name\rc1,x\rc2,\"y\rz\"\rc3,w\r",
                &[(2, "c1"), (3, "c2"), (5, "c3")],
            ),
            // CRLF line ends, a byte order mark and semicolons.
            (
                b"\xEF\xBB\xBFProduct Key;Name\r\na1;Mug\r\n\r\na2;Cup\r\n",
                &[(2, "a1"), (4, "a2")],
            ),
        ];
        for (body, keys) in cases {
            let expected: Rows = keys.iter().map(|&(l, k)| (l, Ok(k.to_owned()))).collect();
            let shown = String::from_utf8_lossy(body);
            assert_eq!(lines(Format::Csv, body), (expected, None), "{shown:?}");
        }
        let body = b"\xEF\xBB\xBF{\"product_key\":\"j1\",\"name\":\"x\"}\r\n";
        assert_eq!(lines(Format::JsonLines, body).0, [(1, Ok("j1".into()))]);
    }

    #[test]
    fn a_quoted_field_still_open_at_the_end_of_the_feed_is_an_invalid_row_never_a_valid_one() {
        let (rows, end) = lines(
            Format::Csv,
            b"product_key,name\nx1,ok\nx3,\"unterminated\nx4,ok\n",
        );
        assert_eq!(end, None);
        assert_eq!(
            rows,
            [(2, Ok("x1".into())), (3, Err(UNCLOSED_QUOTE.into()))]
        );
        let (rows, end) = lines(Format::Csv, b"product_key,\"name\nx1,ok\n");
        assert_eq!(rows, []);
        assert!(
            end.is_some_and(|e| e.contains("never closed")),
            "the header"
        );
    }

    #[test]
    fn an_over_long_line_is_one_invalid_row_and_the_next_rows_are_read() {
        let long = format!("{{\"name\":\"{}\"}}", "x".repeat(MAX_ROW_BYTES * 3));
        let body = format!("{long}\n{{\"product_key\":\"b\",\"name\":\"y\"}}\n");
        let (rows, end) = lines(Format::JsonLines, body.as_bytes());
        assert_eq!(end, None);
        assert_eq!(rows, [(1, Err(too_long())), (2, Ok("b".into()))]);
    }

    #[test]
    fn a_json_array_is_read_element_by_element_with_strings_holding_brackets() {
        let body = br#" [ {"product_key":"a","name":"x ], {"}, {"product_key":"b","name":"[y]","attributes":{"k":[1,2]}} ] "#;
        let (rows, end) = lines(Format::JsonArray, body);
        assert_eq!(end, None);
        assert_eq!(rows, [(1, Ok("a".into())), (2, Ok("b".into()))]);
        assert_eq!(lines(Format::JsonArray, b"[]").0, []);
        assert!(lines(
            Format::JsonArray,
            b"[{\"product_key\":\"a\",\"name\":\"x\"}"
        )
        .1
        .is_some_and(|e| e.contains("not closed")));
        assert!(lines(Format::JsonArray, b"42").1.is_some());
        assert!(lines(Format::JsonArray, b"[{},]").1.is_some());
    }
}
