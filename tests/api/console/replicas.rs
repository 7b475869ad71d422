//! The overview across two replicas of the real binary on one real Redis: both answer the
//! same figures after a scripted mix of done, failed and cancelled syncs, and they agree with
//! the jobs API; the process list shows the running sync on the replica that runs it, and a
//! `kill -9`ed replica reads `answering: false` once it missed three heartbeats, then leaves
//! the list once its heartbeat is stale — and never lingers past it (every answer is checked:
//! no listed process is staler than `stale_after_seconds`).

use std::time::{Duration, Instant};

use crate::helpers::{a_scripted_mix, both_agree, pid_of, stats_of, Replicas, Service};

/// Polls `survivor`'s overview until `victim_pid` has left its process list, having read
/// it not answering first; the survivor answers. (Only the last read is held to that: a
/// heartbeat every 0.2 s may be 0.6 s late on a loaded test machine.)
async fn until_it_leaves(survivor: &Service, victim_pid: u32) {
    let killed_at = Instant::now();
    let mut read_silent = false;
    loop {
        let stats = stats_of(survivor).await;
        let processes = stats["processes"].as_array().unwrap();
        let pids: Vec<u32> = processes.iter().map(|p| pid_of(&p["worker"])).collect();
        if !pids.contains(&victim_pid) {
            assert_eq!(pids, vec![survivor.pid()]);
            assert_eq!(processes[0]["answering"], true, "the survivor answers");
            break;
        }
        read_silent |= processes
            .iter()
            .any(|p| pid_of(&p["worker"]) == victim_pid && p["answering"] == false);
        assert!(
            killed_at.elapsed() < Duration::from_secs(20),
            "the killed replica never left: {stats}"
        );
        // The victim's entry can only go stale with time: nothing else signals it.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        read_silent,
        "the killed replica read not answering before it left"
    );
    println!(
        "a kill -9ed replica left the process list {:?} after the kill (stale after 1.5 s)",
        killed_at.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_agree_on_the_overview_and_a_killed_one_leaves_the_process_list() {
    let Replicas {
        redis,
        feeds,
        a,
        b,
        dead,
    } = Replicas::start().await;
    let (ended, held) = a_scripted_mix(&a, &b, &feeds, dead, feeds.url("held")).await;
    let runner = pid_of(&b.get_job(&held).await["worker"]);
    both_agree(&a, &b, &ended, &held, runner).await;
    // kill -9 the replica that does not run the held sync; the other keeps answering.
    let (mut victim, survivor) = if runner == a.pid() { (b, a) } else { (a, b) };
    let victim_pid = victim.pid();
    victim.kill9();
    until_it_leaves(&survivor, victim_pid).await;
    feeds.release("held");
    survivor.poll_until_ended(&held).await;
    let after = stats_of(&survivor).await;
    assert_eq!(
        after["finished"]["last_hour"]["by_kind"]["sync"]["done"], 3,
        "{after}"
    );
    drop(redis);
}
