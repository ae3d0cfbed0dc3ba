//! `--verify`: reads every series back through the daemon's JSON read API
//! (`/api/v1/range?step=1m`) and checks each minute slot against the
//! expectation (see `expect`): how reads are made is in `read`, what counts
//! as a difference in `compare`.
//!
//! One read per source and metric returns all of its label sets, so a
//! labelled fleet costs no more reads than an unlabelled one. When a source
//! and metric have more label sets than one read may return (the daemon's
//! `query.max_series`, 1,000 by default), each series is read on its own
//! with its label set as the read's `labels` condition. Reads merge the
//! daemon's unflushed data, so nothing has to be flushed first; a short
//! settle only lets the last acknowledged requests finish on the daemon.

mod compare;
#[cfg(test)]
mod fake;
mod read;

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use crate::expect::ExpSlot;
use crate::fleet::Kind;
use crate::transport::error_chain;
use read::ReadOf;

/// Most series one read may return: the daemon's default
/// `query.max_series`. Sources and metrics with more label sets are read
/// series by series.
const MAX_SERIES_PER_READ: usize = 1_000;

/// A series by name: source, metric and the canonical text of its labels
/// (empty for none).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SeriesKey {
    pub source: String,
    pub metric: String,
    pub labels: String,
}

impl SeriesKey {
    /// The series of the same source and metric with other labels.
    fn with_labels(&self, labels: &str) -> SeriesKey {
        SeriesKey {
            labels: labels.to_string(),
            ..self.clone()
        }
    }
}

/// `source/metric`, or `source/metric{labels}`.
impl fmt::Display for SeriesKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.source, self.metric)?;
        if !self.labels.is_empty() {
            write!(f, "{{{}}}", self.labels)?;
        }
        Ok(())
    }
}

/// One series to check.
#[derive(Debug, Clone)]
pub struct Check {
    pub series: SeriesKey,
    pub kind: Kind,
    /// Ascending by minute.
    pub slots: Vec<(i64, ExpSlot)>,
}

#[derive(Debug, Clone)]
pub struct VerifyOpts {
    /// Base URL of the HTTP listener, without a trailing slash.
    pub http: String,
    pub concurrency: usize,
    pub timeout: Duration,
    pub settle: Duration,
    /// How long a `partial` answer is read again (`read.rs`).
    pub partial_patience: Duration,
    /// How long a read the daemon does not answer (refused, reset, 502
    /// to 504) is tried again (`read.rs`).
    pub read_patience: Duration,
    /// Set once a read has waited its whole `read_patience` in vain: the
    /// daemon is taken for gone, and no later read waits for it.
    pub gone: Arc<AtomicBool>,
    /// Mismatch lines listed in the report; all are counted.
    pub max_listed: usize,
    /// Unix seconds; minutes whose start is in `[from, to)` are read.
    pub from_s: i64,
    pub to_s: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("--http {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("cannot reach tallyd's HTTP API at {url}: {detail}. --verify reads back through /api/v1/range: point --http at tallyd's HTTP listener (default port 8080)")]
    Unreachable { url: String, detail: String },
    #[error("building the HTTP client: {0}")]
    Client(String),
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct VerifyReport {
    pub passed: bool,
    pub series_checked: u64,
    /// Series left out because a request carrying their samples failed
    /// ambiguously (see `expect`).
    pub series_skipped: u64,
    pub skipped_examples: Vec<String>,
    /// Expected minute slots compared.
    pub slots_checked: u64,
    pub mismatches: u64,
    /// Minutes present in the daemon but not expected.
    pub extra_points: u64,
    /// Expected minutes the daemon does not have.
    pub missing_points: u64,
    /// Series with points under a checked source and metric whose label
    /// set the run did not send.
    pub extra_series: u64,
    /// Series that could not be read at all, or only `partial` (from the
    /// daemon's memory alone, its store unreachable) for longer than
    /// `--partial-patience`: a read problem, never missing data.
    pub read_errors: u64,
    /// Reads answered `partial` and read again.
    pub partial_rereads: u64,
    /// HTTP reads made (one per source and metric, or per series; more
    /// when the window spans days).
    pub reads: u64,
    /// The first mismatches and read errors, sorted.
    pub listed: Vec<String>,
    pub elapsed_s: f64,
}

/// Checks that the HTTP API answers at all, before a long run relies on it.
pub async fn preflight(http: &str, timeout: Duration) -> Result<(), VerifyError> {
    let client = client(timeout)?;
    let url = format!("{http}/healthz");
    let unreachable = |detail: String| VerifyError::Unreachable {
        url: http.to_string(),
        detail,
    };
    let resp = client
        .get(&url)
        .send()
        .await
        .map_err(|e| unreachable(error_chain(&e)))?;
    if !resp.status().is_success() {
        return Err(unreachable(format!(
            "GET /healthz answered {}",
            resp.status()
        )));
    }
    Ok(())
}

fn client(timeout: Duration) -> Result<reqwest::Client, VerifyError> {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(5)))
        .build()
        .map_err(|e| VerifyError::Client(e.to_string()))
}

