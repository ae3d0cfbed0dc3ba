//! Reading a `tally.v1.PushRequest` off the wire: prost's generated types
//! (an owned string for every name, a vector for every series' numbers)
//! against the borrowed view the ingest path reads, for W2's labelled
//! message and W1's unlabelled one; and a remote-write
//! request and a line-protocol body of W1's shape read into that view; and
//! a read of Graphite plaintext lines of W1's shape gathered into a batch
//! and its view, as a connection does; both text protocols again as the
//! load generator renders W1 (full-precision values, and twenty fields
//! to a line of line protocol); and an OTLP request of the load
//! generator's W1 (a resource per source, a metric per series, one point
//! each) read into the view. Run with `cargo bench -p tallyd
//! --bench decode`; figures are in BENCHMARKS.md.

// A benchmark that cannot set up panics: there is nothing to measure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use prost::Message;
use tally::ingest::builder::Budget;
use tally::ingest::graphite::{self, Batch};
use tally::ingest::influx::{self, InfluxConfig, Precision};
use tally::ingest::otlp::{self, OtlpConfig};
use tally::ingest::remote_write::{Parse, RemoteWriteConfig};
use tally::ingest::view::PushView;
use tally::metadata::MetadataBook;
use tally_proto::prometheus as rw;
use tally_proto::v1 as pb;

// The daemon's allocator: both sides allocate per request, prost also per
// series, and the system allocator's page faults on large buffers would
// dominate what is measured.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// One message as the load generator sends W2: 5,000 series of one sample
/// each, 25 sources × 20 metrics × 10 label sets (`cpu` × `mode`).
fn w2_message() -> Vec<u8> {
    let sources = (0..25)
        .map(|s| pb::SourceBatch {
            source: format!("server-{s:05}"),
            groups: Vec::new(),
            series: (0..20)
                .flat_map(|m| {
                    (0..10).map(move |l| pb::SeriesSamples {
                        metric: format!("node_metric_{m:02}_total"),
                        kind: pb::SampleKind::Gauge as i32,
                        labels: vec![
                            pb::Label {
                                name: "cpu".into(),
                                value: (l / 5).to_string(),
                            },
                            pb::Label {
                                name: "mode".into(),
                                value: ["idle", "user", "system", "iowait", "irq"][l % 5].into(),
                            },
                        ],
                        timestamps_ms: vec![1_795_305_600_000 + l as i64],
                        values: vec![(s * 200 + m * 10 + l) as f64 * 1.5],
                        start_times_ms: Vec::new(),
                    })
                })
                .collect(),
        })
        .collect();
    pb::PushRequest { sources }.encode_to_vec()
}

/// One message as the load generator sends W1: 5,000 unlabelled series
/// of one sample each, 250 sources × 20 metrics, gauges 2 : delta 1 :
/// cumulative 1.
fn w1_message() -> Vec<u8> {
    let kinds = [
        pb::SampleKind::Gauge,
        pb::SampleKind::Gauge,
        pb::SampleKind::DeltaCounter,
        pb::SampleKind::CumulativeCounter,
    ];
    let sources = (0..250)
        .map(|s| pb::SourceBatch {
            source: format!("src-{s:04}"),
            groups: Vec::new(),
            series: (0..20)
                .map(|m| pb::SeriesSamples {
                    metric: format!("m_{:02}", m + 1),
                    kind: kinds[m % 4] as i32,
                    labels: Vec::new(),
                    timestamps_ms: vec![1_795_305_600_000 + m as i64],
                    values: vec![(s * 20 + m) as f64 * 0.37],
                    start_times_ms: Vec::new(),
                })
                .collect(),
        })
        .collect();
    pb::PushRequest { sources }.encode_to_vec()
}

/// One remote-write request as the peers kit's W1 sender renders it
/// (decompressed): 5,000 series of one sample, labels `__name__="w1"`,
/// `host` and `metric`, in name order.
fn w1_remote_write() -> Vec<u8> {
    let label = |name: &str, value: String| rw::Label {
        name: name.into(),
        value,
    };
    let timeseries = (0..5_000)
        .map(|i| rw::TimeSeries {
            labels: vec![
                label("__name__", "w1".into()),
                label("host", format!("host-{:04}", i / 20)),
                label("metric", format!("metric_{:02}", i % 20)),
            ],
            samples: vec![rw::Sample {
                value: i as f64 * 0.5,
                timestamp: 1_795_305_600_000,
            }],
        })
        .collect();
    rw::WriteRequest {
        timeseries,
        metadata: vec![],
    }
    .encode_to_vec()
}

