//! JSON feeds: JSON Lines (a row a line) and JSON arrays (a row an element, or one object
//! as the whole body), each row a product object.

use std::io::{BufRead, BufReader, Read};

use serde_json::Value;

use crate::strict_json::{self, StrictJsonError};

use super::framing::{Framed, Framing};
use super::header::{self, Names};
use super::{not_utf8, too_long, FeedError, Product};

/// A JSON Lines row ends at a line break.
struct LineEnd;

impl Framing for LineEnd {
    fn end_in(&mut self, bytes: &[u8]) -> Option<usize> {
        bytes.iter().position(|b| *b == b'\n')
    }
}

pub(super) fn json_lines<R: Read, E>(
    input: BufReader<R>,
    mut row: impl FnMut(u64, Result<Product, String>) -> Result<(), E>,
) -> Result<Result<(), FeedError>, E> {
    let mut framed = Framed::new(input);
    let mut bytes = Vec::new();
    let mut rows = JsonRows::default();
    loop {
        let frame = match framed.next(&mut LineEnd, &mut bytes) {
            Ok(Some(frame)) => frame,
            Ok(None) => return Ok(Ok(())),
            Err(e) => return Ok(Err(FeedError::Read(e))),
        };
        let parsed = match std::str::from_utf8(&bytes) {
            _ if frame.too_long => rows.unread(too_long()),
            Err(_) => rows.unread(not_utf8()),
            Ok(text) if text.trim().is_empty() => continue,
            Ok(text) => match rows.read(text.trim().as_bytes()) {
                Ok(parsed) => parsed,
                Err(refused) => return Ok(Err(refused)),
            },
        };
        row(frame.line, parsed)?;
    }
}

/// Reads rows' JSON text as products, and the first row's keys as the feed's header.
#[derive(Default)]
struct JsonRows {
    /// A row has been seen: the header check is behind us.
    past_first: bool,
}

impl JsonRows {
    /// A row that could not be read at all (too long, not UTF-8): no header to check.
    fn unread(&mut self, why: String) -> Result<Product, String> {
        self.past_first = true;
        Err(why)
    }

    /// The row's product, or why it is not one; `Err` when the first row's keys refuse the
    /// whole feed (see `header`). A key given twice (at any depth) makes the row invalid,
    /// never "the last one wins".
    fn read(&mut self, text: &[u8]) -> Result<Result<Product, String>, FeedError> {
        let value = match strict_json::parse(text) {
            Ok(value) => value,
            Err(StrictJsonError::Invalid(why)) => {
                return Ok(self.unread(format!("not valid JSON: {why}")))
            }
            Err(e) => return Ok(self.unread(e.to_string())),
        };
        self.read_value(value)
    }

    fn read_value(&mut self, value: Value) -> Result<Result<Product, String>, FeedError> {
        if !std::mem::replace(&mut self.past_first, true) {
            if let Value::Object(fields) = &value {
                let keys: Vec<String> = fields.keys().cloned().collect();
                if let Some(why) = header::refusal(&keys, Names::FirstJsonRow) {
                    return Err(FeedError::Malformed(why));
                }
            }
        }
        Ok(Product::from_json(value))
    }
}

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

pub(super) fn json_array<R: Read, E>(
    input: BufReader<R>,
    row: impl FnMut(u64, Result<Product, String>) -> Result<(), E>,
) -> Result<Result<(), FeedError>, E> {
    let mut framed = Framed::new(input);
    match framed.peek_past_whitespace() {
        Ok(Some(b'[')) => {
            framed.input.consume(1);
            elements(framed, row)
        }
        Ok(Some(b'{')) => single_object(framed, row),
        Ok(_) => malformed("send a JSON array of products (or one product object)"),
        Err(e) => Ok(Err(FeedError::Read(e))),
    }
}

fn malformed<E>(why: &str) -> Result<Result<(), FeedError>, E> {
    Ok(Err(FeedError::Malformed(why.to_owned())))
}

/// One object as the whole body is one product: a body that is not JSON is malformed, not
/// a row.
fn single_object<R: Read, E>(
    mut framed: Framed<R>,
    mut row: impl FnMut(u64, Result<Product, String>) -> Result<(), E>,
) -> Result<Result<(), FeedError>, E> {
    let mut bytes = Vec::new();
    let parsed = match framed.next(&mut NoEnd, &mut bytes) {
        Err(e) => return Ok(Err(FeedError::Read(e))),
        Ok(Some(frame)) if frame.too_long => Err(too_long()),
        Ok(_) => match strict_json::parse(&bytes) {
            Ok(value) => match JsonRows::default().read_value(value) {
                Ok(parsed) => parsed,
                Err(refused) => return Ok(Err(refused)),
            },
            Err(e @ StrictJsonError::DuplicateKey(_)) => Err(e.to_string()),
            Err(e) => return malformed(&format!("the JSON body is not valid JSON: {e}")),
        },
    };
    row(1, parsed)?;
    Ok(Ok(()))
}

/// The elements of an array whose `[` was consumed, each one row, up to its `]`.
fn elements<R: Read, E>(
    mut framed: Framed<R>,
    mut row: impl FnMut(u64, Result<Product, String>) -> Result<(), E>,
) -> Result<Result<(), FeedError>, E> {
    let (mut bytes, mut framing, mut rows) =
        (Vec::new(), ElementEnd::default(), JsonRows::default());
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
                    rows.unread(too_long())
                } else {
                    match rows.read(&bytes) {
                        Ok(parsed) => parsed,
                        Err(refused) => return Ok(Err(refused)),
                    }
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
