//! Strict JSON: parsing that refuses a key given twice in one object, at any depth, where
//! serde_json would silently let the last value win. The one reader of "JSON without
//! repeated keys", shared by the request bodies (api) and the feed rows (catalog).

use serde_json::Value;

/// What a duplicate key's deserialisation error starts with, so it can be told apart.
const DUPLICATE_KEY: &str = "duplicate key `";

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum StrictJsonError {
    #[error("the key `{0}` is given twice in one object")]
    DuplicateKey(String),
    #[error("{0}")]
    Invalid(String),
}

/// Parses JSON text, refusing any object that repeats a key.
pub fn parse(text: &[u8]) -> Result<Value, StrictJsonError> {
    match serde_json::from_slice::<Strict>(text) {
        Ok(Strict(value)) => Ok(value),
        Err(e) => {
            let text = e.to_string();
            match text
                .strip_prefix(DUPLICATE_KEY)
                .and_then(|rest| rest.split_once('`'))
            {
                Some((key, _)) => Err(StrictJsonError::DuplicateKey(key.to_owned())),
                None => Err(StrictJsonError::Invalid(text)),
            }
        }
    }
}

/// A JSON value whose objects never repeat a key.
struct Strict(Value);

impl<'de> serde::Deserialize<'de> for Strict {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> serde::de::Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format!("{DUPLICATE_KEY}{key}`")));
            }
            let Strict(v) = map.next_value()?;
            object.insert(key, v);
        }
        Ok(Value::Object(object))
    }
}
