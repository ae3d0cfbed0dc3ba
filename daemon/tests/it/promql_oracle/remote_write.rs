//! Delivers the synthetic feed over remote-write 1.0 to Prometheus' own
//! receiver and to `tallyd`, as an agent would: in five-minute windows of
//! data time, oldest first, each request a few thousand samples.
//!
//! What "late" means differs between the two, so the deliveries differ in
//! order but not in content:
//! * Prometheus refuses a sample older than its series' newest (out of
//!   order) and any sample more than an hour older than the newest it
//!   holds (out of bounds), failing the whole request. It gets every
//!   series in time order; the lagging host's windows come twenty minutes
//!   (of data time) after the others', well within its hour.
//! * Tally takes late samples within `ingest.lateness_window`: the lagging
//!   host the same way, and in addition every third sample of some gauges
//!   only after the whole feed, once its minutes were flushed, behind newer
//!   samples of the same series (a late sample must not displace a newer
//!   one as the minute's last). Cumulative counters are refused out of
//!   order by design (their increase is taken from the previous sample),
//!   so only gauges are sent that way.

use prost::Message as _;
use tally_proto::prometheus as rw;
use tally_testkit::client::http_client;
use tally_testkit::settle::wait_settled;

use super::synthetic::Series;

/// Data time per delivery window.
const WINDOW_MS: i64 = 5 * 60_000;
/// Most samples per request.
const MAX_SAMPLES: usize = 4_000;

/// Where a request went and what it answered, when that was not 2xx.
pub(super) struct Failure {
    pub(super) side: &'static str,
    pub(super) what: String,
}

/// What the deliveries did.
#[derive(Default)]
pub(super) struct Delivery {
    pub(super) prometheus_samples: usize,
    pub(super) tally_samples: usize,
    pub(super) tally_late_samples: usize,
    pub(super) requests: usize,
    pub(super) failures: Vec<Failure>,
}

/// One request's series: labels and samples.
type Batch = Vec<rw::TimeSeries>;

fn timeseries(s: &Series, samples: impl Iterator<Item = (i64, f64)>) -> rw::TimeSeries {
    // BTreeMap order is Prometheus' label order.
    rw::TimeSeries {
        labels: s
            .labels
            .iter()
            .map(|(name, value)| rw::Label {
                name: name.clone(),
                value: value.clone(),
            })
            .collect(),
        samples: samples
            .map(|(timestamp, value)| rw::Sample { value, timestamp })
            .collect(),
    }
}

/// Splits `series` into requests of at most [`MAX_SAMPLES`] samples.
fn requests(series: Vec<rw::TimeSeries>) -> Vec<Batch> {
    let mut out: Vec<Batch> = Vec::new();
    let mut n = 0;
    for ts in series.into_iter().filter(|ts| !ts.samples.is_empty()) {
        if out.is_empty() || n + ts.samples.len() > MAX_SAMPLES {
            out.push(Vec::new());
            n = 0;
        }
        n += ts.samples.len();
        out.last_mut().expect("a request").push(ts);
    }
    out
}

/// POSTs one request; a failure is recorded, not raised, so that the
/// report tells everything that went wrong.
async fn post(url: &str, side: &'static str, batch: Batch, d: &mut Delivery) {
    let body = rw::WriteRequest {
        timeseries: batch,
        metadata: Vec::new(),
    }
    .encode_to_vec();
    let body = snap::raw::Encoder::new()
        .compress_vec(&body)
        .expect("snappy compression");
    let resp = http_client()
        .post(url)
        .header("Content-Type", "application/x-protobuf")
        .header("Content-Encoding", "snappy")
        .header("X-Prometheus-Remote-Write-Version", "0.1.0")
        .body(body)
        .send()
        .await;
    match resp {
        Ok(r) if r.status().is_success() => {}
        Ok(r) => {
            let status = r.status();
            let text = r.text().await.unwrap_or_default();
            d.failures.push(Failure {
                side,
                what: format!("{status}: {}", trim(&text, 300)),
            });
        }
        Err(e) => d.failures.push(Failure {
            side,
            what: e.to_string(),
        }),
    }
    d.requests += 1;
}

pub(super) fn trim(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Sends `feed` (starting at `t0_ms`) to Prometheus' receiver at
/// `prometheus_write` and to `tallyd` at `tally_write`, then, once the
/// daemon at `tally_base` has flushed, Tally's late samples.
pub(super) async fn deliver(
    feed: &[Series],
    t0_ms: i64,
    prometheus_write: &str,
    tally_base: &str,
) -> Delivery {
    let tally_write = format!("{tally_base}/api/v1/write");
    let mut d = Delivery::default();
    let lag_windows = |s: &Series| s.lag_minutes * 60_000 / WINDOW_MS;
    let last_window = feed
        .iter()
        .flat_map(|s| {
            s.samples
                .last()
                .map(|x| (x.0 - t0_ms) / WINDOW_MS + lag_windows(s))
        })
        .max()
        .unwrap_or(0);
    for w in 0..=last_window {
        let mut to_prometheus = Vec::new();
        let mut to_tally = Vec::new();
        for s in feed {
            let data_window = w - lag_windows(s);
            let (from, to) = (
                t0_ms + data_window * WINDOW_MS,
                t0_ms + (data_window + 1) * WINDOW_MS,
            );
            let in_window = |t: i64| t >= from && t < to;
            let all = s.samples.iter().copied().filter(|x| in_window(x.0));
            to_prometheus.push(timeseries(s, all));
            let on_time = s
                .samples
                .iter()
                .enumerate()
                .filter(|(k, x)| in_window(x.0) && !s.late_for_tally(*k))
                .map(|(_, x)| *x);
            to_tally.push(timeseries(s, on_time));
        }
        for batch in requests(to_prometheus) {
            d.prometheus_samples += batch.iter().map(|t| t.samples.len()).sum::<usize>();
            post(prometheus_write, "prometheus", batch, &mut d).await;
        }
        for batch in requests(to_tally) {
            d.tally_samples += batch.iter().map(|t| t.samples.len()).sum::<usize>();
            post(&tally_write, "tally", batch, &mut d).await;
        }
    }
    // The late pass: the minutes these samples belong to are flushed.
    wait_settled(tally_base).await;
    let late: Vec<rw::TimeSeries> = feed
        .iter()
        .map(|s| {
            let late = s
                .samples
                .iter()
                .enumerate()
                .filter(|(k, _)| s.late_for_tally(*k))
                .map(|(_, x)| *x);
            timeseries(s, late)
        })
        .collect();
    for batch in requests(late) {
        let n: usize = batch.iter().map(|t| t.samples.len()).sum();
        d.tally_samples += n;
        d.tally_late_samples += n;
        post(&tally_write, "tally", batch, &mut d).await;
    }
    wait_settled(tally_base).await;
    d
}
