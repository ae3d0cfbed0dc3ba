//! The OTLP messages' wire format as the view parser (`parse`) reads it:
//! a message's fields walked from its bytes, strings borrowed, attribute
//! values held as they came until a label needs their text.
//!
//! The decoding is prost's primitives (keys, varints, fixed and packed
//! numbers, skipping unknown fields) with the view's own string checks
//! ([`borrow_str`]), and every part of a message prost would decode is
//! decoded here too, wanted or not (scopes, exemplars, exponential
//! buckets), so that a body is refused exactly when prost refuses it. What
//! is read but not kept (an exemplar, a scope) costs no allocation, as the
//! reading of an attribute array or map (which is kept as prost's own
//! message, since only its JSON text is wanted) is the only place one is
//! made. One difference is left, as in `crate::ingest::view`: prost's
//! recursion limit for nested arrays and maps is counted from the array or
//! map here, not from the request, so about ten levels more are allowed.

use std::fmt::Write as _;

use bumpalo::Bump;
use opentelemetry_proto::tonic::common::v1::{
    any_value::Value, AnyValue, ArrayValue, EntityRef, KeyValueList,
};
use prost::encoding::{
    bool as pbool, check_wire_type, double, fixed64, int32, int64, message, sfixed64, sint32,
    skip_field, uint32, uint64, DecodeContext, WireType,
};

use crate::ingest::view::{borrow_str, fast, own, ViewError};

/// Walks the fields of a message whose bytes are `body`, as prost's
/// `merge_loop` does within a message's length.
pub(super) fn fields<'a, E: From<ViewError>>(
    body: &'a [u8],
    mut field: impl FnMut(&mut &'a [u8], u32, WireType) -> Result<(), E>,
) -> Result<(), E> {
    let mut buf = body;
    while !buf.is_empty() {
        let (tag, wire_type) = fast::key(&mut buf).map_err(|e| E::from(ViewError::Wire(e)))?;
        field(&mut buf, tag, wire_type)?;
    }
    Ok(())
}

/// An embedded message's bytes, to be walked later (or twice: protobuf
/// lets fields come in any order, and some must be read before others).
pub(super) fn body<'a>(wire_type: WireType, buf: &mut &'a [u8]) -> Result<&'a [u8], ViewError> {
    check_wire_type(WireType::LengthDelimited, wire_type)?;
    let len = fast::read_varint(buf)?;
    let bytes = usize::try_from(len)
        .ok()
        .and_then(|len| buf.get(..len))
        .ok_or_else(|| own("buffer underflow"))?;
    *buf = &buf[bytes.len()..];
    Ok(bytes)
}

/// Skips a field that was read (and checked) in another pass.
pub(super) fn skip(wire_type: WireType, tag: u32, buf: &mut &[u8]) -> Result<(), ViewError> {
    Ok(skip_field(wire_type, tag, buf, DecodeContext::default())?)
}

/// Runs one of prost's `merge` primitives, naming the field on failure.
pub(super) fn prim(
    r: Result<(), prost::DecodeError>,
    message: &'static str,
    field: &'static str,
) -> Result<(), ViewError> {
    r.map_err(|e| ViewError::Wire(e).at(message, field))
}

