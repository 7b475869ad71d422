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
use serde_json::{Map, Value};

use crate::strict_json::{self, StrictJsonError};

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

/// A JSON object's text as a product; a key given twice (at any depth) makes it invalid,
/// never "the last one wins".
fn product_from_json_text(text: &[u8]) -> Result<Product, String> {
    let value = strict_json::parse(text).map_err(|e| match e {
        StrictJsonError::DuplicateKey(_) => e.to_string(),
        StrictJsonError::Invalid(why) => format!("not valid JSON: {why}"),
    })?;
    Product::from_json(value)
}

// ---------------------------------------------------------------------------------------
// Framing: where a row ends, read in bounded pieces

/// Finds the end of the current row in the bytes it is shown, one piece at a time.
trait Framing {
    /// The index of the byte that ends the row, if it is in `bytes`.
    fn end_in(&mut self, bytes: &[u8]) -> Option<usize>;
}

/// One row as framed: its bytes (empty when it was too long) and what ended it.
struct Frame {
    too_long: bool,
    /// The byte that ended the row, or `None` at the end of the input.
    end: Option<u8>,
    /// The line the row started on (1-based).
    line: u64,
}

/// Reads rows of at most `MAX_ROW_BYTES`, discarding the rest of a longer one.
struct Framed<R> {
    input: BufReader<R>,
    /// Line breaks consumed so far: `\n`, `\r\n` and a lone `\r` each count one.
    newlines: u64,
    /// The last byte consumed was a `\r` (so a `\n` next is the same line break).
    after_cr: bool,
}

impl<R: Read> Framed<R> {
    fn new(input: BufReader<R>) -> Self {
        Self {
            input,
            newlines: 0,
            after_cr: false,
        }
    }

    /// Counts the line breaks in bytes about to be consumed.
    fn count_breaks(&mut self, bytes: &[u8]) {
        for &b in bytes {
            match b {
                b'\r' => self.newlines += 1,
                b'\n' if !self.after_cr => self.newlines += 1,
                _ => {}
            }
            self.after_cr = b == b'\r';
        }
    }

    /// The next row into `row` (cleared first); `None` once the input is used up.
    fn next(&mut self, framing: &mut impl Framing, row: &mut Vec<u8>) -> io::Result<Option<Frame>> {
        row.clear();
        let line = self.newlines + 1;
        let mut too_long = false;
        let mut started = false;
        loop {
            let available = self.input.fill_buf()?;
            if available.is_empty() {
                return Ok(started.then_some(Frame {
                    too_long,
                    end: None,
                    line,
                }));
            }
            started = true;
            let (piece, used, end) = match framing.end_in(available) {
                Some(i) => (&available[..i], i + 1, Some(available[i])),
                None => (available, available.len(), None),
            };
            if !too_long {
                if row.len() + piece.len() > MAX_ROW_BYTES {
                    too_long = true;
                    *row = Vec::new();
                } else {
                    row.extend_from_slice(piece);
                }
            }
            let consumed = available[..used].to_vec();
            self.count_breaks(&consumed);
            self.input.consume(used);
            if end.is_some() {
                return Ok(Some(Frame {
                    too_long,
                    end,
                    line,
                }));
            }
        }
    }

    /// Skips whitespace; the next byte after it, not consumed.
    fn peek_past_whitespace(&mut self) -> io::Result<Option<u8>> {
        loop {
            let available = self.input.fill_buf()?;
            let Some(&first) = available.first() else {
                return Ok(None);
            };
            if !first.is_ascii_whitespace() {
                return Ok(Some(first));
            }
            self.count_breaks(&[first]);
            self.input.consume(1);
        }
    }
}

/// A JSON Lines row ends at a line break.
struct LineEnd;

impl Framing for LineEnd {
    fn end_in(&mut self, bytes: &[u8]) -> Option<usize> {
        bytes.iter().position(|b| *b == b'\n')
    }
}

// ---------------------------------------------------------------------------------------
// JSON Lines

