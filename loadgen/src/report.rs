//! The final report: one structure, printed for people or as JSON.
//!
//! Throughput is accepted samples divided by the send phase's wall time
//! (first connection to last acknowledgement), so it never counts samples
//! the daemon did not take. Latency is per request: for `Push`, from
//! handing the batch to the transport to its response; for `PushStream`,
//! which is answered once per stream, from closing the stream to its
//! summary.

use crate::protocol::Protocol;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::verify::VerifyReport;
use crate::worker::{Mode, Tally};

#[derive(Debug, Clone, Serialize)]
pub struct FleetReport {
    pub sources: usize,
    pub metrics: usize,
    /// `--labels` (empty without labels).
    pub labels: String,
    /// Label sets per metric (1 without labels).
    pub label_sets: usize,
    pub series: usize,
    /// Metrics of each kind.
    pub kinds: BTreeMap<&'static str, usize>,
    pub seed: u64,
    pub source_prefix: String,
    pub reset_every: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct RangeReport {
    /// `max`, `real_time` or `verify_only`.
    pub pace: &'static str,
    pub start_ms: i64,
    pub end_ms: i64,
    pub start: String,
    pub rate: f64,
    /// Samples per series.
    pub ticks: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Samples {
    pub planned: u64,
    pub sent: u64,
    pub accepted: u64,
    pub rejected: u64,
    /// In requests that failed ambiguously: maybe stored, maybe not.
    pub ambiguous: u64,
    /// Sent but neither accepted nor rejected: the run stopped first.
    pub unacknowledged: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Requests {
    pub acknowledged: u64,
    pub failed: u64,
    pub retries: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    /// What one measurement is.
    pub measures: &'static str,
    pub count: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p99_9_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
}

impl Latency {
    pub fn from_histogram(h: &Histogram<u64>, mode: Mode) -> Latency {
        let ms = |us: u64| us as f64 / 1000.0;
        let measures = match mode {
            Mode::Unary => "Push request: send to response",
            Mode::Stream => "PushStream: stream closed to summary",
        };
        if h.is_empty() {
            return Latency {
                measures,
                ..Default::default()
            };
        }
        Latency {
            measures,
            count: h.len(),
            p50_ms: ms(h.value_at_quantile(0.50)),
            p90_ms: ms(h.value_at_quantile(0.90)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            p99_9_ms: ms(h.value_at_quantile(0.999)),
            max_ms: ms(h.max()),
            mean_ms: h.mean() / 1000.0,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RealTime {
    /// The latest a batch left after its first sample was due.
    pub max_lag_ms: f64,
    /// Batches sent more than one tick late: the fleet outran the daemon or
    /// the load generator.
    pub late_batches: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub target: String,
    /// The HTTP API verification reads from.
    pub http: String,
    pub protocol: Protocol,
    pub mode: Mode,
    pub fleet: FleetReport,
    pub range: RangeReport,
    pub batch: usize,
    pub span: u32,
    pub concurrency: usize,
    pub samples: Samples,
    pub requests: Requests,
    pub elapsed_s: f64,
    /// When the send phase (`elapsed_s`) began, in Unix seconds: after
    /// `--prerender`'s encoding, at the scheduled start in real time.
    pub send_started_unix_s: f64,
    /// Accepted samples per second of the send phase.
    pub samples_per_s: f64,
    pub latency: Latency,
    /// Failed requests (including retried ones) by gRPC status.
    pub errors_by_status: BTreeMap<&'static str, u64>,
    pub error_examples: BTreeMap<&'static str, String>,
    /// Rejected samples by reason, from the responses' rejection lists.
    pub rejections_by_reason: BTreeMap<String, u64>,
    /// True when some response's list was cut short (counts are then partial).
    pub rejections_truncated: bool,
    pub rejection_examples: Vec<String>,
    pub real_time: Option<RealTime>,
    pub verify: Option<VerifyReport>,
    /// `ok`, `verify_failed`, `ambiguous_failures`, `aborted` or `interrupted`.
    pub outcome: &'static str,
    pub fatal: Option<String>,
}

/// Adds one worker's books to the totals.
pub fn merge_tally(into: &mut Tally, t: &Tally) {
    into.sent += t.sent;
    into.accepted += t.accepted;
    into.rejected += t.rejected;
    into.ambiguous += t.ambiguous;
    into.unacknowledged += t.unacknowledged;
    into.acks += t.acks;
    into.failed += t.failed;
    into.retries += t.retries;
    for (k, v) in &t.errors_by_code {
        *into.errors_by_code.entry(k).or_default() += v;
    }
    for (k, v) in &t.error_examples {
        into.error_examples.entry(k).or_insert_with(|| v.clone());
    }
    for (k, v) in &t.rejections_by_reason {
        *into.rejections_by_reason.entry(k.clone()).or_default() += v;
    }
    into.rejections_truncated |= t.rejections_truncated;
    for e in &t.rejection_examples {
        if into.rejection_examples.len() < 5 {
            into.rejection_examples.push(e.clone());
        }
    }
    into.max_lag = into.max_lag.max(t.max_lag);
    into.late_batches += t.late_batches;
}

/// `1234567` → `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl Report {
    pub fn human(&self) -> String {
        let mut o = String::new();
        let f = &self.fleet;
        let r = &self.range;
        let pace = match r.pace {
            "max" => "as fast as possible",
            "real_time" => "in real time",
            _ => "verify only",
        };
        let sets = match f.label_sets {
            _ if f.labels.is_empty() => String::new(),
            n => format!(" × {n} label sets ({})", f.labels),
        };
        let _ = writeln!(
            o,
            "tally-loadgen → {}: {} sources × {} metrics{sets} = {} series (gauge {}, delta {}, cumulative {}), seed {}",
            if r.pace == "verify_only" {
                &self.http
            } else {
                &self.target
            },
            thousands(f.sources as u64),
            f.metrics,
            thousands(f.series as u64),
            f.kinds.get("gauge").unwrap_or(&0),
            f.kinds.get("delta").unwrap_or(&0),
            f.kinds.get("cumulative").unwrap_or(&0),
            f.seed,
        );
        let _ = writeln!(
            o,
            "  range     {} for {:.0} s at {} sample/s per series ({} samples each), {pace}",
            r.start,
            (r.end_ms - r.start_ms) as f64 / 1000.0,
            r.rate,
            r.ticks,
        );
        if r.pace != "verify_only" {
            self.human_send(&mut o);
            self.human_problems(&mut o);
        }
        if let Some(v) = &self.verify {
            human_verify(&mut o, v);
        }
        if let Some(f) = &self.fatal {
            let _ = writeln!(o, "error: {f}");
        }
        o
    }

    /// Transport, counts, speed and latency of the send phase.
    fn human_send(&self, o: &mut String) {
        {
            let s = &self.samples;
            let mode = match (self.protocol, self.mode) {
                (Protocol::Tally, Mode::Unary) => "unary Push",
                (Protocol::Tally, Mode::Stream) => "PushStream",
                (Protocol::OtlpGrpc, _) => "OTLP/gRPC Export",
                (Protocol::OtlpHttp, _) => "OTLP/HTTP POST /v1/metrics",
                (Protocol::RemoteWrite, _) => "remote-write POST /api/v1/write",
                (Protocol::Influx, _) => "line protocol POST /api/v2/write",
                (Protocol::Graphite, _) => "Graphite plaintext over TCP",
            };
            let _ = writeln!(
                o,
                "  transport {mode}, batches of ≤{} samples (span {}), {} connections",
                self.batch, self.span, self.concurrency
            );
            let _ = writeln!(
                o,
                "  samples   sent {}  accepted {}  rejected {}  ambiguous {}  unacknowledged {}  (of {} planned)",
                thousands(s.sent),
                thousands(s.accepted),
                thousands(s.rejected),
                thousands(s.ambiguous),
                thousands(s.unacknowledged),
                thousands(s.planned),
            );
            let _ = writeln!(
                o,
                "  requests  {} acknowledged, {} failed, {} retries",
                thousands(self.requests.acknowledged),
                thousands(self.requests.failed),
                thousands(self.requests.retries),
            );
            let _ = writeln!(
                o,
                "  speed     {} samples/s accepted ({:.2} s sending)",
                thousands(self.samples_per_s.round() as u64),
                self.elapsed_s,
            );
            let l = &self.latency;
            let _ = writeln!(
                o,
                "  latency   p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  p99.9 {:.2} ms  max {:.2} ms  ({} × {})",
                l.p50_ms, l.p90_ms, l.p99_ms, l.p99_9_ms, l.max_ms, thousands(l.count), l.measures,
            );
            if let Some(rt) = &self.real_time {
                let _ = writeln!(
                    o,
                    "  schedule  max lag {:.1} ms, {} batches more than one tick late",
                    rt.max_lag_ms, rt.late_batches
                );
            }
        }
    }

    /// Errors and rejections, with an example of each.
    fn human_problems(&self, o: &mut String) {
        {
            if self.errors_by_status.is_empty() {
                let _ = writeln!(o, "  errors    none");
            } else {
                for (code, n) in &self.errors_by_status {
                    let example = self
                        .error_examples
                        .get(code)
                        .map(String::as_str)
                        .unwrap_or("");
                    let _ = writeln!(o, "  errors    {code} × {n}: {example}");
                }
            }
            if !self.rejections_by_reason.is_empty() {
                let list: Vec<String> = self
                    .rejections_by_reason
                    .iter()
                    .map(|(k, v)| format!("{k} {}", thousands(*v)))
                    .collect();
                let _ = writeln!(
                    o,
                    "  rejected  {}{}",
                    list.join(", "),
                    if self.rejections_truncated {
                        " (rejection lists were truncated: counts are partial)"
                    } else {
                        ""
                    }
                );
                for e in &self.rejection_examples {
                    let _ = writeln!(o, "            e.g. {e}");
                }
            }
        }
    }
}

/// The verdict of `--verify`, with the first mismatches.
fn human_verify(o: &mut String, v: &VerifyReport) {
    let verdict = if v.passed { "PASSED" } else { "FAILED" };
    let _ = writeln!(
            o,
            "verify {verdict}: {} series, {} minute slots checked in {:.2} s ({} reads); {} mismatches ({} missing, {} extra points, {} extra series), {} series unreadable",
            thousands(v.series_checked),
            thousands(v.slots_checked),
            v.elapsed_s,
            thousands(v.reads),
            thousands(v.mismatches),
            v.missing_points,
            v.extra_points,
            v.extra_series,
            v.read_errors,
        );
    for l in &v.listed {
        let _ = writeln!(o, "  {l}");
    }
    let shown = v.listed.len() as u64;
    if v.mismatches + v.read_errors > shown {
        let _ = writeln!(
            o,
            "  … and {} more (--max-mismatches)",
            v.mismatches + v.read_errors - shown
        );
    }
    if v.series_skipped > 0 {
        let _ = writeln!(
                o,
                "WARNING: {} series were NOT verified: requests carrying their samples failed ambiguously (the daemon may or may not have applied them), e.g. {}",
                thousands(v.series_skipped),
                v.skipped_examples.join(", ")
            );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(6_000_000), "6,000,000");
    }

    #[test]
    fn latency_percentiles_come_from_the_histogram() {
        let mut h = crate::worker::new_histogram();
        for us in 1..=1000u64 {
            h.record(us * 1000).unwrap();
        }
        let l = Latency::from_histogram(&h, Mode::Unary);
        assert_eq!(l.count, 1000);
        assert!((l.p50_ms - 500.0).abs() < 1.0, "{}", l.p50_ms);
        assert!((l.p99_ms - 990.0).abs() < 1.0, "{}", l.p99_ms);
        assert!((l.max_ms - 1000.0).abs() < 1.0, "{}", l.max_ms);
    }
}
