//! What evaluation produces (series, vectors, scalars) and how it fails.
//! The evaluator and the series arithmetic both speak these, so they sit
//! below both.

use std::collections::BTreeMap;

use crate::query::QueryError;

/// A series' labels, sorted by name.
pub(crate) type Labels = BTreeMap<String, String>;

/// One series: a value, or none, per evaluation time.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Series {
    pub(crate) labels: Labels,
    pub(crate) values: Vec<Option<f64>>,
}

/// What an expression evaluates to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    /// One number per evaluation time.
    Scalar(Vec<f64>),
    Vector(Vec<Series>),
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum EvalError {
    /// The query asks for something its data cannot answer (e.g. `rate` of
    /// a gauge); the message says what.
    #[error("{0}")]
    BadData(String),
    #[error(transparent)]
    Query(#[from] QueryError),
}
