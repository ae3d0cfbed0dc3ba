//! Heap allocations per sample on each protocol's ingest path, in steady
//! state (every series already known): the front door's parse of the
//! request's bytes (inflated as they arrive), then admission and the
//! aggregator, as `tallyd` runs them. A counting allocator wraps the
//! daemon's own; what a request costs whatever its size (the view's
//! columns, the arena, the label encodings' buffer) is amortised over its
//! 5,000 samples, and anything per sample shows as a whole number.
//!
//! Run with `cargo bench -p tallyd --bench ingest_allocs`. It prints
//! allocations and nanoseconds per sample for each protocol and fails when
//! a protocol allocates more than [`MAX_PER_SAMPLE`] per sample: the goal
//! is none per sample, a handful per request. Figures are in BENCHMARKS.md.

// A benchmark that cannot set up panics: there is nothing to measure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use prost::Message as _;
use tally::aggregator::{Aggregator, AggregatorConfig};
use tally::auth::Grant;
use tally::ingest::builder::Budget;
use tally::ingest::graphite::{parse_line, Batch};
use tally::ingest::influx::{self, InfluxConfig, Precision};
use tally::ingest::otlp::{self, OtlpConfig};
use tally::ingest::remote_write::{Parse, RemoteWriteConfig};
use tally::ingest::view::PushView;
use tally::ingest::{IngestConfig, IngestGate, Ingestor, Protocol};
use tally::metadata::MetadataBook;
use tally::rollup::{RollupConfig, Rollups};
use tally_proto::prometheus as rw;
use tally_proto::v1 as pb;

/// Counts every allocation (and reallocation) the daemon's allocator is
/// asked for.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static INNER: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

// SAFETY: every call is forwarded unchanged to jemalloc, which upholds
// `GlobalAlloc`'s contract; counting touches nothing the caller owns.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { INNER.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { INNER.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { INNER.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { INNER.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Above this many allocations for each sample a request grows by, a
/// protocol allocates per sample (or per series): the bench fails.
const MAX_PER_SAMPLE: f64 = 0.01;

const METRICS: usize = 20;
/// The sizes of request measured, in hosts of [`METRICS`] series, one
/// sample each: 1,000 and 10,000 samples. What grows from one to the
/// other is the cost per sample; what does not is the cost per request.
const SIZES: [usize; 2] = [50, 500];
const WARM: usize = 3;
/// One request a second, all within a minute.
const MEASURED: usize = 50;
const _: () = assert!(WARM + MEASURED < 60);

/// Series `i` of the fleet: (host, metric, cpu, mode).
fn series(i: usize) -> (String, String, String, &'static str) {
    let (h, m) = (i / METRICS, i % METRICS);
    let mode = ["idle", "user", "system", "iowait"][m % 4];
    (
        format!("host-{h:04}"),
        format!("node_metric_{m:02}"),
        (m % 5).to_string(),
        mode,
    )
}

fn value(k: usize, i: usize) -> f64 {
    (k * 1_000_000 + i) as f64 * 0.25
}

/// Request `k` in remote-write, snappy-compressed as Prometheus sends it.
fn remote_write(hosts: usize, k: usize, ts_ms: i64) -> Vec<u8> {
    let timeseries = (0..hosts * METRICS)
        .map(|i| {
            let (host, metric, cpu, mode) = series(i);
            let label = |name: &str, value: &str| rw::Label {
                name: name.into(),
                value: value.into(),
            };
            rw::TimeSeries {
                labels: vec![
                    label("__name__", &metric),
                    label("cpu", &cpu),
                    label("instance", &host),
                    label("mode", mode),
                ],
                samples: vec![rw::Sample {
                    value: value(k, i),
                    timestamp: ts_ms,
                }],
            }
        })
        .collect();
    let raw = rw::WriteRequest {
        timeseries,
        metadata: vec![],
    }
    .encode_to_vec();
    snap::raw::Encoder::new().compress_vec(&raw).unwrap()
}

/// Request `k` in line protocol, one field per line, as Telegraf sends it.
fn line_protocol(hosts: usize, k: usize, ts_ms: i64) -> Vec<u8> {
    let mut body = String::new();
    for i in 0..hosts * METRICS {
        let (host, metric, cpu, mode) = series(i);
        body.push_str(&format!(
            "{metric},host={host},cpu={cpu},mode={mode} value={} {ts_ms}\n",
            value(k, i)
        ));
    }
    body.into_bytes()
}

/// Request `k` as Graphite plaintext lines with 1.1 tags, as collectd
/// and carbon relays send them.
fn graphite(hosts: usize, k: usize, ts_ms: i64) -> Vec<u8> {
    let mut body = String::new();
    for i in 0..hosts * METRICS {
        let (host, metric, cpu, mode) = series(i);
        body.push_str(&format!(
            "{host}.{metric};cpu={cpu};mode={mode} {} {}.{:03}\n",
            value(k, i),
            ts_ms / 1000,
            ts_ms % 1000
        ));
    }
    body.into_bytes()
}

