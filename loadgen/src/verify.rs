//! `--verify`: reads every series back through the daemon's JSON read API
//! (`/api/v1/range?step=1m`) and checks each minute slot against the
//! expectation (see `expect`).
//!
//! `n`, `min` and `max` must match exactly: they do not depend on the order
//! of the samples. `sum` is compared within a bound (see [`sum_tolerance`]).
//! A minute the daemon has that was not expected (an extra point) is a
//! mismatch too, as is a series whose kind differs. Reads merge the
//! daemon's unflushed data, so nothing has to be flushed first; a short
//! settle only lets the last acknowledged requests finish on the daemon.

use std::time::Duration;

use futures::StreamExt;
use serde::Deserialize;

use crate::expect::ExpSlot;
use crate::fleet::Kind;
use crate::transport::{error_chain, Backoff};

/// One series to check.
#[derive(Debug, Clone)]
pub struct Check {
    pub source: String,
    pub metric: String,
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
    /// Series that could not be read at all.
    pub read_errors: u64,
    /// The first mismatches and read errors, sorted.
    pub listed: Vec<String>,
    pub elapsed_s: f64,
}

/// The bound on `|daemon sum − expected sum|` for a slot of `n` values whose
/// absolute values add up to `abs_sum`.
///
/// Floating-point addition is not associative. The daemon adds a minute's
/// values in arrival order into an in-memory slot, and a read then merges
/// partial slots (flushed documents, batches in flight, still-pending
/// accumulators): a different parenthesisation of the same terms than the
/// loadgen's left-to-right sum. Any order of recursive summation of n terms
/// is within `(n − 1)·u·Σ|xᵢ|` of the exact sum (u = 2⁻⁵³, the unit
/// roundoff), so two of them are within `2(n − 1)·u·Σ|xᵢ| < n·2⁻⁵²·Σ|xᵢ|`
/// of each other. Whole-number values (counters) sum exactly below 2⁵³, so
/// for them the bound is slack and a wrong count still shows up in `n`.
pub fn sum_tolerance(n: u64, abs_sum: f64) -> f64 {
    n as f64 * f64::EPSILON * abs_sum
}

/// `/api/v1/range` answers with a list of series; verify asks for one.
#[derive(Debug, Deserialize)]
struct RangeEnvelope {
    series: Vec<RangeBody>,
}

#[derive(Debug, Deserialize)]
struct RangeBody {
    kind: Option<String>,
    points: Vec<PointBody>,
}

#[derive(Debug, Deserialize)]
struct PointBody {
    t: i64,
    n: u64,
    sum: f64,
    min: f64,
    max: f64,
}

#[derive(Debug, Deserialize)]
struct ErrorBody {
    error: String,
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

/// Reads back and compares every series in `checks`; `skipped` names the
/// series left out.
pub async fn verify(
    checks: Vec<Check>,
    skipped: Vec<String>,
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
        skipped_examples: skipped.into_iter().take(opts.max_listed).collect(),
        ..Default::default()
    };
    // Keep more lines than shown, then sort, so the listing is stable
    // whatever order the concurrent reads finish in.
    let keep = opts.max_listed.saturating_mul(20).max(100);
    let mut lines = Vec::new();
    let mut results = futures::stream::iter(checks)
        .map(|check| {
            let client = client.clone();
            async move {
                let got = read_series(&client, opts, &check).await;
                (check, got)
            }
        })
        .buffer_unordered(opts.concurrency.max(1));
    while let Some((check, got)) = results.next().await {
        report.series_checked += 1;
        report.slots_checked += check.slots.len() as u64;
        match got {
            Ok(body) => {
                let found = compare(&check, &body);
                report.extra_points += found.extra;
                report.missing_points += found.missing;
                report.mismatches += found.lines.len() as u64;
                for l in found.lines {
                    if lines.len() < keep {
                        lines.push(l);
                    }
                }
            }
            Err(e) => {
                report.read_errors += 1;
                if lines.len() < keep {
                    lines.push(format!(
                        "{}/{}: could not read: {e}",
                        check.source, check.metric
                    ));
                }
            }
        }
    }
    lines.sort();
    lines.truncate(opts.max_listed);
    report.listed = lines;
    report.passed = report.mismatches == 0 && report.read_errors == 0;
    report.elapsed_s = started.elapsed().as_secs_f64();
    Ok(report)
}