/// One line-protocol body as the peers kit's W1 sender renders it: 5,000
/// lines of measurement `w1`, tags `host` and `metric`, one field `value`
/// with two decimals, and a timestamp in seconds.
fn w1_line_protocol() -> Vec<u8> {
    let mut body = String::new();
    for i in 0..5_000 {
        body.push_str(&format!(
            "w1,host=host-{:04},metric=cpu.m{:02} value={}.{:02} 1795305600\n",
            i / 20,
            i % 20,
            i % 97,
            i % 100
        ));
    }
    body.into_bytes()
}

/// 5,000 Graphite plaintext lines as the peers kit's W1 sender renders
/// them: `w1.<host>.<metric> <value> <seconds>`, metrics with a dot of
/// their own (`cpu.user`), values with two decimals.
fn w1_graphite() -> Vec<u8> {
    let metrics = ["cpu.user", "cpu.system", "mem.used", "net.rx_bytes"];
    let mut body = String::new();
    for i in 0..5_000 {
        body.push_str(&format!(
            "w1.host-{:04}.{}{:02} {}.{:02} 1795305600\n",
            i / 20,
            metrics[i % 4],
            i % 20,
            i % 97,
            i % 100
        ));
    }
    body.into_bytes()
}

/// A gauge's value as the load generator writes it: a fraction printed at
/// full precision, sixteen or seventeen digits.
fn full_precision(i: usize) -> f64 {
    (i as f64 * 0.618_033_988_749_895).fract() * 1000.0 - 100.0
}

/// One line-protocol body as the load generator renders W1 for `influx`
/// (5,000 samples): a line per source and tick with its twenty gauges as
/// fields, at millisecond precision.
fn w1_full_line_protocol() -> Vec<u8> {
    let mut body = String::new();
    for s in 0..250 {
        body.push_str(&format!("m,host=src-{s:04} "));
        let fields: Vec<String> = (1..=20)
            .map(|m| format!("{m:02}={}", full_precision(s * 20 + m)))
            .collect();
        body.push_str(&fields.join(","));
        body.push_str(" 1795305600123\n");
    }
    body.into_bytes()
}

/// 5,000 Graphite plaintext lines as the load generator renders W1 for
/// `graphite`: `<source>.<metric> <value> <seconds>.<milliseconds>`.
fn w1_full_graphite() -> Vec<u8> {
    let mut body = String::new();
    for i in 0..5_000 {
        body.push_str(&format!(
            "src-{:04}.m_{:02} {} 1795305600.123\n",
            i / 20,
            i % 20 + 1,
            full_precision(i)
        ));
    }
    body.into_bytes()
}

/// What a Graphite connection does with its lines: parse each, add it to
/// the batch, and hand admission the view. Not inlined, so that a profile
/// of the bench finds it by name.
#[inline(never)]
fn batch_and_view(batch: &mut Batch, text: &str) -> usize {
    batch.clear();
    for line in text.lines() {
        let line = graphite::parse_text(line).unwrap();
        batch.push(&line, 0).unwrap();
    }
    touch(&batch.view())
}

/// A Graphite connection's batch as W1 fills it: each of the load
/// generator's eight connections sends its 2,500 series a tick at a time,
/// so a batch of 5,000 lines holds two ticks of the same 125 sources, and
/// each source comes again after all the others.
fn w1_full_graphite_two_ticks() -> Vec<u8> {
    let mut body = String::new();
    for tick in 0..2 {
        for i in 0..2_500 {
            body.push_str(&format!(
                "src-{:04}.m_{:02} {} 179530560{tick}.123\n",
                i / 20,
                i % 20 + 1,
                full_precision(i + tick * 2_500)
            ));
        }
    }
    body.into_bytes()
}

/// One OTLP request as the load generator renders W1 for `otlp-grpc` and
/// `otlp-http`: 250 resources (`service.instance.id` the source) of 20
/// metrics, each a metric of one point without attributes; of every four
/// metrics two gauges, a delta and a cumulative monotonic sum.
fn w1_otlp() -> Vec<u8> {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::metrics::v1::{
        metric::Data, number_data_point, Gauge, Metric, NumberDataPoint, ResourceMetrics,
        ScopeMetrics, Sum,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;
    let metric = |s: usize, m: usize| {
        let point = NumberDataPoint {
            time_unix_nano: 1_795_305_600_000 * 1_000_000,
            value: Some(number_data_point::Value::AsDouble(
                (s * 20 + m) as f64 * 0.5,
            )),
            ..Default::default()
        };
        let sum = |temporality| {
            Data::Sum(Sum {
                data_points: vec![point.clone()],
                aggregation_temporality: temporality,
                is_monotonic: true,
            })
        };
        let data = match m % 4 {
            2 => sum(1),
            3 => sum(2),
            _ => Data::Gauge(Gauge {
                data_points: vec![point.clone()],
            }),
        };
        Metric {
            name: format!("metric_{m:02}"),
            data: Some(data),
            ..Default::default()
        }
    };
    let resource_metrics = (0..250)
        .map(|s| ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: "service.instance.id".into(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue(format!("server-{s:05}"))),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics: (0..20).map(|m| metric(s, m)).collect(),
                ..Default::default()
            }],
            ..Default::default()
        })
        .collect();
    ExportMetricsServiceRequest { resource_metrics }.encode_to_vec()
}

