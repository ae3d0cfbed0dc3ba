//! The wire: a plan encoded straight to `tally.v1.PushRequest` bytes, and
//! the gRPC codec that sends such bytes and decodes the generated
//! `PushResponse`.
//!
//! Why not build the generated `PushRequest` and let prost encode it? At one
//! sample per series per message that costs three allocations per sample
//! (metric name, two one-element arrays) plus buffer regrowth while
//! encoding: most of the loadgen's CPU, on a machine it shares with the
//! daemon it is measuring. Encoding from the plan allocates once per
//! message, and the bytes are kept for a retry instead of rebuilt. A label
//! set's fields are the same in every message, so they are encoded once per
//! set and copied.
//!
//! The output is byte for byte what prost produces for the same message
//! built with the generated types ([`WorkerSeries::build`]); the tests check
//! that over many plan shapes, so the two cannot drift apart silently.

use std::marker::PhantomData;

use bytes::{BufMut, Bytes};
use prost::encoding::{encode_varint, encoded_len_varint};
use tally_proto::keys::{
    LABEL_NAME, LABEL_VALUE, PUSH_SOURCES, SERIES_KIND, SERIES_LABELS, SERIES_METRIC,
    SERIES_TIMESTAMPS, SERIES_VALUES, SOURCE_NAME, SOURCE_SERIES,
};
use tally_proto::v1 as pb;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

use crate::batch::{Plan, Timeline, WorkerSeries};
use crate::fleet::Fleet;

/// Reusable scratch space, so encoding a message allocates only its output,
/// and the label sets' fields, encoded once.
#[derive(Debug)]
pub struct Scratch {
    source: Vec<u8>,
    ts: Vec<i64>,
    values: Vec<f64>,
    /// Every set's `SeriesSamples.labels` fields back to back; set `k`'s
    /// are `label_fields[label_ends[k - 1]..label_ends[k]]`.
    label_fields: Vec<u8>,
    label_ends: Vec<usize>,
}

impl Scratch {
    pub fn new(fleet: &Fleet) -> Scratch {
        let spec = fleet.labels();
        let mut label_fields = Vec::new();
        let mut label_ends = Vec::with_capacity(fleet.label_sets());
        let mut label = Vec::new();
        for set in 0..fleet.label_sets() {
            for (name, value) in spec.pairs(set) {
                label.clear();
                put_string(&mut label, LABEL_NAME, name);
                put_string(&mut label, LABEL_VALUE, &value);
                put_len_delimited(&mut label_fields, SERIES_LABELS, &label);
            }
            label_ends.push(label_fields.len());
        }
        Scratch {
            source: Vec::new(),
            ts: Vec::new(),
            values: Vec::new(),
            label_fields,
            label_ends,
        }
    }

    /// The encoded `labels` fields of label set `set`.
    fn labels(&self, set: usize) -> &[u8] {
        let start = set.checked_sub(1).map_or(0, |k| self.label_ends[k]);
        &self.label_fields[start..self.label_ends[set]]
    }
}

fn put_len_delimited(out: &mut Vec<u8>, key: u8, body: &[u8]) {
    out.push(key);
    encode_varint(body.len() as u64, out);
    out.extend_from_slice(body);
}

/// A proto3 string field: left out when empty, as prost does.
fn put_string(out: &mut Vec<u8>, key: u8, s: &str) {
    if !s.is_empty() {
        put_len_delimited(out, key, s.as_bytes());
    }
}

/// The `PushRequest` of `plan`, encoded.
pub fn encode(
    fleet: &Fleet,
    tl: &Timeline,
    ws: &WorkerSeries,
    plan: &Plan,
    scratch: &mut Scratch,
) -> Bytes {
    let m = ws.per_source;
    let end = plan.first + plan.len;
    // Roughly: names, headers, labels, ≤10 bytes per timestamp, 8 per value.
    let labels = scratch.label_fields.len() / scratch.label_ends.len().max(1);
    let mut out = Vec::with_capacity(plan.len * (24 + labels) + plan.samples() as usize * 18 + 64);
    let mut body = std::mem::take(&mut scratch.source);
    let mut lin = plan.first;
    while lin < end {
        let src = ws.sources[lin / m];
        let src_end = ((lin / m + 1) * m).min(end);
        body.clear();
        put_len_delimited(&mut body, SOURCE_NAME, fleet.source_name(src).as_bytes());
        // Every series of a source shares the source's timestamps.
        scratch.ts.clear();
        scratch
            .ts
            .extend(plan.tick_range().map(|k| tl.ts_ms(src, k)));
        let ts_len: usize = scratch
            .ts
            .iter()
            .map(|&t| encoded_len_varint(t as u64))
            .sum();
        for l in lin..src_end {
            put_series(&mut body, fleet, plan, scratch, (src, l % m), ts_len);
        }
        put_len_delimited(&mut out, PUSH_SOURCES, &body);
        lin = src_end;
    }
    scratch.source = body;
    Bytes::from(out)
}

