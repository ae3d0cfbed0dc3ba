//! Names between Tally and Prometheus: how a Tally metric name becomes a
//! Prometheus metric name, which Tally metrics a Prometheus name stands
//! for, and the short-lived cache of the catalog's metric names that the
//! reverse lookup and the listings read.
//!
//! Tally metric names are `[A-Za-z0-9._:/-]+`; Prometheus names must match
//! `[a-zA-Z_:][a-zA-Z0-9_:]*`. The mapping replaces `.`, `/` and `-` with
//! `_` and puts `_` before a leading digit. It is lossy (`cpu.user` and
//! `cpu-user` both become `cpu_user`), so every series also carries the
//! label `tally_metric` with the exact Tally name: colliding metrics stay
//! distinct series, and a user can select one exactly.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::model::{validate_metric, SampleKind};
use crate::query::{QueryEngine, QueryError};
use crate::store::CatalogQuery;

/// The label holding a series' metric name.
pub(crate) const NAME_LABEL: &str = "__name__";
/// The label holding a series' source.
pub(crate) const SOURCE_LABEL: &str = "source";
/// The label holding the exact Tally metric name.
pub(crate) const TALLY_METRIC_LABEL: &str = "tally_metric";

/// How long the catalog's metric names are reused: long enough that a
/// dashboard refreshing many panels scans the catalog once, short enough
/// that a new metric shows up within seconds of its first flush.
pub(crate) const NAMES_TTL: Duration = Duration::from_secs(15);

/// The Prometheus name of a Tally metric.
pub(crate) fn prom_name(metric: &str) -> String {
    let mut out = String::with_capacity(metric.len() + 1);
    if metric.starts_with(|c: char| c.is_ascii_digit()) {
        out.push('_');
    }
    out.extend(metric.chars().map(|c| match c {
        '.' | '/' | '-' => '_',
        c => c,
    }));
    out
}

/// The one Tally metric a Prometheus name can stand for, when only one
/// can: a name without `_` is its own preimage (only `_` is ever
/// introduced by the mapping). None when several Tally names could map to
/// it, or none can.
pub(crate) fn unambiguous_metric(prom: &str) -> Option<&str> {
    (!prom.contains('_') && validate_metric(prom).is_ok()).then_some(prom)
}

/// Whether some Tally metric could map to `prom`: a name in the image of
/// [`prom_name`].
pub(crate) fn is_mapped_name(prom: &str) -> bool {
    let mut chars = prom.chars();
    match chars.next() {
        None => false,
        Some(c) if c.is_ascii_digit() => false,
        Some(_) => prom
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
    }
}

/// What the catalog knows of one metric across its sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MetricKind {
    Gauge,
    Counter,
    /// Gauge on some sources, counter on others.
    Mixed,
}

impl MetricKind {
    fn of(kind: SampleKind) -> MetricKind {
        if kind.is_counter() {
            MetricKind::Counter
        } else {
            MetricKind::Gauge
        }
    }

    /// The Prometheus metadata type.
    pub(crate) fn prom_type(self) -> &'static str {
        match self {
            MetricKind::Gauge => "gauge",
            MetricKind::Counter => "counter",
            MetricKind::Mixed => "unknown",
        }
    }
}

/// Every metric in the catalog with its kind, as of `at`.
#[derive(Debug)]
pub(crate) struct MetricNames {
    pub(crate) at: Instant,
    pub(crate) metrics: BTreeMap<String, MetricKind>,
}

impl MetricNames {
    /// The Tally metrics whose Prometheus name is `prom`.
    pub(crate) fn named(&self, prom: &str) -> Vec<String> {
        self.metrics
            .keys()
            .filter(|m| prom_name(m) == prom)
            .cloned()
            .collect()
    }
}

/// The cache of the catalog's metric names. One refresh at a time: callers
/// arriving during a refresh wait for it rather than scanning again.
#[derive(Default)]
pub(crate) struct NameCache {
    current: tokio::sync::Mutex<Option<Arc<MetricNames>>>,
}