/// One read and the series it checks.
#[derive(Debug)]
struct Read {
    checks: Vec<Check>,
    /// Label sets of the read's source and metric left out of verification.
    skipped: HashSet<String>,
    /// A read of one series, with its label set as the `labels` condition.
    one_series: bool,
}

impl Read {
    fn of(&self) -> ReadOf<'_> {
        let first = &self.checks[0].series;
        ReadOf {
            source: &first.source,
            metric: &first.metric,
            labels: self.one_series.then_some(first.labels.as_str()),
        }
    }
}

/// The reads that cover `checks`: one per source and metric, or one per
/// series where a source and metric have too many label sets for one read.
fn plan_reads(checks: Vec<Check>, skipped: &[SeriesKey]) -> Vec<Read> {
    type Pair = (String, String);
    let mut by_pair: BTreeMap<Pair, (Vec<Check>, HashSet<String>)> = BTreeMap::new();
    for c in checks {
        let pair = (c.series.source.clone(), c.series.metric.clone());
        by_pair.entry(pair).or_default().0.push(c);
    }
    for s in skipped {
        if let Some((_, set)) = by_pair.get_mut(&(s.source.clone(), s.metric.clone())) {
            set.insert(s.labels.clone());
        }
    }
    let mut reads = Vec::with_capacity(by_pair.len());
    for (checks, skipped) in by_pair.into_values() {
        let labelled = checks.iter().all(|c| !c.series.labels.is_empty());
        if checks.len() + skipped.len() <= MAX_SERIES_PER_READ || !labelled {
            reads.push(Read {
                checks,
                skipped,
                one_series: false,
            });
        } else {
            // A full label set selects that series only: no skipped set
            // can be among the answer.
            reads.extend(checks.into_iter().map(|c| Read {
                checks: vec![c],
                skipped: HashSet::new(),
                one_series: true,
            }));
        }
    }
    reads
}

