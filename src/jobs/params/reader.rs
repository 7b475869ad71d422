//! Reading a kind's typed parameters from a request's fields: a serde `Deserializer` over
//! [`Fields`] that reads values as forms, query strings and JSON spell them (a boolean as
//! `true/1/yes/on`, a number as text, a repeated field as a list) and refuses a field the
//! parameters do not name before it reads any value.

use std::collections::{btree_map, BTreeMap};

use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, Visitor};
use serde::{forward_to_deserialize_any, Deserialize, Serialize};
use serde_json::Value;

use super::error::ParamError;

/// The fields of a start request other than the ones every start takes (`tenant_id`, `wait`):
/// each name with the values given for it, in order (a repeated form field or a JSON array
/// gives several; a JSON `null` or `[]` gives none, which reads as absent).
pub type Fields = BTreeMap<String, Vec<Value>>;

/// The parameters of a kind that takes none: `{}` in the job record, any field refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoParams {}

/// Reads a kind's parameters from a request's fields, once: a field `P` does not name is
/// `unknown_field` (before any value is looked at), a value of the wrong shape
/// `invalid_field`, a required field that is absent `missing_field`.
pub fn from_fields<P: DeserializeOwned>(fields: &Fields) -> Result<P, ParamError> {
    P::deserialize(FieldsReader { fields })
}

/// The request fields a parameters type reads (its serde field names, in order; none for a
/// type that is not a struct), so a caller can tell which kind a field belongs to.
pub fn field_names<P: DeserializeOwned>() -> &'static [&'static str] {
    match P::deserialize(NamesOf) {
        Err(Names(names)) => names,
        Ok(_) => &[],
    }
}

/// A deserializer that reads nothing: it answers the struct's field names as its error.
struct NamesOf;

/// The field names `NamesOf` found (empty when the type asked for something else).
#[derive(Debug)]
struct Names(&'static [&'static str]);

impl std::fmt::Display for Names {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "fields {:?}", self.0)
    }
}

impl std::error::Error for Names {}

impl de::Error for Names {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Names(&[])
    }
}

impl<'de> de::Deserializer<'de> for NamesOf {
    type Error = Names;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Names> {
        Err(Names(&[]))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Names> {
        Err(Names(fields))
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// Refuses fields other than `allowed`, so a typo is a clear 4xx rather than silently ignored
/// (for a kind that reads its fields itself).
pub fn only_fields(fields: &Fields, allowed: &[&str]) -> Result<(), ParamError> {
    match fields.keys().find(|k| !allowed.contains(&k.as_str())) {
        None => Ok(()),
        Some(name) => Err(ParamError::unknown(name, allowed)),
    }
}

/// Reads a boolean field given at most once, as [`from_fields`] reads a `bool` (for a kind
/// that reads its fields itself).
pub fn bool_field(fields: &Fields, name: &str) -> Result<Option<bool>, ParamError> {
    match fields.get(name) {
        Some(values) if !values.is_empty() => {
            bool::deserialize(FieldValues { name, values }).map(Some)
        }
        _ => Ok(None),
    }
}

/// Parses a boolean as forms, query strings and JSON spell it.
pub fn parse_bool(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::Number(n) => match n.as_u64() {
            Some(1) => Some(true),
            Some(0) => Some(false),
            _ => None,
        },
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Some(true),
            "false" | "0" | "no" | "off" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// All the fields, read as a struct (its field names are the request's) or a map.
struct FieldsReader<'a> {
    fields: &'a Fields,
}

impl<'de> de::Deserializer<'de> for FieldsReader<'_> {
    type Error = ParamError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ParamError> {
        visitor.visit_map(Entries {
            iter: self.fields.iter(),
            current: None,
        })
    }

    /// Every field is checked against the struct's before any value is read, so the answer
    /// to a request with a typo is the typo, whatever else it got wrong.
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        allowed: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ParamError> {
        only_fields(self.fields, allowed)?;
        self.deserialize_any(visitor)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// The fields as serde's map access; a field given with no value is skipped (absent).
struct Entries<'a> {
    iter: btree_map::Iter<'a, String, Vec<Value>>,
    current: Option<(&'a str, &'a [Value])>,
}

impl<'de> de::MapAccess<'de> for Entries<'_> {
    type Error = ParamError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, ParamError> {
        let Some((name, values)) = self.iter.by_ref().find(|(_, v)| !v.is_empty()) else {
            return Ok(None);
        };
        self.current = Some((name, values));
        seed.deserialize(name.as_str().into_deserializer())
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, ParamError> {
        let (name, values) = self
            .current
            .take()
            .expect("serde asks for a value only right after its key");
        seed.deserialize(FieldValues { name, values })
            .map_err(|e| e.about(name))
    }
}

/// One field's values: a list for a sequence, else exactly one value.
struct FieldValues<'a> {
    name: &'a str,
    values: &'a [Value],
}

impl<'a> FieldValues<'a> {
    fn single(&self) -> Result<One<'a>, ParamError> {
        match self.values {
            [value] => Ok(One {
                name: self.name,
                value,
                each: false,
            }),
            _ => Err(ParamError::invalid(
                self.name,
                format!("`{}` was given more than once", self.name),
            )),
        }
    }
}

/// Defines each listed `deserialize_*` method as reading the field's one value the same way
/// (`@single`), or as another method of the same deserializer (`deserialize_u64: …`);
/// `@transparent` reads an option or a newtype as what it holds.
macro_rules! reads_as {
    // A value that is given is `Some`, and a newtype reads as what it wraps.
    (@transparent) => {
        fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ParamError> {
            visitor.visit_some(self)
        }

        fn deserialize_newtype_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            visitor: V,
        ) -> Result<V::Value, ParamError> {
            visitor.visit_newtype_struct(self)
        }
    };
    (@single $($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ParamError> {
            self.single()?.$method(visitor)
        }
    )*};
    ($($to:ident: $($method:ident)*;)*) => {$($(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ParamError> {
            self.$to(visitor)
        }
    )*)*};
}

