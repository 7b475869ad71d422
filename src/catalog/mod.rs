//! The catalogue domain: the job kinds this service exists to run — sync, enrich, pair —
//! as plain blocking functions with an optional progress callback. Knows nothing of HTTP.

pub mod extract;
pub mod products;

use serde_json::{json, Value};

use crate::config::Config;
use crate::jobs::registry::{bool_field, only_fields, Fields, JobError, ParamError, Registry};

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("this job kind is not implemented yet")]
    NotImplemented,
}

impl crate::jobs::registry::ErrorClass for CatalogError {
    fn class(&self) -> &'static str {
        match self {
            CatalogError::NotImplemented => "NotImplemented",
        }
    }
}

/// The catalogue job kinds, wired for the binary.
pub fn registry(_config: &Config) -> Registry {
    Registry::new()
        .with("sync", prepare_sync, |_, _| {
            Err(JobError::from(CatalogError::NotImplemented))
        })
        .with("enrich", prepare_enrich, |_, _| {
            Err(JobError::from(CatalogError::NotImplemented))
        })
        .with_plain("pair", |_, _| {
            Err(JobError::from(CatalogError::NotImplemented))
        })
}

fn prepare_sync(fields: &Fields) -> Result<Value, ParamError> {
    only_fields(fields, &["source"])?;
    let sources: Vec<String> = fields
        .get("source")
        .map(|vs| {
            vs.iter()
                .map(|v| {
                    v.as_str().map(str::to_owned).ok_or_else(|| {
                        ParamError::invalid("source", "each source must be a string")
                    })
                })
                .collect::<Result<_, _>>()
        })
        .transpose()?
        .unwrap_or_default();
    if sources.is_empty() {
        return Err(ParamError::missing(
            "source",
            "sync needs at least one source (a feed path or URL)",
        ));
    }
    Ok(json!({ "sources": sources }))
}

fn prepare_enrich(fields: &Fields) -> Result<Value, ParamError> {
    only_fields(fields, &["force"])?;
    let force = bool_field(fields, "force")?.unwrap_or(false);
    Ok(json!({ "force": force }))
}
