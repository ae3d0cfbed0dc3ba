//! The gauges and sums every OTLP exporter writes, read in one pass each:
//! a `Metric` of a name, perhaps a description and a unit, then one gauge
//! or sum whose points come before its temporality and monotonicity; and
//! a `NumberDataPoint` of one-byte keys for its times, its value, its flags
//! and attributes that are a key and a string, in any order. Anything else
//! (metadata, a histogram, a data field given twice, an exemplar, an
//! attribute of another type or of an unusual layout, a field Tally does
//! not know, a varint prost would refuse, a string that is not UTF-8) is
//! left to the exact reader in the parent module, which reads the metric
//! or the point again from its start as prost does and names what is
//! wrong.
//!
//! Why: the exact reader walks each field through a closure, a metric's
//! data twice (for its shape, then its points), and each attribute through
//! three nested walks (the `KeyValue`, its `AnyValue`, the string), each
//! with prost's generic primitives. W1 sends a metric per point: the walks
//! were most of what the OTLP parser spent. The same layout rule as
//! `tally.v1`'s fast reader (`ingest/view/fast.rs`), whose primitives this
//! shares.

use super::wire::Attr;
use super::{Point, Reader, Shape, Variant, GATHERED_POINTS};
use crate::ingest::text::TextMemo;
use crate::ingest::view::fast::{after_key, delimited, varint};

/// `Metric`'s fields as keys (field number << 3 | wire type).
const NAME: u8 = 1 << 3 | 2;
const DESCRIPTION: u8 = 2 << 3 | 2;
const UNIT: u8 = 3 << 3 | 2;
const GAUGE: u8 = 5 << 3 | 2;
const SUM: u8 = 7 << 3 | 2;
/// `Gauge`'s and `Sum`'s fields.
const DATA_POINTS: u8 = 1 << 3 | 2;
const TEMPORALITY: u8 = 2 << 3;
const MONOTONIC: u8 = 3 << 3;

/// `NumberDataPoint`'s fields as keys (field number << 3 | wire type).
const START: u8 = 2 << 3 | 1;
const TIME: u8 = 3 << 3 | 1;
const AS_DOUBLE: u8 = 4 << 3 | 1;
const AS_INT: u8 = 6 << 3 | 1;
const ATTRIBUTES: u8 = 7 << 3 | 2;
const FLAGS: u8 = 8 << 3;
/// `KeyValue.key`, `KeyValue.value` and `AnyValue.string_value`.
const KEY: u8 = 1 << 3 | 2;
const VALUE: u8 = 2 << 3 | 2;
const STRING_VALUE: u8 = 1 << 3 | 2;

impl<'a> Reader<'a, '_> {
    /// A gauge or a sum of the usual layout: its name, its type and its
    /// shape, with the places of its points in `self.gathered`. None
    /// leaves it to the exact reader.
    pub(super) fn fast_metric(&mut self, mut m: &'a [u8]) -> Option<(&'a str, Variant, Shape)> {
        let name = self.memo.text(after_key(&mut m, NAME)?)?;
        for key in [DESCRIPTION, UNIT] {
            if let Some(text) = after_key(&mut m, key) {
                self.memo.text(text)?;
            }
        }
        let key = *m.first()?;
        let variant = match key {
            GAUGE => Variant::Gauge,
            SUM => Variant::Sum,
            _ => return None,
        };
        let mut data = after_key(&mut m, key)?;
        if !m.is_empty() {
            return None;
        }
        self.gathered.clear();
        while let Some(point) = after_key(&mut data, DATA_POINTS) {
            if self.gathered.len() == GATHERED_POINTS {
                return None;
            }
            self.gathered.push(point);
        }
        let mut shape = Shape {
            temporality: 0,
            monotonic: false,
        };
        if variant == Variant::Sum {
            // prost reads an `int32` and a `bool` as varints, cut to 32
            // bits and compared with zero. A varint it would refuse is left
            // unread, so `data` is not empty below.
            if let Some(v) = after_varint_key(&mut data, TEMPORALITY) {
                shape.temporality = v as i32;
            }
            if let Some(v) = after_varint_key(&mut data, MONOTONIC) {
                shape.monotonic = v != 0;
            }
        }
        data.is_empty().then_some((name, variant, shape))
    }

    /// A gauge's or a sum's point of the usual layout: its numbers, with
    /// its attributes in `self.attrs`. None leaves it to the exact reader
    /// (which clears what was pushed).
    pub(super) fn fast_number_point(&mut self, mut b: &'a [u8]) -> Option<Point> {
        let mut p = Point::default();
        while let Some((&key, rest)) = b.split_first() {
            b = rest;
            match key {
                START => p.start = fixed64(&mut b)?,
                TIME => p.time = fixed64(&mut b)?,
                AS_DOUBLE => p.value = Some(f64::from_bits(fixed64(&mut b)?)),
                AS_INT => p.value = Some(fixed64(&mut b)? as i64 as f64),
                ATTRIBUTES => {
                    let (kv, rest) = delimited(b)?;
                    let attr = string_attribute(kv, &mut self.memo)?;
                    self.attrs.push(attr);
                    b = rest;
                }
                // prost reads a `uint32` as a varint cut to 32 bits.
                FLAGS => {
                    let (v, n) = varint(b)?;
                    p.flags = v as u32;
                    b = &b[n..];
                }
                _ => return None,
            }
        }
        Some(p)
    }
}

