//! The client subcommands (`submit`, `refresh`, `watch`, `jobs`, `cancel`, `retry`, `products`): an
//! HTTP client of the service and nothing else — it never opens the store, so it works
//! against any replica and sees exactly what every other client sees. `gen-feed` writes a
//! demo feed offline.
//!
//! Exit codes are part of the interface (scripts branch on them): see [`Exit`].

/// `println!` for what the CLI prints on stdout: a reader that stops early (`| head`) ends
/// the command quietly, as `gen-feed` does, where `println!` would panic
/// ([`output::line`]).
macro_rules! say {
    ($($arg:tt)*) => { $crate::cli::output::line(format_args!($($arg)*)) };
}

mod args;
mod client;
mod error;
mod follow;
pub mod gen_feed;
pub mod hash_token;
mod output;
mod refresh;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use args::*;
use client::{Client, ClientError, JobQuery, Started};
use follow::{follow, Followed};

use crate::config::Config;

/// The whole command line: `serve` (the default: with no subcommand the service runs with
/// the flags and environment it always took) or a client subcommand.
#[derive(Debug, Parser)]
#[command(
    name = "catalog-jobs",
    version,
    about = "Runs a product catalogue's long jobs (sync, enrich, pair) per tenant, with honest progress; and drives them from a shell.",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    #[command(flatten)]
    pub serve: Config,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service (the default when no subcommand is given).
    Serve(Box<Config>),
    /// Read a token on stdin and print its `sha256:` form for API_TOKENS(_FILE).
    HashToken,
    /// Write a generated catalogue as JSON Lines on stdout (the demo feed by default).
    GenFeed(gen_feed::GenFeedArgs),
    #[command(flatten)]
    Client(ClientCommand),
}

/// What a client subcommand ends with, as the process's exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// The job is done (or the request was carried out).
    Done = 0,
    /// The job failed, was cancelled or reads lost.
    JobDidNotFinish = 1,
    /// The command line or the request was wrong (the server's 4xx), or the job is unknown.
    Usage = 2,
    /// A job of this kind is already active for this tenant (its id is printed).
    AlreadyRunning = 3,
    /// The server could not be reached or answered 5xx.
    Unreachable = 4,
    /// Ctrl-C while following: the job goes on (the shell's convention for SIGINT).
    Interrupted = 130,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(e as u8)
    }
}

/// Runs a client subcommand to its exit code.
pub fn run(command: ClientCommand) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a single-threaded Tokio runtime can be built");
    runtime.block_on(dispatch(command)).into()
}

async fn dispatch(command: ClientCommand) -> Exit {
    let connection = command.connection();
    let client = match Client::new(&connection.server, connection.token_file.as_deref()) {
        Ok(c) => c,
        Err(e) => return output::failure(&e),
    };
    let json = connection.json;
    let answer = match command {
        ClientCommand::Submit(args) => submit(&client, args).await,
        ClientCommand::Refresh(args) => refresh::refresh(&client, args).await,
        ClientCommand::Watch(args) => watch(&client, &args.job_id, json).await,
        ClientCommand::Jobs(args) => jobs(&client, &args).await,
        ClientCommand::Cancel(args) => cancel(&client, &args.job_id, json).await,
        ClientCommand::Retry(args) => retry(&client, &args).await,
        ClientCommand::Products(command) => products(&client, command, json).await,
    };
    answer.unwrap_or_else(|e| output::failure(&e))
}

async fn submit(client: &Client, args: SubmitArgs) -> Result<Exit, ClientError> {
    let json = args.connection.json;
    let mut form = vec![("tenant_id", args.tenant.clone())];
    form.extend(args.sources.iter().map(|s| ("source", s.clone())));
    flags(&mut form, args.force, args.full);
    let path = format!("/catalog/{}", args.kind.as_str());
    let started = client.start(&path, &form).await?;
    match after_start(started, args.wait, args.attach, json) {
        Next::Follow(id) => watch(client, &id, json).await,
        Next::Exit(exit) => Ok(exit),
    }
}

