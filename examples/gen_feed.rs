//! Writes a deterministic generated catalogue as JSON Lines to stdout.
//!
//!     cargo run --example gen_feed -- [PRODUCTS] [SEED] > examples/feeds/demo.jsonl
//!     cargo run --release --example gen_feed -- --hard 100000 [SEED] > hard.jsonl
//!
//! Defaults: the demo catalogue, 2,400 products, seed 7 (the committed
//! `examples/feeds/demo.jsonl`). `--hard` writes the hard catalogue (`demo::generate_hard`)
//! that the pairing tests, `catalog_bench` and `scripts/sklearn_pair.sh` use.

use std::io::{BufWriter, Write};

use catalog_jobs::catalog::demo::{generate, generate_hard};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let hard = args.first().is_some_and(|a| a == "--hard");
    if hard {
        args.remove(0);
    }
    let mut args = args.into_iter();
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
    let catalogue = if hard {
        generate_hard(products, seed)
    } else {
        generate(products, seed)
    };
    for p in catalogue {
        serde_json::to_writer(&mut out, &p).expect("stdout is writable");
        out.write_all(b"\n").expect("stdout is writable");
    }
    out.flush().expect("stdout is writable");
}
