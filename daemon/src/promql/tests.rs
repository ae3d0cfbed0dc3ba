//! The engine end to end over a real query engine: an aggregator holding
//! samples, an embedded store they are flushed to, rollups and the
//! catalog, evaluated through [`evaluate`].

use std::sync::Arc;

use super::*;
use crate::aggregator::{Aggregator, AggregatorConfig, SeriesBatch};
use crate::catalog::CatalogWriter;
use crate::flush::{FlushConfig, Pipeline};
use crate::ingest::IngestConfig;
use crate::model::SampleKind;
use crate::query::{QueryConfig, QueryEngine};
use crate::rollup::{RollupConfig, Rollups};
use crate::store::embedded::EmbeddedStore;
use crate::store::Store;

const M: i64 = 60_000;

struct Harness {
    _dir: tempfile::TempDir,
    agg: Arc<Aggregator>,
    rollups: Arc<Rollups>,
    pipeline: Arc<Pipeline>,
    engine: Arc<QueryEngine>,
    names: NameCache,
    scheme: LabelScheme,
}

/// A minute-aligned base time a day ago: within every retention.
fn base() -> i64 {
    let now = chrono::Utc::now().timestamp_millis();
    (now - 86_400_000).div_euclid(3_600_000) * 3_600_000
}

impl Harness {
    fn new(limits: QueryConfig) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
        let ingest = IngestConfig {
            lateness_window: std::time::Duration::from_secs(3 * 86_400),
            ..IngestConfig::default()
        };
        let agg = Arc::new(Aggregator::new(&AggregatorConfig { shards: 2 }, &ingest));
        let rollups = Arc::new(Rollups::new(RollupConfig::default()).unwrap());
        let pipeline = Arc::new(
            Pipeline::new(agg.clone(), store.clone(), FlushConfig::default(), 0)
                .with_rollups(rollups.clone())
                .with_catalog(Arc::new(CatalogWriter::new(
                    std::time::Duration::from_secs(600),
                ))),
        );
        let engine = Arc::new(QueryEngine::new(
            store,
            agg.clone(),
            rollups.clone(),
            pipeline.inflight().clone(),
            limits,
            14 * 86_400,
        ));
        Harness {
            _dir: dir,
            agg,
            rollups,
            pipeline,
            engine,
            names: NameCache::new(),
            scheme: LabelScheme::default(),
        }
    }

    /// Samples `(ms, value)` of one series; `labels` canonical
    /// (`a="1",b="2"`).
    fn push(
        &self,
        source: &str,
        metric: &str,
        labels: &str,
        kind: SampleKind,
        samples: &[(i64, f64)],
    ) {
        let now = samples.iter().map(|s| s.0).max().unwrap_or(0) + 1;
        let ts: Vec<i64> = samples.iter().map(|s| s.0).collect();
        let vs: Vec<f64> = samples.iter().map(|s| s.1).collect();
        self.rollups.declare::<&str>(source, &[], now / 1000);
        let out = self.agg.ingest(
            &[SeriesBatch {
                labels,
                source,
                metric,
                kind: Some(kind),
                timestamps_ms: &ts,
                values: &vs,
                start_times_ms: &[],
                source_index: 0,
                series_index: 0,
            }],
            now,
        );
        assert!(out.rejected == 0, "{out:?}");
    }

    /// Moves what memory holds into the store and its catalog.
    async fn flush(&self) {
        let stop = tokio_util::sync::CancellationToken::new();
        while let Some(batch) = self.pipeline.cut_batch() {
            assert!(self.pipeline.apply(&batch, &stop).await);
            self.pipeline.record_catalog(&batch).await;
        }
    }

    fn ctx(&self) -> Context<'_> {
        Context {
            engine: &self.engine,
            names: &self.names,
            scheme: &self.scheme,
        }
    }

    async fn eval(&self, q: &str, start: i64, end: i64, step: i64) -> EvalResult<Answer> {
        evaluate(
            self.ctx(),
            &Request {
                query: q.to_string(),
                start_ms: start,
                end_ms: end,
                step_ms: step,
                lookback_ms: DEFAULT_LOOKBACK_MS,
            },
        )
        .await
    }

    /// An instant query's vector as (labels text, value).
    async fn vector(&self, q: &str, t: i64) -> Vec<(String, f64)> {
        match self.eval(q, t, t, 0).await.unwrap().data {
            Data::Vector(v) => v.into_iter().map(|(l, v)| (text(&l), v)).collect(),
            Data::Scalar(s) => vec![(String::new(), s)],
            other => panic!("{q}: {other:?}"),
        }
    }

    async fn one(&self, q: &str, t: i64) -> Option<f64> {
        let v = self.vector(q, t).await;
        assert!(v.len() <= 1, "{q}: {v:?}");
        v.first().map(|p| p.1)
    }

    async fn matrix(
        &self,
        q: &str,
        start: i64,
        end: i64,
        step: i64,
    ) -> Vec<(String, Vec<(i64, f64)>)> {
        match self.eval(q, start, end, step).await.unwrap().data {
            Data::Matrix(m) => m.into_iter().map(|(l, p)| (text(&l), p)).collect(),
            other => panic!("{q}: {other:?}"),
        }
    }
}

