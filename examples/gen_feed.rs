//! Writes the deterministic demo catalogue as JSON Lines to stdout.
//!
//!     cargo run --example gen_feed -- [PRODUCTS] [SEED] > examples/feeds/demo.jsonl
//!
//! Defaults: 2,400 products, seed 7 (the committed `examples/feeds/demo.jsonl`).

use std::io::{BufWriter, Write};

use catalog_jobs::catalog::demo::generate;

fn main() {
    let mut args = std::env::args().skip(1);
    let products: usize = args
        .next()
        .map(|a| a.parse().expect("PRODUCTS is a whole number"))
        .unwrap_or(2_400);
    let seed: u64 = args
        .next()
        .map(|a| a.parse().expect("SEED is a whole number"))
        .unwrap_or(7);
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    for p in generate(products, seed) {
        serde_json::to_writer(&mut out, &p).expect("stdout is writable");
        out.write_all(b"\n").expect("stdout is writable");
    }
    out.flush().expect("stdout is writable");
}
