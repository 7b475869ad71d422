//! The memory budget of the real binary: it caps glibc's malloc arenas itself at start (its
//! default, 8 a core, let a replica's idle RSS grow across the long soak), and an operator's
//! `MALLOC_ARENA_MAX` wins over that cap when it is a count (else the cap stays, and the log
//! says why). Arenas are counted where glibc puts them: every arena but the main one is a
//! 64 MiB-aligned, 64 MiB anonymous reservation in `/proc/<pid>/maps`. And it gives the
//! pages glibc holds free back to the system (every second), so memory freed below
//! something still live does not stay resident.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

use std::time::{Duration, Instant};

use futures_util::{stream, StreamExt};

use crate::helpers::{tenant, Service};

/// The binary's own cap (`MALLOC_ARENAS` in src/main.rs): the main arena and one more.
const CAPPED_ARENAS: usize = 2;
/// An operator's choice above the cap, and above what the test's threads can fill.
const OPERATORS_ARENAS: &str = "8";
/// glibc's `HEAP_MAX_SIZE` on 64-bit: the size and alignment of each arena beyond the main one.
const ARENA_HEAP: u64 = 64 << 20;
/// Requests sent at once: enough that every worker thread of the runtime serves some.
const CONCURRENT: usize = 64;
/// Requests sent in all.
const REQUESTS: usize = 600;
/// Syncs started, each on a blocking thread of its own while it runs.
const SYNCS: usize = 4;

/// Gets every thread of the service allocating: runtime workers serve concurrent requests,
/// blocking threads run syncs.
async fn allocate_on_every_thread(svc: &Service) {
    for _ in 0..SYNCS {
        svc.start_sync(tenant().as_str(), "demo.jsonl").await;
    }
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("a client builds");
    let paths = ["/healthz", "/metrics", "/catalog/jobs?limit=50"];
    stream::iter(0..REQUESTS)
        .map(|i| client.get(svc.url(paths[i % paths.len()])).send())
        .buffer_unordered(CONCURRENT)
        .for_each(|r| async move {
            assert!(
                r.is_ok_and(|r| r.status().is_success()),
                "the service answers"
            );
        })
        .await;
}

