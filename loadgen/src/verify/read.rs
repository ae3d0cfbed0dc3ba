//! Reading back: `GET /api/v1/range?source=…&metric=…&step=1m` over the
//! run's window, in chunks of a day (the API caps points per series), with
//! retries on what the daemon answers when busy.
//!
//! A read names one source and one metric exactly. With no `labels`
//! condition the daemon answers every label set of them (PromQL
//! semantics), each series with its `"labels": {…}`; a read may also carry
//! a `labels` condition in PromQL matcher syntax, such as one series'
//! canonical text. The series of all chunks are merged by the canonical
//! text of their labels. A series without labels comes without `labels`
//! (as every series did before labels), and is read as the empty set: a
//! labelled fleet read from a daemon without label support then shows as
//! missing label sets, each a mismatch.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Deserialize;

use super::VerifyOpts;
use crate::labels::canonical;
use crate::transport::{error_chain, Backoff};

/// `/api/v1/range` answers with a list of series; `partial` when the
/// daemon answered from memory alone because its store was unreachable.
#[derive(Debug, Deserialize)]
struct RangeEnvelope {
    series: Vec<SeriesBody>,
    #[serde(default)]
    partial: Option<String>,
}

#[derive(Debug, Deserialize)]
struct SeriesBody {
    kind: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    points: Vec<RawPoint>,
}

/// A point as the daemon writes it. A cumulative counter's first minute
/// holds only its baseline (`last`), with no counted samples: there is
/// nothing in it to verify, so such points are left out.
#[derive(Debug, Deserialize)]
struct RawPoint {
    t: i64,
    #[serde(default)]
    n: u64,
    sum: Option<f64>,
    min: Option<f64>,
    max: Option<f64>,
}

impl RawPoint {
    fn counted(self) -> Option<PointBody> {
        if self.n == 0 {
            return None;
        }
        Some(PointBody {
            t: self.t,
            n: self.n,
            sum: self.sum?,
            min: self.min?,
            max: self.max?,
        })
    }
}

/// One series as read: its kind and its points, merged over the chunks.
#[derive(Debug, Clone, Default)]
pub struct RangeBody {
    pub kind: Option<String>,
    pub points: Vec<PointBody>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct PointBody {
    pub t: i64,
    pub n: u64,
    pub sum: f64,
    pub min: f64,
    pub max: f64,
}

#[derive(Debug, Deserialize)]
struct ErrorBody {
    error: String,
}

/// What one read asks for.
#[derive(Debug, Clone, Copy)]
pub struct ReadOf<'a> {
    pub source: &'a str,
    pub metric: &'a str,
    /// The `labels` condition; None reads every label set.
    pub labels: Option<&'a str>,
}

/// The series of one read over the whole window, by the canonical text of
/// their labels. `rereads` counts the chunks read again because the
/// daemon answered them `partial`.
pub async fn read(
    client: &reqwest::Client,
    opts: &VerifyOpts,
    of: ReadOf<'_>,
    rereads: &mut u64,
) -> Result<BTreeMap<String, RangeBody>, String> {
    const CHUNK_S: i64 = 86_400;
    let mut all: BTreeMap<String, RangeBody> = BTreeMap::new();
    let mut from = opts.from_s;
    while from < opts.to_s {
        let to = (from + CHUNK_S).min(opts.to_s);
        for s in read_whole_chunk(client, opts, of, from, to, rereads).await? {
            // The daemon leaves `labels` out for a series without any.
            let labels = match &s.labels {
                Some(l) => canonical(l.iter().map(|(n, v)| (n.as_str(), v.as_str()))),
                None => String::new(),
            };
            let body = all.entry(labels).or_default();
            body.kind = body.kind.take().or(s.kind);
            body.points
                .extend(s.points.into_iter().filter_map(RawPoint::counted));
        }
        from = to;
    }
    Ok(all)
}