/// The start's `force` (enrich) and `full` (pair) fields, sent only when asked for: a kind
/// that has no such field refuses it (422 naming it).
fn flags(form: &mut Vec<(&'static str, String)>, force: bool, full: bool) {
    if force {
        form.push(("force", "true".to_owned()));
    }
    if full {
        form.push(("full", "true".to_owned()));
    }
}

/// What a start's answer leaves a command to do.
enum Next {
    /// Follow this job to its end.
    Follow(String),
    /// Nothing: the answer was printed.
    Exit(Exit),
}

/// Prints a start's answer, unless the command is to follow a job: the accepted one with
/// `wait`, the active one a refusal names with `attach`.
fn after_start(started: Started, wait: bool, attach: bool, json: bool) -> Next {
    match started {
        Started::Accepted(job) if wait => Next::Follow(job.id()),
        Started::Accepted(job) => {
            output::started(&job, json);
            Next::Exit(Exit::Done)
        }
        Started::AlreadyRunning(id) if attach => {
            output::note(&format!(
                "a job of this kind is already active: following {id}"
            ));
            Next::Follow(id)
        }
        Started::AlreadyRunning(id) => {
            output::already_running(&id, json);
            Next::Exit(Exit::AlreadyRunning)
        }
    }
}

async fn watch(client: &Client, id: &str, json: bool) -> Result<Exit, ClientError> {
    match follow(client, id).await? {
        Followed::Ended(job) => Ok(output::report(&job, json)),
        Followed::Interrupted(job) => {
            output::left_running(&job);
            Ok(Exit::Interrupted)
        }
    }
}

/// One page of `--limit` jobs (or, with `--all`, every page), then where the next page
/// starts. The service may answer a filtered listing a short page and a cursor (it reads a
/// bounded stretch of the index each call), so a page is read on until it holds `--limit`
/// jobs or the listing ends: a short page printed as it came would read "no such jobs".
async fn jobs(client: &Client, args: &JobsArgs) -> Result<Exit, ClientError> {
    let mut query = JobQuery {
        tenant: args.tenant.as_deref(),
        statuses: &args.statuses,
        kind: args.kind.as_deref(),
        limit: args.limit,
        cursor: args.cursor.clone(),
    };
    let mut jobs = Vec::new();
    loop {
        let page = client.list(&query).await?;
        jobs.extend(page.items);
        let short = jobs.len() < args.limit;
        match page.next_cursor {
            Some(next) if args.all || short => {
                query.cursor = Some(next);
                if !args.all {
                    query.limit = args.limit - jobs.len();
                }
            }
            next => {
                output::table(&jobs, args.tenant.is_none(), args.connection.json);
                output::more(next.as_deref());
                return Ok(Exit::Done);
            }
        }
    }
}

async fn cancel(client: &Client, id: &str, json: bool) -> Result<Exit, ClientError> {
    let (requested, job) = client.cancel(id).await?;
    Ok(output::cancelled(&job, requested, json))
}

async fn retry(client: &Client, args: &RetryArgs) -> Result<Exit, ClientError> {
    let json = args.connection.json;
    let started = client.retry(&args.job_id).await?;
    match after_start(started, args.wait, false, json) {
        Next::Follow(id) => watch(client, &id, json).await,
        Next::Exit(exit) => Ok(exit),
    }
}

async fn products(
    client: &Client,
    command: ProductsCommand,
    json: bool,
) -> Result<Exit, ClientError> {
    let page = match command {
        ProductsCommand::View(args) => {
            let product = client.product(&args.tenant, &args.key).await?;
            output::product(&product, json);
            return Ok(Exit::Done);
        }
        ProductsCommand::List(args) => {
            let (limit, cursor) = (args.paging.limit, args.paging.cursor.as_deref());
            client.products(&args.tenant, None, limit, cursor).await?
        }
        ProductsCommand::Search(args) => {
            let words = args.words.join(" ");
            let (limit, cursor) = (args.paging.limit, args.paging.cursor.as_deref());
            client
                .products(&args.tenant, Some(&words), limit, cursor)
                .await?
        }
    };
    output::products(&page.items, json);
    output::more(page.next_cursor.as_deref());
    Ok(Exit::Done)
}
