//! `catalog-jobs gen-feed`: writes a generated catalogue as JSON Lines on stdout — the
//! committed demo feed, a large feed to try single flight and cancel on, or the hard
//! catalogue the pairing benchmarks read. Deterministic: the same size and seed give the
//! same bytes. A subcommand of the binary rather than an example, so it builds with the
//! service and not with every dev-dependency.

use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

use clap::Args;

use crate::catalog::demo::{generate, generate_hard};

#[derive(Clone, Debug, Args)]
pub struct GenFeedArgs {
    /// How many products to write.
    #[arg(default_value_t = 2_400)]
    pub products: usize,
    /// The generator's seed (the committed demo feed is seed 7).
    #[arg(default_value_t = 7)]
    pub seed: u64,
    /// Write the hard catalogue instead: families told apart only by a combination of words
    /// thousands of products share (what `catalog_bench` and `scripts/sklearn_pair.sh` pair).
    #[arg(long)]
    pub hard: bool,
}

/// Writes the feed to stdout; a reader that stops early (`| head`) is not an error.
pub fn run(args: &GenFeedArgs) -> ExitCode {
    let mut out = BufWriter::new(io::stdout().lock());
    match write(args, &mut out).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gen-feed: could not write the feed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn write(args: &GenFeedArgs, out: &mut impl Write) -> io::Result<()> {
    let catalogue = if args.hard {
        generate_hard(args.products, args.seed)
    } else {
        generate(args.products, args.seed)
    };
    for product in &catalogue {
        serde_json::to_writer(&mut *out, product)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}
