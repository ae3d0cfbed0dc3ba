//! The ingest path from the wire: random bytes decoded as a `PushRequest`,
//! and structured requests with hostile names, kinds, timestamps and
//! values, through the real `tally.v1.Ingest` service into a real
//! aggregator. Every sample must be accounted for, accepted or rejected,
//! and a refused request must be refused with a documented code.

use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use prost::Message as _;
use tally_proto::v1 as pb;
use tonic::{Code, Request};

use crate::aggregator::{Aggregator, AggregatorConfig};
use crate::grpc::{IngestService, WirePush};
use crate::ingest::{IngestConfig, IngestGate, Ingestor};
use crate::rollup::{RollupConfig, Rollups};

const NAMES: &[&str] = &[
    "db-1",
    "web-01",
    "a",
    "",
    " ",
    "x|y",
    "@all",
    "é",
    "\u{0}",
    "-",
    "node_cpu_seconds_total",
    "m/1",
    "😀",
    "a.b:c",
];

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(NAMES).prop_map(str::to_string),
        1 => any::<String>(),
        1 => (1usize..300).prop_map(|n| "s".repeat(n)),
    ]
}

fn value() -> impl Strategy<Value = f64> {
    prop_oneof![
        3 => -1e6f64..1e6,
        1 => proptest::sample::select(&[
            f64::NAN, f64::INFINITY, f64::NEG_INFINITY, f64::MAX, f64::MIN, 1.7e308,
            -1.7e308, 0.0, -0.0, f64::MIN_POSITIVE,
        ][..]),
        1 => any::<f64>(),
    ]
}

fn timestamp(now_ms: i64) -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => now_ms - 7_200_000..now_ms + 600_000,
        1 => any::<i64>(),
        1 => proptest::sample::select(&[i64::MIN, i64::MAX, 0, -1][..]),
    ]
}

fn series(now_ms: i64) -> impl Strategy<Value = pb::SeriesSamples> {
    (
        name(),
        -1i32..5,
        proptest::collection::vec(timestamp(now_ms), 0..12),
        proptest::collection::vec(value(), 0..12),
        proptest::collection::vec(timestamp(now_ms), 0..3),
    )
        .prop_map(
            |(metric, kind, timestamps_ms, values, start_times_ms)| pb::SeriesSamples {
                labels: Vec::new(),
                metric,
                kind,
                timestamps_ms,
                values,
                start_times_ms,
            },
        )
}

fn request(now_ms: i64) -> impl Strategy<Value = pb::PushRequest> {
    let source = (
        name(),
        proptest::collection::vec(series(now_ms), 0..6),
        proptest::collection::vec(name(), 0..3),
    )
        .prop_map(|(source, series, groups)| pb::SourceBatch {
            source,
            series,
            groups,
        });
    proptest::collection::vec(source, 0..5).prop_map(|sources| pb::PushRequest { sources })
}

/// Samples a request carries, counting each series' longer array, as the
/// service does when it rejects a series whose arrays disagree.
fn samples_in(req: &pb::PushRequest) -> u64 {
    req.sources
        .iter()
        .flat_map(|s| &s.series)
        .map(|s| s.timestamps_ms.len().max(s.values.len()) as u64)
        .sum()
}

fn service() -> IngestService {
    let limits = IngestConfig {
        max_series: 10_000,
        ..IngestConfig::default()
    };
    let agg = Arc::new(Aggregator::new(&AggregatorConfig { shards: 2 }, &limits));
    let rollups = match Rollups::new(RollupConfig::default()) {
        Ok(r) => Arc::new(r),
        Err(e) => panic!("default rollups: {e}"),
    };
    IngestService::new(Arc::new(Ingestor::new(
        agg,
        rollups,
        Arc::new(IngestGate::default()),
    )))
}

fn runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_current_thread().build() {
        Ok(rt) => rt,
        Err(e) => panic!("runtime: {e}"),
    }
}

/// Pushes `req` and checks the books balance.
fn check(
    rt: &tokio::runtime::Runtime,
    svc: &IngestService,
    req: pb::PushRequest,
) -> Result<(), TestCaseError> {
    push_bytes(rt, svc, req.encode_to_vec(), Some(samples_in(&req)))
}

/// Pushes `bytes`, which hold a request of `sent` samples or (None) do not
/// decode, and checks the books balance.
fn push_bytes(
    rt: &tokio::runtime::Runtime,
    svc: &IngestService,
    bytes: Vec<u8>,
    sent: Option<u64>,
) -> Result<(), TestCaseError> {
    let push = WirePush {
        bytes: bytes.into(),
    };
    match rt.block_on(svc.push(Request::new(push))) {
        Ok(resp) => {
            let r = resp.into_inner();
            prop_assert_eq!(
                Some(r.accepted + r.rejected),
                sent,
                "samples unaccounted for"
            );
            for rej in &r.rejections {
                prop_assert!(rej.reason != 0, "rejection without a reason: {rej:?}");
                prop_assert!(!rej.detail.is_empty(), "rejection without detail: {rej:?}");
            }
        }
        Err(status) if sent.is_none() => prop_assert_eq!(
            status.code(),
            Code::InvalidArgument,
            "undecodable bytes got {:?}",
            status
        ),
        Err(status) => prop_assert!(
            matches!(
                status.code(),
                Code::InvalidArgument | Code::ResourceExhausted | Code::Unavailable
            ),
            "unexpected status {status:?}"
        ),
    }
    Ok(())
}

#[test]
fn fuzz_ingest_structured_requests() {
    let (rt, svc) = (runtime(), service());
    let now_ms = chrono::Utc::now().timestamp_millis();
    let mut runner = TestRunner::new(super::runner());
    if let Err(e) = runner.run(&request(now_ms), |req| check(&rt, &svc, req)) {
        panic!("{e}");
    }
}

#[test]
fn fuzz_ingest_wire_bytes() {
    let (rt, svc) = (runtime(), service());
    let now_ms = chrono::Utc::now().timestamp_millis();
    // Valid encodings with bytes flipped, cut or appended, and plain noise.
    let bytes = prop_oneof![
        (request(now_ms), any::<Vec<(usize, u8)>>()).prop_map(|(req, flips)| {
            let mut b = req.encode_to_vec();
            for (at, x) in flips {
                if !b.is_empty() {
                    let i = at % b.len();
                    b[i] ^= x;
                }
            }
            b
        }),
        any::<Vec<u8>>(),
    ];
    let mut runner = TestRunner::new(super::runner());
    let result = runner.run(&bytes, |b| {
        let sent = pb::PushRequest::decode(b.as_slice())
            .ok()
            .map(|req| samples_in(&req));
        push_bytes(&rt, &svc, b, sent)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn a_message_of_more_series_than_samples_allowed_is_refused_whole() {
    let (rt, svc) = (runtime(), service());
    let limit = IngestConfig::default().max_batch_samples;
    // One source of `limit + 1` empty series: two bytes each on the wire.
    let mut source = Vec::new();
    for _ in 0..=limit {
        source.extend_from_slice(&[0x12, 0x00]);
    }
    let mut bytes = vec![0x0a];
    prost::encoding::encode_varint(source.len() as u64, &mut bytes);
    bytes.extend_from_slice(&source);
    let push = WirePush {
        bytes: bytes.into(),
    };
    match rt.block_on(svc.push(Request::new(push))) {
        Ok(resp) => panic!("taken: {:?}", resp.into_inner()),
        Err(status) => {
            assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
            assert!(
                status.message().contains("ingest.max_batch_samples"),
                "{status:?}"
            );
        }
    }
}
