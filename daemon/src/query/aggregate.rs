//! The values a slot yields: count, sum, min, max, average, rate and the
//! last sample, and the point that carries those a reader asked for.
//!
//! Separate from the engine because it is the one definition of what each
//! aggregate means: the native API's `agg=`, the gRPC aggregates and the
//! PromQL range functions (`avg_over_time`, `rate`, …) all read a slot
//! through [`Aggregate::of`].

use super::QueryError;
use crate::model::Slot;

/// A value a point can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Aggregate {
    Avg,
    Min,
    Max,
    Sum,
    Count,
    Rate,
    /// The bucket's newest sample, as sent.
    Last,
}

impl Aggregate {
    pub const ALL: [Aggregate; 7] = [
        Aggregate::Count,
        Aggregate::Sum,
        Aggregate::Min,
        Aggregate::Max,
        Aggregate::Avg,
        Aggregate::Rate,
        Aggregate::Last,
    ];

    pub fn parse(s: &str) -> Result<Aggregate, QueryError> {
        Ok(match s.trim() {
            "avg" => Aggregate::Avg,
            "min" => Aggregate::Min,
            "max" => Aggregate::Max,
            "sum" => Aggregate::Sum,
            "count" | "n" => Aggregate::Count,
            "rate" => Aggregate::Rate,
            "last" => Aggregate::Last,
            other => {
                return Err(QueryError::Invalid(format!(
                    "aggregate {other:?} is not one of avg, min, max, sum, count, rate, last"
                )))
            }
        })
    }

    /// A comma-separated list; empty means every aggregate.
    pub fn parse_list(s: &str) -> Result<Vec<Aggregate>, QueryError> {
        let mut out: Vec<Aggregate> = s
            .split(',')
            .filter(|p| !p.trim().is_empty())
            .map(Aggregate::parse)
            .collect::<Result<_, _>>()?;
        out.sort();
        out.dedup();
        Ok(out)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Aggregate::Avg => "avg",
            Aggregate::Min => "min",
            Aggregate::Max => "max",
            Aggregate::Sum => "sum",
            Aggregate::Count => "count",
            Aggregate::Rate => "rate",
            Aggregate::Last => "last",
        }
    }

    /// This aggregate of a slot `width_s` seconds wide: none when the slot
    /// has no values (or, for `Last`, no last sample). Rate is defined for
    /// counters only.
    pub fn of(self, slot: &Slot, width_s: i64, counter: bool) -> Option<f64> {
        if self == Aggregate::Last {
            // A staleness marker is the end of the series, not a value.
            return slot.value_sample().map(|(_, v)| v);
        }
        if !slot.has_values() {
            return None;
        }
        Some(match self {
            Aggregate::Avg => slot.sum / slot.n as f64,
            Aggregate::Min => slot.min,
            Aggregate::Max => slot.max,
            Aggregate::Sum => slot.sum,
            Aggregate::Count => slot.n as f64,
            Aggregate::Rate if counter => slot.sum / width_s as f64,
            Aggregate::Rate | Aggregate::Last => return None,
        })
    }
}

/// One bucket with data. Values not asked for are absent.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Point {
    /// Bucket start, Unix seconds.
    pub t: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sum: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub avg: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// The newest sample as sent, and its time (Unix milliseconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_ms: Option<i64>,
}

impl Point {
    /// The `aggregates` of a non-empty bucket (all when empty).
    pub fn of(t: i64, slot: &Slot, width_s: i64, counter: bool, aggregates: &[Aggregate]) -> Point {
        let want = |a: Aggregate| {
            if aggregates.is_empty() || aggregates.contains(&a) {
                a.of(slot, width_s, counter)
            } else {
                None
            }
        };
        Point {
            t,
            n: want(Aggregate::Count).map(|_| slot.n),
            sum: want(Aggregate::Sum),
            min: want(Aggregate::Min),
            max: want(Aggregate::Max),
            avg: want(Aggregate::Avg),
            rate: want(Aggregate::Rate),
            last: want(Aggregate::Last),
            last_ms: want(Aggregate::Last).and(slot.value_sample().map(|(t, _)| t)),
        }
    }

    /// Points of ascending non-empty buckets.
    pub(crate) fn all(
        buckets: &[(i64, Slot)],
        width_s: i64,
        counter: bool,
        aggregates: &[Aggregate],
    ) -> Vec<Point> {
        buckets
            .iter()
            .map(|(t, s)| Point::of(*t, s, width_s, counter, aggregates))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_carry_the_aggregates_asked_for() {
        let mut s = Slot::of(2.0);
        s.add_value(4.0);
        let all = Point::of(0, &s, 60, true, &[]);
        assert_eq!(
            (all.n, all.sum, all.min, all.max, all.avg, all.rate),
            (
                Some(2),
                Some(6.0),
                Some(2.0),
                Some(4.0),
                Some(3.0),
                Some(0.1)
            )
        );
        let gauge = Point::of(0, &s, 60, false, &[]);
        assert_eq!(gauge.rate, None);
        let some = Point::of(0, &s, 60, false, &[Aggregate::Max, Aggregate::Count]);
        assert_eq!((some.max, some.n, some.sum), (Some(4.0), Some(2), None));
        assert_eq!(
            Aggregate::parse_list("max,avg,max").unwrap(),
            vec![Aggregate::Avg, Aggregate::Max]
        );
        assert!(Aggregate::parse_list("p99").is_err());
    }
}