/// The URL of one chunk of a read.
pub fn chunk_url(
    opts: &VerifyOpts,
    of: ReadOf<'_>,
    from: i64,
    to: i64,
) -> Result<reqwest::Url, String> {
    let (from, to) = (from.to_string(), to.to_string());
    let mut params = vec![
        ("source", of.source),
        ("metric", of.metric),
        ("from", from.as_str()),
        ("to", to.as_str()),
        ("step", "1m"),
    ];
    if let Some(l) = of.labels {
        params.push(("labels", l));
    }
    reqwest::Url::parse_with_params(&format!("{}/api/v1/range", opts.http), params)
        .map_err(|e| e.to_string())
}

/// A chunk as the store holds it: a `partial` answer (what the daemon's
/// memory holds, the store unreachable for the moment) is read again, with
/// backoff, for up to `opts.partial_patience`; one that stays partial is
/// an error, a read problem rather than missing points.
async fn read_whole_chunk(
    client: &reqwest::Client,
    opts: &VerifyOpts,
    of: ReadOf<'_>,
    from: i64,
    to: i64,
    rereads: &mut u64,
) -> Result<Vec<SeriesBody>, String> {
    let started = std::time::Instant::now();
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    loop {
        let envelope = read_chunk(client, opts, of, from, to).await?;
        let Some(why) = envelope.partial else {
            return Ok(envelope.series);
        };
        let wait = backoff.next_delay();
        if started.elapsed() + wait > opts.partial_patience {
            return Err(format!(
                "the daemon answered partial (from memory alone: {why}) for {:.0?}; not counted as missing",
                started.elapsed()
            ));
        }
        *rereads += 1;
        tokio::time::sleep(wait).await;
    }
}

async fn read_chunk(
    client: &reqwest::Client,
    opts: &VerifyOpts,
    of: ReadOf<'_>,
    from: i64,
    to: i64,
) -> Result<RangeEnvelope, String> {
    let url = chunk_url(opts, of, from, to)?;
    let mut retry = Retry::new(opts);
    loop {
        let resp = match client.get(url.clone()).send().await {
            Ok(resp) => resp,
            Err(e) => match retry.after(Away::of(&e)) {
                Some(wait) => {
                    tokio::time::sleep(wait).await;
                    continue;
                }
                None => return Err(error_chain(&e)),
            },
        };
        let status = resp.status();
        let bytes = match resp.bytes().await {
            Ok(b) => b,
            Err(e) => match retry.after(Away::of(&e)) {
                Some(wait) => {
                    tokio::time::sleep(wait).await;
                    continue;
                }
                None => return Err(error_chain(&e)),
            },
        };
        if status.is_success() {
            let envelope: RangeEnvelope = serde_json::from_slice(&bytes)
                .map_err(|e| format!("unexpected answer from {url}: {e}"))?;
            return Ok(envelope);
        }
        // 503 is the daemon's "store busy, try again"; 502 and 504 a proxy's
        // word that it is away.
        if status.is_server_error() {
            let away = match status.as_u16() {
                502..=504 => Away::Yes,
                _ => Away::Maybe,
            };
            if let Some(wait) = retry.after(away) {
                tokio::time::sleep(wait).await;
                continue;
            }
        }
        let why = serde_json::from_slice::<ErrorBody>(&bytes)
            .map(|b| b.error)
            .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned());
        return Err(format!("HTTP {status}: {why}"));
    }
}

/// Whether a failed read says the daemon is away for a while (refused,
/// reset or busy: a restart, its log replayed, takes seconds), or may
/// mean anything (a timeout, another server error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Away {
    Yes,
    Maybe,
}

impl Away {
    fn of(e: &reqwest::Error) -> Away {
        match e.is_timeout() {
            true => Away::Maybe,
            false => Away::Yes,
        }
    }
}

/// When a read is made again: while the daemon is away, with backoff for
/// up to `read_patience`; otherwise at most [`MAYBE_TRIES`] times in all.
/// A read that spends its whole patience marks the daemon gone
/// (`VerifyOpts::gone`), and from then on no read waits for it: a daemon
/// that never comes back costs one patience, not one per read.
struct Retry<'a> {
    opts: &'a VerifyOpts,
    started: std::time::Instant,
    backoff: Backoff,
    tries: u32,
}