fn json_lines<R: Read, E>(
    input: BufReader<R>,
    mut row: impl FnMut(u64, Result<Product, String>) -> Result<(), E>,
) -> Result<Result<(), FeedError>, E> {
    let mut framed = Framed::new(input);
    let mut bytes = Vec::new();
    loop {
        let frame = match framed.next(&mut LineEnd, &mut bytes) {
            Ok(Some(frame)) => frame,
            Ok(None) => return Ok(Ok(())),
            Err(e) => return Ok(Err(FeedError::Read(e))),
        };
        if frame.too_long {
            row(frame.line, Err(too_long()))?;
            continue;
        }
        let parsed = match std::str::from_utf8(&bytes) {
            Err(_) => Err(not_utf8()),
            Ok(text) if text.trim().is_empty() => continue,
            Ok(text) => product_from_json_text(text.trim().as_bytes()),
        };
        row(frame.line, parsed)?;
    }
}

// ---------------------------------------------------------------------------------------
// CSV

/// A CSV record ends at a line break outside quotes: `\n`, or `\r` (old Mac spreadsheets end
/// lines with a lone CR; in `\r\n` the `\n` then ends a blank record, which is skipped).
/// Quotes open only at a field's start, as in the csv crate, so `55" TV` in an unquoted field
/// is text, not an opening quote.
struct CsvRecordEnd {
    delimiter: u8,
    state: CsvState,
}

#[derive(Clone, Copy)]
enum CsvState {
    FieldStart,
    Unquoted,
    Quoted,
    /// A quote inside a quoted field: the field's end, or the first of `""`.
    QuoteInQuoted,
}

impl Framing for CsvRecordEnd {
    fn end_in(&mut self, bytes: &[u8]) -> Option<usize> {
        for (i, &b) in bytes.iter().enumerate() {
            self.state = match (self.state, b) {
                (CsvState::Quoted, b'"') => CsvState::QuoteInQuoted,
                (CsvState::Quoted, _) => CsvState::Quoted,
                (CsvState::QuoteInQuoted, b'"') => CsvState::Quoted,
                (_, b'\n' | b'\r') => {
                    self.state = CsvState::FieldStart;
                    return Some(i);
                }
                (_, d) if d == self.delimiter => CsvState::FieldStart,
                (CsvState::FieldStart, b'"') => CsvState::Quoted,
                _ => CsvState::Unquoted,
            };
        }
        None
    }
}

/// The delimiter a spreadsheet used: whichever of `;` and tab the header line has more of
/// than `,` (`,` on a tie).
fn sniff_delimiter(input: &mut impl BufRead) -> io::Result<u8> {
    let head = input.fill_buf()?;
    let end = head.iter().position(|b| matches!(b, b'\n' | b'\r'));
    let line = &head[..end.unwrap_or(head.len())];
    let count = |c: u8| line.iter().filter(|b| **b == c).count();
    Ok([b';', b'\t']
        .into_iter()
        .filter(|d| count(*d) > count(b','))
        .max_by_key(|d| count(*d))
        .unwrap_or(b','))
}

/// Splits one framed record into its fields, as UTF-8 text.
struct CsvFields {
    builder: csv::ReaderBuilder,
}

impl CsvFields {
    fn new(delimiter: u8) -> Self {
        let mut builder = csv::ReaderBuilder::new();
        builder
            .has_headers(false)
            .flexible(true)
            .delimiter(delimiter);
        Self { builder }
    }

    fn split(&self, record: &[u8]) -> Result<Vec<String>, String> {
        let mut reader = self.builder.from_reader(record);
        let mut fields = csv::ByteRecord::new();
        match reader.read_byte_record(&mut fields) {
            Ok(true) => {}
            Ok(false) => return Ok(Vec::new()),
            Err(e) => return Err(format!("unreadable CSV row: {e}")),
        }
        fields
            .iter()
            .map(|f| {
                std::str::from_utf8(f)
                    .map(str::to_owned)
                    .map_err(|_| not_utf8())
            })
            .collect()
    }
}

/// A header name as a product field: case-insensitive, spaces read as underscores.
fn header_name(raw: &str) -> String {
    raw.trim().to_ascii_lowercase().replace(' ', "_")
}

/// One CSV record as the JSON object `Product::from_json` reads; empty cells are absent.
fn csv_object(headers: &[String], fields: Vec<String>) -> Result<Value, String> {
    if fields.len() > headers.len() && fields[headers.len()..].iter().any(|f| !f.trim().is_empty())
    {
        return Err(format!(
            "the row has {} fields but the header names {}",
            fields.len(),
            headers.len()
        ));
    }
    let mut obj = Map::new();
    for (h, v) in headers.iter().zip(fields) {
        if h.is_empty() || v.trim().is_empty() {
            continue;
        }
        obj.insert(h.clone(), Value::String(v));
    }
    Ok(Value::Object(obj))
}

