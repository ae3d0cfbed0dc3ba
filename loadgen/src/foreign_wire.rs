//! OTLP and remote-write requests encoded straight to bytes from the
//! `tally.v1` request a batch would be, as [`crate::wire`] does for
//! `tally.v1` itself.
//!
//! Why: building the generated OTLP messages costs a `KeyValue` with two
//! strings per label per data point, a struct per point and a string per
//! metric, then prost walks the nesting again to size it; remote-write's
//! generated types cost a string per label per series. On a machine the
//! load generator shares with the daemon it measures, that CPU is taken
//! from the daemon. Here each nesting level is encoded into a reused
//! scratch buffer and copied into its parent with its length: no allocation
//! per point or label, and only memory copies for the nesting.
//!
//! The messages are exactly those [`crate::protocol`] builds (the same
//! grouping of a source's runs of one metric into one OTLP metric, the same
//! kinds, the same sorted remote-write labels); the tests decode these bytes
//! with the generated types and compare, over many fleet shapes.

use prost::encoding::{encode_key, encode_varint, WireType};
use tally_proto::v1 as pb;

/// Reused buffers, one per nesting level.
#[derive(Debug, Default)]
pub struct Scratch {
    resource: Vec<u8>,
    scope: Vec<u8>,
    metric: Vec<u8>,
    data: Vec<u8>,
    point: Vec<u8>,
    attrs: Vec<u8>,
    kv: Vec<u8>,
    any: Vec<u8>,
}

fn put_len_delimited(out: &mut Vec<u8>, field: u32, body: &[u8]) {
    encode_key(field, WireType::LengthDelimited, out);
    encode_varint(body.len() as u64, out);
    out.extend_from_slice(body);
}

fn put_str(out: &mut Vec<u8>, field: u32, s: &str) {
    if !s.is_empty() {
        put_len_delimited(out, field, s.as_bytes());
    }
}