/// One `SeriesSamples` of series `j` of source `src` into its source's
/// body; `scratch.ts` holds the source's timestamps, `ts_len` their size.
fn put_series(
    body: &mut Vec<u8>,
    fleet: &Fleet,
    plan: &Plan,
    scratch: &mut Scratch,
    (src, j): (usize, usize),
    ts_len: usize,
) {
    let (metric, set) = fleet.column(j);
    let name = fleet.metric_name(metric).as_bytes();
    let kind = fleet.kind(metric).proto() as i32 as u64;
    scratch.values.clear();
    scratch
        .values
        .extend(plan.tick_range().map(|k| fleet.value(src, j, k)));
    let labels = scratch.labels(set);
    let n = scratch.values.len();
    let mut series_len = 1 + encoded_len_varint(name.len() as u64) + name.len();
    series_len += 1 + encoded_len_varint(kind);
    if n > 0 {
        series_len += 1 + encoded_len_varint(ts_len as u64) + ts_len;
        series_len += 1 + encoded_len_varint(8 * n as u64) + 8 * n;
    }
    series_len += labels.len();
    body.push(SOURCE_SERIES);
    encode_varint(series_len as u64, body);
    put_len_delimited(body, SERIES_METRIC, name);
    body.push(SERIES_KIND);
    encode_varint(kind, body);
    if n > 0 {
        body.push(SERIES_TIMESTAMPS);
        encode_varint(ts_len as u64, body);
        for &t in &scratch.ts {
            // int64 is a plain varint of the two's complement.
            encode_varint(t as u64, body);
        }
        body.push(SERIES_VALUES);
        encode_varint(8 * n as u64, body);
        for &v in &scratch.values {
            body.put_f64_le(v);
        }
    }
    body.extend_from_slice(labels);
}

/// Sends pre-encoded `PushRequest` bytes; decodes `PushResponse`.
/// Sends pre-encoded bytes and decodes the reply as `R`.
#[derive(Debug, Clone, Copy)]
pub struct RawCodec<R>(PhantomData<fn() -> R>);

impl<R> Default for RawCodec<R> {
    fn default() -> Self {
        RawCodec(PhantomData)
    }
}

/// `tally.v1` `Push` and `PushStream`.
pub type PushCodec = RawCodec<pb::PushResponse>;

#[derive(Debug, Clone, Copy, Default)]
pub struct RawEncoder;

#[derive(Debug, Clone, Copy)]
pub struct ResponseDecoder<R>(PhantomData<fn() -> R>);

impl<R: prost::Message + Default + Send + 'static> Codec for RawCodec<R> {
    type Encode = Bytes;
    type Decode = R;
    type Encoder = RawEncoder;
    type Decoder = ResponseDecoder<R>;

    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }

    fn decoder(&mut self) -> ResponseDecoder<R> {
        ResponseDecoder(PhantomData)
    }
}

impl Encoder for RawEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        // One reservation, one copy: no regrowth however big the batch.
        buf.reserve(item.len());
        buf.put_slice(&item);
        Ok(())
    }
}

impl<R: prost::Message + Default> Decoder for ResponseDecoder<R> {
    type Item = R;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<R>, Status> {
        R::decode(buf)
            .map(Some)
            .map_err(|e| Status::internal(format!("undecodable reply: {e}")))
    }
}

/// The gRPC paths of the two ingest calls.
pub fn push_path() -> tonic::codegen::http::uri::PathAndQuery {
    path("Push")
}

pub fn push_stream_path() -> tonic::codegen::http::uri::PathAndQuery {
    path("PushStream")
}

fn path(method: &str) -> tonic::codegen::http::uri::PathAndQuery {
    let p = format!("/{}/{method}", pb::ingest_server::SERVICE_NAME);
    // A constant service name and method: always a valid path.
    tonic::codegen::http::uri::PathAndQuery::try_from(p)
        .unwrap_or_else(|_| tonic::codegen::http::uri::PathAndQuery::from_static("/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::FleetSpec;
    use prost::Message as _;

    #[test]
    fn encoding_matches_the_generated_types_byte_for_byte() {
        // A 128-byte name makes a Label longer than 127 bytes: two-byte lengths.
        let long = format!("{}=2", "l".repeat(128));
        for labels in ["", "cpu=2,mode=3", "zone=1,az=2", long.as_str()] {
            for (sources, metrics) in [(1, 1), (5, 3), (7, 11), (130, 2)] {
                let fleet = Fleet::new(FleetSpec {
                    sources,
                    metrics,
                    seed: 9,
                    kinds: "gauge=3,delta=1,cumulative=2".parse().unwrap(),
                    source_prefix: "host.example:".into(),
                    reset_every: 7,
                    labels: labels.parse().unwrap(),
                })
                .unwrap();
                assert_matches_prost(&fleet);
            }
        }
    }

    /// Plans of several shapes, at positive and negative times, for every
    /// worker of a few partitions of `fleet`.
    fn assert_matches_prost(fleet: &Fleet) {
        let sources = fleet.sources();
        // Negative timestamps take ten-byte varints; exercise those too.
        for start_ms in [1_795_000_000_000, -5_000] {
            let tl = Timeline {
                start_ms,
                rate: 3.0,
                ticks: 40,
                sources,
            };
            let mut scratch = Scratch::new(fleet);
            for workers in [1, 2, 3] {
                for ws in WorkerSeries::partition(sources, fleet.per_source(), workers) {
                    if ws.len() == 0 {
                        continue;
                    }
                    for (first, len, tick0, ticks) in [
                        (0, ws.len(), 0, 1),
                        (0, 1, 5, 3),
                        (ws.len() / 2, ws.len() - ws.len() / 2, 39, 1),
                    ] {
                        if len == 0 {
                            continue;
                        }
                        let plan = Plan {
                            tick0,
                            ticks,
                            first,
                            len,
                        };
                        let ours = encode(fleet, &tl, &ws, &plan, &mut scratch);
                        let reference = ws.build(fleet, &tl, &plan).encode_to_vec();
                        assert_eq!(ours.as_ref(), reference.as_slice(), "{plan:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn paths_name_the_ingest_service() {
        assert_eq!(push_path().as_str(), "/tally.v1.Ingest/Push");
        assert_eq!(push_stream_path().as_str(), "/tally.v1.Ingest/PushStream");
    }
}
