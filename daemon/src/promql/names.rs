//! Names between Tally and Prometheus: a series' labels as PromQL sees
//! them, which Tally metrics a Prometheus name stands for, and the
//! short-lived cache of the catalog's metric names that the reverse lookup
//! and the listings read.
//!
//! A series (source, metric, labels) is shown with:
//! * `__name__`: the metric's Prometheus name. Tally metric names are
//!   `[A-Za-z0-9._:/-]+`; Prometheus names must match
//!   `[a-zA-Z_:][a-zA-Z0-9_:]*`. The mapping replaces `.`, `/` and `-` with
//!   `_` and puts `_` before a leading digit.
//! * the source label (`prometheus.source_label`, `instance` unless told):
//!   the series' source.
//! * `tally_metric`: the exact Tally name, only where the mapping changed
//!   it. The mapping is lossy (`cpu.user` and `cpu-user` both become
//!   `cpu_user`), so colliding metrics stay distinct series and a user can
//!   select one exactly.
//! * the series' own labels; one named like the source label is shown as
//!   `exported_<name>`, as Prometheus renames a scraped label that collides
//!   with a target label. (`tally_metric` cannot be an own label: ingest
//!   reserves it, and OTLP stores the attribute as `exported_tally_metric`.)

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::value::Labels;
use crate::model::{validate_metric, SampleKind};
use crate::query::{QueryEngine, QueryError};
use crate::store::CatalogQuery;

pub(crate) use super::value::NAME_LABEL;
/// The label holding the exact Tally metric name, where it differs.
pub(crate) const TALLY_METRIC_LABEL: &str = "tally_metric";
/// What a colliding own label is prefixed with.
const EXPORTED: &str = "exported_";

/// What a label name in a selector refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route<'a> {
    /// The Prometheus metric name.
    Name,
    Source,
    /// The exact Tally metric name (empty where it equals `__name__`).
    TallyMetric,
    /// One of the series' own labels, by its stored name.
    Own(&'a str),
}

/// How series are shown: the configured source label and the renames it
/// implies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelScheme {
    source_label: String,
    /// `exported_<source label>`.
    exported_source: String,
}

impl Default for LabelScheme {
    fn default() -> Self {
        LabelScheme::new("instance")
    }
}

impl LabelScheme {
    pub fn new(source_label: &str) -> LabelScheme {
        LabelScheme {
            source_label: source_label.to_string(),
            exported_source: format!("{EXPORTED}{source_label}"),
        }
    }

    pub(crate) fn source_label(&self) -> &str {
        &self.source_label
    }

    /// A series' labels as PromQL sees them.
    pub(crate) fn labels_of(
        &self,
        source: &str,
        metric: &str,
        own: &crate::labels::Labels,
    ) -> Labels {
        let mut map: std::collections::BTreeMap<String, String> = own
            .to_map()
            .into_iter()
            .map(|(k, v)| (self.shown_own(&k).into_owned(), v))
            .collect();
        let name = prom_name(metric);
        if name != metric {
            map.insert(TALLY_METRIC_LABEL.to_string(), metric.to_string());
        }
        map.insert(NAME_LABEL.to_string(), name);
        map.insert(self.source_label.clone(), source.to_string());
        Labels::new(map)
    }

    /// How an own label's name is shown.
    pub(crate) fn shown_own<'a>(&self, name: &'a str) -> std::borrow::Cow<'a, str> {
        if name == self.source_label {
            std::borrow::Cow::Owned(format!("{EXPORTED}{name}"))
        } else {
            std::borrow::Cow::Borrowed(name)
        }
    }

    /// What a label name in a selector refers to.
    pub(crate) fn route<'a>(&self, name: &'a str) -> Route<'a> {
        match name {
            NAME_LABEL => Route::Name,
            TALLY_METRIC_LABEL => Route::TallyMetric,
            n if n == self.source_label => Route::Source,
            n if n == self.exported_source => Route::Own(&n[EXPORTED.len()..]),
            n => Route::Own(n),
        }
    }

    /// The names Tally adds to every series (`tally_metric` aside).
    pub(crate) fn added(&self) -> [&str; 2] {
        [NAME_LABEL, &self.source_label]
    }
}

/// The `tally_metric` label's value for `metric`: empty where the
/// Prometheus name is the metric itself.
pub(crate) fn tally_metric_value(metric: &str) -> &str {
    if prom_name(metric) == metric {
        ""
    } else {
        metric
    }
}

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
pub enum MetricKind {
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
pub struct MetricNames {
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
pub struct NameCache {
    current: tokio::sync::Mutex<Option<Arc<MetricNames>>>,
}

impl NameCache {
    pub fn new() -> NameCache {
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
    fn series_labels_as_prometheus_shows_them() {
        let scheme = LabelScheme::default();
        let own = crate::labels::Labels::from_pairs(
            [
                ("instance", "own"),
                ("cpu", "0"),
                ("exported_tally_metric", "t"),
            ],
            16,
        )
        .unwrap();
        let l = scheme.labels_of("web-1", "node.load1", &own);
        let got: Vec<(&str, &str)> = l.iter().collect();
        assert_eq!(
            got,
            vec![
                ("__name__", "node_load1"),
                ("cpu", "0"),
                ("exported_instance", "own"),
                ("exported_tally_metric", "t"),
                ("instance", "web-1"),
                ("tally_metric", "node.load1"),
            ]
        );
        let plain = scheme.labels_of("a", "up", &crate::labels::Labels::none());
        assert_eq!(plain.get("tally_metric"), None);
        assert_eq!(scheme.route("instance"), Route::Source);
        assert_eq!(scheme.route("exported_instance"), Route::Own("instance"));
        assert_eq!(
            scheme.route("exported_tally_metric"),
            Route::Own("exported_tally_metric")
        );
        assert_eq!(scheme.route("tally_metric"), Route::TallyMetric);
        assert_eq!(scheme.route("__name__"), Route::Name);
        assert_eq!(scheme.route("cpu"), Route::Own("cpu"));
        assert_eq!(tally_metric_value("up"), "");
        assert_eq!(tally_metric_value("a.b"), "a.b");
        let source = LabelScheme::new("source");
        assert_eq!(source.route("instance"), Route::Own("instance"));
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
