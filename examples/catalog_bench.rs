//! Prints time, products/second, peak memory and family recall@5 for enrich and pair on the
//! hard generated catalogue (`demo::generate_hard`: families told apart only by combinations
//! of common words, 30 % noise), and the incremental pair after 1 % of random edits
//! (`demo::edit_hard`).
//!
//!     cargo run --release --example catalog_bench                   # 10k, 100k and 1M products
//!     cargo run --release --example catalog_bench -- 50000          # one size
//!     cargo run --release --example catalog_bench -- 50000 --demo   # the easy demo catalogue
//!     VOCAB=40 cargo run --release --example catalog_bench -- 100000  # few words (`few_words`)
//!
//! Each size runs in a child process of its own, so its peak memory (VmHWM) is its own; the
//! peak is reset before each step, and a counting allocator tells what the pair itself held
//! at most, to set beside `PAIR_MAX_MEMORY_MB`'s estimate. Only the store holds the
//! catalogue while jobs run, as in the service (and, between pairs, the index a pair keeps
//! for the next, `pair::kept`). Uses the embedded catalogue store, so it
//! measures the algorithms, not Redis. Compare with
//! `scripts/sklearn_pair.sh N` (scikit-learn's exhaustive cosine kNN on the same products).
//! To profile the incremental pair alone (`perf_ctl_at`; `PERF_PAIR=full` profiles the first
//! full pair instead):
//!
//!     mkfifo ctl ack; PERF_CTL=ctl:ack perf record -D -1 --control fifo:ctl,ack -g \
//!         target/release/examples/catalog_bench 1000000

use std::alloc::{GlobalAlloc, Layout, System};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use catalog_jobs::catalog::pair::PairParams;
use catalog_jobs::catalog::products::{MemoryCatalog, Product, ProductKey};
use catalog_jobs::catalog::{demo, enrich, pair, run_unfenced, Catalog, CatalogSettings};
use catalog_jobs::jobs::fence::Unfenced;
use catalog_jobs::jobs::TenantId;
use tokio_util::sync::CancellationToken;

/// The seed of the benchmark catalogue (the sklearn script reads the same products).
const SEED: u64 = 42;

/// The sizes run by default.
const SIZES: [usize; 3] = [10_000, 100_000, 1_000_000];

/// Recall is measured at this many neighbours (the default `PAIR_TOP_K`).
const RECALL_AT: usize = 5;

/// The heap this process holds, counted on every allocation, and the most it held since
/// `Heap::reset`: what a pair itself takes, apart from what the allocator keeps of memory
/// freed before (which the resident set cannot tell apart).
struct Heap;

static HELD: AtomicUsize = AtomicUsize::new(0);
static MOST: AtomicUsize = AtomicUsize::new(0);

#[global_allocator]
static COUNTED: Heap = Heap;

// SAFETY: every call is passed on to the system allocator unchanged; only counts are added.
unsafe impl GlobalAlloc for Heap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            Heap::grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        HELD.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            HELD.fetch_sub(layout.size(), Ordering::Relaxed);
            Heap::grew(new_size);
        }
        p
    }
}

impl Heap {
    fn grew(size: usize) {
        let now = HELD.fetch_add(size, Ordering::Relaxed) + size;
        MOST.fetch_max(now, Ordering::Relaxed);
    }

    fn held_mib() -> f64 {
        HELD.load(Ordering::Relaxed) as f64 / MIB
    }

    fn most_mib() -> f64 {
        MOST.load(Ordering::Relaxed) as f64 / MIB
    }

