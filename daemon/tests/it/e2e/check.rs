//! What the end-to-end suite sends and expects back, and how it checks it:
//! series as sent, the points the daemon must report for them, and exact
//! reads over gRPC and HTTP at every step. Separate from the tests so the
//! suite's modules (per store, one store only) share one definition of
//! "exact".
//!
//! Sample values are small integers and binary fractions, so every sum is
//! exact in any order and the expected aggregates compare with `==`.

use std::collections::BTreeMap;
use std::time::Duration;

use tally_proto::v1 as pb;
use tally_testkit::client::{get_json, now_ms, within};
use tally_testkit::Daemon;
use tonic::transport::Channel;

/// How long a SIGTERM'ed daemon may take to exit (its own shutdown deadline
/// is 30 s by default).
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(35);

pub const MINUTE_MS: i64 = 60_000;
pub const SECOND_MS: i64 = 1_000;

/// Start of the minute `minutes_ago` minutes before the current one, in ms.
pub fn minute_start_ms(minutes_ago: i64) -> i64 {
    let now = now_ms();
    now - now.rem_euclid(MINUTE_MS) - minutes_ago * MINUTE_MS
}

/// Like [`minute_start_ms`], but moved back (by at most `span_minutes`
/// more) so that the `span_minutes` minutes from it lie in one clock hour.
/// For tests that count which write commands a flush sends: data crossing an
/// hour (or day) boundary makes the flush insert new documents first.
pub fn minute_start_in_one_hour_ms(minutes_ago: i64, span_minutes: i64) -> i64 {
    const HOUR_MS: i64 = 60 * MINUTE_MS;
    let t0 = minute_start_ms(minutes_ago);
    let end = t0 + (span_minutes - 1) * MINUTE_MS;
    if end.div_euclid(HOUR_MS) == t0.div_euclid(HOUR_MS) {
        t0
    } else {
        // The span would cross an hour boundary: end it just before.
        end.div_euclid(HOUR_MS) * HOUR_MS - span_minutes * MINUTE_MS
    }
}

/// A range around data starting at `t0`: ten minutes before it to two
/// minutes from now, in ms.
pub fn range_around(t0: i64) -> (i64, i64) {
    (t0 - 10 * MINUTE_MS, now_ms() + 2 * MINUTE_MS)
}

// ---------------------------------------------------------------------------
// What the tests send, and what they expect back.

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Gauge,
    Delta,
    Cumulative,
}

impl Kind {
    pub fn proto(self) -> pb::SampleKind {
        match self {
            Kind::Gauge => pb::SampleKind::Gauge,
            Kind::Delta => pb::SampleKind::DeltaCounter,
            Kind::Cumulative => pb::SampleKind::CumulativeCounter,
        }
    }

    /// The kind's name in the HTTP API.
    pub fn json(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Delta => "delta_counter",
            Kind::Cumulative => "cumulative_counter",
        }
    }

    pub fn is_counter(self) -> bool {
        self != Kind::Gauge
    }
}

/// One series as sent: (timestamp ms, value) in the order sent.
#[derive(Debug, Clone)]
pub struct Sent {
    pub source: String,
    pub metric: String,
    pub kind: Kind,
    pub samples: Vec<(i64, f64)>,
}

impl Sent {
    pub fn new(source: &str, metric: &str, kind: Kind, samples: Vec<(i64, f64)>) -> Sent {
        Sent {
            source: source.into(),
            metric: metric.into(),
            kind,
            samples,
        }
    }

    pub fn proto(&self) -> pb::SeriesSamples {
        pb::SeriesSamples {
            labels: Vec::new(),
            metric: self.metric.clone(),
            kind: self.kind.proto() as i32,
            timestamps_ms: self.samples.iter().map(|s| s.0).collect(),
            values: self.samples.iter().map(|s| s.1).collect(),
            start_times_ms: Vec::new(),
        }
    }

    /// What the daemon must store: gauges and delta counters as sent,
    /// cumulative counters as deltas (the first sample is the baseline; a
    /// value below the previous one is a reset and counts whole).
    pub fn expect(&self) -> Expect {
        let stored = match self.kind {
            Kind::Gauge | Kind::Delta => self.samples.clone(),
            Kind::Cumulative => self
                .samples
                .windows(2)
                .map(|w| {
                    let ((_, prev), (ts, v)) = (w[0], w[1]);
                    (ts, if v >= prev { v - prev } else { v })
                })
                .collect(),
        };
        Expect {
            source: self.source.clone(),
            metric: self.metric.clone(),
            kind: Some(self.kind),
            stored,
        }
    }

