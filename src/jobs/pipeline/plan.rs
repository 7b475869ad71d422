//! A pipeline as a request asks for it (`Plan`): its steps, each with its kind's checked
//! parameters and its share of the percent, read from a start's fields or from the pipeline
//! a retry runs again; and the jobs that make it (`NewPipeline`).

use serde::Deserialize;
use serde_json::{Map, Value};

use super::super::params::{from_fields, Fields, ParamError};
use super::super::registry::Registry;
use super::super::store::{NewJob, NewPipeline, Origin};
use super::super::{JobId, Kind, Snapshot, Status, TenantId};
use super::{shares, PIPELINE_KIND};

/// The field that names a pipeline's steps.
pub const STEPS_FIELD: &str = "steps";

/// A pipeline as a request asks for it: its steps, in order, each with its kind's checked
/// parameters and its share of the pipeline's percent.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub steps: Vec<(Kind, Value, u8)>,
}

/// The `steps` field as a client spells it: a list, repeated, or comma-separated.
#[derive(Deserialize)]
struct StepsField {
    #[serde(default)]
    steps: Vec<String>,
}

/// Reads a pipeline's request fields (besides those every start takes): `steps` (default:
/// every ordered kind, in order; some of them, in that order, each once) and each step's own
/// fields, handed to the step's kind as a start of that kind would get them. A field no step
/// kind takes, or one of a kind that is not among the steps, is `unknown_field`.
pub fn plan(registry: &Registry, fields: &Fields) -> Result<Plan, ParamError> {
    let order = registry.order();
    let mut own = fields.clone();
    let named = match own.remove_entry(STEPS_FIELD) {
        Some((name, values)) => {
            Some(from_fields::<StepsField>(&Fields::from([(name, values)]))?.steps)
        }
        None => None,
    };
    let kinds = steps_of(order, named.as_deref())?;
    let mut by_kind: Vec<Fields> = vec![Fields::new(); kinds.len()];
    for (name, values) in own {
        let owner = order.iter().map(|(k, _)| k).find(|k| {
            registry
                .get(k)
                .and_then(|spec| spec.fields)
                .is_some_and(|taken| taken.contains(&name.as_str()))
        });
        match owner.and_then(|k| kinds.iter().position(|chosen| chosen == k)) {
            Some(at) => {
                by_kind[at].insert(name, values);
            }
            None => return Err(not_a_step_field(registry, &kinds, &name, owner)),
        }
    }
    let mut steps = Vec::with_capacity(kinds.len());
    for (kind, fields) in kinds.into_iter().zip(by_kind) {
        let spec = registry.get(&kind).expect("ordered kinds are registered");
        steps.push((kind, (spec.prepare)(&fields)?, 0));
    }
    Ok(Plan::shared(registry, steps))
}

/// The steps `named`, checked against the order: all the ordered kinds when the field is
/// absent; a field that names no step (`steps=`, `"steps": []` or `null`) is refused, never
/// read as "all".
fn steps_of(order: &[(Kind, u32)], named: Option<&[String]>) -> Result<Vec<Kind>, ParamError> {
    let all: Vec<&str> = order.iter().map(|(k, _)| k.as_str()).collect();
    let wrong = || {
        ParamError::invalid(
            STEPS_FIELD,
            format!(
                "steps are some of {}, in that order, each once (e.g. {})",
                all.join(", "),
                all.join(",")
            ),
        )
    };
    let words: Vec<&str> = named
        .unwrap_or_default()
        .iter()
        .flat_map(|n| n.split(','))
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .collect();
    if words.is_empty() {
        return match named.is_none() && !order.is_empty() {
            true => Ok(order.iter().map(|(k, _)| k.clone()).collect()),
            false => Err(wrong()),
        };
    }
    let mut at = 0;
    let mut kinds = Vec::with_capacity(words.len());
    for word in words {
        let found = all[at..]
            .iter()
            .position(|k| *k == word)
            .ok_or_else(wrong)?;
        at += found + 1;
        kinds.push(order[at - 1].0.clone());
    }
    Ok(kinds)
}

/// The refusal of a field no step of this pipeline takes.
fn not_a_step_field(
    registry: &Registry,
    kinds: &[Kind],
    name: &str,
    owner: Option<&Kind>,
) -> ParamError {
    let mut takes = vec![STEPS_FIELD];
    for kind in kinds {
        takes.extend(
            registry
                .get(kind)
                .and_then(|spec| spec.fields)
                .unwrap_or_default(),
        );
    }
    let error = ParamError::unknown(name, &takes);
    match owner {
        Some(kind) => ParamError {
            message: format!("`{name}` is a field of {kind}, which is not one of this pipeline's steps"),
            ..error
        },
        None => ParamError {
            message: format!("`{name}` is not a field of a pipeline or its steps; it takes tenant_id, wait and {}", takes.join(", ")),
            ..error
        },
    }
}

