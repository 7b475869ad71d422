//! What the CLI prints: data on stdout (a job id, a report, a table, or JSON with
//! `--json`), and everything meant for a person on stderr — so `$(catalog-jobs submit …)`
//! captures just the id.

use serde_json::Value;

use super::client::{ClientError, Job};
use super::Exit;

/// Widest step shown in the jobs table: long steps would wrap the table on a terminal.
const STEP_WIDTH: usize = 40;

/// Writes one line on stdout (`say!`). A reader that has gone (`catalog-jobs jobs | head -1`)
/// ends the process with success: what it wanted was printed. Any other failure to write
/// ends it with [`Exit::JobDidNotFinish`]'s code, saying why on stderr.
pub fn line(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let Err(e) = writeln!(std::io::stdout().lock(), "{args}") else {
        return;
    };
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("error: could not write to stdout: {e}");
    std::process::exit(Exit::JobDidNotFinish as i32);
}

fn print_json(value: &Value) {
    say!(
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
        say!("{}", job.id());
        eprintln!("started {} job {} ({})", job.kind(), job.id(), job.status());
    }
}

pub fn already_running(id: &str, json: bool) {
    if json {
        print_json(&serde_json::json!({"error": "already_running", "job_id": id}));
    } else {
        say!("{id}");
    }
    eprintln!("a job of this kind is already active for this tenant: {id} (follow it with `catalog-jobs watch {id}`, or give the same command --attach)");
}

/// The ended job's report; its exit code says how it ended.
pub fn report(job: &Job, json: bool) -> Exit {
    if json {
        print_json(&job.0);
    } else {
        say!("{}", summary(job));
    }
    match job.status() {
        "done" => Exit::Done,
        _ => Exit::JobDidNotFinish,
    }
}

/// One line: `sync 6f0c… done: read=2400 created=2400 …`, with the error class when failed.
pub fn summary(job: &Job) -> String {
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

/// Jobs as a table; `with_tenant` adds the tenant column (a listing across tenants).
pub fn table(jobs: &[Job], with_tenant: bool, json: bool) {
    if json {
        print_json(&Value::Array(jobs.iter().map(|j| j.0.clone()).collect()));
        return;
    }
    let tenant = |t: &str| match with_tenant {
        true => format!("{t:<20}  "),
        false => String::new(),
    };
    say!(
        "{:<36}  {}{:<8}  {:<10}  {:>4}  {:<24}  STEP",
        "JOB ID",
        tenant("TENANT"),
        "KIND",
        "STATUS",
        "%",
        "CREATED"
    );
    for job in jobs {
        let step: String = job.step().chars().take(STEP_WIDTH).collect();
        say!(
            "{:<36}  {}{:<8}  {:<10}  {:>4}  {:<24}  {step}",
            job.id(),
            tenant(job.tenant()),
            job.kind(),
            job.status(),
            job.percent(),
            job.0["created_at"].as_str().unwrap_or(""),
        );
    }
}

/// Where the next page starts, when there is one (on stderr: stdout stays the data).
pub fn more(next_cursor: Option<&str>) {
    if let Some(cursor) = next_cursor {
        eprintln!("more on the next page: run the same command with --cursor {cursor}");
    }
}

/// Products as a table: key, price, brand and name.
pub fn products(products: &[Value], json: bool) {
    if json {
        print_json(&Value::Array(products.to_vec()));
        return;
    }
    say!("{:<24}  {:>12}  {:<16}  NAME", "KEY", "PRICE", "BRAND");
    for p in products {
        say!(
            "{:<24}  {:>12}  {:<16}  {}",
            text(p, "product_key"),
            price(p),
            text(p, "brand"),
            text(p, "name")
        );
    }
}

/// One product: its facts, the attributes enrich extracted, and its neighbours with keys.
pub fn product(p: &Value, json: bool) {
    if json {
        print_json(p);
        return;
    }
    say!("{}  {}", text(p, "product_key"), text(p, "name"));
    let category = p["taxonomy_path"]
        .as_array()
        .map(|path| {
            path.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" › ")
        })
        .unwrap_or_default();
    let enrichment = &p["enrichment"];
    for (label, value) in [
        ("brand", text(p, "brand").to_owned()),
        ("price", price(p)),
        ("category", category),
        ("enrichment", text(enrichment, "state").replace('_', " ")),
    ] {
        if !value.is_empty() {
            say!("{label:<12}{value}");
        }
    }
    if let Some(attributes) = enrichment["attributes"].as_object() {
        for (name, value) in attributes {
            let value = value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_owned);
            say!("  {name:<10}{value}");
        }
    }
    let neighbours = p["neighbours"].as_array().cloned().unwrap_or_default();
    if neighbours.is_empty() {
        say!("neighbours  none yet (run `catalog-jobs submit pair`)");
    } else {
        say!("neighbours");
    }
    for n in &neighbours {
        let score = n["score"].as_f64().unwrap_or(0.0);
        say!(
            "  {:<24}  {score:.3}  {}",
            text(n, "product_key"),
            text(n, "name")
        );
    }
}

fn text<'a>(v: &'a Value, field: &str) -> &'a str {
    v[field].as_str().unwrap_or("")
}

/// A price from its cents, with the currency the service names (when it names one).
fn price(p: &Value) -> String {
    let Some(cents) = p["price_cents"].as_i64() else {
        return String::new();
    };
    let amount = format!("{}.{:02}", cents / 100, cents % 100);
    match p["currency"].as_str() {
        Some(currency) => format!("{amount} {currency}"),
        None => amount,
    }
}

pub fn cancelled(job: &Job, requested: bool, json: bool) -> Exit {
    if json {
        print_json(&job.0);
    } else if requested {
        say!("{} {}", job.id(), job.status());
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