/// What a quoted field still open at the end of the feed is reported as.
const UNCLOSED_QUOTE: &str =
    "a quoted field is never closed: its opening `\"` runs to the end of the feed";

fn csv_rows<R: Read, E>(
    mut input: BufReader<R>,
    mut row: impl FnMut(u64, Result<Product, String>) -> Result<(), E>,
) -> Result<Result<(), FeedError>, E> {
    let delimiter = match sniff_delimiter(&mut input) {
        Ok(d) => d,
        Err(e) => return Ok(Err(FeedError::Read(e))),
    };
    let fields = CsvFields::new(delimiter);
    let mut framing = CsvRecordEnd {
        delimiter,
        state: CsvState::FieldStart,
    };
    let mut framed = Framed::new(input);
    let mut bytes = Vec::new();
    let mut headers: Option<Vec<String>> = None;
    loop {
        let frame = match framed.next(&mut framing, &mut bytes) {
            Ok(Some(frame)) => frame,
            Ok(None) => return Ok(Ok(())),
            Err(e) => return Ok(Err(FeedError::Read(e))),
        };
        // The feed ended inside a quoted field: the rest of the body is not one valid row.
        let unclosed = frame.end.is_none() && matches!(framing.state, CsvState::Quoted);
        let Some(headers) = &headers else {
            if unclosed {
                return Ok(Err(FeedError::Malformed(UNCLOSED_QUOTE.into())));
            }
            match csv_header(&fields, &bytes, frame.too_long) {
                Ok(None) => continue,
                Ok(Some(h)) => headers = Some(h),
                Err(message) => return Ok(Err(FeedError::Malformed(message))),
            }
            continue;
        };
        if frame.too_long {
            row(frame.line, Err(too_long()))?;
            continue;
        }
        if unclosed {
            row(frame.line, Err(UNCLOSED_QUOTE.into()))?;
            continue;
        }
        if bytes.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let parsed = fields
            .split(&bytes)
            .and_then(|f| csv_object(headers, f))
            .and_then(Product::from_json);
        row(frame.line, parsed)?;
    }
}