/// An attribute's value as sent (`AnyValue`'s oneof), before it is made
/// label text.
#[derive(Debug, Clone, Default)]
pub(super) enum Attr<'a> {
    /// No value, or an empty one: an absent label.
    #[default]
    None,
    Str(&'a str),
    Bool(bool),
    Int(i64),
    Double(f64),
    Bytes(&'a [u8]),
    /// `string_value_strindex`, which means nothing outside profiles.
    Strindex(i32),
    /// Arrays and maps, decoded by prost: only their JSON text is wanted.
    Array(ArrayValue),
    Kvlist(KeyValueList),
}

impl<'a> Attr<'a> {
    /// The value as label text ([`super::attrs::value_text`]'s): borrowed
    /// when the body holds it as it is, else made in `arena` through
    /// `scratch`.
    pub(super) fn text(self, arena: &'a Bump, scratch: &mut String) -> Option<&'a str> {
        scratch.clear();
        match self {
            Attr::None => return None,
            Attr::Str(s) => return Some(s),
            Attr::Bool(b) => return Some(if b { "true" } else { "false" }),
            Attr::Int(i) => {
                let _ = write!(scratch, "{i}");
            }
            Attr::Double(d) => {
                let _ = write!(scratch, "{d}");
            }
            Attr::Bytes(b) => {
                for byte in b {
                    let _ = write!(scratch, "{byte:02x}");
                }
            }
            other => {
                let value = match other {
                    Attr::Array(a) => Value::ArrayValue(a),
                    Attr::Kvlist(kv) => Value::KvlistValue(kv),
                    Attr::Strindex(i) => Value::StringValueStrindex(i),
                    _ => return None,
                };
                let any = AnyValue { value: Some(value) };
                *scratch = super::attrs::value_text(Some(&any))?;
            }
        }
        Some(arena.alloc_str(scratch))
    }
}

/// A `KeyValue`: its key and value. A value sent twice is merged, as
/// prost merges a message field given twice.
pub(super) fn key_value<'a>(
    wire_type: WireType,
    buf: &mut &'a [u8],
) -> Result<(&'a str, Attr<'a>), ViewError> {
    let kv = body(wire_type, buf)?;
    let (mut key, mut value) = ("", Attr::None);
    fields(kv, |buf, tag, wire_type| match tag {
        1 => borrow_str(wire_type, buf)
            .map(|s| key = s)
            .map_err(|e| e.at("KeyValue", "key")),
        2 => {
            let any = body(wire_type, buf).map_err(|e| e.at("KeyValue", "value"))?;
            any_value(any, &mut value).map_err(|e| e.at("KeyValue", "value"))
        }
        3 => prim(
            int32::merge(wire_type, &mut 0, buf, DecodeContext::default()),
            "KeyValue",
            "key_strindex",
        ),
        _ => skip(wire_type, tag, buf),
    })?;
    Ok((key, value))
}

/// Merges an `AnyValue`'s fields into `value`: the last member of the
/// oneof given wins, and an array or map given again after itself is
/// merged into it, as prost does.
fn any_value<'a>(any: &'a [u8], value: &mut Attr<'a>) -> Result<(), ViewError> {
    fields(any, |buf, tag, wire_type| {
        let ctx = DecodeContext::default();
        let at = |f| move |e: ViewError| e.at("AnyValue", f);
        match tag {
            1 => *value = Attr::Str(borrow_str(wire_type, buf).map_err(at("string_value"))?),
            2 => {
                let mut b = false;
                prim(
                    pbool::merge(wire_type, &mut b, buf, ctx),
                    "AnyValue",
                    "bool_value",
                )?;
                *value = Attr::Bool(b);
            }
            3 => {
                let mut i = 0;
                prim(
                    int64::merge(wire_type, &mut i, buf, ctx),
                    "AnyValue",
                    "int_value",
                )?;
                *value = Attr::Int(i);
            }
            4 => {
                let mut d = 0.0;
                prim(
                    double::merge(wire_type, &mut d, buf, ctx),
                    "AnyValue",
                    "double_value",
                )?;
                *value = Attr::Double(d);
            }
            5 => {
                let mut a = match std::mem::take(value) {
                    Attr::Array(a) => a,
                    _ => ArrayValue::default(),
                };
                prim(
                    message::merge(wire_type, &mut a, buf, ctx),
                    "AnyValue",
                    "array_value",
                )?;
                *value = Attr::Array(a);
            }
            6 => {
                let mut kv = match std::mem::take(value) {
                    Attr::Kvlist(kv) => kv,
                    _ => KeyValueList::default(),
                };
                prim(
                    message::merge(wire_type, &mut kv, buf, ctx),
                    "AnyValue",
                    "kvlist_value",
                )?;
                *value = Attr::Kvlist(kv);
            }
            7 => *value = Attr::Bytes(body(wire_type, buf).map_err(at("bytes_value"))?),
            8 => {
                let mut i = 0;
                prim(
                    int32::merge(wire_type, &mut i, buf, ctx),
                    "AnyValue",
                    "string_value_strindex",
                )?;
                *value = Attr::Strindex(i);
            }
            _ => skip(wire_type, tag, buf)?,
        }
        Ok(())
    })
}

/// Checks an `InstrumentationScope`, which Tally does not read.
pub(super) fn scope(wire_type: WireType, buf: &mut &[u8]) -> Result<(), ViewError> {
    let scope = body(wire_type, buf)?;
    fields(scope, |buf, tag, wire_type| match tag {
        1 | 2 => borrow_str(wire_type, buf).map(drop),
        3 => key_value(wire_type, buf).map(drop),
        4 => prim(
            uint32::merge(wire_type, &mut 0, buf, DecodeContext::default()),
            "InstrumentationScope",
            "dropped_attributes_count",
        ),
        _ => skip(wire_type, tag, buf),
    })
    .map_err(|e| e.at("ScopeMetrics", "scope"))
}

/// Checks an `EntityRef` of a resource, which Tally does not read (rare:
/// it is decoded by prost).
pub(super) fn entity_ref(wire_type: WireType, buf: &mut &[u8]) -> Result<(), ViewError> {
    let mut e = EntityRef::default();
    prim(
        message::merge(wire_type, &mut e, buf, DecodeContext::default()),
        "Resource",
        "entity_refs",
    )
}

/// Checks an `Exemplar`, which Tally does not read.
pub(super) fn exemplar(wire_type: WireType, buf: &mut &[u8]) -> Result<(), ViewError> {
    let ex = body(wire_type, buf)?;
    fields(ex, |buf, tag, wire_type| {
        let ctx = DecodeContext::default();
        match tag {
            7 => key_value(wire_type, buf).map(drop),
            2 => prim(
                fixed64::merge(wire_type, &mut 0, buf, ctx),
                "Exemplar",
                "time_unix_nano",
            ),
            3 => prim(
                double::merge(wire_type, &mut 0.0, buf, ctx),
                "Exemplar",
                "as_double",
            ),
            6 => prim(
                sfixed64::merge(wire_type, &mut 0, buf, ctx),
                "Exemplar",
                "as_int",
            ),
            4 | 5 => body(wire_type, buf).map(drop),
            _ => skip(wire_type, tag, buf),
        }
    })
    .map_err(|e| e.at("DataPoint", "exemplars"))
}

/// Checks an exponential histogram's `Buckets`, which Tally does not read;
/// `scratch` takes the counts (kept for the next, so no allocation).
pub(super) fn buckets(
    wire_type: WireType,
    buf: &mut &[u8],
    scratch: &mut Vec<u64>,
) -> Result<(), ViewError> {
    let b = body(wire_type, buf)?;
    fields(b, |buf, tag, wire_type| {
        let ctx = DecodeContext::default();
        match tag {
            1 => prim(
                sint32::merge(wire_type, &mut 0, buf, ctx),
                "Buckets",
                "offset",
            ),
            2 => {
                scratch.clear();
                prim(
                    uint64::merge_repeated(wire_type, scratch, buf, ctx),
                    "Buckets",
                    "bucket_counts",
                )
            }
            _ => skip(wire_type, tag, buf),
        }
    })
}
