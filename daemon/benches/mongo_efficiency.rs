//! What reaches MongoDB per ingested sample: 20,000 series at one sample
//! per second, flushed every 1 s, 5 s and 10 s.
//!
//! ```text
//! cargo bench -p tallyd --bench mongo_efficiency
//! TALLY_BENCH_SERIES=2000 TALLY_BENCH_SECONDS=30 cargo bench -p tallyd --bench mongo_efficiency
//! ```
//!
//! The library is driven directly, in simulated time: an [`Aggregator`]
//! takes one sample per series per simulated second, and every 1, 5 or 10
//! simulated seconds its drained minutes go to [`MongoStore::apply`] as one
//! flush, as the daemon's flush pipeline does. Nothing waits for the wall
//! clock. The store talks to the MongoDB stand-in (`tests/mongo-standin`,
//! started here as the tests start it), or to the real server in
//! `MONGODB_URI`, one fresh database per flush interval.
//!
//! Before the steady state, the current hour and day documents of every
//! series are pre-allocated (in requests of 2,000 documents, the daemon's
//! default `prealloc.max_per_second`), so first-sighting inserts stay out of
//! the steady-state figures; that cost is reported on its own.
//!
//! The store runs with its defaults: flushes write hour documents, and an
//! hour's day blocks are sealed once, when the hour has closed. The run
//! stays inside one hour, so the steady state holds no seal; `close` at the
//! end seals the open hour, which is what closing an hour costs, reported
//! on its own and spread over the hour's flushes.
//!
//! The figures come from [`MongoStore::stats`]: statements (update
//! statements and inserted documents), commands (each one round trip), and
//! the BSON bytes of the commands the store built, which is what goes on
//! the wire up to the few bytes of the OP_MSG envelope. They depend only on
//! the workload, not on the machine, so one run is enough. The wall time per
//! flush is printed as an aside: it measures the Python stand-in, not a
//! MongoDB server.
//!
//! Settings (environment): `TALLY_BENCH_SERIES` (default 20000),
//! `TALLY_BENCH_SECONDS` simulated seconds per interval (default 60),
//! `TALLY_BENCH_INTERVALS` flush intervals in seconds (default `1,5,10`).

// A benchmark that cannot set up panics: there is nothing to measure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tally::aggregator::{Aggregator, AggregatorConfig, SeriesBatch};
use tally::config::MongoDbConfig;
use tally::ingest::IngestConfig;
use tally::model::{DocKey, FlushBatch, FlushId, SampleKind, SeriesId, Tier};
use tally::store::mongodb::{day_doc_bson_size, hour_doc_bson_size, MongoStats, MongoStore};
use tally::store::Store;
use tally_testkit::mongo as standin;

/// 2026-11-22T10:10:00Z, in ms: a steady-state run of up to 49 minutes
/// stays inside one hour and one day document per series.
const T0_MS: i64 = 1_795_342_200_000;
const METRICS_PER_SOURCE: usize = 20;
/// Pre-allocation requests carry this many documents: the daemon's default
/// `prealloc.max_per_second`, which its maintenance loop sends per tick.
const PREALLOC_CHUNK: usize = 2_000;
const WRITER: &str = "bench";
/// Long enough that no document expires during the run.
const RETENTION: (u64, u64) = (50 * 365 * 86_400, 50 * 365 * 86_400);

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not valid")),
        _ => default,
    }
}

/// The difference of two snapshots of the store's counters.
fn delta(after: &MongoStats, before: &MongoStats) -> MongoStats {
    MongoStats {
        statements: after.statements - before.statements,
        round_trips: after.round_trips - before.round_trips,
        update_statements: after.update_statements - before.update_statements,
        update_round_trips: after.update_round_trips - before.update_round_trips,
        insert_statements: after.insert_statements - before.insert_statements,
        insert_round_trips: after.insert_round_trips - before.insert_round_trips,
        lookup_round_trips: after.lookup_round_trips - before.lookup_round_trips,
        read_round_trips: after.read_round_trips - before.read_round_trips,
        catalog_statements: after.catalog_statements - before.catalog_statements,
        catalog_round_trips: after.catalog_round_trips - before.catalog_round_trips,
        bytes_sent: after.bytes_sent - before.bytes_sent,
        preallocated_documents: after.preallocated_documents - before.preallocated_documents,
        first_sighting_documents: after.first_sighting_documents - before.first_sighting_documents,
        fallback_upserts: after.fallback_upserts - before.fallback_upserts,
    }
}

