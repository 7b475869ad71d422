//! The client subcommands (`submit`, `watch`, `jobs`, `cancel`): an HTTP client of the
//! service and nothing else — it never opens the store, so it works against any replica
//! and sees exactly what every other client sees. `gen-feed` writes a demo feed offline.
//!
//! Exit codes are part of the interface (scripts branch on them): see [`Exit`].

mod client;
mod follow;
pub mod gen_feed;
pub mod hash_token;
mod output;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

use client::{Client, ClientError, Started};
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

#[derive(Clone, Debug, Subcommand)]
pub enum ClientCommand {
    /// Start a job; print its id, or follow it with --wait.
    Submit(SubmitArgs),
    /// Follow a job until it ends, with a progress bar, then print its report.
    Watch(WatchArgs),
    /// A tenant's recent jobs, newest first, as a table.
    Jobs(JobsArgs),
    /// Ask an active job to stop.
    Cancel(CancelArgs),
}

/// Where the service is and how to talk to it; shared by every client subcommand.
#[derive(Clone, Debug, Args)]
pub struct Connection {
    /// The service's base URL.
    #[arg(
        long,
        env = "CATALOG_JOBS_URL",
        default_value = "http://127.0.0.1:8001"
    )]
    pub server: String,

    /// A file holding a bearer token, sent as `Authorization: Bearer …` (never in a URL).
    #[arg(long, env = "CATALOG_JOBS_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,

    /// Print JSON on stdout (the job snapshot, or the listing) instead of a summary.
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum JobKind {
    Sync,
    Enrich,
    Pair,
}

impl JobKind {
    fn as_str(self) -> &'static str {
        match self {
            JobKind::Sync => "sync",
            JobKind::Enrich => "enrich",
            JobKind::Pair => "pair",
        }
    }
}

#[derive(Clone, Debug, Args)]
pub struct SubmitArgs {
    /// The job kind.
    pub kind: JobKind,
    /// The tenant the job runs for.
    #[arg(long)]
    pub tenant: String,
    /// A feed to sync (a path inside FEEDS_DIR or an allowed URL); repeatable.
    #[arg(long = "source")]
    pub sources: Vec<String>,
    /// Enrich every product, even those unchanged since their last enrichment.
    #[arg(long)]
    pub force: bool,
    /// Follow the job until it ends, then print its report.
    #[arg(long)]
    pub wait: bool,
    /// When a job of this kind is already active for the tenant, follow that one instead.
    #[arg(long)]
    pub attach: bool,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Clone, Debug, Args)]
pub struct WatchArgs {
    pub job_id: String,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Clone, Debug, Args)]
pub struct JobsArgs {
    #[arg(long)]
    pub tenant: String,
    /// How many jobs to show (1–100).
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Clone, Debug, Args)]
pub struct CancelArgs {
    pub job_id: String,
    #[command(flatten)]
    pub connection: Connection,
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
    let connection = match &command {
        ClientCommand::Submit(a) => &a.connection,
        ClientCommand::Watch(a) => &a.connection,
        ClientCommand::Jobs(a) => &a.connection,
        ClientCommand::Cancel(a) => &a.connection,
    };
    let client = match Client::new(&connection.server, connection.token_file.as_deref()) {
        Ok(c) => c,
        Err(e) => return output::failure(&e),
    };
    let json = connection.json;
    let answer = match command {
        ClientCommand::Submit(args) => submit(&client, args).await,
        ClientCommand::Watch(args) => watch(&client, &args.job_id, json).await,
        ClientCommand::Jobs(args) => jobs(&client, &args.tenant, args.limit, json).await,
        ClientCommand::Cancel(args) => cancel(&client, &args.job_id, json).await,
    };
    answer.unwrap_or_else(|e| output::failure(&e))
}

async fn submit(client: &Client, args: SubmitArgs) -> Result<Exit, ClientError> {
    let json = args.connection.json;
    let mut form = vec![("tenant_id", args.tenant.clone())];
    form.extend(args.sources.iter().map(|s| ("source", s.clone())));
    if args.force {
        form.push(("force", "true".to_owned()));
    }
    match client.start(args.kind.as_str(), &form).await? {
        Started::Accepted(job) if args.wait => watch(client, &job.id(), json).await,
        Started::Accepted(job) => {
            output::started(&job, json);
            Ok(Exit::Done)
        }
        Started::AlreadyRunning(id) if args.attach => {
            output::note(&format!(
                "a job of this kind is already active: following {id}"
            ));
            watch(client, &id, json).await
        }
        Started::AlreadyRunning(id) => {
            output::already_running(&id, json);
            Ok(Exit::AlreadyRunning)
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

async fn jobs(
    client: &Client,
    tenant: &str,
    limit: usize,
    json: bool,
) -> Result<Exit, ClientError> {
    let listing = client.list(tenant, limit).await?;
    output::table(&listing, json);
    Ok(Exit::Done)
}

async fn cancel(client: &Client, id: &str, json: bool) -> Result<Exit, ClientError> {
    let (requested, job) = client.cancel(id).await?;
    Ok(output::cancelled(&job, requested, json))
}
