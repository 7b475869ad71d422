//! The progress callback's cost per call, as a job function sees it: clamp, never-backwards
//! percent, and an in-place replace of the channel value (no store I/O, no blocking).
//! Target: under 100 ns a call. Run: `cargo bench --bench progress`.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use catalog_jobs::jobs::progress::{guarded, progress_channel};
use criterion::{criterion_group, criterion_main, Criterion};

fn progress_callback(c: &mut Criterion) {
    let (reporter, _ticks) = progress_channel();
    let callback = guarded(|p: u8, s: &str| reporter.report(p, s));
    let mut i = 0u32;
    c.bench_function("progress callback (guarded, nobody reading)", |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            callback(
                black_box((i % 101) as u8),
                black_box("extracting attributes — batch 5 of 11"),
            );
        })
    });

    // The same with a writer on another thread reading the latest tick as fast as it can
    // (the real writer reads at most ten times a second): the worst case of contention.
    let (reporter, mut ticks) = progress_channel();
    let callback = guarded(|p: u8, s: &str| reporter.report(p, s));
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .expect("a runtime");
            rt.block_on(async {
                while !stop.load(Ordering::Relaxed) {
                    let _ = tokio::time::timeout(std::time::Duration::from_millis(1), ticks.next())
                        .await;
                }
            })
        })
    };
    c.bench_function("progress callback (guarded, a reader spinning)", |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            callback(
                black_box((i % 101) as u8),
                black_box("extracting attributes — batch 5 of 11"),
            );
        })
    });
    stop.store(true, Ordering::Relaxed);
    reader.join().expect("the reader thread ends");
}

criterion_group!(benches, progress_callback);
criterion_main!(benches);
