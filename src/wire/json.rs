//! Serde helpers that make the JSON of the generated protobuf types readable by
//! people. `build.rs` attaches them to every field of the matching type; nothing
//! here is called by hand.
//!
//! - Enum fields (`i32` in prost) are written as their proto name without the
//!   enum's prefix: `FAILURE_KIND_NON_ZERO_EXIT` is `"NON_ZERO_EXIT"`. Reading
//!   accepts the short name, the full proto name, or a number (so a value this
//!   version does not know can still be written down; converting to the core
//!   then names the field and rejects it).
//! - A few fields added after the first version (listed in `build.rs`) are left
//!   out when they hold their zero, so old events export as they always did.
//! - Bytes fields are written as a JSON string when they are valid UTF-8, and as
//!   `{"base64": "..."}` (standard alphabet, padded) when they are not. A string
//!   always means its UTF-8 bytes, so there is no ambiguity.

use std::fmt;
use std::marker::PhantomData;

use base64::Engine as _;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

/// Whether a field holds protobuf's zero (absent message, empty list or map,
/// 0, false): `build.rs` leaves such a field out of the JSON of the fields it
/// names in `JSON_OMITTED_WHEN_ZERO`.
pub fn is_zero<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// A protobuf enum as prost generates it. `build.rs` implements this for every
/// enum of the schema (`OUT_DIR/gridfold.v1.json.rs`).
pub trait ProtoEnum: Copy + TryFrom<i32> + Into<i32> + 'static {
    /// The enum's proto name, `FailureKind`.
    const NAME: &'static str;
    /// The prefix every value name carries, `FAILURE_KIND_`.
    const VALUE_PREFIX: &'static str;
    /// The value names without the prefix, in declaration order.
    const JSON_NAMES: &'static [&'static str];
    /// The full proto name of the value (prost's `as_str_name`).
    fn proto_name(self) -> &'static str;
    /// The value of a full proto name (prost's `from_str_name`).
    fn from_proto_name(name: &str) -> Option<Self>;
}

/// The short JSON name of an enum value known to `E`, if it is one.
pub fn enum_json_name<E: ProtoEnum>(value: i32) -> Option<&'static str> {
    let known = E::try_from(value).ok()?;
    let name = known.proto_name();
    Some(name.strip_prefix(E::VALUE_PREFIX).unwrap_or(name))
}

/// The names worth suggesting: all but `UNSPECIFIED`, which is never valid.
fn values_of<E: ProtoEnum>() -> String {
    E::JSON_NAMES
        .iter()
        .skip(1)
        .copied()
        .collect::<Vec<_>>()
        .join(", ")
}

/// An enum field's `i32`, (de)serialised by name.
struct Named<E>(i32, PhantomData<E>);

impl<E: ProtoEnum> Serialize for Named<E> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match enum_json_name::<E>(self.0) {
            Some(name) => serializer.serialize_str(name),
            None => serializer.serialize_i32(self.0),
        }
    }
}

impl<'de, E: ProtoEnum> Deserialize<'de> for Named<E> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NamedVisitor::<E>(PhantomData))
    }
}

struct NamedVisitor<E>(PhantomData<E>);

impl<E: ProtoEnum> Visitor<'_> for NamedVisitor<E> {
    type Value = Named<E>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a {} name ({})", E::NAME, values_of::<E>())
    }

    fn visit_str<Err: de::Error>(self, text: &str) -> Result<Self::Value, Err> {
        let known = E::from_proto_name(&format!("{}{text}", E::VALUE_PREFIX))
            .or_else(|| E::from_proto_name(text))
            .ok_or_else(|| {
                Err::custom(format_args!(
                    "unknown {} {text:?}, expected one of {}",
                    E::NAME,
                    values_of::<E>()
                ))
            })?;
        Ok(Named(known.into(), PhantomData))
    }

    fn visit_i64<Err: de::Error>(self, number: i64) -> Result<Self::Value, Err> {
        let value = i32::try_from(number)
            .map_err(|_| Err::custom(format_args!("{} value {number} is out of range", E::NAME)))?;
        Ok(Named(value, PhantomData))
    }

    fn visit_u64<Err: de::Error>(self, number: u64) -> Result<Self::Value, Err> {
        let value = i32::try_from(number)
            .map_err(|_| Err::custom(format_args!("{} value {number} is out of range", E::NAME)))?;
        Ok(Named(value, PhantomData))
    }
}

/// For a singular enum field.
pub mod enum_name {
    use super::*;

    pub fn serialize<E: ProtoEnum, S: Serializer>(value: &i32, s: S) -> Result<S::Ok, S::Error> {
        Named::<E>(*value, PhantomData).serialize(s)
    }

