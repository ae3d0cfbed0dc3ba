//! The query engine: everything dashboards read, independent of the
//! protocol that asks (`grpc`, `http`, the Prometheus-compatible API).
//!
//! * Ranges of one or more series, at any step that is a whole number of
//!   minutes, or `auto` (the finest step that fits a point budget).
//! * The latest value and current minute of series.
//! * Aggregates of one metric across sources, from a group rollup when the
//!   selection is a group, else fanned out over the catalog's members.
//! * Discovery: series, sources and metrics from the catalog.
//!
//! Each step is served from the widest slots that divide it: minutes from
//! hour documents (or, beyond two days or the hour tier's retention, from
//! the day documents' minute blocks), hours and days from the day
//! documents' running slots. What the store does not have yet (in-flight
//! flushes and the aggregator) is merged in, so a graph is fresh to the
//! second whatever the flush interval. Empty buckets are absent, never zero
//! points.
//!
//! | module         | what it holds                                              |
//! |----------------|------------------------------------------------------------|
//! | `engine`       | [`QueryEngine`], selections, per-series buckets, range and latest reads |
//! | `merge`        | store documents merged with unflushed data, each sample once |
//! | `step`         | [`Step`], [`StepSpec`], [`Window`]: buckets of a range     |
//! | `aggregate`    | [`Aggregate`] and [`Point`]: what a slot yields            |
//! | `label_sets`   | the label sets of a source's metric: memory and catalog     |
//! | `cross_source` | one metric across sources: rollup or fan-out               |
//! | `charts`       | many metrics of one source in one bounded read (small charts) |
//! | `discovery`    | series, sources and metrics listings                       |
//! | `partial`      | answering from memory while the store is unreachable      |
//! | `error`        | [`QueryError`]                                             |
//! | `config`       | [`QueryConfig`], the `[query]` section                     |
//! | `budget`       | [`ReadBudget`]: the memory all reads in progress share     |

mod aggregate;
mod budget;
mod charts;
mod config;
mod cross_source;
mod discovery;
mod engine;
mod error;
mod label_sets;
mod merge;
pub mod partial;
mod step;

pub use aggregate::{Aggregate, Point};
pub use budget::{ReadBudget, Reservation};
pub use charts::{
    ChartsQuery, ChartsResult, MetricChart, DEFAULT_SERIES_PER_METRIC, MAX_CHART_METRICS,
    MAX_CHART_POINTS, MAX_SERIES_PER_METRIC,
};
pub use config::QueryConfig;
pub use cross_source::{AggregateGroup, AggregateQuery, AggregateResult, Sources};
pub use discovery::{Names, Page, SeriesInfo};
pub use engine::{
    Buckets, LabelMap, Latest, LatestValue, QueryEngine, RangeResult, Selection, SeriesBuckets,
    SeriesRange,
};
pub use error::QueryError;
pub use step::{Step, StepSpec, Window, MAX_TIME_S};