/// Request `k` in OTLP protobuf, one resource per host (its `host.name`
/// the source), one gauge point per metric with two string attributes
/// named as the semantic conventions name a CPU's, as
/// an OpenTelemetry SDK or Collector sends it over HTTP.
fn otlp_protobuf(hosts: usize, k: usize, ts_ms: i64) -> Vec<u8> {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::metrics::v1::{
        metric::Data, number_data_point, Gauge, Metric, NumberDataPoint, ResourceMetrics,
        ScopeMetrics,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;
    let text = |key: &str, value: &str| KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    };
    let resource_metrics = (0..hosts)
        .map(|h| {
            let metrics = (0..METRICS)
                .map(|m| {
                    let i = h * METRICS + m;
                    let (_, metric, cpu, mode) = series(i);
                    let point = NumberDataPoint {
                        // The semantic conventions' names for `system.cpu.time`:
                        // dotted keys, which become labels by a renaming.
                        attributes: vec![text("cpu.logical_number", &cpu), text("cpu.mode", mode)],
                        time_unix_nano: ts_ms as u64 * 1_000_000,
                        value: Some(number_data_point::Value::AsDouble(value(k, i))),
                        ..Default::default()
                    };
                    Metric {
                        name: metric,
                        data: Some(Data::Gauge(Gauge {
                            data_points: vec![point],
                        })),
                        ..Default::default()
                    }
                })
                .collect();
            ResourceMetrics {
                resource: Some(Resource {
                    attributes: vec![
                        text("host.name", &series(h * METRICS).0),
                        text("service.name", "node"),
                    ],
                    ..Default::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    metrics,
                    ..Default::default()
                }],
                ..Default::default()
            }
        })
        .collect();
    ExportMetricsServiceRequest { resource_metrics }.encode_to_vec()
}

/// Request `k` in `tally.v1`.
fn tally(hosts: usize, k: usize, ts_ms: i64) -> Vec<u8> {
    let sources = (0..hosts)
        .map(|h| pb::SourceBatch {
            source: series(h * METRICS).0,
            groups: vec![],
            series: (0..METRICS)
                .map(|m| {
                    let i = h * METRICS + m;
                    let (_, metric, cpu, mode) = series(i);
                    let label = |name: &str, value: &str| pb::Label {
                        name: name.into(),
                        value: value.into(),
                    };
                    pb::SeriesSamples {
                        metric,
                        kind: pb::SampleKind::Gauge as i32,
                        labels: vec![label("cpu", &cpu), label("mode", mode)],
                        timestamps_ms: vec![ts_ms],
                        values: vec![value(k, i)],
                        start_times_ms: vec![],
                    }
                })
                .collect(),
        })
        .collect();
    pb::PushRequest { sources }.encode_to_vec()
}

fn ingestor() -> Ingestor {
    let limits = IngestConfig::default();
    let agg = Arc::new(Aggregator::new(&AggregatorConfig { shards: 8 }, &limits));
    let rollups = Arc::new(Rollups::new(RollupConfig::default()).unwrap());
    Ingestor::new(agg, rollups, Arc::new(IngestGate::default()))
        .with_metadata(Arc::new(MetadataBook::new()))
}

/// One request through a protocol's front door and admission; returns the
/// samples accepted.
type Door = fn(&Ingestor, &[u8]) -> u64;

fn budget(ingest: &Ingestor) -> Budget {
    ingest.budget()
}

fn via_remote_write(ingest: &Ingestor, body: &[u8]) -> u64 {
    let len = snap::raw::decompress_len(body).unwrap();
    // The daemon inflates into a pooled buffer; so does this.
    thread_local!(static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) });
    BUF.with_borrow_mut(|buf| {
        if buf.len() < len {
            buf.resize(len, 0);
        }
        let n = snap::raw::Decoder::new()
            .decompress(body, &mut buf[..len])
            .unwrap();
        let cfg = RemoteWriteConfig::default();
        let known = |s: &str, m: &str, l: &[(&str, &str)]| ingest.known_kind(s, m, l);
        let parse = Parse {
            cfg: &cfg,
            book: ingest.metadata(),
            cap: ingest.limits().max_rejections_reported,
            budget: budget(ingest),
            known: &known,
        };
        let (view, refused) = parse.view(&buf[..n]).unwrap();
        admit(ingest, &view, Protocol::RemoteWrite, refused)
    })
}

fn via_line_protocol(ingest: &Ingestor, body: &[u8]) -> u64 {
    let arena = bumpalo::Bump::new();
    let cfg = InfluxConfig::default();
    let r = influx::convert(
        body,
        &arena,
        Precision::Milliseconds,
        0,
        &cfg,
        ingest.limits().max_rejections_reported,
        budget(ingest),
    )
    .unwrap();
    admit(ingest, &r.view, Protocol::InfluxV1, r.refused)
}