fn text(l: &Labels) -> String {
    l.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

#[tokio::test]
async fn bare_selectors_answer_the_newest_sample_within_the_lookback() {
    let h = Harness::new(QueryConfig::default());
    let b = base();
    // A gauge sampled at :10 and :50 of two minutes, read between them:
    // the read starts keeping its recent samples.
    let q = "load{instance=\"a\"}";
    let first = [(b + 10_000, 1.0), (b + 50_000, 2.0)];
    h.push("a", "load", "", SampleKind::Gauge, &first);
    assert_eq!(h.one(q, b + M).await, Some(2.0));
    let second = [(b + M + 10_000, 3.0), (b + M + 50_000, 4.0)];
    h.push("a", "load", "", SampleKind::Gauge, &second);
    assert_eq!(h.one(q, b + 2 * M).await, Some(4.0));
    // Mid-minute in the past, the minute's last sample later: the recent
    // samples reach back there, so the newest sample at or before answers.
    assert_eq!(h.one(q, b + M + 30_000).await, Some(3.0));
    assert_eq!(h.one(q, b + M + 15_000).await, Some(3.0));
    // Before the oldest of them: the nearer of the minute's last sample
    // (45 s after) and the minute before's (15 s before).
    assert_eq!(h.one(q, b + M + 5_000).await, Some(2.0));
    assert_eq!(h.one(q, b + 5_000).await, None);
    assert_eq!(h.one(q, b + M + 50_000 + 300_000).await, Some(4.0));
    assert_eq!(h.one(q, b + M + 50_001 + 300_000).await, None);
    assert_eq!(
        h.one(&format!("timestamp({q})"), b + 2 * M).await,
        Some((b + M + 50_000) as f64 / 1000.0)
    );
    let v = h.vector(q, b + 2 * M).await;
    assert_eq!(v[0].0, "__name__=load,instance=a");
    // Once they no longer reach back there, the nearer of the minute's
    // last sample (20 s after) and the minute before's (40 s before).
    let later: Vec<(i64, f64)> = (1..=8).map(|k| (b + 2 * M + k * 1_000, 5.0)).collect();
    h.push("a", "load", "", SampleKind::Gauge, &later);
    assert_eq!(h.one(q, b + M + 30_000).await, Some(4.0));
    assert_eq!(h.one(q, b + M + 15_000).await, Some(2.0));
    // A series no read asked for before keeps none: its first read has
    // the nearer sample too.
    h.push(
        "c",
        "load",
        "",
        SampleKind::Gauge,
        &[first, second].concat(),
    );
    let q = "load{instance=\"c\"}";
    assert_eq!(h.one(q, b + M + 30_000).await, Some(4.0));
    assert_eq!(h.one(q, b + M + 30_000).await, Some(4.0));
}

#[tokio::test]
async fn counters_rate_from_their_increases_and_show_their_raw_values() {
    let h = Harness::new(QueryConfig::default());
    let b = base();
    // A cumulative counter +1/s sampled every 15 s, reset once at minute 3.
    let mut samples = Vec::new();
    for i in 0..40 {
        let t = b + i * 15_000;
        let v = if i < 12 {
            100.0 + i as f64 * 15.0
        } else {
            (i - 12) as f64 * 15.0
        };
        samples.push((t, v));
    }
    h.push("a", "reqs", "", SampleKind::CumulativeCounter, &samples);
    let q = |f: &str| format!("{f}(reqs{{instance=\"a\"}}[5m])");
    let t = b + 10 * M;
    // Minutes 5..9: 20 increases of 15.
    assert_eq!(h.one(&q("increase"), t).await, Some(300.0));
    assert_eq!(h.one(&q("rate"), t).await, Some(1.0));
    // Across the reset: minute 3's increases count the value after it.
    let inc = h
        .one("increase(reqs{instance=\"a\"}[10m])", t)
        .await
        .unwrap();
    // 11 increases before the reset, the reset itself (to 0), 27 after.
    assert_eq!(inc, 11.0 * 15.0 + 27.0 * 15.0);
    // The bare selector is the raw cumulative value.
    assert_eq!(h.one("reqs{instance=\"a\"}", t).await, Some(27.0 * 15.0));
    // irate: the last minute's increase over the time between the last
    // samples of the last two minutes.
    assert_eq!(h.one(&q("irate"), t).await, Some(1.0));
    // resets between minutes' last samples.
    assert_eq!(
        h.one("resets(reqs{instance=\"a\"}[10m])", t).await,
        Some(1.0)
    );
}

#[tokio::test]
async fn inside_a_minute_the_newest_samples_answer_as_prometheus_does() {
    let h = Harness::new(QueryConfig::default());
    let b = base();
    // A counter at an ever faster pace and a gauge, scraped every second
    // at .250 (Prometheus' aligned times).
    let at = |i: i64| b + 250 + i * 1_000;
    let push = |from: i64, to: i64| {
        let counter: Vec<(i64, f64)> = (from..to).map(|i| (at(i), (i * i) as f64)).collect();
        let gauge: Vec<(i64, f64)> = (from..to).map(|i| (at(i), (i % 7) as f64)).collect();
        h.push("a", "reqs", "", SampleKind::CumulativeCounter, &counter);
        h.push("a", "load", "", SampleKind::Gauge, &gauge);
    };
    push(0, 60);
    // A dashboard's first read starts the recent samples and the steps.
    for q in ["reqs{instance=\"a\"}", "load{instance=\"a\"}"] {
        assert!(h.one(q, b + M - 1).await.is_some());
    }
    push(60, 154);
    // 30.5 s into minute 2, samples up to 33.25 s in.
    let t = b + 2 * M + 30_500;
    // irate from the last two samples (149 and 150), not minute 2's pace.
    let irate = h.one("irate(reqs{instance=\"a\"}[1m])", t).await;
    assert_eq!(irate, Some((150 * 150 - 149 * 149) as f64));
    let idelta = h.one("idelta(load{instance=\"a\"}[1m])", t).await;
    assert_eq!(idelta, Some((150 % 7 - 149 % 7) as f64));
    // (t - 1m, t] holds samples 91 to 150: minute 1's part after the cut
    // counted by its steps and the samples' spacing, nothing scaled.
    let n = h.one("count_over_time(load{instance=\"a\"}[1m])", t).await;
    assert_eq!(n, Some(60.0));
    // Before the recent samples reach back: the last minute's rate.
    let early = h
        .one("irate(reqs{instance=\"a\"}[1m])", b + 2 * M + 20_500)
        .await;
    assert_ne!(early, Some((140 * 140 - 139 * 139) as f64));
    assert!(early.is_some());
}

#[tokio::test]
async fn gauges_over_time_are_exact() {
    let h = Harness::new(QueryConfig::default());
    let b = base();
    let samples: Vec<(i64, f64)> = (0..20).map(|i| (b + i * 20_000, (i % 7) as f64)).collect();
    h.push("a", "g", "", SampleKind::Gauge, &samples);
    h.flush().await;
    let t = b + 6 * M;
    let window: Vec<f64> = samples
        .iter()
        .filter(|(ts, _)| *ts < t && *ts >= t - 5 * M)
        .map(|s| s.1)
        .collect();
    let sum: f64 = window.iter().sum();
    assert_eq!(h.one("sum_over_time(g[5m])", t).await, Some(sum));
    assert_eq!(
        h.one("count_over_time(g[5m])", t).await,
        Some(window.len() as f64)
    );
    assert_eq!(
        h.one("avg_over_time(g[5m])", t).await,
        Some(sum / window.len() as f64)
    );
    assert_eq!(h.one("max_over_time(g[5m])", t).await, Some(6.0));
    assert_eq!(h.one("min_over_time(g[5m])", t).await, Some(0.0));
    assert_eq!(h.one("present_over_time(g[5m])", t).await, Some(1.0));
    // [90s] is two minutes, [75s] one.
    assert_eq!(h.one("count_over_time(g[90s])", t).await, Some(6.0));
    assert_eq!(h.one("count_over_time(g[75s])", t).await, Some(3.0));
    assert_eq!(h.one("absent_over_time(g[5m])", t).await, None);
    assert_eq!(
        h.one("absent_over_time(nothing{job=\"x\"}[5m])", t).await,
        Some(1.0)
    );
    assert_eq!(
        h.vector("absent(nothing{job=\"x\"})", t).await,
        vec![("job=x".to_string(), 1.0)]
    );
    // offset and @ move the window.
    assert_eq!(
        h.one("sum_over_time(g[1m] offset 1m)", t + M).await,
        h.one("sum_over_time(g[1m])", t).await
    );
    assert_eq!(
        h.one(&format!("sum_over_time(g[1m] @ {})", t / 1000), b)
            .await,
        h.one("sum_over_time(g[1m])", t).await
    );
}

#[tokio::test]
async fn subqueries_run_the_inner_query_at_aligned_steps() {
    let h = Harness::new(QueryConfig::default());
    let b = base();
    let samples: Vec<(i64, f64)> = (0..40).map(|i| (b + i * 30_000, (i * i) as f64)).collect();
    h.push("a", "g", "", SampleKind::Gauge, &samples);
    let t = b + 20 * M;
    let sub = h
        .one(
            "max_over_time(avg_over_time(g{instance=\"a\"}[1m])[10m:2m])",
            t,
        )
        .await
        .unwrap();
    let mut want = f64::MIN;
    for k in (10..=20).step_by(2) {
        let v = h
            .one("avg_over_time(g{instance=\"a\"}[1m])", b + k * M)
            .await
            .unwrap();
        want = want.max(v);
    }
    assert_eq!(sub, want);
    // rate over a subquery's samples extrapolates, as Prometheus does.
    let r = h
        .one("rate(sum_over_time(g{instance=\"a\"}[1m])[5m:1m])", t)
        .await;
    assert!(r.is_some());
}

#[tokio::test]
async fn operators_match_vectors_as_prometheus_does() {
    let h = Harness::new(QueryConfig::default());
    let b = base();
    let at = b + 30_000;
    for (src, avail, total) in [("a", 25.0, 100.0), ("b", 50.0, 200.0)] {
        h.push(src, "mem_avail", "", SampleKind::Gauge, &[(at, avail)]);
        h.push(src, "mem_total", "", SampleKind::Gauge, &[(at, total)]);
    }
    h.push("a", "cpu", "mode=\"idle\"", SampleKind::Gauge, &[(at, 3.0)]);
    h.push("a", "cpu", "mode=\"user\"", SampleKind::Gauge, &[(at, 1.0)]);
    h.flush().await;
    let t = b + M;
    assert_eq!(
        h.vector("mem_avail / mem_total * 100", t).await,
        vec![
            ("instance=a".to_string(), 25.0),
            ("instance=b".to_string(), 25.0)
        ]
    );
    assert_eq!(h.vector("mem_total > 150", t).await.len(), 1);
    assert_eq!(
        h.vector("mem_total > bool 150", t).await,
        vec![
            ("instance=a".to_string(), 0.0),
            ("instance=b".to_string(), 1.0)
        ]
    );
    assert_eq!(h.vector("mem_avail and mem_total > 150", t).await.len(), 1);
    assert_eq!(
        h.vector("mem_avail unless mem_total > 150", t).await.len(),
        1
    );
    assert_eq!(h.vector("mem_avail or cpu", t).await.len(), 4);
    let grouped = h.vector("cpu * on(instance) group_left mem_total", t).await;
    assert_eq!(grouped.len(), 2);
    assert_eq!(grouped[0], ("instance=a,mode=idle".to_string(), 300.0));
    // Many-to-one without group_left is an error, as in Prometheus.
    let e = h
        .eval("cpu * on(instance) mem_total", t, t, 0)
        .await
        .unwrap_err();
    assert!(matches!(e, EvalError::Execution(_)), "{e}");
    assert_eq!(
        h.vector("sum by (instance) (cpu)", t).await,
        vec![("instance=a".to_string(), 4.0)]
    );
    assert_eq!(h.vector("topk(1, mem_total)", t).await[0].1, 200.0);
    assert_eq!(h.vector("count_values(\"v\", mem_total)", t).await.len(), 2);
    assert_eq!(h.one("scalar(sum(mem_total))", t).await, Some(300.0));
    assert_eq!(
        h.vector(
            "label_replace(mem_total, \"host\", \"h-$1\", \"instance\", \"(.*)\")",
            t
        )
        .await[0]
            .0,
        "__name__=mem_total,host=h-a,instance=a"
    );
    assert_eq!(h.one("vector(time())", t).await, Some(t as f64 / 1000.0));
}

#[tokio::test]
async fn histogram_quantiles_of_bucket_rates() {
    let h = Harness::new(QueryConfig::default());
    let b = base();
    for (le, per_min) in [("0.1", 10.0), ("0.5", 50.0), ("1", 90.0), ("+Inf", 100.0)] {
        let samples: Vec<(i64, f64)> = (0..12)
            .map(|i| (b + i * 30_000, per_min * i as f64 / 2.0))
            .collect();
        h.push(
            "a",
            "lat_bucket",
            &format!("le=\"{le}\""),
            SampleKind::CumulativeCounter,
            &samples,
        );
    }
    h.flush().await;
    let t = b + 6 * M;
    let v = h
        .vector(
            "histogram_quantile(0.5, sum by (le) (rate(lat_bucket[5m])))",
            t,
        )
        .await;
    assert_eq!(v.len(), 1);
    assert!(close(v[0].1, 0.5), "{v:?}");
}

#[tokio::test]
async fn rollups_serve_fleet_wide_sums_and_agree_with_the_fan_out() {
    let h = Harness::new(QueryConfig::default());
    let b = base();
    for (i, src) in ["a", "b", "c"].into_iter().enumerate() {
        for mode in ["idle", "user"] {
            let samples: Vec<(i64, f64)> = (0..24)
                .map(|k| (b + k * 15_000, (k * (i as i64 + 1)) as f64))
                .collect();
            h.push(
                src,
                "cpu_seconds",
                &format!("mode=\"{mode}\""),
                SampleKind::CumulativeCounter,
                &samples,
            );
        }
    }
    h.flush().await;
    let t = b + 6 * M;
    let served = h
        .eval("sum by (mode) (rate(cpu_seconds[5m]))", t, t, 0)
        .await
        .unwrap();
    assert_eq!(served.rollups, vec!["all".to_string()]);
    let fanned = h
        .eval(
            "sum by (mode) (rate(cpu_seconds{instance=~\".+\"}[5m]))",
            t,
            t,
            0,
        )
        .await
        .unwrap();
    assert!(fanned.rollups.is_empty());
    let (Data::Vector(s), Data::Vector(f)) = (served.data, fanned.data) else {
        panic!()
    };
    assert_eq!(s.len(), 2);
    for ((ls, vs), (lf, vf)) in s.iter().zip(&f) {
        assert_eq!(ls, lf);
        assert!(close(*vs, *vf), "{vs} vs {vf}");
    }
}

#[tokio::test]
async fn limits_refuse_before_reading_and_name_the_setting() {
    let limits = QueryConfig {
        max_total_points: 1_000,
        ..QueryConfig::default()
    };
    let h = Harness::new(limits);
    let b = base();
    h.push("a", "g", "", SampleKind::Gauge, &[(b, 1.0)]);
    h.flush().await;
    let e = h
        .eval("avg(avg_over_time(g[1m]))", b, b + 2_000 * M, M)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("query.max_total_points"), "{e}");
    let e = h
        .eval("max_over_time(g[2d:1s])", b, b, 0)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("query.max_points"), "{e}");
    assert!(matches!(
        h.eval("rate(", b, b, 0).await,
        Err(EvalError::BadData(_))
    ));
    let e = h.eval("g[5m]", b, b + M, M).await.unwrap_err();
    assert!(e.to_string().contains("range vector"), "{e}");
}