/// The header record's names; `None` for a blank line before it.
fn csv_header(
    fields: &CsvFields,
    bytes: &[u8],
    too_long: bool,
) -> Result<Option<Vec<String>>, String> {
    if too_long {
        return Err("the CSV header line is too long".into());
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let names: Vec<String> = fields
        .split(bytes)
        .map_err(|e| format!("the CSV header could not be read: {e}"))?
        .iter()
        .map(|h| header_name(h))
        .collect();
    if !names.iter().any(|h| h == "product_key") {
        return Err("the CSV header has no product_key column".into());
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(twice) = names.iter().find(|h| !h.is_empty() && !seen.insert(*h)) {
        return Err(format!("the CSV header names the column `{twice}` twice"));
    }
    Ok(Some(names))
}

// ---------------------------------------------------------------------------------------
// JSON arrays

/// An array element ends at a `,` or `]` outside strings and nested brackets.
#[derive(Default)]
struct ElementEnd {
    depth: u32,
    in_string: bool,
    escaped: bool,
}

impl Framing for ElementEnd {
    fn end_in(&mut self, bytes: &[u8]) -> Option<usize> {
        for (i, &b) in bytes.iter().enumerate() {
            if self.in_string {
                match (self.escaped, b) {
                    (true, _) => self.escaped = false,
                    (false, b'\\') => self.escaped = true,
                    (false, b'"') => self.in_string = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' => self.depth = self.depth.saturating_sub(1),
                b']' if self.depth > 0 => self.depth -= 1,
                b',' | b']' if self.depth == 0 => {
                    *self = Self::default();
                    return Some(i);
                }
                _ => {}
            }
        }
        None
    }
}

/// A single object as the whole body: it ends only where the input does.
struct NoEnd;

impl Framing for NoEnd {
    fn end_in(&mut self, _: &[u8]) -> Option<usize> {
        None
    }
}

fn json_array<R: Read, E>(
    input: BufReader<R>,
    mut row: impl FnMut(u64, Result<Product, String>) -> Result<(), E>,
) -> Result<Result<(), FeedError>, E> {
    let mut framed = Framed::new(input);
    let malformed = |m: &str| Ok(Err(FeedError::Malformed(m.to_owned())));
    let mut bytes = Vec::new();
    let first = match framed.peek_past_whitespace() {
        Ok(b) => b,
        Err(e) => return Ok(Err(FeedError::Read(e))),
    };
    match first {
        Some(b'[') => framed.input.consume(1),
        Some(b'{') => {
            // One object is one product: a body that is not JSON is malformed, not a row.
            return match framed.next(&mut NoEnd, &mut bytes) {
                Err(e) => Ok(Err(FeedError::Read(e))),
                Ok(Some(frame)) if frame.too_long => {
                    row(1, Err(too_long()))?;
                    Ok(Ok(()))
                }
                Ok(_) => match strict_json::parse(&bytes) {
                    Ok(value) => {
                        row(1, Product::from_json(value))?;
                        Ok(Ok(()))
                    }
                    Err(e @ StrictJsonError::DuplicateKey(_)) => {
                        row(1, Err(e.to_string()))?;
                        Ok(Ok(()))
                    }
                    Err(e) => malformed(&format!("the JSON body is not valid JSON: {e}")),
                },
            };
        }
        _ => return malformed("send a JSON array of products (or one product object)"),
    }
    let mut framing = ElementEnd::default();
    let mut position = 0u64;
    loop {
        let frame = match framed.next(&mut framing, &mut bytes) {
            Ok(Some(frame)) => frame,
            Ok(None) => return malformed("the JSON array is not closed with `]`"),
            Err(e) => return Ok(Err(FeedError::Read(e))),
        };
        let blank = bytes.iter().all(u8::is_ascii_whitespace);
        match (blank && !frame.too_long, frame.end) {
            // `[]`: no elements at all.
            (true, Some(b']')) if position == 0 => {}
            (true, _) => return malformed("the JSON array has an empty element (a stray `,`)"),
            (false, _) => {
                position += 1;
                let parsed = if frame.too_long {
                    Err(too_long())
                } else {
                    product_from_json_text(&bytes)
                };
                row(position, parsed)?;
            }
        }
        match frame.end {
            Some(b',') => continue,
            Some(_) => break,
            None => return malformed("the JSON array is not closed with `]`"),
        }
    }
    match framed.peek_past_whitespace() {
        Ok(None) => Ok(Ok(())),
        Ok(Some(_)) => malformed("there is data after the JSON array's closing `]`"),
        Err(e) => Ok(Err(FeedError::Read(e))),
    }
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn a_quote_inside_an_unquoted_csv_field_is_text_and_a_quoted_newline_is_not_a_row_end() {
        let body = b"product_key,name\na1,55\" TV\na2,\"Two\nlines, \"\"quoted\"\"\"\na3,x\n";
        let (rows, end) = lines(Format::Csv, body);
        assert_eq!(end, None);
        let keys: Vec<_> = rows.iter().map(|(l, r)| (*l, r.clone())).collect();
        assert_eq!(
            keys,
            [
                (2, Ok("a1".to_owned())),
                (3, Ok("a2".to_owned())),
                (5, Ok("a3".to_owned()))
            ]
        );
    }

    #[test]
    fn crlf_line_ends_a_bom_and_semicolons_read_as_plain_rows() {
        let body = b"\xEF\xBB\xBFProduct Key;Name\r\na1;Mug\r\n\r\na2;Cup\r\n";
        let (rows, end) = lines(Format::Csv, body);
        assert_eq!(end, None);
        assert_eq!(rows, [(2, Ok("a1".into())), (4, Ok("a2".into()))]);
        let body = b"\xEF\xBB\xBF{\"product_key\":\"j1\",\"name\":\"x\"}\r\n";
        assert_eq!(lines(Format::JsonLines, body).0, [(1, Ok("j1".into()))]);
    }

    #[test]
    fn a_lone_cr_ends_a_csv_line_and_counts_as_one() {
        let body = b"product_key,name\rc1,x\rc2,\"y\rz\"\rc3,w\r";
        let (rows, end) = lines(Format::Csv, body);
        assert_eq!(end, None);
        assert_eq!(
            rows,
            [
                (2, Ok("c1".into())),
                (3, Ok("c2".into())),
                (5, Ok("c3".into()))
            ]
        );
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
