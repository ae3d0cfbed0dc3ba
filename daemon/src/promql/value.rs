//! What evaluation produces and consumes: label sets, instant vectors over
//! a list of evaluation times, scalars, strings, and range vectors (a
//! series' points in a window), and how evaluation fails.
//!
//! Every node is evaluated at a list of times at once, so a value holds one
//! entry per time: a scalar a number per time, a vector series an optional
//! number per time. The evaluator, the functions and the operators all
//! speak these types, so they sit below all of them.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::model::{is_stale_marker, Slot};
use crate::query::QueryError;

/// The label holding a series' metric name.
pub const NAME_LABEL: &str = "__name__";

/// A series' labels, sorted by name, shared until one is changed (most
/// nodes pass their input's labels on untouched).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Labels(Arc<BTreeMap<String, String>>);

impl Labels {
    pub fn new(map: BTreeMap<String, String>) -> Labels {
        Labels(Arc::new(map))
    }

    pub fn empty() -> Labels {
        Labels::default()
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// A label's value, the empty string when the series lacks it (as
    /// PromQL reads an absent label).
    pub fn value(&self, name: &str) -> &str {
        self.get(name).unwrap_or("")
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn map(&self) -> &BTreeMap<String, String> {
        &self.0
    }

    /// Sets `name` to `value`; an empty value removes the label, as in
    /// Prometheus.
    pub fn set(&mut self, name: &str, value: &str) {
        if value.is_empty() {
            self.remove(name);
        } else if self.get(name) != Some(value) {
            Arc::make_mut(&mut self.0).insert(name.to_string(), value.to_string());
        }
    }

    pub fn remove(&mut self, name: &str) {
        if self.0.contains_key(name) {
            Arc::make_mut(&mut self.0).remove(name);
        }
    }

    /// Without the metric name, as arithmetic and most functions leave it.
    pub fn without_name(mut self) -> Labels {
        self.remove(NAME_LABEL);
        self
    }

    /// Only the labels `keep` accepts.
    pub fn filtered(&self, keep: impl Fn(&str) -> bool) -> Labels {
        if self.0.keys().all(|k| keep(k)) {
            return self.clone();
        }
        Labels::new(
            self.0
                .iter()
                .filter(|(k, _)| keep(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        )
    }

    /// Approximate heap bytes, for the memory budget.
    pub fn weight(&self) -> usize {
        self.0.iter().map(|(k, v)| k.len() + v.len() + 48).sum()
    }
}

impl FromIterator<(String, String)> for Labels {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Labels {
        Labels::new(iter.into_iter().collect())
    }
}

/// One series of an instant vector: a value, or none, per evaluation time.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub labels: Labels,
    pub values: Vec<Option<f64>>,
}

impl Series {
    pub fn has_any(&self) -> bool {
        self.values.iter().any(Option::is_some)
    }
}

/// How a range series' points read: what `n`, `sum`, `min` and `max` of a
/// point are, which decides what a range function can take from them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PointKind {
    /// Minute (or wider) slots of a gauge: `n/sum/min/max` are of the values.
    Gauge,
    /// Slots of a delta counter: the values are the increases, so
    /// `n/sum/min/max` are of both.
    Delta,
    /// Slots of a cumulative counter: `n/sum/min/max` are of the per-sample
    /// increases (resets handled at ingest); the raw values survive only as
    /// each slot's last sample.
    Cumulative,
    /// Real samples (a subquery's results): one value per point, exact.
    Samples,
}

impl PointKind {
    /// Whether `sum` over a window is the exact increase of a counter.
    pub fn sums_increases(self) -> bool {
        matches!(self, PointKind::Delta | PointKind::Cumulative)
    }
}

/// A range vector's series: its points in time order. For slots, `t` is
/// the slot's start (ms) and `width_ms` its width; for samples `t` is the
/// sample's time, `width_ms` 0 and each slot holds the one value.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeSeries {
    pub labels: Labels,
    pub kind: PointKind,
    pub width_ms: i64,
    pub t: Vec<i64>,
    pub slots: Vec<Slot>,
    /// For the window of the last read, where it starts inside its first
    /// slot: that slot's part before the window, as the series' steps
    /// measured it (see `range_fns::WindowAt::lead_ms`).
    pub lead: Option<Lead>,
    /// For the last read, the two newest samples at or before it, where
    /// the series' recent samples hold them (see [`Tail`]).
    pub tail: Option<Tail>,
}

/// The count and sum at or before `cut_ms` of the minute slot `cut_ms`
/// is inside of, where a window `(cut_ms, t]` starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lead {
    pub cut_ms: i64,
    pub n: f64,
    pub sum: f64,
}