fn via_graphite(ingest: &Ingestor, body: &[u8]) -> u64 {
    // A connection keeps its batch's buffers from one batch to the next;
    // so does this.
    thread_local!(static BATCH: std::cell::RefCell<Option<Batch>> = const { std::cell::RefCell::new(None) });
    BATCH.with_borrow_mut(|batch| {
        let batch = batch.get_or_insert_with(|| Batch::new(1, budget(ingest)));
        for line in body.split(|&c| c == b'\n').filter(|l| !l.is_empty()) {
            batch.push(&parse_line(line).unwrap(), 0).unwrap();
        }
        let accepted = admit(
            ingest,
            &batch.view(),
            Protocol::Graphite,
            Default::default(),
        );
        batch.clear();
        accepted
    })
}

fn via_otlp(ingest: &Ingestor, body: &[u8]) -> u64 {
    // The daemon makes an arena per request; so does this.
    let arena = bumpalo::Bump::new();
    let cfg = OtlpConfig::default();
    let cap = ingest.limits().max_rejections_reported;
    let r = otlp::parse(body, &arena, &cfg, cap, budget(ingest)).unwrap();
    admit(ingest, &r.view, Protocol::OtlpHttp, r.refused)
}

fn via_tally(ingest: &Ingestor, body: &[u8]) -> u64 {
    let view = PushView::decode(body, usize::MAX).unwrap();
    admit(ingest, &view, Protocol::TallyPush, Default::default())
}

fn admit(
    ingest: &Ingestor,
    view: &PushView<'_>,
    protocol: Protocol,
    refused: tally::aggregator::IngestOutcome,
) -> u64 {
    let out = RUNTIME
        .with(|rt| rt.block_on(ingest.ingest_read(view, &Grant::open(), protocol, refused)))
        .unwrap();
    assert_eq!(out.rejected, 0, "{:?}", out.rejections.first());
    out.accepted
}

thread_local! {
    /// Made once, in the warm-up, as the daemon's runtime is.
    static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
}

/// Renders a protocol's request `k` of `hosts` hosts at `ts_ms`.
type Render = fn(usize, usize, i64) -> Vec<u8>;

/// Allocations per request and nanoseconds per sample over [`MEASURED`]
/// requests of `hosts` hosts, after [`WARM`] that make every series known.
fn measure(render: Render, door: Door, hosts: usize) -> (f64, f64) {
    // Every request within one minute: a minute's first sample makes the
    // series' slot for it, which belongs to the minute, not the request
    // (with no flush here to drain them, slots would pile up besides).
    let minute = chrono::Utc::now().timestamp_millis() / 60_000 - 2;
    let start = minute * 60_000;
    let ingest = ingestor();
    let bodies: Vec<Vec<u8>> = (0..WARM + MEASURED)
        .map(|k| render(hosts, k, start + k as i64 * 1000))
        .collect();
    let series = (hosts * METRICS) as u64;
    for body in &bodies[..WARM] {
        assert_eq!(door(&ingest, body), series);
    }
    let before = ALLOCS.load(Ordering::Relaxed);
    let t = Instant::now();
    for body in &bodies[WARM..] {
        assert_eq!(door(&ingest, body), series);
    }
    let elapsed = t.elapsed();
    let allocs = ALLOCS.load(Ordering::Relaxed) - before;
    (
        allocs as f64 / MEASURED as f64,
        elapsed.as_nanos() as f64 / (MEASURED as u64 * series) as f64,
    )
}

fn main() {
    let protocols: [(&str, Render, Door); 5] = [
        ("tally.v1", tally, via_tally),
        ("otlp", otlp_protobuf, via_otlp),
        ("remote-write", remote_write, via_remote_write),
        ("line protocol", line_protocol, via_line_protocol),
        ("graphite", graphite, via_graphite),
    ];
    let only = std::env::var("PROTOCOL").ok();
    let mut failed = Vec::new();
    let [small, large] = SIZES.map(|h| h * METRICS);
    println!(
        "protocol       allocations per request ({small} / {large} samples)  per added sample  ns/sample ({large})"
    );
    for (name, render, door) in protocols {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let (a_small, _) = measure(render, door, SIZES[0]);
        let (a_large, ns) = measure(render, door, SIZES[1]);
        let per_sample = (a_large - a_small) / (large - small) as f64;
        println!("{name:14} {a_small:21.1} / {a_large:<21.1} {per_sample:16.4} {ns:10.0}");
        if per_sample > MAX_PER_SAMPLE {
            failed.push(name);
        }
    }
    if !failed.is_empty() {
        eprintln!(
            "allocating per sample (more than {MAX_PER_SAMPLE} an allocation for each sample added to a request): {}",
            failed.join(", ")
        );
        std::process::exit(1);
    }
}
