//! The job seam's own vocabulary: a start request's raw fields in (`Fields`), a kind's typed
//! parameters out (`from_fields`), and the one error a kind gives for a field the client got
//! wrong (`ParamError`). A kind declares its parameters as a serde struct, one line a field;
//! `from_fields` reads it by the rules of forms and query strings (a boolean as `true/1/yes/on`,
//! a repeated field as a list, a field the struct does not name refused). Nothing here knows
//! HTTP: the api maps a `ParamError` to its envelope once.

mod error;
mod reader;

pub use error::{ParamError, ParamErrorKind, INVALID_FIELD, MISSING_FIELD, UNKNOWN_FIELD};
pub use reader::{bool_field, field_names, from_fields, only_fields, parse_bool, Fields, NoParams};

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::{json, Value};

    /// A kind's parameters as the seam is meant to be used: one line a field.
    #[derive(Debug, PartialEq, Deserialize)]
    struct Example {
        #[serde(default)]
        force: bool,
        #[serde(default)]
        source: Vec<String>,
        limit: Option<u32>,
    }

    fn fields(pairs: Value) -> Fields {
        let Value::Object(map) = pairs else {
            panic!("the case's fields are an object")
        };
        map.into_iter()
            .map(|(k, v)| match v {
                Value::Array(items) => (k, items),
                Value::Null => (k, vec![]),
                other => (k, vec![other]),
            })
            .collect()
    }

    #[test]
    fn fields_read_as_a_kind_spells_them() {
        let cases = [
            (json!({}), false, vec![], None),
            (json!({"force": "yes"}), true, vec![], None),
            (json!({"force": 0}), false, vec![], None),
            (json!({"force": null}), false, vec![], None),
            (json!({"source": "a.jsonl"}), false, vec!["a.jsonl"], None),
            (json!({"source": ["a", "b"]}), false, vec!["a", "b"], None),
            (json!({"limit": " 7 "}), false, vec![], Some(7)),
            (json!({"limit": 7}), false, vec![], Some(7)),
        ];
        for (given, force, source, limit) in cases {
            let expected = Example {
                force,
                source: source.into_iter().map(str::to_owned).collect(),
                limit,
            };
            assert_eq!(
                from_fields::<Example>(&fields(given.clone())),
                Ok(expected),
                "{given}"
            );
        }
    }

    #[test]
    fn a_field_the_client_got_wrong_is_named_with_its_code_and_what_to_fix() {
        let cases = [
            (
                json!({"force": "sure", "colour": "red"}),
                UNKNOWN_FIELD,
                "colour",
                "`colour` is not a field of this job; it takes tenant_id, wait and force, source, limit",
            ),
            (
                json!({"colour": null}),
                UNKNOWN_FIELD,
                "colour",
                "`colour` is not a field of this job; it takes tenant_id, wait and force, source, limit",
            ),
            (
                json!({"force": "sure"}),
                INVALID_FIELD,
                "force",
                "`force` must be one of true, false, 1, 0, yes, no, on, off",
            ),
            (
                json!({"force": {}}),
                INVALID_FIELD,
                "force",
                "`force` must be one of true, false, 1, 0, yes, no, on, off",
            ),
            (
                json!({"force": [true, true]}),
                INVALID_FIELD,
                "force",
                "`force` was given more than once",
            ),
            (
                json!({"source": ["a", 5]}),
                INVALID_FIELD,
                "source",
                "each of `source` must be a string",
            ),
            (
                json!({"limit": "many"}),
                INVALID_FIELD,
                "limit",
                "`limit` must be a whole number",
            ),
            (
                json!({"limit": 5_000_000_000u64}),
                INVALID_FIELD,
                "limit",
                "`limit`: invalid value: integer `5000000000`, expected u32",
            ),
        ];
        for (given, code, field, message) in cases {
            let e = from_fields::<Example>(&fields(given.clone())).unwrap_err();
            assert_eq!(
                (e.code, e.field.as_str(), e.message.as_str()),
                (code, field, message),
                "{given}"
            );
        }
    }

    #[test]
    fn a_parameters_type_names_the_fields_it_reads() {
        assert_eq!(field_names::<Example>(), ["force", "source", "limit"]);
        assert_eq!(field_names::<NoParams>(), [] as [&str; 0]);
        assert_eq!(field_names::<Value>(), [] as [&str; 0]);
    }

    #[test]
    fn a_kind_without_parameters_takes_no_field() {
        assert_eq!(from_fields::<NoParams>(&Fields::new()), Ok(NoParams {}));
        let e = from_fields::<NoParams>(&fields(json!({"force": true}))).unwrap_err();
        assert_eq!(
            (e.code, e.kind, e.message.as_str()),
            (
                UNKNOWN_FIELD,
                ParamErrorKind::Unknown,
                "`force` is not a field of this job; it takes only tenant_id and wait"
            )
        );
        assert_eq!(serde_json::to_value(NoParams {}).unwrap(), json!({}));
    }

    #[test]
    fn a_required_field_that_is_absent_is_missing() {
        #[derive(Debug, Deserialize)]
        struct Needs {
            #[allow(dead_code)]
            steps: Vec<String>,
        }
        let e = from_fields::<Needs>(&fields(json!({"steps": null}))).unwrap_err();
        assert_eq!(
            (e.code, e.field.as_str(), e.message.as_str()),
            (MISSING_FIELD, "steps", "`steps` is required")
        );
    }

    #[test]
    fn the_field_readers_read_as_the_typed_reader_does() {
        let given = fields(json!({"dry_run": "on", "twice": [1, 0]}));
        assert_eq!(bool_field(&given, "dry_run"), Ok(Some(true)));
        assert_eq!(bool_field(&given, "absent"), Ok(None));
        assert_eq!(
            bool_field(&given, "twice").unwrap_err().message,
            "`twice` was given more than once"
        );
        assert_eq!(
            only_fields(&given, &["dry_run"]).unwrap_err().field,
            "twice"
        );
        assert_eq!(parse_bool(&json!(" OFF ")), Some(false));
        assert_eq!(parse_bool(&json!(2)), None);
    }
}
