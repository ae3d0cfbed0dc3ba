//! What the write-ahead log writes per sample, and what encoding it costs
//! the log's writer, for the candidates weighed in docs/durability.md:
//! the `tally.v1` bytes as logged before (the baseline), those bytes
//! compressed (LZ4, zstd at levels 1 and -1), and the compact records
//! (`wal::CompactEncoder`, a series dictionary per segment and samples
//! against predictions), alone and compressed.
//!
//! Two workloads at one sample per series per second, as a minute of the
//! log sees them:
//! - the load generator's fleet: 5,000 sources × 20 metrics (half gauges
//!   with full-precision values, a quarter delta counters, a quarter
//!   cumulative counters), 5,000 series per `tally.v1` request;
//! - W1 as Prometheus remote-write: 1,000 hosts × 20 metrics, values with
//!   two decimals, 5,000 samples per request, read into a view as
//!   `tallyd` reads it and written out as the `tally.v1` bytes the log's
//!   writer gets.
//!
//! Run with `cargo bench -p tallyd --bench wal_encode`. Bytes count each
//! record's frame (8 bytes); nanoseconds are the writer thread's per
//! sample (median of 3 passes): for the baseline the frame's copy and
//! checksum, for the others also the encoding. The compact encoding reads
//! the request's bytes as a view first (the writer gets bytes); that step
//! and the encoding from a ready view are also timed alone. It also counts the compact
//! encoding's allocations once its series are known (the view's columns
//! are per request; nothing may be per sample), and fails past
//! [`MAX_ALLOCS_PER_SAMPLE`].

// A benchmark that cannot set up panics: there is nothing to measure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use prost::Message as _;
use rand::{Rng, SeedableRng};
use tally::ingest::builder::Budget;
use tally::ingest::remote_write::{Parse, RemoteWriteConfig};
use tally::ingest::view::PushView;
use tally::metadata::MetadataBook;
use tally::wal::{CompactDecoder, CompactEncoder};
use tally_proto::prometheus as rw;
use tally_proto::v1 as pb;

/// Counts every allocation (and reallocation).
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator,
// which upholds `GlobalAlloc`'s contract; counting touches nothing the
// caller owns.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The ingest path's limit (`ingest_allocs`), held for the log's writer.
const MAX_ALLOCS_PER_SAMPLE: f64 = 0.01;

const SECONDS: usize = 30;
const BATCH: usize = 5000;
const T0: i64 = 1_764_000_000_000;

/// One request as the log's writer gets it: `tally.v1` bytes.
struct Request {
    bytes: Vec<u8>,
    samples: usize,
}

/// The load generator's fleet, its values drawn as `tally-loadgen` draws
/// them (a level, a triangle wave and noise for gauges; whole numbers for
/// counters).
fn loadgen(sources: usize, metrics: usize) -> Vec<Request> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let kinds: Vec<i32> = (0..metrics).map(|m| [0, 0, 1, 2][m % 4]).collect();
    let profile: Vec<(f64, f64, u64)> = (0..sources * metrics)
        .map(|_| {
            let base = rng.random::<f64>() * 1000.0 - 100.0;
            (base, rng.random::<f64>(), 30 + rng.random_range(0..570))
        })
        .collect();
    let per_request = BATCH / metrics;
    let mut out = Vec::new();
    for tick in 0..SECONDS as u64 {
        let mut order: Vec<usize> = (0..sources.div_ceil(per_request)).collect();
        // Connections' requests reach the log in any order within a second.
        order.sort_by_key(|_| rng.random::<u32>());
        for r in order {
            let batches = (r * per_request..((r + 1) * per_request).min(sources))
                .map(|src| {
                    let ts = T0 + ((tick as f64 + src as f64 / sources as f64) * 1000.0) as i64;
                    let series = (0..metrics)
                        .map(|m| {
                            let (level, p, period) = profile[src * metrics + m];
                            let noise = rng.random::<f64>();
                            let value = match kinds[m] {
                                0 => {
                                    let amp = (0.05 + 0.3 * p) * (level.abs() + 1.0);
                                    let x = (tick % period) as f64 / period as f64;
                                    level + amp * (4.0 * (x - 0.5).abs() - 1.0) + noise * amp * 0.2
                                }
                                1 => (2.0 * (p * 500.0).floor() * noise).floor(),
                                _ => {
                                    let rate = 1.0 + (p * 200.0).floor();
                                    (level.abs() * 1e6).floor()
                                        + (rate * tick as f64 + noise * 0.99 * rate).floor()
                                }
                            };
                            pb::SeriesSamples {
                                metric: format!("m_{:04}", m + 1),
                                kind: kinds[m],
                                timestamps_ms: vec![ts],
                                values: vec![value],
                                ..Default::default()
                            }
                        })
                        .collect();
                    pb::SourceBatch {
                        source: format!("src-{:06}", src + 1),
                        series,
                        groups: vec![],
                    }
                })
                .collect();
            let req = pb::PushRequest { sources: batches };
            let samples = req.sources.iter().map(|s| s.series.len()).sum();
            out.push(Request {
                bytes: req.encode_to_vec(),
                samples,
            });
        }
    }
    out
}

