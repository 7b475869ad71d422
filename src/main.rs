use clap::Parser;

use catalog_jobs::cli::{self, Cli, Command};
use catalog_jobs::config::Config;
use catalog_jobs::startup::App;
use catalog_jobs::telemetry;

mod allocator;

fn main() -> std::process::ExitCode {
    // First, while this is the only thread.
    let allocator = allocator::configure();
    let cli = Cli::parse();
    match cli.command {
        None => serve(cli.serve, &allocator),
        Some(Command::Serve(config)) => serve(*config, &allocator),
        Some(Command::HashToken) => cli::hash_token::run(),
        Some(Command::GenFeed(args)) => cli::gen_feed::run(&args),
        Some(Command::Client(command)) => cli::run(command),
    }
}

fn serve(config: Config, allocator: &str) -> std::process::ExitCode {
    telemetry::init(config.log_format);
    tracing::info!(mimalloc = %allocator, "allocator");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime can be built at start-up");
    let result = runtime.block_on(async {
        let app = App::build(config).await?;
        app.run_until(shutdown_signal()).await?;
        Ok::<(), Box<dyn std::error::Error>>(())
    });
    // Job functions still running on blocking threads after the grace period were already
    // given back to the shared queue (their writes are fenced off); do not wait for them.
    runtime.shutdown_background();
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            telemetry::could_not_start(&e);
            std::process::ExitCode::FAILURE
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