fn put_fixed64(out: &mut Vec<u8>, field: u32, v: u64) {
    encode_key(field, WireType::SixtyFourBit, out);
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_varint(out: &mut Vec<u8>, field: u32, v: u64) {
    encode_key(field, WireType::Varint, out);
    encode_varint(v, out);
}

/// An OTLP `KeyValue` with a string value, as field `field` of `out`.
/// `kv` and `any` are scratch space.
fn put_string_kv(
    out: &mut Vec<u8>,
    field: u32,
    pair: (&str, &str),
    kv: &mut Vec<u8>,
    any: &mut Vec<u8>,
) {
    any.clear();
    put_str(any, 1, pair.1);
    kv.clear();
    put_str(kv, 1, pair.0);
    put_len_delimited(kv, 2, any);
    put_len_delimited(out, field, kv);
}

/// `req` as an encoded `ExportMetricsServiceRequest`: what
/// `crate::protocol::otlp(req).encode_to_vec()` decodes to.
pub fn otlp(req: &pb::PushRequest, s: &mut Scratch) -> Vec<u8> {
    let mut out = Vec::new();
    for src in &req.sources {
        s.scope.clear();
        for run in src.series.chunk_by(|a, b| a.metric == b.metric) {
            metric(run, s);
            put_len_delimited(&mut s.scope, 2, &s.metric);
        }
        // Resource: its one attribute, the source.
        s.point.clear();
        let pair = ("service.instance.id", src.source.as_str());
        put_string_kv(&mut s.point, 1, pair, &mut s.kv, &mut s.any);
        s.resource.clear();
        put_len_delimited(&mut s.resource, 1, &s.point);
        put_len_delimited(&mut s.resource, 2, &s.scope);
        put_len_delimited(&mut out, 1, &s.resource);
    }
    out
}

/// One OTLP `Metric` into `s.metric`: a run of series of one metric name,
/// every sample a data point, of the first series' kind.
fn metric(run: &[pb::SeriesSamples], s: &mut Scratch) {
    s.data.clear();
    for series in run {
        s.attrs.clear();
        for l in &series.labels {
            let pair = (l.name.as_str(), l.value.as_str());
            put_string_kv(&mut s.attrs, 7, pair, &mut s.kv, &mut s.any);
        }
        for (t, v) in series.timestamps_ms.iter().zip(&series.values) {
            s.point.clear();
            s.point.extend_from_slice(&s.attrs);
            let nanos = (*t as u64).saturating_mul(1_000_000);
            if nanos != 0 {
                put_fixed64(&mut s.point, 3, nanos);
            }
            put_fixed64(&mut s.point, 4, v.to_bits());
            put_len_delimited(&mut s.data, 1, &s.point);
        }
    }
    let first = &run[0];
    let temporality = match pb::SampleKind::try_from(first.kind) {
        Ok(pb::SampleKind::DeltaCounter) => Some(1),
        Ok(pb::SampleKind::CumulativeCounter) => Some(2),
        _ => None,
    };
    s.metric.clear();
    put_str(&mut s.metric, 1, &first.metric);
    match temporality {
        // Sum: data points, temporality, monotonic.
        Some(t) => {
            put_varint(&mut s.data, 2, t);
            put_varint(&mut s.data, 3, 1);
            put_len_delimited(&mut s.metric, 7, &s.data);
        }
        // Gauge: data points.
        None => put_len_delimited(&mut s.metric, 5, &s.data),
    }
}

/// `req` as an encoded remote-write `WriteRequest` (before snappy): what
/// `crate::protocol::remote_write(req).encode_to_vec()` decodes to.
pub fn remote_write(req: &pb::PushRequest, s: &mut Scratch) -> Vec<u8> {
    let mut out = Vec::new();
    let mut labels: Vec<(&str, &str)> = Vec::new();
    for src in &req.sources {
        for series in &src.series {
            labels.clear();
            labels.push(("__name__", &series.metric));
            labels.push(("instance", &src.source));
            labels.extend(series.labels.iter().map(|l| (&*l.name, &*l.value)));
            labels.sort_by(|a, b| a.0.cmp(b.0));
            s.data.clear();
            for (name, value) in &labels {
                s.kv.clear();
                put_str(&mut s.kv, 1, name);
                put_str(&mut s.kv, 2, value);
                put_len_delimited(&mut s.data, 1, &s.kv);
            }
            for (t, v) in series.timestamps_ms.iter().zip(&series.values) {
                s.point.clear();
                put_fixed64(&mut s.point, 1, v.to_bits());
                put_varint(&mut s.point, 2, *t as u64);
                put_len_delimited(&mut s.data, 2, &s.point);
            }
            put_len_delimited(&mut out, 1, &s.data);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use prost::Message as _;
    use tally_proto::prometheus as rw;

    fn series(
        metric: &str,
        kind: pb::SampleKind,
        labels: &[(&str, &str)],
        n: usize,
    ) -> pb::SeriesSamples {
        pb::SeriesSamples {
            metric: metric.into(),
            kind: kind as i32,
            timestamps_ms: (0..n as i64)
                .map(|i| 1_700_000_000_000 + i * 1000)
                .collect(),
            values: (0..n).map(|i| i as f64 * 1.5 - 2.0).collect(),
            start_times_ms: Vec::new(),
            labels: labels
                .iter()
                .map(|(n, v)| pb::Label {
                    name: (*n).into(),
                    value: (*v).into(),
                })
                .collect(),
        }
    }

    /// Runs of one metric, every kind, labels out of order, several sources,
    /// a zero value and a zero timestamp.
    fn requests() -> Vec<pb::PushRequest> {
        use pb::SampleKind::*;
        let mut zero = series("z", Gauge, &[], 2);
        zero.timestamps_ms[0] = 0;
        zero.values[1] = 0.0;
        let sources = vec![
            pb::SourceBatch {
                source: "h1".into(),
                series: vec![
                    series("g", Gauge, &[("cpu", "0")], 3),
                    series("g", Gauge, &[("cpu", "1"), ("a", "x")], 1),
                    series("c_total", CumulativeCounter, &[("mode", "idle")], 2),
                    series("d", DeltaCounter, &[], 1),
                    series("g", Gauge, &[], 1),
                    zero,
                ],
                groups: Vec::new(),
            },
            pb::SourceBatch {
                source: "h2".into(),
                series: vec![series("d", DeltaCounter, &[("zz", "1"), ("b", "2")], 4)],
                groups: Vec::new(),
            },
        ];
        vec![
            pb::PushRequest {
                sources: Vec::new(),
            },
            pb::PushRequest {
                sources: sources.clone(),
            },
            pb::PushRequest {
                sources: sources[1..].to_vec(),
            },
        ]
    }

    #[test]
    fn otlp_decodes_to_what_the_generated_types_build() {
        let mut s = Scratch::default();
        for req in requests() {
            let bytes = otlp(&req, &mut s);
            let got = ExportMetricsServiceRequest::decode(&bytes[..]).unwrap();
            assert_eq!(got, protocol::otlp(&req), "{req:?}");
        }
    }

    #[test]
    fn remote_write_decodes_to_what_the_generated_types_build() {
        let mut s = Scratch::default();
        for req in requests() {
            let bytes = remote_write(&req, &mut s);
            let got = rw::WriteRequest::decode(&bytes[..]).unwrap();
            assert_eq!(got, protocol::remote_write(&req), "{req:?}");
        }
    }
}