#[tokio::test]
async fn range_queries_are_the_instant_queries_at_each_step() {
    let h = Harness::new(QueryConfig::default());
    let b = base();
    let samples: Vec<(i64, f64)> = (0..120)
        .map(|i| (b + i * 20_000, ((i * 7) % 11) as f64))
        .collect();
    h.push("a", "g", "", SampleKind::Gauge, &samples);
    h.push("b", "g", "", SampleKind::Gauge, &samples[..60]);
    h.flush().await;
    for q in [
        "avg_over_time(g[3m])",
        "sum(rate(g[2m]))",
        "g * 2",
        "max_over_time(g[5m:1m])",
        "quantile_over_time(0.5, g[4m])",
        "count_values(\"v\", g)",
        "topk(1e18, g)",
        "label_replace(g, \"src\", \"$1\", \"instance\", \"(.*)\")",
        "g * on (instance) group_left g",
    ] {
        let (start, end) = (b + 3 * M, b + 40 * M);
        let m = h.matrix(q, start, end, 2 * M).await;
        for (labels, points) in &m {
            for (t, v) in points {
                let inst = h.vector(q, *t).await;
                let found = inst.iter().find(|(l, _)| l == labels).map(|p| p.1);
                assert_eq!(found, Some(*v), "{q} at {t}");
            }
        }
        assert!(!m.is_empty(), "{q}");
    }
}