/// The simulated fleet: `server-NNNNN` sources with 20 metrics each,
/// alternately gauges and delta counters.
struct Fleet {
    names: Vec<(String, String, SampleKind)>,
}

impl Fleet {
    fn new(series: usize) -> Fleet {
        let names = (0..series)
            .map(|i| {
                let kind = if i % 2 == 0 {
                    SampleKind::Gauge
                } else {
                    SampleKind::DeltaCounter
                };
                (
                    format!("server-{:05}", i / METRICS_PER_SOURCE),
                    format!("metric_{:02}", i % METRICS_PER_SOURCE),
                    kind,
                )
            })
            .collect();
        Fleet { names }
    }

    /// The current hour and day document of every series at `t_ms`.
    fn doc_keys(&self, t_ms: i64) -> Vec<DocKey> {
        let t = t_ms / 1000;
        let hour = t - t.rem_euclid(Tier::Hour.period_s());
        let day = t - t.rem_euclid(Tier::Day.period_s());
        self.names
            .iter()
            .flat_map(|(s, m, _)| {
                let series = SeriesId::new(s, m);
                [
                    DocKey {
                        series: series.clone(),
                        tier: Tier::Hour,
                        period_start: hour,
                    },
                    DocKey {
                        series,
                        tier: Tier::Day,
                        period_start: day,
                    },
                ]
            })
            .collect()
    }

    /// One simulated second: one sample of every series at `t_ms`.
    fn ingest(&self, agg: &Aggregator, t_ms: i64, second: i64) {
        let ts = [t_ms];
        let values: Vec<[f64; 1]> = (0..self.names.len())
            .map(|i| [((i as i64 * 7 + second * 13) % 1000) as f64])
            .collect();
        let batches: Vec<SeriesBatch<'_>> = self
            .names
            .iter()
            .zip(&values)
            .enumerate()
            .map(|(i, ((s, m, k), v))| SeriesBatch {
                labels: "",
                source: s,
                metric: m,
                kind: Some(*k),
                timestamps_ms: &ts,
                values: v,
                start_times_ms: &[],
                source_index: (i / METRICS_PER_SOURCE) as u32,
                series_index: (i % METRICS_PER_SOURCE) as u32,
            })
            .collect();
        let out = agg.ingest(&batches, t_ms);
        assert_eq!(
            (out.accepted, out.rejected),
            (self.names.len() as u64, 0),
            "every sample must be taken"
        );
    }
}

struct Prealloc {
    documents: u64,
    stats: MongoStats,
    wall: Duration,
}

/// The steady state of one flush interval.
struct Run {
    interval_s: i64,
    flushes: u64,
    samples: u64,
    /// Sum over flushes of the series with data in the flush.
    active_series: u64,
    stats: MongoStats,
    wall: Duration,
    max_flush: Duration,
    prealloc: Prealloc,
    /// What `close` sent afterwards: the seal of the open hour.
    drain: MongoStats,
}