/// What admission reads of every series, so neither side's work is
/// optimised away.
fn touch_owned(req: &pb::PushRequest) -> usize {
    req.sources
        .iter()
        .flat_map(|src| &src.series)
        .map(|s| s.metric.len() + s.labels.len() + s.values.len())
        .sum()
}

fn touch(view: &PushView<'_>) -> usize {
    view.sources()
        .flat_map(|src| src.series())
        .map(|s| s.metric.len() + s.labels.len() + s.values.len())
        .sum()
}

fn decode(c: &mut Criterion) {
    let bytes = w2_message();
    let mut g = c.benchmark_group("decode");
    g.measurement_time(Duration::from_secs(5));
    g.throughput(Throughput::Elements(5_000));
    g.bench_function("w2_message_5000_series/prost_owned", |b| {
        b.iter(|| {
            let req = pb::PushRequest::decode(&bytes[..]).unwrap();
            touch_owned(&req)
        })
    });
    g.bench_function("w2_message_5000_series/borrowed_view", |b| {
        b.iter(|| touch(&PushView::decode(&bytes, usize::MAX).unwrap()))
    });
    let w1 = w1_message();
    g.bench_function("w1_message_5000_series/borrowed_view", |b| {
        b.iter(|| touch(&PushView::decode(&w1, usize::MAX).unwrap()))
    });
    let body = w1_remote_write();
    let cfg = RemoteWriteConfig {
        source_labels: vec!["host".into()],
    };
    let book = MetadataBook::new();
    let parse = Parse {
        cfg: &cfg,
        book: &book,
        cap: 10,
        budget: Budget {
            samples: usize::MAX,
            bytes: usize::MAX,
        },
        known: &|_, _, _| None,
    };
    g.bench_function("w1_remote_write_5000_series/borrowed_view", |b| {
        b.iter(|| touch(&parse.view(&body).unwrap().0))
    });
    let body = w1_line_protocol();
    let cfg = InfluxConfig::default();
    let budget = Budget {
        samples: usize::MAX,
        bytes: usize::MAX,
    };
    g.bench_function("w1_line_protocol_5000_lines/borrowed_view", |b| {
        b.iter(|| {
            let arena = bumpalo::Bump::new();
            let r =
                influx::convert(&body, &arena, Precision::Seconds, 0, &cfg, 10, budget).unwrap();
            assert_eq!(r.refused.rejected, 0);
            touch(&r.view)
        })
    });
    let body = w1_full_line_protocol();
    g.bench_function(
        "w1_full_precision_line_protocol_5000_fields/borrowed_view",
        |b| {
            b.iter(|| {
                let arena = bumpalo::Bump::new();
                let r =
                    influx::convert(&body, &arena, Precision::Milliseconds, 0, &cfg, 10, budget)
                        .unwrap();
                assert_eq!(r.refused.rejected, 0);
                touch(&r.view)
            })
        },
    );
    let body = w1_otlp();
    let otlp_cfg = OtlpConfig::default();
    g.bench_function("w1_otlp_5000_points/borrowed_view", |b| {
        b.iter(|| {
            let arena = bumpalo::Bump::new();
            let r = otlp::parse(&body, &arena, &otlp_cfg, 10, budget).unwrap();
            assert_eq!(r.refused.rejected, 0);
            touch(&r.view)
        })
    });
    for (name, body, source_component) in [
        ("w1_graphite_5000_lines/batch_and_view", w1_graphite(), 2),
        (
            "w1_full_precision_graphite_5000_lines/batch_and_view",
            w1_full_graphite(),
            1,
        ),
        (
            "w1_full_precision_graphite_two_ticks/batch_and_view",
            w1_full_graphite_two_ticks(),
            1,
        ),
    ] {
        let text = std::str::from_utf8(&body).unwrap();
        let mut batch = Batch::new(source_component, budget);
        g.bench_function(name, |b| b.iter(|| batch_and_view(&mut batch, text)));
    }
    g.finish();
}

criterion_group!(benches, decode);
criterion_main!(benches);