/// `count_values` over values that change at every step makes a series
/// per series and step. Its chunks are cut so that what they hold fits a
/// share of the read budget (here 4 MiB: about 80 steps of 40 series,
/// where the whole range at once would hold 40 × 200 series of 200
/// slots), and the answer is the same.
#[tokio::test]
async fn count_values_of_changing_values_is_answered_in_bounded_chunks() {
    let h = Harness::new(QueryConfig {
        read_budget_bytes: 16 << 20,
        ..QueryConfig::default()
    });
    let b = base();
    for s in 0..40 {
        let samples: Vec<(i64, f64)> = (0..200)
            .map(|i| (b + i * M + 1_000, (s * 1_000 + i) as f64))
            .collect();
        h.push(&format!("h{s}"), "g", "", SampleKind::Gauge, &samples);
    }
    h.flush().await;
    let q = "count_values(\"v\", g)";
    let m = h.matrix(q, b + M, b + 200 * M, M).await;
    // At each step every series shows the sample of the minute before:
    // its own value, seen once.
    assert_eq!(m.len(), 40 * 200);
    assert!(m.iter().all(|(_, p)| p.len() == 1 && p[0].1 == 1.0));
    let at = b + 120 * M;
    let inst = h.vector(q, at).await;
    let from_range: Vec<(String, f64)> = m
        .iter()
        .filter(|(_, p)| p[0].0 == at)
        .map(|(l, p)| (l.clone(), p[0].1))
        .collect();
    assert_eq!(inst.len(), 40);
    assert_eq!(from_range.len(), 40);
}