    /// Samples `range` of this series, as a series of its own.
    pub fn part(&self, range: std::ops::Range<usize>) -> Sent {
        Sent {
            samples: self.samples[range].to_vec(),
            ..self.clone()
        }
    }
}

/// What the daemon must report for each of `sent`.
pub fn expects(sent: &[Sent]) -> Vec<Expect> {
    sent.iter().map(Sent::expect).collect()
}

/// A series as the daemon must report it: its kind (None: unknown) and the
/// (timestamp ms, value) pairs that landed in slots.
#[derive(Debug, Clone)]
pub struct Expect {
    pub source: String,
    pub metric: String,
    pub kind: Option<Kind>,
    pub stored: Vec<(i64, f64)>,
}

impl Expect {
    /// A series the daemon must know nothing about.
    pub fn absent(source: &str, metric: &str) -> Expect {
        Expect {
            source: source.into(),
            metric: metric.into(),
            kind: None,
            stored: Vec::new(),
        }
    }
}

/// One expected bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    pub t_ms: i64,
    pub n: u64,
    pub sum: f64,
    pub min: f64,
    pub max: f64,
}

/// Folds stored samples into buckets `width_s` wide, ascending; buckets
/// without samples do not exist.
pub fn buckets(stored: &[(i64, f64)], width_s: i64) -> Vec<Bucket> {
    let width_ms = width_s * 1000;
    let mut out: BTreeMap<i64, Bucket> = BTreeMap::new();
    for &(ts, v) in stored {
        let t_ms = ts - ts.rem_euclid(width_ms);
        let b = out.entry(t_ms).or_insert(Bucket {
            t_ms,
            n: 0,
            sum: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        });
        b.n += 1;
        b.sum += v;
        b.min = b.min.min(v);
        b.max = b.max.max(v);
    }
    out.into_values().collect()
}

/// Groups series into one request, one `SourceBatch` per source in order of
/// first appearance.
pub fn request(series: &[Sent]) -> pb::PushRequest {
    let mut sources: Vec<pb::SourceBatch> = Vec::new();
    for s in series {
        match sources.iter_mut().find(|b| b.source == s.source) {
            Some(b) => b.series.push(s.proto()),
            None => sources.push(pb::SourceBatch {
                source: s.source.clone(),
                series: vec![s.proto()],
                groups: Vec::new(),
            }),
        }
    }
    pb::PushRequest { sources }
}

// ---------------------------------------------------------------------------
// Talking to the daemon.

/// One `Push`, bounded; the daemon's answer or its status.
pub async fn push(
    client: &mut pb::ingest_client::IngestClient<Channel>,
    req: pb::PushRequest,
) -> Result<pb::PushResponse, tonic::Status> {
    within("Push", client.push(req))
        .await
        .map(|r| r.into_inner())
}

/// SIGTERM, and a clean exit within [`EXIT_TIMEOUT`].
pub async fn sigterm_and_exit(d: &mut Daemon) {
    d.sigterm();
    let status = d.wait_async(EXIT_TIMEOUT).await;
    assert!(
        status.success(),
        "tallyd exited with {status} after SIGTERM"
    );
}

/// SIGTERM, a clean exit, and a new process with the same options on the
/// same data directory (and so, for MongoDB, the same database).
pub async fn restart(d: &mut Daemon) {
    sigterm_and_exit(d).await;
    // Already exited: restart() only spawns the new process (and waits,
    // synchronously, for its listening line).
    tokio::task::block_in_place(|| d.restart());
}

/// GET `/api/v1/range` with `params`: (status, JSON body).
pub async fn http_range(d: &Daemon, params: &[(&str, String)]) -> (u16, serde_json::Value) {
    let params: Vec<(&str, &str)> = params.iter().map(|(k, v)| (*k, v.as_str())).collect();
    get_json(d, "/api/v1/range", &params).await
}

// ---------------------------------------------------------------------------
// Exact reads.

pub const GRPC_STEPS: [(pb::Step, i64); 3] = [
    (pb::Step::Minute, 60),
    (pb::Step::Hour, 3_600),
    (pb::Step::Day, 86_400),
];
pub const HTTP_STEPS: [(&str, i64); 3] = [("1m", 60), ("1h", 3_600), ("1d", 86_400)];

