//! The wire: a plan encoded straight to `tally.v1.PushRequest` bytes, and
//! the gRPC codec that sends such bytes and decodes the generated
//! `PushResponse`.
//!
//! Why not build the generated `PushRequest` and let prost encode it? At one
//! sample per series per message that costs three allocations per sample
//! (metric name, two one-element arrays) plus buffer regrowth while
//! encoding: most of the loadgen's CPU, on a machine it shares with the
//! daemon it is measuring. Encoding from the plan allocates once per
//! message, and the bytes are kept for a retry instead of rebuilt.
//!
//! The output is byte for byte what prost produces for the same message
//! built with the generated types ([`WorkerSeries::build`]); the tests check
//! that over many plan shapes, so the two cannot drift apart silently.

use bytes::{BufMut, Bytes};
use prost::encoding::{encode_varint, encoded_len_varint};
use prost::Message as _;
use tally_proto::v1 as pb;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

use crate::batch::{Plan, Timeline, WorkerSeries};
use crate::fleet::Fleet;

/// Field keys (field number << 3 | wire type 2 = length-delimited, 0 = varint).
const PUSH_SOURCES: u8 = 1 << 3 | 2;
const SOURCE_NAME: u8 = 1 << 3 | 2;
const SOURCE_SERIES: u8 = 2 << 3 | 2;
const SERIES_METRIC: u8 = 1 << 3 | 2;
const SERIES_KIND: u8 = 2 << 3;
const SERIES_TIMESTAMPS: u8 = 3 << 3 | 2;
const SERIES_VALUES: u8 = 4 << 3 | 2;

/// Reusable scratch space, so encoding a message allocates only its output.
#[derive(Debug, Default)]
pub struct Scratch {
    source: Vec<u8>,
    ts: Vec<i64>,
    values: Vec<f64>,
}

fn put_len_delimited(out: &mut Vec<u8>, key: u8, body: &[u8]) {
    out.push(key);
    encode_varint(body.len() as u64, out);
    out.extend_from_slice(body);
}

/// The `PushRequest` of `plan`, encoded.
pub fn encode(
    fleet: &Fleet,
    tl: &Timeline,
    ws: &WorkerSeries,
    plan: &Plan,
    scratch: &mut Scratch,
) -> Bytes {
    let m = ws.metrics;
    let end = plan.first + plan.len;
    // Roughly: names, headers, ≤10 bytes per timestamp, 8 per value.
    let mut out = Vec::with_capacity(plan.len * 24 + plan.samples() as usize * 18 + 64);
    let mut lin = plan.first;
    while lin < end {
        let src = ws.sources[lin / m];
        let src_end = ((lin / m + 1) * m).min(end);
        let body = &mut scratch.source;
        body.clear();
        put_len_delimited(body, SOURCE_NAME, fleet.source_name(src).as_bytes());
        // Every metric of a source shares the source's timestamps.
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
            let metric = l % m;
            let name = fleet.metric_name(metric).as_bytes();
            let kind = fleet.kind(metric).proto() as i32 as u64;
            scratch.values.clear();
            scratch
                .values
                .extend(plan.tick_range().map(|k| fleet.value(src, metric, k)));
            let n = scratch.values.len();
            let mut series_len = 1 + encoded_len_varint(name.len() as u64) + name.len();
            series_len += 1 + encoded_len_varint(kind);
            if n > 0 {
                series_len += 1 + encoded_len_varint(ts_len as u64) + ts_len;
                series_len += 1 + encoded_len_varint(8 * n as u64) + 8 * n;
            }
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
        }
        put_len_delimited(&mut out, PUSH_SOURCES, body);
        lin = src_end;
    }
    Bytes::from(out)
}

/// Sends pre-encoded `PushRequest` bytes; decodes `PushResponse`.
#[derive(Debug, Clone, Copy, Default)]
pub struct PushCodec;

#[derive(Debug, Clone, Copy, Default)]
pub struct RawEncoder;

#[derive(Debug, Clone, Copy, Default)]
pub struct ResponseDecoder;

impl Codec for PushCodec {
    type Encode = Bytes;
    type Decode = pb::PushResponse;
    type Encoder = RawEncoder;
    type Decoder = ResponseDecoder;

    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }

    fn decoder(&mut self) -> ResponseDecoder {
        ResponseDecoder
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

impl Decoder for ResponseDecoder {
    type Item = pb::PushResponse;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<pb::PushResponse>, Status> {
        pb::PushResponse::decode(buf)
            .map(Some)
            .map_err(|e| Status::internal(format!("undecodable PushResponse: {e}")))
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

    #[test]
    fn encoding_matches_the_generated_types_byte_for_byte() {
        for (sources, metrics, workers) in [(1, 1, 1), (5, 3, 2), (7, 11, 3), (130, 2, 1)] {
            let fleet = Fleet::new(FleetSpec {
                sources,
                metrics,
                seed: 9,
                kinds: "gauge=3,delta=1,cumulative=2".parse().unwrap(),
                source_prefix: "host.example:".into(),
                reset_every: 7,
            })
            .unwrap();
            // Negative timestamps take ten-byte varints; exercise those too.
            for start_ms in [1_795_000_000_000, -5_000] {
                let tl = Timeline {
                    start_ms,
                    rate: 3.0,
                    ticks: 40,
                    sources,
                };
                let mut scratch = Scratch::default();
                for ws in WorkerSeries::partition(sources, metrics, workers) {
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
                        let ours = encode(&fleet, &tl, &ws, &plan, &mut scratch);
                        let reference = ws.build(&fleet, &tl, &plan).encode_to_vec();
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