impl<'de> de::Deserializer<'de> for FieldValues<'_> {
    type Error = ParamError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ParamError> {
        match self.values {
            [_] => self.single()?.deserialize_any(visitor),
            _ => self.deserialize_seq(visitor),
        }
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ParamError> {
        visitor.visit_seq(Each {
            name: self.name,
            iter: self.values.iter(),
        })
    }

    reads_as! { @transparent }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, ParamError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ParamError> {
        self.single()?.deserialize_enum(name, variants, visitor)
    }

    reads_as! {
        @single
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_f32
        deserialize_f64 deserialize_char deserialize_str deserialize_string deserialize_map
        deserialize_identifier
    }

    forward_to_deserialize_any! {
        i128 u128 bytes byte_buf unit unit_struct tuple_struct struct ignored_any
    }
}

/// A repeated field's values, one element each.
struct Each<'a> {
    name: &'a str,
    iter: std::slice::Iter<'a, Value>,
}

impl<'de> de::SeqAccess<'de> for Each<'_> {
    type Error = ParamError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, ParamError> {
        let Some(value) = self.iter.next() else {
            return Ok(None);
        };
        let one = One {
            name: self.name,
            value,
            each: true,
        };
        seed.deserialize(one).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

/// One value of a field, read as forms and JSON spell it (a number may come as text).
struct One<'a> {
    name: &'a str,
    value: &'a Value,
    /// One of a repeated field's values: messages say "each".
    each: bool,
}

impl One<'_> {
    fn refuse(&self, what: &str) -> ParamError {
        let name = self.name;
        match self.each {
            true => ParamError::invalid(name, format!("each of `{name}` must be {what}")),
            false => ParamError::invalid(name, format!("`{name}` must be {what}")),
        }
    }

    fn whole<T: std::str::FromStr>(&self, from_json: Option<T>) -> Result<T, ParamError> {
        let from_text = || self.value.as_str().and_then(|s| s.trim().parse().ok());
        from_json
            .or_else(from_text)
            .ok_or_else(|| self.refuse("a whole number"))
    }

    /// The value handed to serde_json's own reader (for maps, lists and `Value` fields).
    fn read_as_json<'de, V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ParamError> {
        de::Deserializer::deserialize_any(self.value.clone(), visitor)
            .map_err(|e| ParamError::invalid(self.name, format!("`{}`: {e}", self.name)))
    }
}

impl<'de> de::Deserializer<'de> for One<'_> {
    type Error = ParamError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ParamError> {
        self.read_as_json(visitor)
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ParamError> {
        match parse_bool(self.value) {
            Some(b) => visitor.visit_bool(b),
            None => Err(self.refuse("one of true, false, 1, 0, yes, no, on, off")),
        }
    }

    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ParamError> {
        visitor.visit_u64(self.whole(self.value.as_u64())?)
    }

    fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ParamError> {
        visitor.visit_i64(self.whole(self.value.as_i64())?)
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ParamError> {
        let from_text = || self.value.as_str().and_then(|s| s.trim().parse().ok());
        match self.value.as_f64().or_else(from_text) {
            Some(x) => visitor.visit_f64(x),
            None => Err(self.refuse("a number")),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ParamError> {
        match self.value {
            Value::String(s) => visitor.visit_str(s),
            _ => Err(self.refuse("a string")),
        }
    }

    reads_as! { @transparent }

    /// A unit variant, named by a string (`mode=full`).
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ParamError> {
        match self.value {
            Value::String(s) => visitor.visit_enum(s.as_str().into_deserializer()),
            _ => Err(self.refuse("a string")),
        }
    }

    reads_as! {
        deserialize_u64: deserialize_u8 deserialize_u16 deserialize_u32;
        deserialize_i64: deserialize_i8 deserialize_i16 deserialize_i32;
        deserialize_f64: deserialize_f32;
        deserialize_str: deserialize_string deserialize_char deserialize_identifier;
    }

    forward_to_deserialize_any! {
        i128 u128 bytes byte_buf unit unit_struct seq tuple tuple_struct map struct ignored_any
    }
}
