//! `catalog-jobs refresh`: a tenant's whole refresh — sync, then enrich, then pair — started
//! as one pipeline with one request (`POST /catalog/pipeline`) and, with `--wait`, followed to
//! its end with one bar per step (one plain line per step's change for scripts), then each
//! step's report and the pipeline's.

use std::io::IsTerminal;
use std::time::Duration;

use clap::Args;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::client::{Client, ClientError, Job};
use super::follow::{eta, follow_on, Followed, Show, BAR_REFRESH_HZ};
use super::{after_start, flags, output, Connection, Exit, Next};

/// Where a pipeline is started.
const PIPELINE_PATH: &str = "/catalog/pipeline";

#[derive(Clone, Debug, Args)]
pub struct RefreshArgs {
    /// The tenant whose catalogue is refreshed.
    #[arg(long)]
    pub tenant: String,
    /// A feed to sync (a path inside FEEDS_DIR or an allowed URL); repeatable. Needed when
    /// the steps include sync.
    #[arg(long = "source")]
    pub sources: Vec<String>,
    /// Some of sync, enrich, pair, in that order (default: all three); comma-separated.
    #[arg(long = "steps", value_delimiter = ',')]
    pub steps: Vec<String>,
    /// Enrich every product, even those unchanged since their last enrichment.
    #[arg(long)]
    pub force: bool,
    /// Pair every product with word weights counted afresh, even when an incremental pair
    /// could.
    #[arg(long)]
    pub full: bool,
    /// Follow the pipeline until it ends, one bar per step, then print each step's report.
    #[arg(long)]
    pub wait: bool,
    /// When the tenant's refresh is already active, follow that one instead.
    #[arg(long)]
    pub attach: bool,
    #[command(flatten)]
    pub connection: Connection,
}

/// Starts the tenant's pipeline; prints its id, or follows it with `--wait`.
pub async fn refresh(client: &Client, args: RefreshArgs) -> Result<Exit, ClientError> {
    let json = args.connection.json;
    let mut form = vec![("tenant_id", args.tenant.clone())];
    form.extend(args.sources.iter().map(|s| ("source", s.clone())));
    if !args.steps.is_empty() {
        form.push(("steps", args.steps.join(",")));
    }
    flags(&mut form, args.force, args.full);
    let started = client.start(PIPELINE_PATH, &form).await?;
    match after_start(started, args.wait, args.attach, json) {
        Next::Follow(id) => follow_steps(client, &id, json).await,
        Next::Exit(exit) => Ok(exit),
    }
}

async fn follow_steps(client: &Client, id: &str, json: bool) -> Result<Exit, ClientError> {
    match follow_on(client, id, &mut Steps::for_stderr()).await? {
        Followed::Ended(pipeline) => Ok(report(&pipeline, json)),
        Followed::Interrupted(pipeline) => {
            output::left_running(&pipeline);
            Ok(Exit::Interrupted)
        }
    }
}

/// Each step's summary line, as `watch` prints a job's, then the pipeline's (or its JSON);
/// the exit code says how the pipeline ended.
fn report(pipeline: &Job, json: bool) -> Exit {
    if !json {
        for step in pipeline.steps() {
            say!("{}", output::summary(&step));
        }
    }
    output::report(pipeline, json)
}

/// A pipeline's progress: at a terminal one bar per step (the running step's carries the
/// pipeline's ETA), else one line per change of a step.
enum Steps {
    Terminal {
        bars: MultiProgress,
        each: Vec<ProgressBar>,
    },
    Lines {
        last: Vec<String>,
    },
}

impl Steps {
    fn for_stderr() -> Self {
        if std::io::stderr().is_terminal() {
            let target = ProgressDrawTarget::stderr_with_hz(BAR_REFRESH_HZ);
            Steps::Terminal {
                bars: MultiProgress::with_draw_target(target),
                each: Vec::new(),
            }
        } else {
            Steps::Lines { last: Vec::new() }
        }
    }
}

impl Show for Steps {
    fn show(&mut self, pipeline: &Job) {
        let steps = pipeline.steps();
        match self {
            Steps::Terminal { bars, each } => {
                while each.len() < steps.len() {
                    each.push(bars.add(step_bar(&steps[each.len()])));
                }
                for (bar, step) in each.iter().zip(&steps) {
                    bar.set_position(step.percent());
                    let running = matches!(step.status(), "running" | "cancelling");
                    let eta = if running {
                        eta(pipeline)
                    } else {
                        String::new()
                    };
                    bar.set_message(format!("{} · {}  {eta}", step.status(), step.step()));
                }
            }
            Steps::Lines { last } => {
                last.resize(steps.len(), String::new());
                for (seen, step) in last.iter_mut().zip(&steps) {
                    let line = format!(
                        "{} {} {}%  {}",
                        step.kind(),
                        step.status(),
                        step.percent(),
                        step.step()
                    );
                    if *seen != line {
                        eprintln!("{} {line}", step.id());
                        *seen = line;
                    }
                }
            }
        }
    }

    fn finish(&mut self) {
        if let Steps::Terminal { bars, each } = self {
            each.iter().for_each(ProgressBar::finish);
            let _ = bars.clear();
        }
    }
}

/// A step's bar: its kind, its percent and a bar, its status and step.
fn step_bar(step: &Job) -> ProgressBar {
    let bar = ProgressBar::hidden().with_position(step.percent());
    bar.set_style(
        ProgressStyle::with_template("{prefix:<6} {pos:>3}% [{bar:30}] {msg}")
            .expect("the bar template is valid")
            .progress_chars("=> "),
    );
    bar.set_length(100);
    bar.set_prefix(step.kind().to_owned());
    bar.enable_steady_tick(Duration::from_millis(1000 / u64::from(BAR_REFRESH_HZ)));
    bar
}