async fn run_interval(
    target: &standin::MongoTarget,
    fleet: &Fleet,
    interval_s: i64,
    seconds: i64,
) -> Run {
    let database = format!("{}_flush{interval_s}s", target.database);
    let cfg = MongoDbConfig {
        uri: target.uri.clone(),
        database: database.clone(),
        timeout: Duration::from_secs(300),
        ..MongoDbConfig::default()
    };
    let store = MongoStore::connect(&cfg, RETENTION, WRITER)
        .await
        .expect("connecting to MongoDB");

    // Pre-allocation of the current hour and day documents.
    let keys = fleet.doc_keys(T0_MS);
    let before = store.stats();
    let started = Instant::now();
    let mut created = 0;
    for chunk in keys.chunks(PREALLOC_CHUNK) {
        let stats = store.preallocate(chunk).await.expect("pre-allocating");
        created += stats.created as u64;
    }
    let prealloc = Prealloc {
        documents: created,
        stats: delta(&store.stats(), &before),
        wall: started.elapsed(),
    };
    assert_eq!(
        created,
        keys.len() as u64,
        "a fresh database: every document is new"
    );

    // Steady state: one sample per series per simulated second.
    let agg = Aggregator::new(
        &AggregatorConfig::default(),
        &IngestConfig {
            lateness_window: std::time::Duration::from_millis((i64::MAX / 4) as u64),
            max_future_skew: std::time::Duration::from_millis((i64::MAX / 4) as u64),
            ..IngestConfig::default()
        },
    );
    let before = store.stats();
    let mut run = Run {
        interval_s,
        flushes: 0,
        samples: 0,
        active_series: 0,
        stats: MongoStats::default(),
        wall: Duration::ZERO,
        max_flush: Duration::ZERO,
        prealloc,
        drain: MongoStats::default(),
    };
    for second in 0..seconds {
        let t_ms = T0_MS + second * 1000;
        fleet.ingest(&agg, t_ms, second);
        run.samples += fleet.names.len() as u64;
        if (second + 1) % interval_s != 0 {
            continue;
        }
        let drained = agg.drain(None);
        let batch = FlushBatch {
            hashes: Vec::new(),
            resumable: true,
            // Flush ids are microseconds of the (simulated) clock, as the
            // daemon's are, so id reservations come once a simulated minute.
            id: FlushId((t_ms * 1000) as u64),
            series: drained,
        };
        run.active_series += batch.series.len() as u64;
        let started = Instant::now();
        let stats = store.apply(&batch).await.expect("applying a flush");
        let took = started.elapsed();
        // Every hour document; no hour closes within the run.
        assert_eq!(stats.documents_skipped, 0);
        assert!(stats.documents_written >= batch.series.len());
        run.wall += took;
        run.max_flush = run.max_flush.max(took);
        run.flushes += 1;
    }
    run.stats = delta(&store.stats(), &before);
    let before = store.stats();
    store.close().await.expect("sealing the open hour");
    run.drain = delta(&store.stats(), &before);
    assert_eq!(
        agg.pending_slots(),
        0,
        "the run ends on a flush boundary: every sample was flushed"
    );
    if target.is_real_server() {
        let _ = store.client().database(&database).drop().await;
    }
    run
}