impl NameCache {
    pub(crate) fn new() -> NameCache {
        NameCache::default()
    }

    /// The catalog's metrics, at most [`NAMES_TTL`] old.
    pub(crate) async fn get(&self, engine: &QueryEngine) -> Result<Arc<MetricNames>, QueryError> {
        let mut current = self.current.lock().await;
        if let Some(names) = current.as_ref() {
            if names.at.elapsed() < NAMES_TTL {
                return Ok(names.clone());
            }
        }
        let names = Arc::new(scan(engine).await?);
        *current = Some(names.clone());
        Ok(names)
    }
}

/// Pages through the whole catalog, capped as the engine caps its name
/// listings (a hundred pages); unlike `QueryEngine::metrics` it also learns
/// each metric's kinds.
async fn scan(engine: &QueryEngine) -> Result<MetricNames, QueryError> {
    let page = engine.limits().max_page;
    let cap = page.saturating_mul(100);
    let mut metrics: BTreeMap<String, MetricKind> = BTreeMap::new();
    let mut after = None;
    let mut scanned = 0usize;
    loop {
        let found = engine
            .series(CatalogQuery {
                source: Vec::new(),
                metric: Vec::new(),
                labels: Vec::new(),
                kind: None,
                seen_since: None,
                after: after.take(),
                limit: page,
            })
            .await?;
        scanned += found.items.len();
        for s in found.items {
            let kind = MetricKind::of(s.kind);
            metrics
                .entry(s.metric)
                .and_modify(|k| {
                    if *k != kind {
                        *k = MetricKind::Mixed
                    }
                })
                .or_insert(kind);
        }
        match found.next {
            None => break,
            Some(key) => {
                if scanned >= cap {
                    return Err(QueryError::Limit(format!(
                        "listing metric names scans the whole catalog and it holds more than {cap} series (100 pages of query.max_page)"
                    )));
                }
                after = crate::model::SeriesId::from_key(&key);
                if after.is_none() {
                    break;
                }
            }
        }
    }
    Ok(MetricNames {
        at: Instant::now(),
        metrics,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping() {
        assert_eq!(prom_name("cpu"), "cpu");
        assert_eq!(prom_name("cpu.user"), "cpu_user");
        assert_eq!(prom_name("opcounters/insert"), "opcounters_insert");
        assert_eq!(prom_name("disk-io:read"), "disk_io:read");
        assert_eq!(prom_name("5xx.count"), "_5xx_count");
        assert_eq!(prom_name("m_0001"), "m_0001");
        for m in ["a", "a.b", "9", "x/y-z", "A:b_c"] {
            assert!(is_mapped_name(&prom_name(m)), "{m}");
        }
        assert!(!is_mapped_name("9a"));
        assert!(!is_mapped_name("a.b"));
        assert!(!is_mapped_name(""));
    }

    #[test]
    fn unambiguous_names() {
        assert_eq!(unambiguous_metric("cpu"), Some("cpu"));
        assert_eq!(unambiguous_metric("disk:read"), Some("disk:read"));
        assert_eq!(unambiguous_metric("cpu_user"), None);
        assert_eq!(unambiguous_metric("_5xx"), None);
        assert_eq!(unambiguous_metric(""), None);
    }

    #[test]
    fn names_by_prometheus_name() {
        let names = MetricNames {
            at: Instant::now(),
            metrics: [
                ("cpu.user", MetricKind::Gauge),
                ("cpu-user", MetricKind::Gauge),
                ("cpu_user", MetricKind::Counter),
                ("cpu", MetricKind::Gauge),
                ("1m", MetricKind::Gauge),
            ]
            .into_iter()
            .map(|(m, k)| (m.to_string(), k))
            .collect(),
        };
        assert_eq!(
            names.named("cpu_user"),
            ["cpu-user", "cpu.user", "cpu_user"]
        );
        assert_eq!(names.named("_1m"), ["1m"]);
        assert!(names.named("mem").is_empty());
    }
}