/// The two newest samples at or before an instant `at_ms` inside a minute,
/// from the series' recent samples: what `irate` and `idelta` read there,
/// as Prometheus does, not the minute's rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tail {
    pub at_ms: i64,
    pub older: (i64, f64),
    pub newer: (i64, f64),
}

impl RangeSeries {
    /// One point of the per-sample view: the slot's last sample, or, for a
    /// slot written before last samples were kept, its average at its last
    /// millisecond (gauges and delta counters; a cumulative counter's raw
    /// value is then unknown). A staleness marker is no point: range
    /// functions skip markers, as Prometheus' range selectors do, so a
    /// minute whose last sample is its series' end has no point.
    pub fn sample(&self, i: usize) -> Option<(i64, f64)> {
        match self.newest(i) {
            Some((_, v)) if is_stale_marker(v) => None,
            p => p,
        }
    }

    /// The slot's newest sample as [`RangeSeries::sample`] has it, but with
    /// a staleness marker kept: what an instant selector reads.
    pub fn newest(&self, i: usize) -> Option<(i64, f64)> {
        let s = &self.slots[i];
        if self.kind == PointKind::Samples {
            return Some((self.t[i], s.last));
        }
        match s.last_sample() {
            Some(p) => Some(p),
            None if self.kind == PointKind::Cumulative || s.n == 0 => None,
            None => Some((self.t[i] + self.width_ms - 1, s.sum / s.n as f64)),
        }
    }

    /// A subquery's sample.
    pub fn push_sample(&mut self, t: i64, v: f64) {
        self.t.push(t);
        self.slots.push(sample_slot(t, v));
    }
}

/// A slot holding one real sample.
pub fn sample_slot(t: i64, v: f64) -> Slot {
    Slot::at(t, v)
}

/// What an expression evaluates to, at every evaluation time.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// One number per evaluation time.
    Scalar(Vec<f64>),
    Vector(Vec<Series>),
    /// A range vector: only ever the answer of an instant query (`x[5m]`).
    Matrix(Vec<RangeSeries>),
    String(String),
}

impl Value {
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Scalar(_) => "scalar",
            Value::Vector(_) => "instant vector",
            Value::Matrix(_) => "range vector",
            Value::String(_) => "string",
        }
    }
}

/// Why an evaluation failed.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The query is wrong (a parse error, a bad argument); Prometheus'
    /// `bad_data`.
    #[error("{0}")]
    BadData(String),
    /// The query is valid but cannot be answered as asked (Prometheus'
    /// `execution`): a limit, or a result Prometheus refuses too (two
    /// series with the same labels).
    #[error("{0}")]
    Execution(String),
    #[error(transparent)]
    Query(#[from] QueryError),
}

pub type EvalResult<T> = Result<T, EvalError>;

pub fn bad(msg: impl Into<String>) -> EvalError {
    EvalError::BadData(msg.into())
}

pub fn execution(msg: impl Into<String>) -> EvalError {
    EvalError::Execution(msg.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_shared_until_changed() {
        let a: Labels = [("__name__", "m"), ("job", "x")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut b = a.clone();
        b.set("job", "x");
        assert!(
            Arc::ptr_eq(&a.0, &b.0),
            "setting the same value copies nothing"
        );
        b.set("job", "");
        assert_eq!(b.get("job"), None);
        assert_eq!(a.get("job"), Some("x"));
        assert_eq!(a.clone().without_name().len(), 1);
        assert_eq!(a.filtered(|k| k == "job").len(), 1);
        assert_eq!(a.value("absent"), "");
    }

    #[test]
    fn the_sample_view_of_slots() {
        let mut with_last = Slot::at(60_500, 4.0);
        with_last.add(61_500, 2.0);
        let mut old = Slot::of(4.0);
        old.add_value(2.0);
        let gauge = RangeSeries {
            labels: Labels::empty(),
            kind: PointKind::Gauge,
            width_ms: 60_000,
            t: vec![60_000, 120_000],
            slots: vec![with_last, old],
            lead: None,
            tail: None,
        };
        assert_eq!(gauge.sample(0), Some((61_500, 2.0)));
        assert_eq!(gauge.sample(1), Some((179_999, 3.0)));
        let counter = RangeSeries {
            kind: PointKind::Cumulative,
            ..gauge
        };
        assert_eq!(counter.sample(1), None);
    }
}
