//! What the CLI prints: data on stdout (a job id, a report, a table, or JSON with
//! `--json`), and everything meant for a person on stderr — so `$(catalog-jobs submit …)`
//! captures just the id.

use serde_json::Value;

use super::client::{ClientError, Job};
use super::Exit;

/// Widest step shown in the jobs table: long steps would wrap the table on a terminal.
const STEP_WIDTH: usize = 40;

fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string(value).expect("a JSON value always serialises")
    );
}

pub fn note(text: &str) {
    eprintln!("{text}");
}

pub fn failure(e: &ClientError) -> Exit {
    eprintln!("error: {e}");
    e.exit()
}

pub fn started(job: &Job, json: bool) {
    if json {
        print_json(&job.0);
    } else {
        println!("{}", job.id());
        eprintln!("started {} job {} ({})", job.kind(), job.id(), job.status());
    }
}

pub fn already_running(id: &str, json: bool) {
    if json {
        print_json(&serde_json::json!({"error": "already_running", "job_id": id}));
    } else {
        println!("{id}");
    }
    eprintln!("a job of this kind is already active for this tenant: {id} (follow it with `catalog-jobs watch {id}`, or submit with --attach)");
}

/// The ended job's report; its exit code says how it ended.
pub fn report(job: &Job, json: bool) -> Exit {
    if json {
        print_json(&job.0);
    } else {
        println!("{}", summary(job));
    }
    match job.status() {
        "done" => Exit::Done,
        _ => Exit::JobDidNotFinish,
    }
}

/// One line: `sync 6f0c… done: read=2400 created=2400 …`, with the error class when failed.
fn summary(job: &Job) -> String {
    let mut line = format!("{} {} {}", job.kind(), job.id(), job.status());
    if let Some(class) = job.error() {
        line.push_str(&format!(" ({class})"));
    }
    let result = &job.0["result"];
    let figures = result.get("totals").unwrap_or(result);
    if let Some(figures) = figures.as_object() {
        let numbers: Vec<String> = figures
            .iter()
            .filter(|(_, v)| v.is_number())
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if !numbers.is_empty() {
            line.push_str(": ");
            line.push_str(&numbers.join(" "));
        }
    }
    line
}

pub fn left_running(job: &Job) {
    let id = job.id();
    eprintln!("stopped watching; job {id} goes on. Follow it again with `catalog-jobs watch {id}`, or stop it with `catalog-jobs cancel {id}`.");
}

pub fn table(jobs: &[Job], json: bool) {
    if json {
        print_json(&Value::Array(jobs.iter().map(|j| j.0.clone()).collect()));
        return;
    }
    println!(
        "{:<36}  {:<7}  {:<10}  {:>4}  {:<24}  STEP",
        "JOB ID", "KIND", "STATUS", "%", "CREATED"
    );
    for job in jobs {
        let step: String = job.step().chars().take(STEP_WIDTH).collect();
        println!(
            "{:<36}  {:<7}  {:<10}  {:>4}  {:<24}  {step}",
            job.id(),
            job.kind(),
            job.status(),
            job.percent(),
            job.0["created_at"].as_str().unwrap_or(""),
        );
    }
}

pub fn cancelled(job: &Job, requested: bool, json: bool) -> Exit {
    if json {
        print_json(&job.0);
    } else if requested {
        println!("{} {}", job.id(), job.status());
    }
    if requested {
        eprintln!(
            "asked job {} to stop; it ends cancelled at its next safe point",
            job.id()
        );
        Exit::Done
    } else {
        eprintln!(
            "job {} has already ended ({}): nothing to cancel",
            job.id(),
            job.status()
        );
        Exit::JobDidNotFinish
    }
}