/// Tries of a read whose failure does not say the daemon is away.
const MAYBE_TRIES: u32 = 4;

impl<'a> Retry<'a> {
    fn new(opts: &'a VerifyOpts) -> Retry<'a> {
        Retry {
            opts,
            started: std::time::Instant::now(),
            backoff: Backoff::new(Duration::from_millis(100), Duration::from_secs(2)),
            tries: 1,
        }
    }

    /// How long to wait before trying again, or None to give up.
    fn after(&mut self, away: Away) -> Option<Duration> {
        let wait = self.backoff.next_delay();
        self.tries += 1;
        let gone = &self.opts.gone;
        let patient = away == Away::Yes && !gone.load(Ordering::Relaxed);
        if patient && self.started.elapsed() + wait <= self.opts.read_patience {
            return Some(wait);
        }
        if patient {
            gone.store(true, Ordering::Relaxed);
        }
        (self.tries <= MAYBE_TRIES).then_some(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_with_and_without_labels() {
        let with: RangeEnvelope = serde_json::from_str(
            r#"{"step":"1m","series":[{"source":"s","metric":"m","labels":{"mode":"1","cpu":"0"},"kind":"gauge","points":[{"t":60,"n":2,"sum":0.30000000000000004,"min":0.1,"max":0.2}]}]}"#,
        )
        .unwrap();
        let s = &with.series[0];
        let labels = s.labels.as_ref().unwrap();
        assert_eq!(
            canonical(labels.iter().map(|(n, v)| (n.as_str(), v.as_str()))),
            r#"cpu="0",mode="1""#
        );
        // Floats are read exactly: min and max are compared bit for bit.
        assert_eq!(s.points[0].sum, Some(0.1 + 0.2));
        let without: RangeEnvelope = serde_json::from_str(
            r#"{"series":[{"source":"s","metric":"m","kind":null,"points":[]}]}"#,
        )
        .unwrap();
        assert!(without.series[0].labels.is_none());
    }

    #[test]
    fn a_baseline_only_minute_is_not_a_point_to_verify() {
        let body: RangeEnvelope = serde_json::from_str(
            r#"{"series":[{"kind":"counter","points":[{"t":0,"last":5.0,"last_ms":1000},{"t":60,"n":1,"sum":2.0,"min":2.0,"max":2.0,"last":7.0}]}]}"#,
        )
        .unwrap();
        let points: Vec<PointBody> = body
            .series
            .into_iter()
            .flat_map(|s| s.points)
            .filter_map(RawPoint::counted)
            .collect();
        assert_eq!(points.len(), 1);
        assert_eq!((points[0].t, points[0].n, points[0].sum), (60, 1, 2.0));
    }

    #[test]
    fn a_read_names_its_source_metric_and_label_condition() {
        let opts = VerifyOpts {
            http: "http://127.0.0.1:8080".into(),
            concurrency: 1,
            timeout: Duration::from_secs(1),
            settle: Duration::ZERO,
            partial_patience: Duration::from_secs(1),
            read_patience: Duration::from_secs(1),
            gone: Default::default(),
            max_listed: 1,
            from_s: 0,
            to_s: 60,
        };
        let mut of = ReadOf {
            source: "src-000001",
            metric: "m_0001",
            labels: None,
        };
        let url = chunk_url(&opts, of, 0, 60).unwrap();
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:8080/api/v1/range?source=src-000001&metric=m_0001&from=0&to=60&step=1m"
        );
        of.labels = Some(r#"cpu="0",mode="a\"b""#);
        let url = chunk_url(&opts, of, 0, 60).unwrap();
        let labels: Vec<_> = url.query_pairs().filter(|(k, _)| k == "labels").collect();
        assert_eq!(labels[0].1, r#"cpu="0",mode="a\"b""#);
    }
}
