//! OTLP attributes as Tally labels: names sanitised to the label charset,
//! values stringified.
//!
//! Names follow the convention of Prometheus' OTLP translation: every
//! character outside `[A-Za-z0-9_]` becomes `_` (`http.method` →
//! `http_method`), a name starting with a digit gets a `key_` prefix, and
//! attributes whose names collide after that have their values joined with
//! `;` in the order they were sent. Two rules are Tally's own: a name
//! starting with `__` (reserved) also gets `key_`, and the two names Tally
//! gives labels of its own, `source` and `tally_metric`, become
//! `exported_source` and `exported_tally_metric`.

use std::fmt::Write as _;

use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
use tally_proto::v1 as pb;

/// A label name from an attribute key.
pub fn label_name(key: &str) -> String {
    crate::labels::label_name_from_key(key)
}

/// An attribute value as label text; `None` when it has no value (an
/// absent label). Arrays and maps are written as JSON, bytes as hex.
pub fn value_text(v: Option<&AnyValue>) -> Option<String> {
    let text = match v?.value.as_ref()? {
        Value::StringValue(s) => s.clone(),
        Value::BoolValue(b) => b.to_string(),
        Value::IntValue(i) => i.to_string(),
        Value::DoubleValue(d) => d.to_string(),
        Value::BytesValue(b) => b.iter().fold(String::new(), |mut s, byte| {
            let _ = write!(s, "{byte:02x}");
            s
        }),
        other => json(other).to_string(),
    };
    Some(text)
}

fn json(v: &Value) -> serde_json::Value {
    use serde_json::Value as J;
    let inner = |a: &AnyValue| a.value.as_ref().map_or(J::Null, json);
    match v {
        Value::StringValue(s) => J::String(s.clone()),
        Value::BoolValue(b) => J::Bool(*b),
        Value::IntValue(i) => J::from(*i),
        Value::DoubleValue(d) => J::from(*d),
        Value::BytesValue(b) => J::String(
            value_text(Some(&AnyValue {
                value: Some(Value::BytesValue(b.clone())),
            }))
            .unwrap_or_default(),
        ),
        Value::ArrayValue(a) => J::Array(a.values.iter().map(inner).collect()),
        Value::KvlistValue(kv) => J::Object(
            kv.values
                .iter()
                .map(|e| (e.key.clone(), e.value.as_ref().map_or(J::Null, inner)))
                .collect(),
        ),
        _ => J::Null,
    }
}

/// The labels of a point: its attributes, then the chosen resource
/// attributes (a point's own attribute wins over a resource one of the
/// same name). Collisions after sanitising join their values with `;`.
pub fn labels(point: &[KeyValue], resource: &[pb::Label]) -> Vec<pb::Label> {
    let mut out: Vec<pb::Label> = Vec::with_capacity(point.len() + resource.len());
    for kv in point {
        let Some(value) = value_text(kv.value.as_ref()) else {
            continue;
        };
        let name = label_name(&kv.key);
        match out.iter_mut().find(|l| l.name == name) {
            Some(l) => {
                l.value.push(';');
                l.value.push_str(&value);
            }
            None => out.push(pb::Label { name, value }),
        }
    }
    for r in resource {
        if !out.iter().any(|l| l.name == r.name) {
            out.push(r.clone());
        }
    }
    out
}

/// The first of `keys` present among `attrs` with a non-empty value.
pub fn first_present<'a>(attrs: &'a [KeyValue], keys: &[String]) -> Option<(&'a str, String)> {
    keys.iter().find_map(|k| {
        let kv = attrs.iter().find(|kv| &kv.key == k)?;
        let v = value_text(kv.value.as_ref()).filter(|v| !v.is_empty())?;
        Some((kv.key.as_str(), v))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(k: &str, v: Value) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: Some(AnyValue { value: Some(v) }),
            ..Default::default()
        }
    }

    #[test]
    fn names_are_sanitised_like_prometheus_translation() {
        assert_eq!(label_name("http.method"), "http_method");
        assert_eq!(label_name("k8s.pod-name/x"), "k8s_pod_name_x");
        assert_eq!(label_name("0day"), "key_0day");
        assert_eq!(label_name("__meta"), "key___meta");
        assert_eq!(label_name("source"), "exported_source");
        assert_eq!(label_name("tally_metric"), "exported_tally_metric");
        assert_eq!(label_name("tally.metric"), "exported_tally_metric");
        assert_eq!(label_name("é"), "_");
    }

    #[test]
    fn values_are_stringified() {
        let t = |v| value_text(Some(&AnyValue { value: Some(v) })).unwrap();
        assert_eq!(t(Value::IntValue(-3)), "-3");
        assert_eq!(t(Value::BoolValue(true)), "true");
        assert_eq!(t(Value::DoubleValue(0.5)), "0.5");
        assert_eq!(t(Value::BytesValue(vec![0xab, 1])), "ab01");
        let arr = Value::ArrayValue(opentelemetry_proto::tonic::common::v1::ArrayValue {
            values: vec![AnyValue {
                value: Some(Value::StringValue("a".into())),
            }],
        });
        assert_eq!(t(arr), "[\"a\"]");
        assert_eq!(value_text(Some(&AnyValue { value: None })), None);
    }

    #[test]
    fn colliding_names_join_and_point_attributes_win() {
        let point = [
            kv("a.b", Value::StringValue("1".into())),
            kv("a_b", Value::StringValue("2".into())),
            kv("host", Value::StringValue("p".into())),
        ];
        let resource = [
            pb::Label {
                name: "host".into(),
                value: "r".into(),
            },
            pb::Label {
                name: "zone".into(),
                value: "z".into(),
            },
        ];
        let got: Vec<(String, String)> = labels(&point, &resource)
            .into_iter()
            .map(|l| (l.name, l.value))
            .collect();
        assert_eq!(
            got,
            [("a_b", "1;2"), ("host", "p"), ("zone", "z")]
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
        );
    }

    #[test]
    fn first_present_skips_empty_values() {
        let attrs = [
            kv("host.name", Value::StringValue(String::new())),
            kv("service.name", Value::StringValue("api".into())),
        ];
        let keys = ["service.instance.id", "host.name", "service.name"].map(String::from);
        assert_eq!(
            first_present(&attrs, &keys),
            Some(("service.name", "api".to_owned()))
        );
    }
}