impl Plan {
    /// The plan with each step's share of 100 from the registry's weights.
    fn shared(registry: &Registry, steps: Vec<(Kind, Value, u8)>) -> Self {
        let weights: Vec<u32> = steps
            .iter()
            .map(|(kind, _, _)| {
                let weight = registry.order().iter().find(|(k, _)| k == kind);
                weight.map_or(1, |(_, w)| *w)
            })
            .collect();
        let steps = steps
            .into_iter()
            .zip(shares(&weights))
            .map(|((kind, params, _), share)| (kind, params, share))
            .collect();
        Self { steps }
    }

    /// What a retry of `pipeline` runs: its steps from the first that did not end `done`
    /// (all of them when it ended done), with the parameters they had.
    pub fn retry_of(registry: &Registry, pipeline: &Snapshot) -> Self {
        let views = pipeline.steps.as_deref().unwrap_or_default();
        let from = match pipeline.status {
            Status::Done => 0,
            _ => views
                .iter()
                .position(|v| v.status != Status::Done)
                .unwrap_or(0),
        };
        let steps = views[from..]
            .iter()
            .map(|v| {
                let params = pipeline.params[v.kind.as_str()].clone();
                (v.kind.clone(), params, 0)
            })
            .collect();
        Self::shared(registry, steps)
    }

    /// The pipeline's own parameters: its steps, and each step's by kind.
    pub fn params(&self) -> Value {
        let mut params = Map::new();
        let kinds: Vec<Value> = self
            .steps
            .iter()
            .map(|(k, _, _)| k.as_str().into())
            .collect();
        params.insert(STEPS_FIELD.to_owned(), Value::Array(kinds));
        for (kind, step, _) in &self.steps {
            params.insert(kind.to_string(), step.clone());
        }
        Value::Object(params)
    }

    /// The pipeline to create for `tenant`: its own job (with the request's key) and one
    /// ordered job per step, all with `origin`.
    pub fn into_new(
        self,
        tenant: TenantId,
        origin: Origin,
        key: Option<String>,
        step: &str,
    ) -> NewPipeline {
        let kind = Kind::parse(PIPELINE_KIND).expect("the pipeline kind is a valid kind");
        let job = NewJob {
            id: JobId::for_tenant(&tenant),
            tenant: tenant.clone(),
            kind,
            params: self.params(),
            step: step.to_owned(),
            origin: origin.clone(),
            idempotency_key: key,
            in_order: false,
            pipeline: None,
        };
        let steps = self
            .steps
            .into_iter()
            .map(|(kind, params, share)| {
                let step = NewJob {
                    id: JobId::for_tenant(&tenant),
                    tenant: tenant.clone(),
                    kind,
                    params,
                    step: step.to_owned(),
                    origin: Origin {
                        retry_of: None,
                        ..origin.clone()
                    },
                    idempotency_key: None,
                    in_order: true,
                    pipeline: Some(job.id),
                };
                (step, share)
            })
            .collect();
        NewPipeline { job, steps }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order() -> Vec<(Kind, u32)> {
        [("sync", 40), ("enrich", 30), ("pair", 30)]
            .iter()
            .map(|(k, w)| (Kind::parse(k).unwrap(), *w))
            .collect()
    }

    fn named(words: &[&str]) -> Result<Vec<String>, ParamError> {
        let words: Vec<String> = words.iter().map(|w| (*w).to_owned()).collect();
        steps_of(&order(), Some(&words)).map(|kinds| kinds.iter().map(|k| k.to_string()).collect())
    }

    #[test]
    fn steps_are_some_of_the_ordered_kinds_in_their_order_each_once() {
        let all = steps_of(&order(), None).unwrap();
        assert_eq!(
            all.iter().map(Kind::as_str).collect::<Vec<_>>(),
            ["sync", "enrich", "pair"]
        );
        assert_eq!(named(&["sync,pair"]).unwrap(), ["sync", "pair"]);
        assert_eq!(named(&["enrich", " pair "]).unwrap(), ["enrich", "pair"]);
        for wrong in [
            &["pair,sync"][..],
            &["sync,sync"],
            &["publish"],
            &[","],
            &[],
            &[""],
        ] {
            let e = named(wrong).expect_err("refused");
            assert_eq!(
                (e.code, e.field.as_str()),
                ("invalid_field", STEPS_FIELD),
                "{wrong:?}"
            );
        }
    }
}