/// Reads back and compares every series in `checks`; `skipped` names the
/// series left out.
pub async fn verify(
    checks: Vec<Check>,
    skipped: Vec<SeriesKey>,
    opts: &VerifyOpts,
) -> Result<VerifyReport, VerifyError> {
    let started = std::time::Instant::now();
    reqwest::Url::parse(&opts.http).map_err(|e| VerifyError::BadUrl {
        url: opts.http.clone(),
        reason: e.to_string(),
    })?;
    tokio::time::sleep(opts.settle).await;
    let client = client(opts.timeout)?;
    let mut report = VerifyReport {
        series_skipped: skipped.len() as u64,
        skipped_examples: skipped
            .iter()
            .take(opts.max_listed)
            .map(SeriesKey::to_string)
            .collect(),
        ..Default::default()
    };
    let reads = plan_reads(checks, &skipped);
    let days = ((opts.to_s - opts.from_s).max(1) as u64).div_ceil(86_400);
    report.reads = reads.len() as u64 * days;
    // Keep more lines than shown, then sort, so the listing is stable
    // whatever order the concurrent reads finish in.
    let keep = opts.max_listed.saturating_mul(20).max(100);
    let mut lines = Vec::new();
    let mut results = futures::stream::iter(reads)
        .map(|r| {
            let client = client.clone();
            async move {
                let mut rereads = 0;
                let got = read::read(&client, opts, r.of(), &mut rereads).await;
                (r, got, rereads)
            }
        })
        .buffer_unordered(opts.concurrency.max(1));
    while let Some((r, got, rereads)) = results.next().await {
        report.partial_rereads += rereads;
        report.series_checked += r.checks.len() as u64;
        report.slots_checked += r.checks.iter().map(|c| c.slots.len() as u64).sum::<u64>();
        let found = match got {
            Ok(bodies) => compare::compare_read(&r.checks, &r.skipped, bodies),
            Err(e) => {
                // One line per series, so lines and counts agree.
                report.read_errors += r.checks.len() as u64;
                let room = keep.saturating_sub(lines.len());
                lines.extend(
                    r.checks
                        .iter()
                        .take(room)
                        .map(|c| format!("{}: could not read: {e}", c.series)),
                );
                continue;
            }
        };
        report.extra_points += found.extra;
        report.missing_points += found.missing;
        report.extra_series += found.extra_series;
        report.mismatches += found.lines.len() as u64;
        let room = keep.saturating_sub(lines.len());
        lines.extend(found.lines.into_iter().take(room));
    }
    lines.sort();
    lines.truncate(opts.max_listed);
    report.listed = lines;
    report.passed = report.mismatches == 0 && report.read_errors == 0;
    report.elapsed_s = started.elapsed().as_secs_f64();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use super::*;

    fn key(source: &str, metric: &str, labels: &str) -> SeriesKey {
        SeriesKey {
            source: source.into(),
            metric: metric.into(),
            labels: labels.into(),
        }
    }

    fn check(series: SeriesKey) -> Check {
        Check {
            series,
            kind: Kind::Gauge,
            slots: Vec::new(),
        }
    }

    #[test]
    fn one_read_per_source_and_metric_with_every_label_set() {
        let checks = vec![
            check(key("a", "m1", "cpu=\"0\"")),
            check(key("b", "m1", "cpu=\"0\"")),
            check(key("a", "m1", "cpu=\"1\"")),
            check(key("a", "m2", "cpu=\"0\"")),
        ];
        let skipped = [key("a", "m1", "cpu=\"2\""), key("c", "m1", "cpu=\"0\"")];
        let reads = plan_reads(checks, &skipped);
        assert_eq!(reads.len(), 3);
        let r = &reads[0];
        let of = r.of();
        assert_eq!((of.source, of.metric, of.labels), ("a", "m1", None));
        assert_eq!(r.checks.len(), 2);
        assert_eq!(r.skipped, HashSet::from(["cpu=\"2\"".to_string()]));
        assert_eq!(
            r.checks[1].series.to_string(),
            "a/m1{cpu=\"1\"}",
            "{:?}",
            r.checks
        );
        // Unlabelled series: one read each, as before labels.
        let plain = plan_reads(vec![check(key("a", "m1", ""))], &[]);
        assert_eq!(plain.len(), 1);
        assert_eq!(plain[0].checks[0].series.to_string(), "a/m1");
    }

    /// Every series of a labelled fleet at one minute, value `i` for the
    /// `i`-th: the checks, and what a daemon holding exactly that stores.
    fn labelled(sources: usize, metrics: usize, spec: &str) -> (Vec<Check>, Vec<fake::Stored>) {
        let spec: crate::labels::LabelSpec = spec.parse().unwrap();
        let (mut checks, mut stored) = (Vec::new(), Vec::new());
        for s in 0..sources {
            for m in 0..metrics {
                for set in 0..spec.sets() {
                    let v = checks.len() as f64;
                    let series = key(&format!("s{s}"), &format!("m{m}"), &spec.canonical(set));
                    stored.push(fake::Stored {
                        source: series.source.clone(),
                        metric: series.metric.clone(),
                        labels: spec
                            .pairs(set)
                            .into_iter()
                            .map(|(n, v)| (n.into(), v))
                            .collect(),
                        kind: "gauge",
                        points: vec![(60, 1, v, v, v)],
                    });
                    let slot = ExpSlot {
                        n: 1,
                        sum: v,
                        min: v,
                        max: v,
                        abs_sum: v,
                    };
                    checks.push(Check {
                        series,
                        kind: Kind::Gauge,
                        slots: vec![(60, slot)],
                    });
                }
            }
        }
        (checks, stored)
    }

    fn opts(http: String) -> VerifyOpts {
        VerifyOpts {
            http,
            concurrency: 4,
            timeout: Duration::from_secs(10),
            settle: Duration::ZERO,
            partial_patience: Duration::from_secs(2),
            read_patience: Duration::from_secs(10),
            gone: Default::default(),
            max_listed: 10,
            from_s: 0,
            to_s: 3600,
        }
    }

    #[tokio::test]
    async fn a_labelled_fleet_verifies_through_the_documented_range_api() {
        let (checks, stored) = labelled(3, 2, "cpu=2,mode=3");
        let fake = Arc::new(fake::Fake::default());
        *fake.store.lock().unwrap() = stored;
        let opts = opts(fake::serve(fake.clone()).await);
        let report = verify(checks.clone(), Vec::new(), &opts).await.unwrap();
        assert!(report.passed, "{report:?}");
        assert_eq!((report.series_checked, report.reads), (36, 6));
        assert_eq!(fake.reads.load(Ordering::Relaxed), 6);

        // One slot off, one set never sent, and a set left out of
        // verification holding anything at all.
        {
            let mut store = fake.store.lock().unwrap();
            store[7].points[0].1 = 2;
            let mut extra = store[0].clone();
            extra.labels.insert("cpu".into(), "9".into());
            store.push(extra);
        }
        let skipped = vec![checks[13].series.clone()];
        fake.store.lock().unwrap()[13].points[0].2 = -1.0;
        let mut fewer = checks;
        fewer.remove(13);
        let report = verify(fewer, skipped, &opts).await.unwrap();
        assert!(!report.passed);
        assert_eq!(
            (
                report.mismatches,
                report.extra_series,
                report.series_skipped
            ),
            (2, 1, 1)
        );
        let text = report.listed.join("\n");
        assert!(
            text.contains(
                r#"s0/m1{cpu="0",mode="1"} minute 1970-01-01T00:01:00Z: n: expected 1, got 2"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"s0/m0{cpu="9",mode="0"}: extra series"#),
            "{text}"
        );
    }

    /// A daemon whose store is away answers `partial` for a while: the
    /// reads are made again and pass; one that stays partial is a read
    /// error, never missing data.
    #[tokio::test]
    async fn partial_answers_are_read_again_and_never_count_as_missing() {
        let (checks, stored) = labelled(2, 2, "cpu=2");
        let fake = Arc::new(fake::Fake::default());
        *fake.store.lock().unwrap() = stored;
        fake.partial_for.store(5, Ordering::Relaxed);
        let opts = opts(fake::serve(fake.clone()).await);
        let report = verify(checks.clone(), Vec::new(), &opts).await.unwrap();
        assert!(report.passed, "{report:?}");
        assert_eq!(report.partial_rereads, 5, "{report:?}");

        fake.partial_for.store(usize::MAX, Ordering::Relaxed);
        let report = verify(checks, Vec::new(), &opts).await.unwrap();
        assert!(!report.passed);
        assert_eq!(
            (report.missing_points, report.mismatches),
            (0, 0),
            "{report:?}"
        );
        assert_eq!(report.read_errors, 8, "{report:?}");
        assert!(report.listed[0].contains("partial"), "{:?}", report.listed);
    }

    /// A daemon killed and restarted while it is read drops the reads in
    /// progress, and a busy one answers 503: such reads are made again
    /// until it answers, for up to `read_patience`, and only then count as
    /// read errors; after one read has waited that long in vain, the others
    /// do not wait. A 4xx is an answer: no read is made again for it.
    #[tokio::test]
    async fn reads_the_daemon_drops_or_is_busy_for_are_made_again_until_it_answers() {
        // One source and metric: one read, of two series.
        let (checks, stored) = labelled(1, 1, "cpu=2");
        let fake = Arc::new(fake::Fake::default());
        *fake.store.lock().unwrap() = stored;
        let base = fake::serve(fake.clone()).await;
        // Six failures: more than a count of four tries would outlast.
        fake.drop_for.store(3, Ordering::Relaxed);
        fake.busy_for.store(3, Ordering::Relaxed);
        let report = verify(checks.clone(), Vec::new(), &opts(base.clone()))
            .await
            .unwrap();
        assert!(report.passed, "{report:?}");
        assert_eq!(report.read_errors, 0, "{report:?}");

        fake.drop_for.store(usize::MAX, Ordering::Relaxed);
        let impatient = VerifyOpts {
            read_patience: Duration::from_millis(300),
            ..opts(base.clone())
        };
        let started = std::time::Instant::now();
        let report = verify(checks.clone(), Vec::new(), &impatient)
            .await
            .unwrap();
        assert!(!report.passed);
        assert_eq!(
            (report.missing_points, report.mismatches, report.read_errors),
            (0, 0, 2),
            "{report:?}"
        );
        assert!(impatient.gone.load(Ordering::Relaxed));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );

        fake.drop_for.store(0, Ordering::Relaxed);
        fake.refuse.store(true, Ordering::Relaxed);
        let reads = fake.reads.load(Ordering::Relaxed);
        let report = verify(checks, Vec::new(), &opts(base)).await.unwrap();
        assert_eq!(report.read_errors, 2, "{report:?}");
        assert_eq!(fake.reads.load(Ordering::Relaxed) - reads, 1, "one try");
    }

    #[tokio::test]
    async fn an_unlabelled_fleet_reads_one_series_per_source_and_metric() {
        let (checks, mut stored) = labelled(2, 3, "");
        stored[4].points[0].3 = -7.0;
        let fake = Arc::new(fake::Fake::default());
        *fake.store.lock().unwrap() = stored;
        let opts = opts(fake::serve(fake.clone()).await);
        let report = verify(checks, Vec::new(), &opts).await.unwrap();
        assert_eq!(
            (report.series_checked, report.reads, report.mismatches),
            (6, 6, 1)
        );
        assert_eq!(
            report.listed,
            ["s1/m1 minute 1970-01-01T00:01:00Z: min: expected 4.0, got -7.0"]
        );
    }

    #[tokio::test]
    async fn label_sets_beyond_one_read_verify_through_the_labels_condition() {
        let (checks, stored) = labelled(1, 1, "id=1001");
        let fake = Arc::new(fake::Fake::default());
        *fake.store.lock().unwrap() = stored;
        let opts = opts(fake::serve(fake.clone()).await);
        let report = verify(checks, Vec::new(), &opts).await.unwrap();
        assert!(report.passed, "{report:?}");
        assert_eq!(fake.reads.load(Ordering::Relaxed), 1001);
    }

    #[test]
    fn too_many_label_sets_for_one_read_are_read_one_by_one() {
        let checks = (0..=MAX_SERIES_PER_READ)
            .map(|i| check(key("a", "m1", &format!("id=\"{i}\""))))
            .collect();
        let reads = plan_reads(checks, &[]);
        assert_eq!(reads.len(), MAX_SERIES_PER_READ + 1);
        let of = reads[7].of();
        assert_eq!(of.labels, Some(reads[7].checks[0].series.labels.as_str()));
    }
}