    pub fn deserialize<'de, E: ProtoEnum, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
        Ok(Named::<E>::deserialize(d)?.0)
    }

    /// For a proto3 `optional` enum field.
    pub mod option {
        use super::super::*;

        pub fn serialize<E: ProtoEnum, S: Serializer>(
            value: &Option<i32>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            value.map(|v| Named::<E>(v, PhantomData)).serialize(s)
        }

        pub fn deserialize<'de, E: ProtoEnum, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<i32>, D::Error> {
            Ok(Option::<Named<E>>::deserialize(d)?.map(|n| n.0))
        }
    }

    /// For a `repeated` enum field.
    pub mod repeated {
        use super::super::*;

        pub fn serialize<E: ProtoEnum, S: Serializer>(
            values: &[i32],
            s: S,
        ) -> Result<S::Ok, S::Error> {
            s.collect_seq(values.iter().map(|v| Named::<E>(*v, PhantomData)))
        }

        pub fn deserialize<'de, E: ProtoEnum, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Vec<i32>, D::Error> {
            Ok(Vec::<Named<E>>::deserialize(d)?
                .into_iter()
                .map(|n| n.0)
                .collect())
        }
    }
}

/// A bytes field: a JSON string when valid UTF-8, else `{"base64": "..."}`.
pub mod bytes_text {
    use super::*;

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(bytes) {
            Ok(text) => s.serialize_str(text),
            Err(_) => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry(
                    "base64",
                    &base64::engine::general_purpose::STANDARD.encode(bytes),
                )?;
                map.end()
            }
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        d.deserialize_any(BytesVisitor)
    }

    struct BytesVisitor;

    impl<'de> Visitor<'de> for BytesVisitor {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a UTF-8 string or {\"base64\": \"...\"}")
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Vec<u8>, E> {
            Ok(text.as_bytes().to_vec())
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<u8>, A::Error> {
            let mut bytes = None;
            while let Some(key) = map.next_key::<String>()? {
                if key != "base64" {
                    return Err(de::Error::unknown_field(&key, &["base64"]));
                }
                if bytes.is_some() {
                    return Err(de::Error::duplicate_field("base64"));
                }
                let text: String = map.next_value()?;
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(text.as_bytes())
                    .map_err(|e| de::Error::custom(format_args!("bad base64: {e}")))?;
                bytes = Some(decoded);
            }
            bytes.ok_or_else(|| de::Error::missing_field("base64"))
        }
    }

    /// For a proto3 `optional bytes` field.
    pub mod option {
        use super::super::*;

        pub fn serialize<S: Serializer>(bytes: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
            match bytes {
                Some(bytes) => super::serialize(bytes, s),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
            #[derive(Deserialize)]
            struct Wrapped(#[serde(with = "super")] Vec<u8>);
            Ok(Option::<Wrapped>::deserialize(d)?.map(|w| w.0))
        }
    }
}

#[cfg(test)]
mod tests {
    use expect_test::expect;

    use crate::wire::proto;

    fn failed(json: &str) -> Result<proto::TaskFailed, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn enums_read_short_names_full_names_and_numbers() {
        let short = failed(r#"{"kind": "SIGNALLED"}"#).unwrap();
        let full = failed(r#"{"kind": "FAILURE_KIND_SIGNALLED"}"#).unwrap();
        let number = failed(r#"{"kind": 2}"#).unwrap();
        assert_eq!(short.kind, proto::FailureKind::Signalled as i32);
        assert_eq!(full, short);
        assert_eq!(number, short);
        // A number this version does not know survives, to be rejected with its field later.
        assert_eq!(failed(r#"{"kind": 99}"#).unwrap().kind, 99);
        expect![[r#"{"task":null,"attempt":0,"engine":"","kind":99,"error_tail":""}"#]]
            .assert_eq(&serde_json::to_string(&failed(r#"{"kind": 99}"#).unwrap()).unwrap());
    }

    #[test]
    fn enums_refuse_unknown_names_listing_the_known_ones() {
        expect![[r#"unknown FailureKind "SEGFAULT", expected one of NON_ZERO_EXIT, SIGNALLED, WALL_TIME_EXCEEDED, LAUNCH_FAILED, ENGINE_SHUTDOWN, PREEMPTED, UNDELIVERABLE at line 1 column 19"#]]
            .assert_eq(&failed(r#"{"kind": "SEGFAULT"}"#).unwrap_err());
    }

    #[test]
    fn bytes_are_text_when_utf8_and_base64_otherwise() {
        let text = proto::TaskCompleted {
            result: b"42\n".to_vec(),
            ..Default::default()
        };
        let binary = proto::TaskCompleted {
            result: vec![0xff, 0x00, 0x80],
            ..Default::default()
        };
        let text_json = serde_json::to_string(&text).unwrap();
        let binary_json = serde_json::to_string(&binary).unwrap();
        expect![[r#"{"task":null,"attempt":0,"engine":"","exit_code":0,"cpu_ms":0,"wall_ms":0,"result":"42\n"}"#]]
            .assert_eq(&text_json);
        expect![[r#"{"task":null,"attempt":0,"engine":"","exit_code":0,"cpu_ms":0,"wall_ms":0,"result":{"base64":"/wCA"}}"#]]
            .assert_eq(&binary_json);
        assert_eq!(
            serde_json::from_str::<proto::TaskCompleted>(&text_json).unwrap(),
            text
        );
        assert_eq!(
            serde_json::from_str::<proto::TaskCompleted>(&binary_json).unwrap(),
            binary
        );
        let bad = serde_json::from_str::<proto::TaskCompleted>(r#"{"result": {"base64": "!!"}}"#);
        expect![[r#"bad base64: Invalid symbol 33, offset 0. at line 1 column 27"#]]
            .assert_eq(&bad.unwrap_err().to_string());
    }
}
