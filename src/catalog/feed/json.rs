//! JSON feeds: JSON Lines (a row a line) and JSON arrays (a row an element, or one object
//! as the whole body), each row a product object.

use std::io::{BufRead, BufReader, Read};

use crate::strict_json::{self, StrictJsonError};

use super::framing::{Framed, Framing};
use super::{not_utf8, product_from_json_text, too_long, FeedError, Product};

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