const W1_METRICS: [&str; 20] = [
    "cpu.user",
    "cpu.system",
    "cpu.iowait",
    "cpu.idle",
    "mem.used",
    "mem.free",
    "mem.cached",
    "mem.buffers",
    "disk.read_bytes",
    "disk.write_bytes",
    "disk.read_ops",
    "disk.write_ops",
    "net.rx_bytes",
    "net.tx_bytes",
    "net.rx_packets",
    "net.tx_packets",
    "load.1m",
    "load.5m",
    "load.15m",
    "proc.count",
];

/// W1 in remote-write (`__name__="w1"`, `host`, `metric` labels; the host
/// the source), second-major, read as `tallyd` reads it.
fn w1() -> Vec<Request> {
    let series = 1000 * W1_METRICS.len();
    let book = MetadataBook::new();
    let cfg = RemoteWriteConfig {
        source_labels: vec!["host".into()],
    };
    let known = |_: &str, _: &str, _: &[(&str, &str)]| None;
    let parse = Parse {
        cfg: &cfg,
        book: &book,
        cap: 10,
        budget: Budget {
            samples: usize::MAX,
            bytes: usize::MAX,
        },
        known: &known,
    };
    let label = |name: &str, value: &str| rw::Label {
        name: name.into(),
        value: value.into(),
    };
    let mut out = Vec::new();
    for k0 in (0..SECONDS * series).step_by(BATCH) {
        let timeseries = (k0..k0 + BATCH)
            .map(|k| {
                let (s, i) = (k / series, k % series);
                let c = (i * 7919 + s * 104_729) % 10_000;
                rw::TimeSeries {
                    labels: vec![
                        label("__name__", "w1"),
                        label("host", &format!("host-{:04}", i / W1_METRICS.len())),
                        label("metric", W1_METRICS[i % W1_METRICS.len()]),
                    ],
                    samples: vec![rw::Sample {
                        value: c as f64 / 100.0,
                        timestamp: T0 + s as i64 * 1000,
                    }],
                }
            })
            .collect();
        let raw = rw::WriteRequest {
            timeseries,
            metadata: vec![],
        }
        .encode_to_vec();
        let (view, _) = parse.view(&raw).unwrap();
        let mut bytes = Vec::new();
        view.encode(&mut bytes);
        out.push(Request {
            bytes,
            samples: view.samples(),
        });
    }
    out
}

/// A candidate: writes request `req`'s record into `out` (cleared first).
type Encode<'a> = Box<dyn FnMut(&[u8], &mut Vec<u8>) + 'a>;

/// Bytes per sample and writer nanoseconds per sample of `make`'s
/// encoding over `reqs` (each pass with a fresh encoder: a new segment).
fn measure(reqs: &[Request], make: &dyn Fn() -> Encode<'static>) -> (f64, f64) {
    let samples: usize = reqs.iter().map(|r| r.samples).sum();
    let mut times = Vec::new();
    let mut bytes = 0;
    for _ in 0..3 {
        let mut encode = make();
        let (mut record, mut frames) = (Vec::new(), Vec::with_capacity(1 << 24));
        bytes = 0;
        let t = Instant::now();
        for r in reqs {
            record.clear();
            encode(&r.bytes, &mut record);
            // The frame: length, checksum, payload, as the writer does.
            frames.clear();
            frames.extend_from_slice(&(record.len() as u32).to_le_bytes());
            frames.extend_from_slice(&crc32fast::hash(&record).to_le_bytes());
            frames.extend_from_slice(&record);
            bytes += frames.len();
        }
        times.push(t.elapsed().as_nanos() as f64 / samples as f64);
    }
    times.sort_by(f64::total_cmp);
    (bytes as f64 / samples as f64, times[1])
}

/// Writer nanoseconds per sample of the compact encoding alone, from
/// views decoded beforehand (as the ingest path has them).
fn encode_only(reqs: &[Request]) -> f64 {
    let views: Vec<PushView<'_>> = reqs
        .iter()
        .map(|r| PushView::decode(&r.bytes, usize::MAX).unwrap())
        .collect();
    let samples: usize = reqs.iter().map(|r| r.samples).sum();
    let mut times = Vec::new();
    let mut out = Vec::with_capacity(1 << 20);
    for _ in 0..3 {
        let mut enc = CompactEncoder::default();
        let t = Instant::now();
        for v in &views {
            out.clear();
            enc.encode(T0, &[], v, &mut out);
        }
        times.push(t.elapsed().as_nanos() as f64 / samples as f64);
    }
    times.sort_by(f64::total_cmp);
    times[1]
}

