//! The fleet: every source this daemon holds series of, with its series
//! count, its newest sample's age and the samples per second it sends, for
//! the dashboard's fleet view (`GET /api/v1/fleet`).
//!
//! Everything comes from what the daemon keeps anyway: the aggregator's
//! series in memory give the series count and newest sample per source
//! ([`Aggregator::source_activity`]), and the flush pipeline's drained
//! batches give the arrivals per source ([`SourceRates`]). Nothing is read
//! from the store, so a source silent for longer than
//! `ingest.series_idle_timeout` (whose series the daemon forgot) is no
//! longer listed. A page of the list costs a sort of the sources; the walk
//! over every series behind it runs at most once per [`SNAPSHOT_TTL`],
//! shared by every reader.

mod rates;

use std::cmp::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::aggregator::Aggregator;
use crate::selector::NameMatcher;

pub use rates::SourceRates;

/// How long one walk over the series serves every reader.
pub const SNAPSHOT_TTL: Duration = Duration::from_secs(1);

/// Most rows one page may ask for.
pub const MAX_PAGE: usize = 1_000;

/// One source as the fleet view shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SourceRow {
    #[serde(serialize_with = "name")]
    pub source: Arc<str>,
    /// Series in memory (sent within `ingest.series_idle_timeout`).
    pub series: usize,
    /// Timestamp of the newest sample, Unix ms (absent before the first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_ms: Option<i64>,
    /// Seconds since `last_ms`, as of the page's `now_ms`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age_s: Option<f64>,
    /// Samples per second over the last one to two minutes.
    pub samples_per_s: f64,
    /// Nothing for longer than the page's `stale_after_s`.
    pub stale: bool,
}

/// Which rows a page holds, in which order.
#[derive(Debug, Clone)]
pub struct FleetQuery {
    /// Only sources these accept (none: every source).
    pub source: Vec<NameMatcher>,
    pub sort: SortBy,
    pub descending: bool,
    pub stale_only: bool,
    pub stale_after: Duration,
    pub offset: usize,
    pub limit: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortBy {
    Source,
    Series,
    Rate,
    Age,
}

impl SortBy {
    pub fn parse(s: &str) -> Option<SortBy> {
        Some(match s {
            "source" => SortBy::Source,
            "series" => SortBy::Series,
            "rate" => SortBy::Rate,
            "age" => SortBy::Age,
            _ => return None,
        })
    }
}

/// One page of the fleet, with totals over every matching source.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FleetPage {
    /// When the rows were taken, Unix ms.
    pub now_ms: i64,
    pub stale_after_s: f64,
    /// Sources this daemon holds series of.
    pub sources: usize,
    /// Sources the query matched (before `offset` and `limit`).
    pub matched: usize,
    /// Matched sources that are stale.
    pub stale: usize,
    /// Series of the matched sources.
    pub series: usize,
    /// Samples per second of the matched sources together.
    pub samples_per_s: f64,
    pub offset: usize,
    pub rows: Vec<SourceRow>,
}

/// What one walk found: every source by name, without staleness (which
/// depends on the reader's threshold).
struct Snapshot {
    taken: Instant,
    now_ms: i64,
    rows: Vec<SourceRow>,
}

pub struct Fleet {
    agg: Arc<Aggregator>,
    rates: Arc<SourceRates>,
    /// The last walk; the async lock makes concurrent readers wait for one
    /// walk instead of each making their own.
    snapshot: tokio::sync::Mutex<Option<Arc<Snapshot>>>,
}

impl Fleet {
    pub fn new(agg: Arc<Aggregator>, rates: Arc<SourceRates>) -> Fleet {
        Fleet {
            agg,
            rates,
            snapshot: tokio::sync::Mutex::new(None),
        }
    }

    /// A page of the fleet.
    pub async fn page(&self, q: &FleetQuery) -> FleetPage {
        let snap = self.snapshot().await;
        let stale_after_ms = q.stale_after.as_millis().min(i64::MAX as u128) as i64;
        let mut rows: Vec<&SourceRow> = Vec::new();
        let (mut stale, mut series, mut rate) = (0, 0, 0.0);
        for r in &snap.rows {
            if !q.source.iter().all(|m| m.matches(&r.source)) {
                continue;
            }
            let is_stale = is_stale(r, snap.now_ms, stale_after_ms);
            if q.stale_only && !is_stale {
                continue;
            }
            stale += usize::from(is_stale);
            series += r.series;
            rate += r.samples_per_s;
            rows.push(r);
        }
        let matched = rows.len();
        if q.sort != SortBy::Source || q.descending {
            rows.sort_by(|a, b| {
                let o = compare(q.sort, a, b);
                let o = if q.descending { o.reverse() } else { o };
                o.then_with(|| a.source.cmp(&b.source))
            });
        }
        let page = rows
            .into_iter()
            .skip(q.offset)
            .take(q.limit.min(MAX_PAGE))
            .map(|r| SourceRow {
                stale: is_stale(r, snap.now_ms, stale_after_ms),
                ..r.clone()
            })
            .collect();
        FleetPage {
            now_ms: snap.now_ms,
            stale_after_s: q.stale_after.as_secs_f64(),
            sources: snap.rows.len(),
            matched,
            stale,
            series,
            samples_per_s: rate,
            offset: q.offset,
            rows: page,
        }
    }

    /// The last walk, or a new one when it is older than [`SNAPSHOT_TTL`].
    async fn snapshot(&self) -> Arc<Snapshot> {
        let mut guard = self.snapshot.lock().await;
        if let Some(s) = guard.as_ref().filter(|s| s.taken.elapsed() < SNAPSHOT_TTL) {
            return s.clone();
        }
        let now_ms = chrono::Utc::now().timestamp_millis();
        let activity = self.agg.source_activity();
        let rates = self
            .rates
            .rates(activity.iter().map(|a| &*a.source), now_ms);
        let rows = activity
            .into_iter()
            .zip(rates)
            .map(|(a, samples_per_s)| SourceRow {
                source: a.source,
                series: a.series,
                last_ms: a.last_ms,
                age_s: a.last_ms.map(|t| (now_ms - t).max(0) as f64 / 1000.0),
                samples_per_s,
                stale: false,
            })
            .collect();
        let snap = Arc::new(Snapshot {
            taken: Instant::now(),
            now_ms,
            rows,
        });
        *guard = Some(snap.clone());
        snap
    }
}

fn name<S: serde::Serializer>(s: &Arc<str>, to: S) -> Result<S::Ok, S::Error> {
    to.serialize_str(s)
}

/// Stale: no sample for longer than the threshold (or none at all).
fn is_stale(r: &SourceRow, now_ms: i64, stale_after_ms: i64) -> bool {
    r.last_ms
        .is_none_or(|t| now_ms.saturating_sub(t) > stale_after_ms)
}

fn compare(by: SortBy, a: &SourceRow, b: &SourceRow) -> Ordering {
    match by {
        SortBy::Source => a.source.cmp(&b.source),
        SortBy::Series => a.series.cmp(&b.series),
        SortBy::Rate => a.samples_per_s.total_cmp(&b.samples_per_s),
        // Ascending: the freshest first; a source without a sample is the
        // oldest of all.
        SortBy::Age => match (a.last_ms, b.last_ms) {
            (Some(x), Some(y)) => y.cmp(&x),
            (None, Some(_)) => Ordering::Greater,
            (Some(_), None) => Ordering::Less,
            (None, None) => Ordering::Equal,
        },
    }
}

#[cfg(test)]
mod tests;
