//! Log set-up: `RUST_LOG` filters (default `info`), `LOG_FORMAT` picks pretty or JSON lines.

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber once; a second call (tests) is a no-op.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only for a person at a terminal; files and container logs get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let _ = match format {
        LogFormat::Pretty => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
