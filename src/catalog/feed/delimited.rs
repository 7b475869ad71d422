//! CSV feeds: a header naming the columns, then a record a row; the delimiter sniffed from
//! the header line (`,`, `;` or tab), quoted fields over several lines.

use std::io::{self, BufRead, BufReader, Read};

use serde_json::{Map, Value};

use super::framing::{Framed, Framing};
use super::header::{self, Names};
use super::{not_utf8, too_long, FeedError, Product};

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
/// A value in a column the header does not name — its header cell empty, or past the
/// header's last column — makes the row invalid, naming the column by its number, as a value
/// under a named unknown column does: no cell is dropped without a word.
fn csv_object(headers: &[String], fields: Vec<String>) -> Result<Value, String> {
    let unnamed = fields
        .iter()
        .enumerate()
        .position(|(i, v)| !v.trim().is_empty() && headers.get(i).is_none_or(|h| h.is_empty()));
    if let Some(i) = unnamed {
        let column = i + 1;
        return Err(match i < headers.len() {
            true => format!(
                "column {column} has a value but the header leaves it unnamed: name the column, or leave its cells empty"
            ),
            false => format!(
                "the row has {} fields but the header names {}: column {column} has a value",
                fields.len(),
                headers.len()
            ),
        });
    }
    let mut obj = Map::new();
    for (h, v) in headers.iter().zip(fields) {
        if v.trim().is_empty() {
            continue;
        }
        obj.insert(h.clone(), Value::String(v));
    }
    Ok(Value::Object(obj))
}

/// What a quoted field still open at the end of the feed is reported as.
pub(super) const UNCLOSED_QUOTE: &str =
    "a quoted field is never closed: its opening `\"` runs to the end of the feed";

pub(super) fn csv_rows<R: Read, E>(
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
    let mut seen = std::collections::HashSet::new();
    if let Some(twice) = names.iter().find(|h| !h.is_empty() && !seen.insert(*h)) {
        return Err(format!("the CSV header names the column `{twice}` twice"));
    }
    match header::refusal(&names, Names::CsvHeader) {
        Some(why) => Err(why),
        None => Ok(Some(names)),
    }
}
