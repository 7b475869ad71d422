use clap::Parser;

use catalog_jobs::cli::{self, Cli, Command};
use catalog_jobs::config::Config;
use catalog_jobs::startup::App;
use catalog_jobs::telemetry;

/// glibc's malloc arenas the binary runs with unless the operator chose: with glibc's default
/// (8 a core) a replica's idle RSS kept growing across the 30-minute soak, with two it held
/// flat (docs/reliability.md).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MALLOC_ARENAS: libc::c_int = 2;
/// The operator's own choice of arenas, which glibc reads itself at start.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const ARENAS_ENV: &str = "MALLOC_ARENA_MAX";
/// The other place glibc reads it from (`glibc.malloc.arena_max=N` among the tunables).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TUNABLES_ENV: (&str, &str) = ("GLIBC_TUNABLES", "glibc.malloc.arena_max");

/// How often the binary hands the heap pages glibc's malloc holds free back to the system
/// (`malloc_trim`): glibc gives back by itself only the free memory at the top of a heap, so
/// what a job or a tenant freed below something still live stayed resident for good (50,000
/// imported products whose tenant was deleted: 16.9 of 18.5 MB kept; the soak's idle replica
/// held 3–5.7 MB free in its heaps, more after each round's peak).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

fn main() -> std::process::ExitCode {
    // First, while this is the only thread: glibc fixes its arena cap when a second thread
    // first allocates.
    let arenas = cap_malloc_arenas();
    let cli = Cli::parse();
    match cli.command {
        None => serve(cli.serve, &arenas),
        Some(Command::Serve(config)) => serve(*config, &arenas),
        Some(Command::HashToken) => cli::hash_token::run(),
        Some(Command::GenFeed(args)) => cli::gen_feed::run(&args),
        Some(Command::Client(command)) => cli::run(command),
    }
}

/// Caps glibc's malloc arenas at `MALLOC_ARENAS`, unless the environment already names a cap
/// (glibc reads and applies that itself); answers what the allocator runs with, for the
/// start-up log.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn cap_malloc_arenas() -> String {
    let chosen = std::env::var_os(ARENAS_ENV);
    let chosen = chosen.as_ref().map(|c| c.to_string_lossy());
    if let Some(chosen) = chosen.as_deref().filter(|c| is_positive_count(c)) {
        return format!("{ARENAS_ENV}={chosen} (the environment's)");
    }
    let (tunables, arena_max) = TUNABLES_ENV;
    if std::env::var(tunables).is_ok_and(|t| t.contains(arena_max)) {
        return format!("{arena_max} in {tunables} (the environment's)");
    }
    // SAFETY: mallopt only sets one of glibc's allocator parameters, and no other thread exists
    // yet to allocate meanwhile.
    let applied = match unsafe { libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS) } {
        1 => format!("at most {MALLOC_ARENAS} (catalog-jobs' own; {ARENAS_ENV} overrides)"),
        _ => "glibc's default (it refused catalog-jobs' cap)".to_owned(),
    };
    match chosen {
        // glibc reads such a value as no cap at all: say it was not used.
        Some(chosen) => {
            format!("{applied}: {ARENAS_ENV}=`{chosen}` is not a whole number above 0, so unused")
        }
        None => applied,
    }
}

/// Whether `value` is a whole number above 0, digits only, as a cap on arenas must be.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn is_positive_count(value: &str) -> bool {
    !value.is_empty()
        && value.bytes().all(|b| b.is_ascii_digit())
        && value.bytes().any(|b| b != b'0')
}

/// Other allocators than glibc's are left as they are.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn cap_malloc_arenas() -> String {
    "the platform's default".to_owned()
}

/// Starts a thread that gives glibc's free heap pages back every `TRIM_EVERY`; answers how
/// often, for the start-up log.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn give_back_free_pages() -> String {
    let trimming = std::thread::Builder::new()
        .name("malloc-trim".to_owned())
        .spawn(|| loop {
            std::thread::sleep(TRIM_EVERY);
            // SAFETY: malloc_trim only returns free pages of glibc's heaps to the system,
            // holding each arena's lock as malloc and free do.
            unsafe { libc::malloc_trim(0) };
        });
    match trimming {
        Ok(_) => format!("every {} s (malloc_trim)", TRIM_EVERY.as_secs()),
        Err(_) => "never: no thread could be started for it".to_owned(),
    }
}

/// Other allocators give back what they free by their own rules.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn give_back_free_pages() -> String {
    "by the platform's allocator".to_owned()
}

fn serve(config: Config, arenas: &str) -> std::process::ExitCode {
    telemetry::init(config.log_format);
    let free_pages = give_back_free_pages();
    tracing::info!(malloc_arenas = %arenas, free_pages_given_back = %free_pages, "allocator");
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
