//! The client subcommands' command lines (clap derive): what each takes, in the words its
//! help and its error messages use. Nothing here talks to the service.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

#[derive(Clone, Debug, Subcommand)]
pub enum ClientCommand {
    /// Start a job; print its id, or follow it with --wait.
    Submit(SubmitArgs),
    /// Refresh a tenant's catalogue: sync, enrich and pair as one pipeline; print its id, or
    /// follow it with --wait (one bar per step).
    Refresh(super::refresh::RefreshArgs),
    /// Follow a job until it ends, with a progress bar, then print its report.
    Watch(WatchArgs),
    /// Jobs, newest first, as a table: a tenant's, or (operator token) every tenant's.
    Jobs(JobsArgs),
    /// Ask an active job to stop.
    Cancel(CancelArgs),
    /// Run an ended job again (a failed or cancelled pipeline from the step that did not finish).
    Retry(RetryArgs),
    /// A tenant's products: list them, search them, or view one with its neighbours.
    #[command(subcommand)]
    Products(ProductsCommand),
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

    /// A file holding your API token (the service is sent it as a bearer token, never in a URL).
    #[arg(long, env = "CATALOG_JOBS_TOKEN_FILE", value_parser = token_file_path)]
    pub token_file: Option<PathBuf>,

    /// Print JSON on stdout (the job snapshot, the listing or the product) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// A token file's path: an empty one (`CATALOG_JOBS_TOKEN_FILE=` left set by a script) is
/// refused with what to do, rather than read as a file named "".
fn token_file_path(path: &str) -> Result<PathBuf, String> {
    if path.is_empty() {
        return Err("the token file's path is empty: give a path, or unset \
                    CATALOG_JOBS_TOKEN_FILE to send no token"
            .into());
    }
    Ok(PathBuf::from(path))
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum JobKind {
    Sync,
    Enrich,
    Pair,
}

impl JobKind {
    pub fn as_str(self) -> &'static str {
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
    /// Pair every product with word weights counted afresh, even when an incremental pair
    /// could (pair only).
    #[arg(long)]
    pub full: bool,
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
    /// Only this tenant's jobs (its last 100). Left out, an operator token lists every tenant's.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Only jobs in these statuses (queued, running, cancelling, done, failed, cancelled,
    /// lost); repeatable or comma-separated.
    #[arg(long = "status", value_delimiter = ',')]
    pub statuses: Vec<String>,
    /// Only jobs of this kind (sync, enrich, pair, pipeline).
    #[arg(long)]
    pub kind: Option<String>,
    /// How many jobs a page shows (1–100).
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Start after this point: the cursor the previous page printed.
    #[arg(long)]
    pub cursor: Option<String>,
    /// Every page, to the last.
    #[arg(long, conflicts_with = "cursor")]
    pub all: bool,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Clone, Debug, Args)]
pub struct CancelArgs {
    pub job_id: String,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Clone, Debug, Args)]
pub struct RetryArgs {
    /// The ended job to run again.
    pub job_id: String,
    /// Follow the new job until it ends, then print its report.
    #[arg(long)]
    pub wait: bool,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Clone, Debug, Subcommand)]
pub enum ProductsCommand {
    /// A tenant's products, a page at a time, by key.
    List(ProductListArgs),
    /// Products whose key starts with the words, or whose name has every one of them.
    Search(ProductSearchArgs),
    /// One product: its facts, what enrich extracted and its nearest neighbours.
    View(ProductViewArgs),
}

#[derive(Clone, Debug, Args)]
pub struct ProductPaging {
    /// How many products a page shows (1–100).
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Start after this point: the cursor the previous page printed.
    #[arg(long)]
    pub cursor: Option<String>,
}

#[derive(Clone, Debug, Args)]
pub struct ProductListArgs {
    #[arg(long)]
    pub tenant: String,
    #[command(flatten)]
    pub paging: ProductPaging,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Clone, Debug, Args)]
pub struct ProductSearchArgs {
    #[arg(long)]
    pub tenant: String,
    /// A key prefix or name words.
    #[arg(required = true, num_args = 1..)]
    pub words: Vec<String>,
    #[command(flatten)]
    pub paging: ProductPaging,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Clone, Debug, Args)]
pub struct ProductViewArgs {
    #[arg(long)]
    pub tenant: String,
    /// The product's key.
    pub key: String,
    #[command(flatten)]
    pub connection: Connection,
}

impl ClientCommand {
    pub fn connection(&self) -> &Connection {
        match self {
            ClientCommand::Submit(a) => &a.connection,
            ClientCommand::Refresh(a) => &a.connection,
            ClientCommand::Watch(a) => &a.connection,
            ClientCommand::Jobs(a) => &a.connection,
            ClientCommand::Cancel(a) => &a.connection,
            ClientCommand::Retry(a) => &a.connection,
            ClientCommand::Products(ProductsCommand::List(a)) => &a.connection,
            ClientCommand::Products(ProductsCommand::Search(a)) => &a.connection,
            ClientCommand::Products(ProductsCommand::View(a)) => &a.connection,
        }
    }
}
