//! Kubernetes JSON from decoded protobuf messages.
//!
//! The protobuf messages come from Go structs whose non-pointer fields are always
//! encoded, empty or not; the JSON of the same struct leaves them out (`omitempty`).
//! So a field is written only when it is set and not empty, unless it is a pointer
//! field in Go (`ptr`), where being set is what counts.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Map, Value};

/// A protobuf value that has a Kubernetes JSON form.
pub(super) trait ToJson {
    /// The JSON form.
    fn value(&self) -> Value;
    /// Whether Go's `omitempty` leaves the value out. Structs never are empty.
    fn is_empty(&self) -> bool {
        false
    }
    /// Whether the value is unset (an absent optional field).
    fn is_absent(&self) -> bool {
        false
    }
}

impl ToJson for String {
    fn value(&self) -> Value {
        Value::String(self.clone())
    }
    fn is_empty(&self) -> bool {
        self.is_empty()
    }
}

impl ToJson for bool {
    fn value(&self) -> Value {
        Value::Bool(*self)
    }
    fn is_empty(&self) -> bool {
        !*self
    }
}

macro_rules! numbers {
    ($($t:ty),*) => {$(
        impl ToJson for $t {
            fn value(&self) -> Value {
                Value::from(*self)
            }
            fn is_empty(&self) -> bool {
                *self == 0
            }
        }
    )*};
}
numbers!(i32, i64);

/// `bytes` fields are base64 strings in JSON.
impl ToJson for Vec<u8> {
    fn value(&self) -> Value {
        Value::String(BASE64.encode(self))
    }
    fn is_empty(&self) -> bool {
        self.is_empty()
    }
}

impl<T: ToJson> ToJson for Option<T> {
    fn value(&self) -> Value {
        self.as_ref().map_or(Value::Null, ToJson::value)
    }
    fn is_empty(&self) -> bool {
        self.as_ref().is_none_or(ToJson::is_empty)
    }
    fn is_absent(&self) -> bool {
        self.is_none()
    }
}

/// Repeated fields; `Vec<u8>` is `bytes` above, so this covers messages and strings.
pub(super) trait Element: ToJson {}
impl Element for String {}

impl<T: Element> ToJson for Vec<T> {
    fn value(&self) -> Value {
        Value::Array(self.iter().map(ToJson::value).collect())
    }
    fn is_empty(&self) -> bool {
        self.is_empty()
    }
}

impl<T: ToJson> ToJson for BTreeMap<String, T> {
    fn value(&self) -> Value {
        Value::Object(self.iter().map(|(k, v)| (k.clone(), v.value())).collect())
    }
    fn is_empty(&self) -> bool {
        self.is_empty()
    }
}

/// Writes one field of a message: set and not empty, or just set for pointer fields.
pub(super) fn put<T: ToJson>(out: &mut Map<String, Value>, name: &str, value: &T, keep: bool) {
    let written = if keep {
        !value.is_absent()
    } else {
        !value.is_empty()
    };
    if written {
        out.insert(name.to_string(), value.value());
    }
}

/// The JSON name of a field: prost's snake_case turned back into the proto's camelCase.
pub(super) fn camel(snake: &str) -> String {
    let snake = snake.trim_start_matches("r#");
    let mut out = String::with_capacity(snake.len());
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// Implements [`ToJson`] for messages by listing their fields. A field is
/// `name`, `name as "jsonName"` when camelCase does not give the JSON name back
/// (`clusterIP`), and either followed by `: ptr` for fields written whenever set (Go
/// pointers, and fields without `omitempty`). The caller imports
/// `ToJson`, `Element`, `put` and `camel`.
macro_rules! messages {
    (@name $field:ident) => { camel(stringify!($field)) };
    (@name $field:ident $json:literal) => { String::from($json) };
    (@keep) => { false };
    (@keep ptr) => { true };
    ($($ty:ty { $($field:ident $(as $json:literal)? $(: $keep:ident)?),* $(,)? })*) => {$(
        impl ToJson for $ty {
            fn value(&self) -> serde_json::Value {
                #[allow(unused_mut)]
                let mut out = serde_json::Map::new();
                $(
                    let name = messages!(@name $field $($json)?);
                    put(&mut out, &name, &self.$field, messages!(@keep $($keep)?));
                )*
                serde_json::Value::Object(out)
            }
        }
        impl Element for $ty {}
    )*};
}
pub(super) use messages;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn camel_case_restores_proto_names() {
        assert_eq!(camel("binary_data"), "binaryData");
        assert_eq!(camel("fields_v1"), "fieldsV1");
        assert_eq!(camel("r#type"), "type");
    }
}