/// An answer that cannot fit the read budget is refused as it grows,
/// naming the setting: 8,000 series of one point (7.2 MB estimated) do
/// not fit what an 8 MiB budget leaves the answer besides its chunks.
#[tokio::test]
async fn an_answer_larger_than_the_budget_is_refused() {
    let h = Harness::new(QueryConfig {
        read_budget_bytes: 8 << 20,
        ..QueryConfig::default()
    });
    let b = base();
    for s in 0..40 {
        let samples: Vec<(i64, f64)> = (0..200)
            .map(|i| (b + i * M + 1_000, (s * 1_000 + i) as f64))
            .collect();
        h.push(&format!("h{s}"), "g", "", SampleKind::Gauge, &samples);
    }
    h.flush().await;
    let e = h
        .eval("count_values(\"v\", g)", b + M, b + 200 * M, M)
        .await
        .unwrap_err();
    assert!(matches!(e, EvalError::Execution(_)), "{e}");
    assert!(e.to_string().contains("query.read_budget_bytes"), "{e}");
    // Fewer steps fit.
    assert_eq!(
        h.matrix("count_values(\"v\", g)", b + M, b + 50 * M, M)
            .await
            .len(),
        40 * 50
    );
}

/// A query that holds too much even at a single step is refused before
/// anything is read, naming the setting (HTTP 422).
#[tokio::test]
async fn count_values_too_big_for_one_step_is_refused() {
    let h = Harness::new(QueryConfig::default());
    let b = base();
    h.push("a", "g", "", SampleKind::Gauge, &[(b, 1.0)]);
    h.flush().await;
    // A day of one-second inner steps: 86,401 series of 86,401 slots.
    let e = h
        .eval("max_over_time(count_values(\"v\", g)[1d:1s])", b, b, 0)
        .await
        .unwrap_err();
    assert!(matches!(e, EvalError::Execution(_)), "{e}");
    assert!(e.to_string().contains("query.max_total_points"), "{e}");
    // The same over an hour of minutes is answered.
    let v = h
        .vector("max_over_time(count_values(\"v\", g)[1h:1m])", b + 2 * M)
        .await;
    assert_eq!(v.len(), 1);
}

/// The deepest expression the limits admit, evaluated on a thread with a
/// runtime worker's stack (2 MiB): nesting costs one small frame a level.
#[test]
fn the_deepest_admitted_query_fits_a_worker_stack() {
    let run = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let h = Harness::new(QueryConfig {
                    max_promql_depth: 256,
                    max_promql_nodes: 8_000,
                    ..QueryConfig::default()
                });
                let b = base();
                h.push("a", "x", "", SampleKind::Gauge, &[(b, 1.0)]);
                let deep = format!(
                    "{}avg_over_time(x{{instance=\"a\"}}[1m]){}",
                    "sum(".repeat(250),
                    ")".repeat(250)
                );
                assert_eq!(h.one(&deep, b + M).await, Some(1.0));
                let neg = format!("{}x{{instance=\"a\"}}", "-".repeat(250));
                assert_eq!(h.one(&neg, b + M).await, Some(1.0));
            });
        })
        .unwrap();
    run.join().unwrap();
}