/// One series over the whole window, in chunks of at most a day (the read
/// API caps points per request).
async fn read_series(
    client: &reqwest::Client,
    opts: &VerifyOpts,
    check: &Check,
) -> Result<RangeBody, String> {
    const CHUNK_S: i64 = 86_400;
    let mut all = RangeBody {
        kind: None,
        points: Vec::new(),
    };
    let mut from = opts.from_s;
    while from < opts.to_s {
        let to = (from + CHUNK_S).min(opts.to_s);
        let body = read_chunk(client, opts, check, from, to).await?;
        all.kind = all.kind.or(body.kind);
        all.points.extend(body.points);
        from = to;
    }
    Ok(all)
}

async fn read_chunk(
    client: &reqwest::Client,
    opts: &VerifyOpts,
    check: &Check,
    from: i64,
    to: i64,
) -> Result<RangeBody, String> {
    let url = reqwest::Url::parse_with_params(
        &format!("{}/api/v1/range", opts.http),
        [
            ("source", check.source.as_str()),
            ("metric", check.metric.as_str()),
            ("from", &from.to_string()),
            ("to", &to.to_string()),
            ("step", "1m"),
        ],
    )
    .map_err(|e| e.to_string())?;
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    let mut attempt = 0;
    loop {
        attempt += 1;
        let last = attempt >= 4;
        match client.get(url.clone()).send().await {
            Ok(resp) => {
                let status = resp.status();
                let bytes = match resp.bytes().await {
                    Ok(b) => b,
                    Err(_) if !last => {
                        tokio::time::sleep(backoff.next_delay()).await;
                        continue;
                    }
                    Err(e) => return Err(error_chain(&e)),
                };
                if status.is_success() {
                    let envelope: RangeEnvelope = serde_json::from_slice(&bytes)
                        .map_err(|e| format!("unexpected answer from {url}: {e}"))?;
                    return envelope
                        .series
                        .into_iter()
                        .next()
                        .ok_or_else(|| format!("{url} answered with no series"));
                }
                // 503 is the daemon's "store busy, try again".
                if status.is_server_error() && !last {
                    tokio::time::sleep(backoff.next_delay()).await;
                    continue;
                }
                let why = serde_json::from_slice::<ErrorBody>(&bytes)
                    .map(|b| b.error)
                    .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned());
                return Err(format!("HTTP {status}: {why}"));
            }
            Err(_) if !last => tokio::time::sleep(backoff.next_delay()).await,
            Err(e) => return Err(error_chain(&e)),
        }
    }
}

#[derive(Debug, Default)]
struct Found {
    lines: Vec<String>,
    extra: u64,
    missing: u64,
}

fn minute_name(t: i64) -> String {
    chrono::DateTime::from_timestamp(t, 0)
        .map(|d| d.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|| t.to_string())
}

