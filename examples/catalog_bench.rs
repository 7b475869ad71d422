//! Prints products/second and peak memory for enrich and pair on the demo catalogue.
//!
//!     cargo run --release --example catalog_bench            # 10k and 100k products
//!     cargo run --release --example catalog_bench -- 50000   # one size
//!
//! Each size runs in a child process of its own, so its peak memory (VmHWM) is its own.
//! Uses the embedded catalogue store, so it measures the algorithms, not Redis.

use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use catalog_jobs::catalog::products::MemoryCatalog;
use catalog_jobs::catalog::{demo, enrich, pair, Catalog, CatalogSettings};
use catalog_jobs::jobs::TenantId;
use tokio_util::sync::CancellationToken;

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(str::to_owned)
        })
        .and_then(|l| {
            l.split_whitespace()
                .nth(1)
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

fn run(n: usize) {
    let products = demo::generate(n, 42);
    let catalog = Catalog {
        store: Arc::new(MemoryCatalog::new()),
        settings: CatalogSettings::default(),
    };
    let tenant = TenantId::parse("bench").expect("a valid tenant");
    catalog
        .store
        .upsert(&tenant, &products)
        .expect("the embedded store accepts products");
    drop(products);
    let before = peak_rss_mib();

    let started = Instant::now();
    let never = CancellationToken::new();
    let report = enrich::run(
        &catalog,
        &tenant,
        &enrich::EnrichParams { force: false },
        &never,
        None,
    )
    .expect("enrich runs");
    let enrich_s = started.elapsed().as_secs_f64();
    assert_eq!(report["products"], n);

    let started = Instant::now();
    let report = pair::run(&catalog, &tenant, &never, None).expect("pair runs");
    let pair_s = started.elapsed().as_secs_f64();
    println!(
        "{n:>7} products | enrich {enrich_s:6.2} s ({:>8.0} products/s) | pair {pair_s:6.2} s ({:>8.0} products/s, {} paired) | peak RSS {:.0} MiB (catalogue loaded: {before:.0} MiB)",
        n as f64 / enrich_s,
        n as f64 / pair_s,
        report["paired"],
        peak_rss_mib(),
    );
}

fn main() {
    let cores = std::thread::available_parallelism()
        .map(|p| p.get())
        .unwrap_or(1);
    match std::env::args().nth(1) {
        Some(n) => run(n.parse().expect("a product count")),
        None => {
            println!("catalog_bench on {cores} cores (embedded store)");
            let me = std::env::current_exe().expect("the bench knows its own path");
            for n in [10_000, 100_000] {
                let status = Command::new(&me)
                    .arg(n.to_string())
                    .status()
                    .expect("the bench can run itself");
                assert!(status.success(), "the {n}-product run failed");
            }
        }
    }
}