/// The varint field keyed `key` at the front of `b`, with `b` moved past
/// it; None, `b` untouched, if another field is there or prost would
/// refuse the varint.
#[inline(always)]
fn after_varint_key(b: &mut &[u8], key: u8) -> Option<u64> {
    let (&k, rest) = b.split_first()?;
    if k != key {
        return None;
    }
    let (v, n) = varint(rest)?;
    *b = &rest[n..];
    Some(v)
}

/// Eight little-endian bytes at the front of `b`.
#[inline(always)]
fn fixed64(b: &mut &[u8]) -> Option<u64> {
    let (bytes, rest) = b.split_first_chunk::<8>()?;
    *b = rest;
    Some(u64::from_le_bytes(*bytes))
}

/// A `KeyValue` of a key and a string value, each given once.
#[inline(always)]
fn string_attribute<'a>(mut kv: &'a [u8], memo: &mut TextMemo<'a>) -> Option<(&'a str, Attr<'a>)> {
    let key = memo.text(after_key(&mut kv, KEY)?)?;
    let mut any = after_key(&mut kv, VALUE)?;
    let value = memo.text(after_key(&mut any, STRING_VALUE)?)?;
    (kv.is_empty() && any.is_empty()).then_some((key, Attr::Str(value)))
}

#[cfg(test)]
mod tests {
    use super::super::Variant;
    use super::*;
    use crate::ingest::builder::Budget;
    use crate::ingest::otlp::OtlpConfig;
    use bumpalo::Bump;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::metrics::v1::{
        metric, number_data_point, Gauge, Metric, NumberDataPoint, Sum,
    };
    use prost::Message as _;