fn compare(check: &Check, body: &RangeBody) -> Found {
    let name = format!("{}/{}", check.source, check.metric);
    let mut found = Found::default();
    if let Some(kind) = &body.kind {
        if kind != check.kind.api_name() {
            found.lines.push(format!(
                "{name}: kind: expected {}, got {kind}",
                check.kind.api_name()
            ));
        }
    }
    let mut points: Vec<&PointBody> = body.points.iter().collect();
    points.sort_by_key(|p| p.t);
    let (mut i, mut j) = (0, 0);
    while i < check.slots.len() || j < points.len() {
        let exp = check.slots.get(i);
        let got = points.get(j);
        match (exp, got) {
            (Some((t, e)), Some(p)) if *t == p.t => {
                let at = format!("{name} minute {}", minute_name(*t));
                if p.n != e.n {
                    found
                        .lines
                        .push(format!("{at}: n: expected {}, got {}", e.n, p.n));
                }
                if p.min != e.min {
                    found
                        .lines
                        .push(format!("{at}: min: expected {:?}, got {:?}", e.min, p.min));
                }
                if p.max != e.max {
                    found
                        .lines
                        .push(format!("{at}: max: expected {:?}, got {:?}", e.max, p.max));
                }
                let tol = sum_tolerance(e.n.max(p.n), e.abs_sum);
                if (p.sum - e.sum).abs() > tol || p.sum.is_nan() {
                    found.lines.push(format!(
                        "{at}: sum: expected {:?}, got {:?} (difference {:.3e} exceeds the rounding bound {:.3e})",
                        e.sum,
                        p.sum,
                        (p.sum - e.sum).abs(),
                        tol
                    ));
                }
                i += 1;
                j += 1;
            }
            (Some((t, e)), p) if p.is_none_or(|p| *t < p.t) => {
                found.missing += 1;
                found.lines.push(format!(
                    "{name} minute {}: missing: expected n={} sum={:?}, the daemon has no point",
                    minute_name(*t),
                    e.n,
                    e.sum
                ));
                i += 1;
            }
            (_, Some(p)) => {
                found.extra += 1;
                found.lines.push(format!(
                    "{name} minute {}: extra point n={} sum={:?} where none was expected",
                    minute_name(p.t),
                    p.n,
                    p.sum
                ));
                j += 1;
            }
            (_, None) => break,
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(n: u64, sum: f64, min: f64, max: f64) -> ExpSlot {
        ExpSlot {
            n,
            sum,
            min,
            max,
            abs_sum: sum.abs(),
        }
    }

    fn point(t: i64, n: u64, sum: f64, min: f64, max: f64) -> PointBody {
        PointBody {
            t,
            n,
            sum,
            min,
            max,
        }
    }

    #[test]
    fn sums_within_the_rounding_bound_pass() {
        // 0.1 + 0.2 + 0.3 in two orders differ in the last bit.
        let a: f64 = (0.1 + 0.2) + 0.3;
        let b: f64 = 0.1 + (0.2 + 0.3);
        assert_ne!(a, b);
        assert!((a - b).abs() <= sum_tolerance(3, 0.6));
        // One whole unit off is far outside it.
        assert!(1.0 > sum_tolerance(60, 6000.0));
    }

    #[test]
    fn compare_finds_each_kind_of_difference() {
        let check = Check {
            source: "src-000001".into(),
            metric: "m_0001".into(),
            kind: Kind::Gauge,
            slots: vec![
                (60, slot(2, 3.0, 1.0, 2.0)),
                (120, slot(1, 5.0, 5.0, 5.0)),
                (180, slot(1, 1.0, 1.0, 1.0)),
            ],
        };
        let ok = RangeBody {
            kind: Some("gauge".into()),
            points: vec![
                point(120, 1, 5.0, 5.0, 5.0),
                point(60, 2, 3.0, 1.0, 2.0),
                point(180, 1, 1.0, 1.0, 1.0),
            ],
        };
        assert!(compare(&check, &ok).lines.is_empty());
        let bad = RangeBody {
            kind: Some("delta_counter".into()),
            points: vec![
                point(0, 1, 9.0, 9.0, 9.0),
                point(60, 3, 4.0, 1.0, 2.0),
                point(180, 1, 1.0, 0.5, 1.0),
            ],
        };
        let f = compare(&check, &bad);
        assert_eq!((f.extra, f.missing), (1, 1));
        let text = f.lines.join("\n");
        assert!(
            text.contains("kind: expected gauge, got delta_counter"),
            "{text}"
        );
        assert!(
            text.contains("src-000001/m_0001 minute 1970-01-01T00:01:00Z: n: expected 2, got 3"),
            "{text}"
        );
        assert!(text.contains("sum: expected 3.0, got 4.0"), "{text}");
        assert!(text.contains("min: expected 1.0, got 0.5"), "{text}");
        assert!(text.contains("00:02:00Z: missing"), "{text}");
        assert!(text.contains("00:00:00Z: extra point"), "{text}");
        assert_eq!(f.lines.len(), 6);
    }
}