fn per(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

fn report(series: usize, seconds: i64, server: &str, runs: &[Run]) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(
        w,
        "\nMongoDB efficiency: {series} series x 1 sample/s, {seconds} simulated s per flush interval, against {server}"
    );
    let _ = writeln!(
        w,
        "(statements = update statements; bytes = BSON of the commands the store sent; steady state, after pre-allocation)\n"
    );
    let _ = writeln!(
        w,
        "| flush interval | flushes | samples/flush | statements/flush | statements/active series | update round trips/flush | statements/round trip | all round trips/flush | bytes/flush | bytes/sample |"
    );
    let _ = writeln!(w, "|---|---|---|---|---|---|---|---|---|---|");
    for r in runs {
        let s = &r.stats;
        let _ = writeln!(
            w,
            "| {} s | {} | {:.0} | {:.0} | {:.2} | {:.1} | {:.0} | {:.2} | {:.0} | {:.1} |",
            r.interval_s,
            r.flushes,
            per(r.samples, r.flushes),
            per(s.update_statements, r.flushes),
            per(s.update_statements, r.active_series),
            per(s.update_round_trips, r.flushes),
            per(s.update_statements, s.update_round_trips),
            per(s.round_trips, r.flushes),
            per(s.bytes_sent, r.flushes),
            per(s.bytes_sent, r.samples),
        );
    }
    let _ = writeln!(
        w,
        "\nSteady-state checks: inserted documents {}, existence look-ups {}, fallback upserts {} (all must be 0); other round trips (flush-id reservations, completion records, reads of the writers' records) {}.",
        runs.iter().map(|r| r.stats.insert_statements).sum::<u64>(),
        runs.iter().map(|r| r.stats.lookup_round_trips).sum::<u64>(),
        runs.iter().map(|r| r.stats.fallback_upserts).sum::<u64>(),
        runs.iter()
            .map(|r| r.stats.round_trips - r.stats.update_round_trips)
            .sum::<u64>(),
    );
    for r in runs {
        // An hour's seal, spread over the hour's flushes.
        let flushes_per_hour = 3600 / r.interval_s.max(1) as u64;
        let samples_per_hour = series as u64 * 3600;
        let steady_stmts = per(r.stats.update_statements, r.active_series);
        let seal_stmts = per(
            r.drain.update_statements,
            r.active_series / r.flushes.max(1),
        ) / flushes_per_hour as f64;
        let _ = writeln!(
            w,
            "Sealing the hour after the {} s run (`close`): {} statements, {:.1} MB, {} read round trips. Spread over an hour's {} flushes: {:.4} statements per active series per flush, {:.1} bytes per sample; with the steady state, {:.4} statements per active series per flush.",
            r.interval_s,
            r.drain.update_statements,
            r.drain.bytes_sent as f64 / 1e6,
            r.drain.read_round_trips,
            flushes_per_hour,
            seal_stmts,
            per(r.drain.bytes_sent, samples_per_hour),
            steady_stmts + seal_stmts,
        );
    }
    let _ = writeln!(
        w,
        "\nPre-allocated documents: hour {} bytes, day {} bytes of BSON (series db-00001/op_counter; each byte of a longer name adds two).",
        hour_doc_bson_size(),
        day_doc_bson_size()
    );
    if let Some(r) = runs.first() {
        let p = &r.prealloc;
        let _ = writeln!(
            w,
            "Pre-allocation of the current hour and day documents of {series} series (once per run): {} documents in {} insert commands (+{} existence look-ups, {} other), {:.1} MB, {:.0} bytes per document on average.",
            p.documents,
            p.stats.insert_round_trips,
            p.stats.lookup_round_trips,
            p.stats.round_trips - p.stats.insert_round_trips - p.stats.lookup_round_trips,
            p.stats.bytes_sent as f64 / 1e6,
            per(p.stats.bytes_sent, p.documents),
        );
    }
    let _ = writeln!(
        w,
        "\nAside, wall time against the Python stand-in (not a real MongoDB server; it measures the stand-in):"
    );
    for r in runs {
        let _ = writeln!(
            w,
            "  {} s interval: {:.0} ms per flush on average, {:.0} ms at most; pre-allocation took {:.1} s",
            r.interval_s,
            r.wall.as_secs_f64() * 1000.0 / r.flushes.max(1) as f64,
            r.max_flush.as_secs_f64() * 1000.0,
            r.prealloc.wall.as_secs_f64(),
        );
    }
    out
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing
    // of the sort and only wants to know that the bench runs: a tiny scale.
    let benching = std::env::args().any(|a| a == "--bench");
    let series: usize = env_or("TALLY_BENCH_SERIES", if benching { 20_000 } else { 200 });
    let seconds: i64 = env_or("TALLY_BENCH_SECONDS", if benching { 60 } else { 10 });
    let intervals: Vec<i64> = env_or("TALLY_BENCH_INTERVALS", "1,5,10".to_string())
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .unwrap_or_else(|_| panic!("TALLY_BENCH_INTERVALS: {s:?} is not a number"))
        })
        .collect();
    assert!(series > 0 && seconds > 0, "nothing to run");
    assert!(
        seconds <= 49 * 60,
        "TALLY_BENCH_SECONDS: at most 2940, so the run stays in one hour"
    );
    for &i in &intervals {
        assert!(
            i > 0 && seconds % i == 0,
            "TALLY_BENCH_SECONDS ({seconds}) must be a multiple of every interval ({i})"
        );
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let target = Arc::new(standin::mongo_target_blocking());
    let server = if target.is_real_server() {
        "the MongoDB server in MONGODB_URI"
    } else {
        "the MongoDB stand-in (Python, tests/mongo-standin)"
    };
    println!("{series} series x {seconds} simulated s per flush interval {intervals:?}, against {server}");
    let fleet = Fleet::new(series);
    let mut runs = Vec::new();
    for &interval in &intervals {
        let run = runtime.block_on(run_interval(&target, &fleet, interval, seconds));
        println!(
            "  {interval} s: {} flushes, {} update statements in {} commands, {:.1} s of flushes",
            run.flushes,
            run.stats.update_statements,
            run.stats.update_round_trips,
            run.wall.as_secs_f64()
        );
        runs.push(run);
    }
    print!("{}", report(series, seconds, server, &runs));
}