/// The request's record before: its clock, no refused source, its bytes.
fn as_before(req: &[u8], out: &mut Vec<u8>) {
    out.push(1);
    out.extend_from_slice(&T0.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(req);
}

fn compact() -> Encode<'static> {
    let mut enc = CompactEncoder::default();
    Box::new(move |req, out| {
        let view = PushView::decode(req, usize::MAX).unwrap();
        out.push(6);
        enc.encode(T0, &[], &view, out);
    })
}

/// The writer's reading of a request's bytes as a view, alone: the
/// compact encoding's first step.
fn decode_only() -> Encode<'static> {
    Box::new(move |req, out| {
        let view = PushView::decode(req, usize::MAX).unwrap();
        out.push(view.series_len() as u8);
    })
}

fn lz4(inner: fn() -> Encode<'static>) -> Encode<'static> {
    let (mut inner, mut plain) = (inner(), Vec::new());
    Box::new(move |req, out| {
        plain.clear();
        inner(req, &mut plain);
        out.resize(lz4_flex::block::get_maximum_output_size(plain.len()), 0);
        let n = lz4_flex::block::compress_into(&plain, out).unwrap();
        out.truncate(n);
    })
}

fn zstd(level: i32, inner: fn() -> Encode<'static>) -> Encode<'static> {
    let (mut inner, mut plain) = (inner(), Vec::new());
    let mut z = zstd::bulk::Compressor::new(level).unwrap();
    Box::new(move |req, out| {
        plain.clear();
        inner(req, &mut plain);
        out.reserve(zstd::zstd_safe::compress_bound(plain.len()));
        z.compress_to_buffer(&plain, out).unwrap();
    })
}

fn before() -> Encode<'static> {
    Box::new(as_before)
}

/// The compact records read back equal the requests. Returns, over the
/// second half (every series known), the encoder's allocations per sample
/// and the view decoding's per request (its columns, whatever the size).
fn check_round_trip(reqs: &[Request]) -> (f64, f64) {
    let (mut enc, mut dec) = (CompactEncoder::default(), CompactDecoder::default());
    let mut out = Vec::new();
    let (mut encoding, mut decoding, mut samples, mut requests) = (0, 0, 0, 0);
    for (i, r) in reqs.iter().enumerate() {
        out.clear();
        let before = ALLOCS.load(Ordering::Relaxed);
        let view = PushView::decode(&r.bytes, usize::MAX).unwrap();
        let decoded = ALLOCS.load(Ordering::Relaxed);
        enc.encode(T0, &[], &view, &mut out);
        if i >= reqs.len() / 2 {
            decoding += decoded - before;
            encoding += ALLOCS.load(Ordering::Relaxed) - decoded;
            samples += r.samples;
            requests += 1;
        }
        let (_, _, got) = dec.decode(&out).unwrap();
        assert_eq!(got.encode_to_vec(), r.bytes, "round trip");
    }
    (
        encoding as f64 / samples as f64,
        decoding as f64 / requests as f64,
    )
}

fn main() {
    let candidates: [(&str, &dyn Fn() -> Encode<'static>); 8] = [
        ("view decode only", &decode_only),
        ("tally.v1 (before)", &before),
        ("tally.v1 + lz4", &|| lz4(before)),
        ("tally.v1 + zstd 1", &|| zstd(1, before)),
        ("tally.v1 + zstd -1", &|| zstd(-1, before)),
        ("compact", &compact),
        ("compact + lz4", &|| lz4(compact)),
        ("compact + zstd 1", &|| zstd(1, compact)),
    ];
    for (name, reqs) in [
        ("load generator, 100,000 series", loadgen(5000, 20)),
        ("W1 remote-write, 20,000 series", w1()),
    ] {
        let (allocs, per_request) = check_round_trip(&reqs);
        let samples: usize = reqs.iter().map(|r| r.samples).sum();
        println!(
            "{name}: {} requests, {samples} samples; compact encoding: {allocs:.4} allocations \
             per sample (the writer's view of a request: {per_request:.0} per request)",
            reqs.len()
        );
        assert!(
            allocs <= MAX_ALLOCS_PER_SAMPLE,
            "the compact encoding allocates per sample"
        );
        println!(
            "  compact, from a view   {:>7.1} ns/sample",
            encode_only(&reqs)
        );
        for (candidate, make) in &candidates {
            let (bytes, ns) = measure(&reqs, make);
            println!("  {candidate:<20} {bytes:>6.2} bytes/sample {ns:>7.1} ns/sample");
        }
    }
}