/// The process's malloc arenas (the main one and each 64 MiB heap) and its threads.
fn arenas_and_threads(pid: u32) -> (usize, usize) {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps are readable");
    let anonymous: Vec<(u64, u64)> = maps
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (start, end) = fields.next()?.split_once('-')?;
            let named = fields.nth(4).is_some();
            let range = (
                u64::from_str_radix(start, 16).ok()?,
                u64::from_str_radix(end, 16).ok()?,
            );
            (!named).then_some(range)
        })
        .collect();
    // A heap is mapped read-write as far as it is used and reserved (no access) beyond, so it
    // reads as adjacent anonymous mappings from a 64 MiB boundary that end 64 MiB later.
    let heaps = anonymous
        .iter()
        .enumerate()
        .filter(|(_, (start, _))| start % ARENA_HEAP == 0)
        .filter(|(i, (start, _))| {
            let mut end = *start;
            for (from, to) in &anonymous[*i..] {
                if *from != end || end - start >= ARENA_HEAP {
                    break;
                }
                end = *to;
            }
            end - start == ARENA_HEAP
        })
        .count();
    let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("tasks are readable")
        .count();
    (1 + heaps, threads)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_caps_glibcs_malloc_arenas_at_two_however_many_of_its_threads_allocate() {
    let svc = Service::embedded().start().await;
    allocate_on_every_thread(&svc).await;
    let (arenas, threads) = arenas_and_threads(svc.pid());
    // With glibc's default every thread that allocates gets an arena of its own, up to 8 a
    // core: more threads than the cap must have allocated for the count to show the cap.
    assert!(
        threads > CAPPED_ARENAS,
        "{threads} threads: too few to fill more than {CAPPED_ARENAS} arenas"
    );
    assert!(
        arenas <= CAPPED_ARENAS,
        "{arenas} malloc arenas for {threads} threads; the binary caps them at {CAPPED_ARENAS}"
    );
    let log = svc.log();
    assert!(
        log.contains(&format!("malloc_arenas=at most {CAPPED_ARENAS}")),
        "the start-up log says what the allocator runs with:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_malloc_arena_max_wins_over_the_binarys_cap() {
    let svc = Service::embedded()
        .env("MALLOC_ARENA_MAX", OPERATORS_ARENAS)
        .start()
        .await;
    allocate_on_every_thread(&svc).await;
    let (arenas, threads) = arenas_and_threads(svc.pid());
    assert!(
        arenas > CAPPED_ARENAS,
        "{arenas} malloc arenas for {threads} threads with MALLOC_ARENA_MAX={OPERATORS_ARENAS}: \
         the binary's cap overrode the operator's"
    );
    let log = svc.log();
    assert!(
        log.contains(&format!(
            "malloc_arenas=MALLOC_ARENA_MAX={OPERATORS_ARENAS} (the environment's)"
        )),
        "the start-up log names the operator's setting:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malloc_arena_max_that_is_no_count_leaves_the_binarys_cap_and_says_so() {
    // glibc reads `many` (or `0`) as no cap at all: eight arenas a core.
    let svc = Service::embedded()
        .env("MALLOC_ARENA_MAX", "many")
        .start()
        .await;
    allocate_on_every_thread(&svc).await;
    let (arenas, threads) = arenas_and_threads(svc.pid());
    assert!(
        arenas <= CAPPED_ARENAS,
        "{arenas} malloc arenas for {threads} threads with MALLOC_ARENA_MAX=many: \
         the binary's cap was not applied"
    );
    let log = svc.log();
    assert!(
        log.contains(&format!("malloc_arenas=at most {CAPPED_ARENAS}"))
            && log.contains("MALLOC_ARENA_MAX=`many` is not a whole number above 0, so unused"),
        "the start-up log says the operator's value was not used:\n{log}"
    );
}

/// Products imported for the tenant that is then deleted, in batches of `IMPORT_BATCH`: small
/// allocations enough to read well above the service's own (about 14 MB of heap).
const IMPORTED: usize = 50_000;
const IMPORT_BATCH: usize = 5_000;
/// How long the freed pages may take to go back (the binary gives them back every second).
const GIVEN_BACK_WITHIN: Duration = Duration::from_secs(30);

/// The process's anonymous resident memory (its heaps and stacks), in kB.
fn rss_anon_kb(pid: u32) -> u64 {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status is readable");
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("status has RssAnon")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_of_a_deleted_tenant_goes_back_to_the_system() {
    let svc = Service::embedded().start().await;
    let (big, small) = (tenant(), tenant());
    let before = rss_anon_kb(svc.pid());
    for batch in 0..IMPORTED / IMPORT_BATCH {
        let rows: String = (0..IMPORT_BATCH)
            .map(|i| {
                format!(
                    "{{\"product_key\":\"k{batch}-{i}\",\"name\":\"Imported Lamp {i} Oak Walnut\",\"brand\":\"Northwind\"}}\n"
                )
            })
            .collect();
        let r = svc.import(big.as_str(), "application/x-ndjson", rows).await;
        assert_eq!(r.status(), 200, "batch {batch} is imported");
    }
    let imported = rss_anon_kb(svc.pid());
    assert!(
        imported > before + 8 * 1024,
        "the import took memory: {before} -> {imported} kB"
    );
    // Something of another tenant's, live after the big one's products.
    let r = svc
        .import(
            small.as_str(),
            "application/x-ndjson",
            "{\"product_key\":\"x\",\"name\":\"Lamp\"}\n",
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(svc.delete_tenant(big.as_str()).await.status(), 200);
    // glibc by itself kept 16.9 of the 18.5 MB resident (before: 4.6 MB).
    let bound = before + (imported - before) / 4;
    let started = Instant::now();
    let mut now = rss_anon_kb(svc.pid());
    while now > bound && started.elapsed() < GIVEN_BACK_WITHIN {
        tokio::time::sleep(Duration::from_millis(200)).await;
        now = rss_anon_kb(svc.pid());
    }
    assert!(
        now <= bound,
        "{before} kB before the import, {imported} after, still {now} {:?} after the tenant's \
         delete: the freed products' pages were not given back",
        started.elapsed()
    );
    let log = svc.log();
    assert!(
        log.contains("free_pages_given_back=every 1 s (malloc_trim)"),
        "the start-up log says how the binary gives free pages back:\n{log}"
    );
}