/// Reads every series over gRPC and HTTP at all three steps over
/// `[from_ms, to_ms)` and checks each point exactly.
pub async fn check_reads(d: &Daemon, expects: &[Expect], from_ms: i64, to_ms: i64) {
    let mut query = d.query_client().await;
    for e in expects {
        check_grpc(&mut query, e, from_ms, to_ms).await;
        check_http(d, e, from_ms / 1000, to_ms / 1000).await;
    }
}

pub async fn check_grpc(
    query: &mut pb::query_client::QueryClient<Channel>,
    e: &Expect,
    from_ms: i64,
    to_ms: i64,
) {
    for (step, width_s) in GRPC_STEPS {
        let what = format!("Query.Range {}/{} {step:?}", e.source, e.metric);
        let resp = within(
            &what,
            query.range(pb::RangeRequest {
                source: e.source.clone(),
                metric: e.metric.clone(),
                from_ms,
                to_ms,
                step: step as i32,
                ..Default::default()
            }),
        )
        .await
        .unwrap_or_else(|s| panic!("{what}: {s:?}"))
        .into_inner();
        let want_kind = e.kind.map_or(pb::SampleKind::Unspecified, Kind::proto);
        assert_eq!(resp.series.len(), 1, "{what}: one series asked for");
        let resp = &resp.series[0];
        assert_eq!(
            pb::SampleKind::try_from(resp.kind).ok(),
            Some(want_kind),
            "{what}: kind"
        );
        let want = buckets(&e.stored, width_s);
        let got: Vec<Bucket> = resp
            .points
            .iter()
            .map(|p| Bucket {
                t_ms: p.t_ms,
                n: p.n.unwrap_or(0),
                sum: p.sum.unwrap_or(f64::NAN),
                min: p.min.unwrap_or(f64::NAN),
                max: p.max.unwrap_or(f64::NAN),
            })
            .collect();
        assert_eq!(got, want, "{what}: points (empty buckets must be absent)");
        let counter = e.kind.is_some_and(Kind::is_counter);
        for (p, w) in resp.points.iter().zip(&want) {
            assert_eq!(p.avg, Some(w.sum / w.n as f64), "{what}: avg at {}", p.t_ms);
            assert_eq!(
                p.rate,
                counter.then(|| w.sum / width_s as f64),
                "{what}: rate at {} (counters only, sum / {width_s} s)",
                p.t_ms
            );
        }
    }
}

/// Floats through JSON: serde_json's default parser may be one ulp off.
pub fn close(got: &serde_json::Value, want: f64) -> bool {
    got.as_f64()
        .is_some_and(|g| (g - want).abs() <= 1e-12 * want.abs().max(1.0))
}

pub async fn check_http(d: &Daemon, e: &Expect, from_s: i64, to_s: i64) {
    for (step, width_s) in HTTP_STEPS {
        let what = format!("GET /api/v1/range {}/{} step={step}", e.source, e.metric);
        let (status, body) = http_range(
            d,
            &[
                ("source", e.source.clone()),
                ("metric", e.metric.clone()),
                ("from", from_s.to_string()),
                ("to", to_s.to_string()),
                ("step", step.to_string()),
            ],
        )
        .await;
        assert_eq!(status, 200, "{what}: {body}");
        let body = &body["series"][0];
        match e.kind {
            Some(k) => assert_eq!(body["kind"], k.json(), "{what}: kind in {body}"),
            None => assert!(body["kind"].is_null(), "{what}: kind in {body}"),
        }
        let points = body["points"]
            .as_array()
            .unwrap_or_else(|| panic!("{what}: no points array in {body}"));
        let want = buckets(&e.stored, width_s);
        assert_eq!(points.len(), want.len(), "{what}: {body}\nwant {want:?}");
        let counter = e.kind.is_some_and(Kind::is_counter);
        for (p, w) in points.iter().zip(&want) {
            let ok = p["t"].as_i64() == Some(w.t_ms / 1000)
                && p["n"].as_u64() == Some(w.n)
                && close(&p["sum"], w.sum)
                && close(&p["min"], w.min)
                && close(&p["max"], w.max)
                && close(&p["avg"], w.sum / w.n as f64)
                && if counter {
                    close(&p["rate"], w.sum / width_s as f64)
                } else {
                    p.get("rate").is_none()
                };
            assert!(
                ok,
                "{what}: point {p} does not match {w:?} (counter: {counter})"
            );
        }
    }
}