    fn reset() {
        MOST.store(HELD.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

const MIB: f64 = (1 << 20) as f64;

/// A line of /proc/self/status in MiB (`VmHWM`: the peak resident set, `VmRSS`: now).
fn status_mib(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(field)).map(str::to_owned))
        .and_then(|l| {
            l.split_whitespace()
                .nth(1)
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

fn peak_rss_mib() -> f64 {
    status_mib("VmHWM:")
}

fn rss_mib() -> f64 {
    status_mib("VmRSS:")
}

/// Starts a new peak: the kernel resets VmHWM to the present resident set when "5" is
/// written to clear_refs, so each step's peak is its own.
fn reset_peak() {
    // Without the reset (an old kernel) the peaks printed are the process's so far.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// User + system CPU seconds of this process so far (all threads), from /proc/self/stat.
/// On a shared machine this, unlike the wall time, does not count time spent waiting for a
/// core.
fn cpu_seconds() -> f64 {
    /// Linux reports these fields in clock ticks of 1/100 s (USER_HZ).
    const TICKS_PER_SECOND: f64 = 100.0;
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // Fields after the command name (which may hold spaces) start at field 3.
            let rest = s.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: f64 = fields.get(11)?.parse().ok()?;
            let stime: f64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) / TICKS_PER_SECOND)
        })
        .unwrap_or(f64::NAN)
}

fn generate(n: usize, easy: bool) -> Vec<Product> {
    if let Some(words) = vocabulary() {
        few_words(n, words, SEED)
    } else if easy {
        demo::generate(n, SEED)
    } else {
        demo::generate_hard(n, SEED)
    }
}

/// `VOCAB=<words>`: the few-words catalogue (`few_words`) instead of the hard one.
fn vocabulary() -> Option<usize> {
    std::env::var("VOCAB")
        .ok()
        .map(|v| v.parse().expect("VOCAB is a number of words"))
}

/// Words a few-words name holds.
const FEW_WORDS_NAME: usize = 6;

/// A catalogue of a shop with few distinct words (a hostile probe's case): every name is
/// `FEW_WORDS_NAME` distinct words drawn from `words` made-up ones, one brand, one category,
/// prices within one ×3 band, so every product is comparable with every other and shares
/// words with nearly all. No planted families: recall is not measured on it.
fn few_words(n: usize, words: usize, seed: u64) -> Vec<Product> {
    let mut rng = demo::Rng::new(seed);
    (0..n)
        .map(|i| few_words_product(&format!("p{i:07}"), words, &mut rng))
        .collect()
}

fn few_words_product(key: &str, words: usize, rng: &mut demo::Rng) -> Product {
    assert!(
        words >= FEW_WORDS_NAME,
        "VOCAB holds at least a name's words"
    );
    let mut picked: Vec<usize> = Vec::with_capacity(FEW_WORDS_NAME);
    while picked.len() < FEW_WORDS_NAME {
        let w = rng.below(words);
        if !picked.contains(&w) {
            picked.push(w);
        }
    }
    let name: Vec<String> = picked.into_iter().map(made_up_word).collect();
    Product {
        product_key: ProductKey::parse(key).expect("a valid key"),
        name: name.join(" "),
        description: None,
        brand: Some("Same".to_owned()),
        price_cents: Some(1_000 + rng.below(100) as i64),
        currency: None,
        taxonomy_path: vec!["Home".to_owned()],
        attributes: serde_json::Map::new(),
    }
}

/// Word `i` of a made-up vocabulary: two or three consonant-vowel syllables, so that no word
/// folds as a plural or joins with another into a third.
fn made_up_word(i: usize) -> String {
    const C: &[u8] = b"bdfgklmnprtvz";
    const V: &[u8] = b"aeiou";
    let syllable = |k: usize| {
        let k = k % (C.len() * V.len());
        format!("{}{}", C[k / V.len()] as char, V[k % V.len()] as char)
    };
    let per = C.len() * V.len();
    format!(
        "{}{}{}",
        syllable(i / per / per),
        syllable(i / per),
        syllable(i)
    )
}

/// Edits of a few-words catalogue (`EDITED_SHARE` of it): half renamed with other words, a
/// quarter removed, a quarter new products.
fn few_words_edits(products: &[Product], words: usize) -> demo::Edits {
    let mut rng = demo::Rng::new(SEED + 1);
    let count = ((products.len() as f64 * EDITED_SHARE).round() as usize).max(1);
    let mut edits = demo::Edits::default();
    for k in 0..count {
        let p = &products[rng.below(products.len())];
        match k % 4 {
            0 | 1 => {
                let renamed = few_words_product(p.product_key.as_str(), words, &mut rng);
                edits.upserts.push(renamed);
            }
            2 => edits.removals.push(p.product_key.clone()),
            _ => {
                let added = few_words_product(&format!("add{k}"), words, &mut rng);
                edits.upserts.push(added);
            }
        }
    }
    edits
}

fn run(n: usize, easy: bool) {
    let catalog = Catalog {
        store: Arc::new(MemoryCatalog::new()),
        settings: CatalogSettings::default(),
    };
    let tenant = TenantId::parse("bench").expect("a valid tenant");
    // Only the store holds the catalogue while jobs run, as in the service: the generated
    // products are made again (the same seed) for the recall and the edits.
    catalog
        .store
        .upsert(&tenant, &generate(n, easy), &Unfenced)
        .expect("the embedded store accepts products");
    let never = CancellationToken::new();
    let started = Instant::now();
    let report = run_unfenced(
        &catalog,
        &tenant,
        &enrich::EnrichParams { force: false },
        &never,
        None,
    )
    .expect("enrich runs");
    let enrich_s = started.elapsed().as_secs_f64();
    assert_eq!(report["products"], n);

    let (loaded, held) = settled("the enrich and the bench");
    reset_peak();
    Heap::reset();
    let started = Instant::now();
    let cpu_before = cpu_seconds();
    let phases = Phases::new();
    perf_ctl_at("full", "enable");
    let report = run_unfenced(
        &catalog,
        &tenant,
        &PairParams::default(),
        &never,
        Some(&|p, _: &str| phases.at(p)),
    )
    .expect("pair runs");
    perf_ctl_at("full", "disable");
    let pair_s = started.elapsed().as_secs_f64();
    let pair_cpu = cpu_seconds() - cpu_before;
    let peak = peak_rss_mib();
    let heap = Heap::most_mib() - held;
    phases.print("full pair");
    let products = generate(n, easy);
    // A few-words catalogue plants no families.
    let (found, expected) = match vocabulary() {
        Some(_) => (0, 0),
        None => recall(&catalog, &tenant, &products),
    };
    println!(
        "{n:>8} products | enrich {enrich_s:6.2} s ({:>8.0} products/s) | pair {pair_s:7.2} s ({:>8.0} products/s, CPU {pair_cpu:.2} s, {} paired) | recall@{RECALL_AT} {:.3} | peak RSS {peak:.0} MiB (before it: {loaded:.0} MiB, the store's catalogue {held:.0} MiB of heap) | the pair's own peak heap {heap:.0} MiB, PAIR_MAX_MEMORY_MB estimate {} MiB",
        n as f64 / enrich_s,
        n as f64 / pair_s,
        report["paired"],
        found as f64 / expected.max(1) as f64,
        pair::estimated_mb(n),
    );
    let edits = match vocabulary() {
        Some(words) => few_words_edits(&products, words),
        None => demo::edit_hard(&products, EDITED_SHARE, SEED + 1),
    };
    drop(products);
    println!("{}", incremental_after_edits(&catalog, &tenant, edits));
    reset_peak();
    Heap::reset();
    let cancel_ms = cancel_latency_ms(&catalog, &tenant);
    println!(
        "           a full pair cancelled while scoring stopped {cancel_ms:.0} ms after the cancel (peak RSS {:.0} MiB, heap {:.0} MiB)",
        peak_rss_mib(),
        Heap::most_mib(),
    );
}

/// How many of the planted families' members the table names among each product's first
/// `RECALL_AT` neighbours, of how many it could.
fn recall(catalog: &Catalog, tenant: &TenantId, products: &[Product]) -> (usize, usize) {
    let neighbours = |key: &ProductKey| {
        catalog
            .store
            .neighbours(tenant, key)
            .expect("the embedded store reads")
            .unwrap_or_default()
            .into_iter()
            .map(|n| n.product_key)
            .collect()
    };
    demo::family_recall(products, neighbours, RECALL_AT)
}

/// Has glibc's malloc do now, untimed, the work it defers from earlier frees to later
/// allocations: blocks freed wait in its fast and unsorted bins, and the next allocations
/// that miss merge them and sort them into place, ten thousand a call. An enrich of a million
/// products leaves millions (`mallinfo2`: 7.5 M free small blocks after the 1 % edits'
/// enrich, with the bench's own copy of the generated products), and the pair timed next
/// paid for them on its first allocations (0.3 s of the incremental pair's 0.5 s reading at
/// 1M; none of it the pair's own frees). Large requests from the main thread's arena, which
/// the bench's jobs allocate from: each merges the fast bins and sorts up to ten thousand
/// blocks. Answers the seconds it took.
fn settle_allocator() -> f64 {
    /// Enough requests to sort twenty million blocks; each costs little once none are left.
    const REQUESTS: usize = 2_000;
    /// Above glibc's small bins (so it merges and sorts), below its mmap threshold.
    const LARGE: usize = 64 << 10;
    let started = Instant::now();
    for _ in 0..REQUESTS {
        // black_box: a compiler may drop a malloc whose block is never used.
        let block = std::hint::black_box(vec![0u8; LARGE]);
        drop(block);
    }
    started.elapsed().as_secs_f64()
}

/// Settles the allocator (`settle_allocator`) before a timed pair, says how long it took
/// for the blocks freed `by`, and answers the resident set and heap held then.
fn settled(by: &str) -> (f64, f64) {
    let seconds = settle_allocator();
    println!("           before the next pair, glibc sorted the blocks freed by {by} in {seconds:.2} s (untimed)");
    (rss_mib(), Heap::held_mib())
}

/// The share of the catalogue a nightly sync is taken to change.
const EDITED_SHARE: f64 = 0.01;

/// Applies `edits` (`EDITED_SHARE` of the catalogue, `demo::edit_hard`), enriches what
/// changed, and times the incremental pair that follows: wall, CPU, phases, peak memory and
/// how many products it re-scored.
fn incremental_after_edits(catalog: &Catalog, tenant: &TenantId, edits: demo::Edits) -> String {
    let store = &catalog.store;
    store
        .upsert(tenant, &edits.upserts, &Unfenced)
        .expect("the embedded store accepts products");
    store
        .remove(tenant, &edits.removals)
        .expect("the embedded store removes products");
    drop(edits);
    let never = CancellationToken::new();
    let params = enrich::EnrichParams { force: false };
    run_unfenced(catalog, tenant, &params, &never, None).expect("enrich runs");
    let (before, held) = settled("the edits, the enrich and the bench");
    reset_peak();
    Heap::reset();
    let started = Instant::now();
    let cpu_before = cpu_seconds();
    let phases = Phases::new();
    perf_ctl_at("incremental", "enable");
    let report = run_unfenced(
        catalog,
        tenant,
        &PairParams::default(),
        &never,
        Some(&|p, _: &str| phases.at(p)),
    )
    .expect("pair runs");
    perf_ctl_at("incremental", "disable");
    let wall = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu_before;
    phases.print("incremental");
    format!(
        "           after {:.0} % edits: {} pair {wall:.2} s (CPU {cpu:.2} s, {} re-scored: {}; changes {}) | peak RSS {:.0} MiB (before it {before:.0} MiB, the store's catalogue, state and kept index {held:.0} MiB of heap) | its own peak heap {:.0} MiB | the index kept for the next pair {:.0} MiB",
        EDITED_SHARE * 100.0,
        report["mode"].as_str().unwrap_or("?"),
        report["rescored"],
        report["rescored_because"],
        report["changes"],
        peak_rss_mib(),
        Heap::most_mib() - held,
        pair::kept::held_mb(),
    )
}

/// Profiles one pair alone: with `PERF_CTL=ctl:ack` (two fifos) the bench tells
/// `perf record -D -1 --control fifo:ctl,ack` to `enable` its events just before that pair and
/// to `disable` them after it, and waits for perf's answer each time. The pair is `which`
/// `PERF_PAIR` names (`full` or `incremental`, the default).
fn perf_ctl_at(which: &str, cmd: &str) {
    use std::io::{Read, Write};
    let Ok(fifos) = std::env::var("PERF_CTL") else {
        return;
    };
    let wanted = std::env::var("PERF_PAIR").unwrap_or_else(|_| "incremental".to_owned());
    if wanted != which {
        return;
    }
    let (ctl, ack) = fifos.split_once(':').expect("PERF_CTL is ctl:ack");
    let mut ctl = std::fs::OpenOptions::new()
        .write(true)
        .open(ctl)
        .expect("perf's control fifo opens");
    writeln!(ctl, "{cmd}").expect("perf's control fifo takes the command");
    let mut answer = [0u8; 5];
    let _ = std::fs::File::open(ack)
        .expect("perf's ack fifo opens")
        .read(&mut answer);
}

/// Wall and CPU time at each phase's end (loading 5, embedding 35, indexing 45, scoring 90,
/// writing 100), from the job's own progress.
struct Phases {
    start: (Instant, f64),
    ends: Mutex<Vec<(u8, Instant, f64)>>,
}

impl Phases {
    const ENDS: [(u8, &'static str); 5] = [
        (5, "load"),
        (35, "embed"),
        (45, "index"),
        (90, "score"),
        (100, "write"),
    ];

    fn new() -> Self {
        Self {
            start: (Instant::now(), cpu_seconds()),
            ends: Mutex::new(Vec::new()),
        }
    }

    fn at(&self, percent: u8) {
        let mut ends = self.ends.lock().expect("not poisoned");
        for (end, _) in Self::ENDS {
            if percent >= end && !ends.iter().any(|(e, _, _)| *e == end) {
                ends.push((end, Instant::now(), cpu_seconds()));
            }
        }
    }

    fn print(&self, which: &str) {
        let ends = self.ends.lock().expect("not poisoned");
        let mut last = self.start;
        let mut line = format!("           {which} phases (wall/CPU s):");
        for (end, name) in Self::ENDS {
            if let Some((_, at, cpu)) = ends.iter().find(|(e, _, _)| *e == end) {
                let wall = at.duration_since(last.0).as_secs_f64();
                line += &format!(" {name} {wall:.2}/{:.2}", cpu - last.1);
                last = (*at, *cpu);
            }
        }
        println!("{line}");
    }
}

/// Pairs again (a full pair), cancels once scoring is under way (at `CANCEL_AT` %), and returns how long
/// the job took to stop after the cancel.
fn cancel_latency_ms(catalog: &Catalog, tenant: &TenantId) -> f64 {
    const CANCEL_AT: u8 = 60;
    let stop = CancellationToken::new();
    let cancelled_at = Mutex::new(None);
    let progress = |percent: u8, _: &str| {
        if percent >= CANCEL_AT && !stop.is_cancelled() {
            *cancelled_at.lock().expect("not poisoned") = Some(Instant::now());
            stop.cancel();
        }
    };
    let full = pair::PairParams { full: true };
    let result = run_unfenced(catalog, tenant, &full, &stop, Some(&progress));
    let stopped = Instant::now();
    assert!(result.is_err(), "the cancelled pair stops");
    let at = cancelled_at
        .lock()
        .expect("not poisoned")
        .expect("scoring reported progress");
    stopped.duration_since(at).as_secs_f64() * 1000.0
}

fn main() {
    let cores = std::thread::available_parallelism()
        .map(|p| p.get())
        .unwrap_or(1);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let easy = args.iter().any(|a| a == "--demo");
    match args.iter().find(|a| !a.starts_with("--")) {
        Some(n) => run(n.parse().expect("a product count"), easy),
        None => {
            let which = match vocabulary() {
                Some(words) => format!("few-words ({words})"),
                None if easy => "demo".to_owned(),
                None => "hard".to_owned(),
            };
            println!(
                "catalog_bench on {cores} cores (embedded store, {which} catalogue, seed {SEED})"
            );
            let me = std::env::current_exe().expect("the bench knows its own path");
            for n in SIZES {
                let mut child = Command::new(&me);
                child.arg(n.to_string());
                if easy {
                    child.arg("--demo");
                }
                let status = child.status().expect("the bench can run itself");
                assert!(status.success(), "the {n}-product run failed");
            }
        }
    }
}
