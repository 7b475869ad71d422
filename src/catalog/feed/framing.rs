//! Framing: where a row ends, read in bounded pieces. A row is kept only up to
//! `MAX_ROW_BYTES`; the rest of a longer one is read and dropped, so memory follows one row.

use std::io::{self, BufRead, BufReader, Read};

use super::MAX_ROW_BYTES;

/// Finds the end of the current row in the bytes it is shown, one piece at a time.
pub(super) trait Framing {
    /// The index of the byte that ends the row, if it is in `bytes`.
    fn end_in(&mut self, bytes: &[u8]) -> Option<usize>;
}

/// One row as framed: its bytes (empty when it was too long) and what ended it.
pub(super) struct Frame {
    pub(super) too_long: bool,
    /// The byte that ended the row, or `None` at the end of the input.
    pub(super) end: Option<u8>,
    /// The line the row started on (1-based).
    pub(super) line: u64,
}

/// Reads rows of at most `MAX_ROW_BYTES`, discarding the rest of a longer one.
pub(super) struct Framed<R> {
    pub(super) input: BufReader<R>,
    /// Line breaks consumed so far: `\n`, `\r\n` and a lone `\r` each count one.
    pub(super) newlines: u64,
    /// The last byte consumed was a `\r` (so a `\n` next is the same line break).
    pub(super) after_cr: bool,
}

impl<R: Read> Framed<R> {
    pub(super) fn new(input: BufReader<R>) -> Self {
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
    pub(super) fn next(
        &mut self,
        framing: &mut impl Framing,
        row: &mut Vec<u8>,
    ) -> io::Result<Option<Frame>> {
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
    pub(super) fn peek_past_whitespace(&mut self) -> io::Result<Option<u8>> {
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