    fn kv(key: &str, value: any_value::Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(value) }),
            ..Default::default()
        }
    }

    fn string(key: &str, value: &str) -> KeyValue {
        kv(key, any_value::Value::StringValue(value.into()))
    }

    /// A point's numbers and attributes, as text to compare.
    type Read = (String, Vec<String>);

    /// Reads `bytes` with the fast reader and, separately, the exact one.
    fn both(bytes: &[u8]) -> (Option<Read>, Read) {
        let arena = Bump::new();
        let cfg = OtlpConfig::default();
        let mut r = Reader::new(&arena, &cfg, 10, Budget::default());
        let shown = |r: &Reader| r.attrs.iter().map(|a| format!("{a:?}")).collect();
        let fast = r
            .fast_number_point(bytes)
            .map(|p| (format!("{p:?}"), shown(&r)));
        r.attrs.clear();
        let exact = r.exact_point(Variant::Gauge, bytes).expect("valid");
        (fast, (format!("{exact:?}"), shown(&r)))
    }

    #[test]
    fn the_usual_point_reads_as_the_exact_reader_reads_it() {
        let points = [
            NumberDataPoint {
                attributes: vec![string("host", "a"), string("cpu", "")],
                start_time_unix_nano: 7,
                time_unix_nano: 1_700_000_000_000_000_000,
                flags: 1,
                value: Some(number_data_point::Value::AsDouble(-1.5)),
                ..Default::default()
            },
            NumberDataPoint {
                time_unix_nano: 3,
                value: Some(number_data_point::Value::AsInt(-42)),
                ..Default::default()
            },
            NumberDataPoint::default(),
        ];
        for point in points {
            let bytes = point.encode_to_vec();
            let (fast, exact) = both(&bytes);
            assert_eq!(fast.expect("the usual layout"), exact);
        }
    }

    #[test]
    fn unusual_points_are_left_to_the_exact_reader() {
        let with = |attributes: Vec<KeyValue>| NumberDataPoint {
            attributes,
            time_unix_nano: 1,
            ..Default::default()
        };
        let mut unusual: Vec<Vec<u8>> = vec![
            with(vec![kv("n", any_value::Value::IntValue(3))]).encode_to_vec(),
            with(vec![kv("b", any_value::Value::BoolValue(true))]).encode_to_vec(),
            with(vec![KeyValue {
                key: "k".into(),
                ..Default::default()
            }])
            .encode_to_vec(),
            with(vec![string("", "v")]).encode_to_vec(),
        ];
        // An exemplar, an unknown field.
        let exemplar = NumberDataPoint {
            exemplars: vec![Default::default()],
            ..Default::default()
        };
        unusual.push(exemplar.encode_to_vec());
        unusual.push(vec![9 << 3, 1]);
        for bytes in &unusual {
            let (fast, _) = both(bytes);
            assert!(fast.is_none(), "{bytes:?}");
        }
        // Cut short, not UTF-8, a varint past 64 bits: left alone, and the
        // exact reader fails.
        let point = with(vec![string("k", "é")]).encode_to_vec();
        // The attribute's value is its last two bytes before the time.
        let mut not_utf8 = point.clone();
        let at = not_utf8.len() - 9 - 1;
        not_utf8[at] = 0xff;
        let long_flags = [&[FLAGS][..], &[0x80; 9], &[2]].concat();
        let arena = Bump::new();
        let cfg = OtlpConfig::default();
        let mut r = Reader::new(&arena, &cfg, 10, Budget::default());
        for bad in [
            &point[..point.len() - 1],
            &point[..5],
            &not_utf8,
            &long_flags,
        ] {
            assert!(r.fast_number_point(bad).is_none(), "{bad:?}");
            assert!(r.exact_point(Variant::Gauge, bad).is_err(), "{bad:?}");
        }
    }

    fn gauge(points: usize) -> Metric {
        Metric {
            name: "m".into(),
            description: "what".into(),
            unit: "s".into(),
            data: Some(metric::Data::Gauge(Gauge {
                data_points: (0..points)
                    .map(|i| NumberDataPoint {
                        time_unix_nano: i as u64 + 1,
                        ..Default::default()
                    })
                    .collect(),
            })),
            ..Default::default()
        }
    }

    fn sum(temporality: i32, monotonic: bool) -> Metric {
        Metric {
            name: "c".into(),
            data: Some(metric::Data::Sum(Sum {
                data_points: vec![NumberDataPoint::default(); 2],
                aggregation_temporality: temporality,
                is_monotonic: monotonic,
            })),
            ..Default::default()
        }
    }

    #[test]
    fn the_usual_metric_reads_as_the_exact_reader_reads_it() {
        for metric in [
            gauge(0),
            gauge(3),
            sum(1, true),
            sum(2, false),
            sum(-1, true),
        ] {
            let bytes = metric.encode_to_vec();
            let arena = Bump::new();
            let cfg = OtlpConfig::default();
            let mut r = Reader::new(&arena, &cfg, 10, Budget::default());
            let (name, variant, shape) = r.fast_metric(&bytes).expect("the usual layout");
            let fast_points = r.gathered.clone();
            let (exact_name, data) = super::super::metric_fields(&bytes).expect("valid");
            let data = data.expect("a gauge or a sum");
            let (exact_shape, gathered) = r.shape(&bytes, &data).expect("valid");
            assert_eq!((name, variant), (exact_name, data.variant));
            assert_eq!(format!("{shape:?}"), format!("{exact_shape:?}"));
            let points = metric.data.as_ref().map_or(0, |d| match d {
                metric::Data::Gauge(g) => g.data_points.len(),
                metric::Data::Sum(s) => s.data_points.len(),
                _ => 0,
            });
            assert_eq!(fast_points.len(), points);
            if gathered {
                assert_eq!(fast_points, r.gathered);
            }
        }
    }

    #[test]
    fn unusual_metrics_are_left_to_the_exact_reader() {
        let with_metadata = Metric {
            metadata: vec![string("k", "v")],
            ..gauge(1)
        };
        let histogram = Metric {
            name: "h".into(),
            data: Some(metric::Data::Histogram(Default::default())),
            ..Default::default()
        };
        let unnamed = Metric {
            name: String::new(),
            ..gauge(1)
        };
        let twice = [gauge(1).encode_to_vec(), gauge(1).encode_to_vec()].concat();
        // A sum's temporality before its points.
        let mut shape_first = vec![NAME, 1, b'c', SUM, 0];
        let body = [&[TEMPORALITY, 2][..], &[DATA_POINTS, 0]].concat();
        shape_first[4] = body.len() as u8;
        shape_first.extend_from_slice(&body);
        let unit_first = [&[UNIT, 1, b's', NAME, 1, b'm'][..], &[GAUGE, 0]].concat();
        let not_utf8 = [&[NAME, 1, 0xff][..], &[GAUGE, 0]].concat();
        for bytes in [
            with_metadata.encode_to_vec(),
            histogram.encode_to_vec(),
            unnamed.encode_to_vec(),
            twice,
            shape_first,
            unit_first,
            not_utf8,
        ] {
            let arena = Bump::new();
            let cfg = OtlpConfig::default();
            let mut r = Reader::new(&arena, &cfg, 10, Budget::default());
            assert!(r.fast_metric(&bytes).is_none(), "{bytes:?}");
        }
    }
}
