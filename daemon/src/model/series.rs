//! Series ids (source, metric, labels), their borrowed form for hot-path
//! lookups, and sample kinds.

use std::borrow::Cow;
use std::fmt;
use std::hash::{Hash, Hasher};

use crate::labels::{metric_key, split_metric_key, Labels};

/// How a series' values are read. Mirrors `tally.v1.SampleKind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SampleKind {
    Gauge,
    DeltaCounter,
    CumulativeCounter,
}

impl SampleKind {
    /// Counters get a `rate`; gauges do not.
    pub fn is_counter(self) -> bool {
        !matches!(self, SampleKind::Gauge)
    }

    /// Stable one-byte code, used in stored documents.
    pub fn code(self) -> u8 {
        match self {
            SampleKind::Gauge => 1,
            SampleKind::DeltaCounter => 2,
            SampleKind::CumulativeCounter => 3,
        }
    }

    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(SampleKind::Gauge),
            2 => Some(SampleKind::DeltaCounter),
            3 => Some(SampleKind::CumulativeCounter),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SampleKind::Gauge => "gauge",
            SampleKind::DeltaCounter => "delta_counter",
            SampleKind::CumulativeCounter => "cumulative_counter",
        }
    }
}

/// A series: one metric of one source, with one label set (often empty).
/// Names and labels are validated before one is made.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SeriesId {
    pub source: std::sync::Arc<str>,
    pub metric: std::sync::Arc<str>,
    pub labels: Labels,
}

impl SeriesId {
    /// Equality that compares addresses first: ids travel as the
    /// aggregator's one shared copy per series, so the tables that meet a
    /// series every flush (pending minutes, catalog records, baselines)
    /// seldom need to compare its names.
    pub fn same(&self, other: &SeriesId) -> bool {
        std::ptr::eq(self, other) || self == other
    }

    /// An unlabelled series.
    pub fn new(source: &str, metric: &str) -> Self {
        SeriesId {
            source: source.into(),
            metric: metric.into(),
            labels: Labels::none(),
        }
    }

    pub fn with_labels(source: &str, metric: &str, labels: Labels) -> Self {
        SeriesId {
            source: source.into(),
            metric: metric.into(),
            labels,
        }
    }

    pub fn series_ref(&self) -> SeriesRef<'_> {
        SeriesRef {
            source: &self.source,
            metric: &self.metric,
            labels: self.labels.as_str(),
        }
    }

    /// The metric followed by `{labels}` when there are any: what follows
    /// `source|` in a series key (see [`crate::labels`]).
    pub fn metric_key(&self) -> Cow<'_, str> {
        metric_key(&self.metric, self.labels.as_str())
    }

    /// `source|metric` or `source|metric{labels}`: the series' key in stores
    /// and catalog order. `|` is in neither name's charset, so the join is
    /// unambiguous; an unlabelled series' key is what it was before labels.
    /// (Key order is not the derived `Ord`: `a-b|m` sorts before `a|m`.)
    pub fn key(&self) -> String {
        let mk = self.metric_key();
        let mut k = String::with_capacity(self.source.len() + 1 + mk.len());
        k.push_str(&self.source);
        k.push('|');
        k.push_str(&mk);
        k
    }

    /// The series of a key made by [`SeriesId::key`], if it is one; names
    /// are not re-validated, labels must be canonical.
    pub fn from_key(key: &str) -> Option<SeriesId> {
        let (source, mk) = key.split_once('|')?;
        SeriesId::from_metric_key(source, mk)
    }

    /// The series of `source` and a metric key ([`SeriesId::metric_key`]).
    pub fn from_metric_key(source: &str, metric_key: &str) -> Option<SeriesId> {
        let (metric, labels) = split_metric_key(metric_key)?;
        let labels = if labels.is_empty() {
            Labels::none()
        } else {
            Labels::from_encoded(labels)?
        };
        Some(SeriesId::with_labels(source, metric, labels))
    }
}

/// The one hasher of series ids in the process: the aggregator's table,
/// a flush's batch and the stores' per-series tables hash a series alike,
/// so a hash taken once when a request meets its series travels with the
/// series through the flush instead of being taken again from its names
/// (which are elsewhere in memory: each fresh hash of a large fleet waits on
/// them). Seeded at random once per process, as each table's own was.
pub fn series_hasher() -> &'static ahash::RandomState {
    static HASHER: std::sync::OnceLock<ahash::RandomState> = std::sync::OnceLock::new();
    HASHER.get_or_init(ahash::RandomState::new)
}

/// `series`' hash by [`series_hasher`]; the same as its [`SeriesRef`]'s.
pub fn series_hash(series: SeriesRef<'_>) -> u64 {
    series_hasher().hash_one(series)
}

impl Hash for SeriesId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.series_ref().hash(state)
    }
}

impl fmt::Display for SeriesId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}{}", self.source, self.metric, self.labels)
    }
}

/// A borrowed series id, so hot-path lookups need no allocation. `labels`
/// is the canonical encoding ([`crate::labels`]), empty when unlabelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeriesRef<'a> {
    pub source: &'a str,
    pub metric: &'a str,
    pub labels: &'a str,
}

impl<'a> SeriesRef<'a> {
    /// An unlabelled series.
    pub fn new(source: &'a str, metric: &'a str) -> Self {
        SeriesRef {
            source,
            metric,
            labels: "",
        }
    }
}

impl Hash for SeriesRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Must match `SeriesId::hash`, which delegates here.
        state.write(self.source.as_bytes());
        state.write_u8(0xff);
        state.write(self.metric.as_bytes());
        state.write_u8(0xff);
        state.write(self.labels.as_bytes());
    }
}

impl hashbrown::Equivalent<SeriesId> for SeriesRef<'_> {
    fn equivalent(&self, key: &SeriesId) -> bool {
        *self.source == *key.source
            && *self.metric == *key.metric
            && self.labels == key.labels.as_str()
    }
}

impl hashbrown::Equivalent<std::sync::Arc<SeriesId>> for SeriesRef<'_> {
    fn equivalent(&self, key: &std::sync::Arc<SeriesId>) -> bool {
        self.equivalent(&**key)
    }
}
