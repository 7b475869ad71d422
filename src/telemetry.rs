//! Log set-up: `RUST_LOG` filters (default `info`), `LOG_FORMAT` picks pretty or JSON lines.
//!
//! JSON lines are flat: every field of the event's spans (`request_id` on request events;
//! `job_id`, `tenant_id`, `kind` on job events) sits at the top level of the event's object,
//! so a log pipeline can filter on them without knowing the span tree.

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormattedFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// How log lines are written (`LOG_FORMAT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Pretty,
    Json,
}

/// What is logged when `RUST_LOG` is unset, empty or unreadable.
const DEFAULT_FILTER: &str = "info";

/// Says why the service could not start: a log line at error level, and the same on standard
/// error as plain text when `RUST_LOG` filters error lines out (`RUST_LOG=off`), so a refused
/// start never exits without a word.
pub fn could_not_start(error: &dyn std::fmt::Display) {
    tracing::error!(error = %error, "catalog-jobs could not start");
    if !tracing::enabled!(tracing::Level::ERROR) {
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "catalog-jobs could not start: {error}");
    }
}

/// Installs the global subscriber once; a second call (tests) is a no-op.
pub fn init(format: LogFormat) {
    // An empty `RUST_LOG` (`RUST_LOG=` in a compose file) means the default, not silence.
    let filter = match std::env::var(EnvFilter::DEFAULT_ENV) {
        Ok(directives) if !directives.trim().is_empty() => EnvFilter::try_new(directives).ok(),
        _ => None,
    }
    .unwrap_or_else(|| EnvFilter::new(DEFAULT_FILTER));
    // Colours only for a person at a terminal; files and container logs get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        // A line that cannot be written (its reader, a log shipper, has gone) is dropped: by
        // default the subscriber reports it with `eprintln!`, which panics on that same
        // broken pipe, in whichever task was logging.
        .log_internal_errors(false);
    let _ = match format {
        LogFormat::Pretty => builder.try_init(),
        LogFormat::Json => builder
            .fmt_fields(JsonFields::new())
            .event_format(FlatJson)
            .try_init(),
    };
}

/// One JSON object per event: `timestamp`, `level`, `target`, the fields of every span the
/// event is in (outermost first), then the event's own fields (`message` among them).
struct FlatJson;

impl<S> FormatEvent<S, JsonFields> for FlatJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut object = Map::new();
        let mut timestamp = String::new();
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        object.insert("timestamp".into(), Value::String(timestamp));
        let meta = event.metadata();
        object.insert("level".into(), Value::String(meta.level().to_string()));
        object.insert("target".into(), Value::String(meta.target().to_owned()));
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let extensions = span.extensions();
                let Some(fields) = extensions.get::<FormattedFields<JsonFields>>() else {
                    continue;
                };
                if let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(fields) {
                    object.extend(fields);
                }
            }
        }
        event.record(&mut JsonVisitor(&mut object));
        let line = serde_json::to_string(&object).map_err(|_| fmt::Error)?;
        writeln!(writer, "{line}")
    }
}

/// Collects an event's fields as JSON values, numbers and booleans kept as such.
struct JsonVisitor<'a>(&'a mut Map<String, Value>);

impl Visit for JsonVisitor<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), Value::from(format!("{value:?}")));
    }
}
