//! Steps and windows: how a read's range is cut into buckets, and which
//! slots serve a bucket width.
//!
//! Separate from the engine because it is pure arithmetic on times that
//! every reader (range reads, aggregates, watch, the PromQL evaluator)
//! settles before any store read, and it is tested on its own.

use super::{QueryConfig, QueryError};
use crate::model::{Resolution, DAY_S, HOUR_S, MINUTE_S};

/// Times a read may name, in Unix seconds (about ±300,000 years): far
/// beyond any data, small enough that range arithmetic cannot overflow.
pub const MAX_TIME_S: i64 = 10_000_000_000_000;

/// The widest step: ten years (and arithmetic on it cannot overflow).
const MAX_STEP_S: i64 = 10 * 366 * DAY_S;

/// Steps `auto` chooses from: each a multiple of the one before where it
/// matters for nesting, and of the slots it reads.
const AUTO_STEPS_S: [i64; 14] = [
    60,
    2 * 60,
    5 * 60,
    10 * 60,
    15 * 60,
    30 * 60,
    HOUR_S,
    2 * HOUR_S,
    3 * HOUR_S,
    6 * HOUR_S,
    12 * HOUR_S,
    DAY_S,
    2 * DAY_S,
    7 * DAY_S,
];

/// The step of a read: bucket width, and which slots serve it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub width_s: i64,
    pub resolution: Resolution,
}

impl Step {
    pub const MINUTE: Step = Step {
        width_s: MINUTE_S,
        resolution: Resolution::Minute,
    };
    pub const HOUR: Step = Step {
        width_s: HOUR_S,
        resolution: Resolution::Hour,
    };
    pub const DAY: Step = Step {
        width_s: DAY_S,
        resolution: Resolution::Day,
    };

    /// A step of `width_s` seconds: a whole number of minutes, read from
    /// the widest slots that divide it.
    pub fn fixed(width_s: i64) -> Result<Step, QueryError> {
        if width_s > MAX_STEP_S {
            return Err(QueryError::Invalid(format!(
                "step {width_s}s is longer than ten years"
            )));
        }
        if width_s < MINUTE_S || width_s % MINUTE_S != 0 {
            return Err(QueryError::Invalid(format!(
                "step {width_s}s is not a whole number of minutes: minute slots are the finest data Tally keeps"
            )));
        }
        let resolution = if width_s % DAY_S == 0 {
            Resolution::Day
        } else if width_s % HOUR_S == 0 {
            Resolution::Hour
        } else {
            Resolution::Minute
        };
        Ok(Step {
            width_s,
            resolution,
        })
    }

    /// The finest step that keeps `[from, to)` within `max_points` buckets.
    pub fn auto(from: i64, to: i64, max_points: usize) -> Step {
        let span = (to - from).max(1);
        let budget = max_points.max(1) as i64;
        let width = AUTO_STEPS_S
            .iter()
            .copied()
            // The bucket containing `from` starts before it: allow for it.
            .find(|w| (span + w - 1) / w < budget)
            .unwrap_or_else(|| {
                let days = (span + DAY_S * budget - 1) / (DAY_S * budget);
                (days + 1) * DAY_S
            });
        Step::fixed(width).unwrap_or(Step::DAY)
    }

    pub fn floor(self, t: i64) -> i64 {
        t.div_euclid(self.width_s) * self.width_s
    }

    /// `1m`, `5m`, `1h`, `6h`, `1d`, `7d`, or seconds otherwise.
    pub fn label(self) -> String {
        let w = self.width_s;
        if w % DAY_S == 0 {
            format!("{}d", w / DAY_S)
        } else if w % HOUR_S == 0 {
            format!("{}h", w / HOUR_S)
        } else {
            format!("{}m", w / MINUTE_S)
        }
    }
}

/// How the reader asked for the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepSpec {
    /// The finest step within the point budget (`max_points`, else the
    /// configured `query.default_points`).
    Auto {
        max_points: Option<usize>,
    },
    Fixed(Step),
}

impl StepSpec {
    /// `auto`, or a duration (`1m`, `15m`, `1h`, `1d`, `300s`, `300`).
    pub fn parse(s: &str, max_points: Option<usize>) -> Result<StepSpec, QueryError> {
        let s = s.trim();
        if s == "auto" {
            return Ok(StepSpec::Auto { max_points });
        }
        let secs = match s.parse::<i64>() {
            Ok(n) => n,
            Err(_) => humantime::parse_duration(s)
                .map_err(|e| {
                    QueryError::Invalid(format!(
                        "step {s:?} is not `auto` or a duration such as 1m, 5m, 1h, 1d: {e}"
                    ))
                })?
                .as_secs() as i64,
        };
        Step::fixed(secs).map(StepSpec::Fixed)
    }
}

/// A resolved read window: buckets start at `from`, `from + step`, … while
/// below `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub from: i64,
    pub to: i64,
    pub step: Step,
}

impl Window {
    /// Checks a range and settles its step within `limits`.
    pub(crate) fn settle(
        from: i64,
        to: i64,
        step: StepSpec,
        limits: &QueryConfig,
    ) -> Result<Window, QueryError> {
        for (name, t) in [("from", from), ("to", to)] {
            if !(-MAX_TIME_S..=MAX_TIME_S).contains(&t) {
                return Err(QueryError::Invalid(format!(
                    "`{name}` ({t}) is out of range: times are Unix seconds within ±{MAX_TIME_S}"
                )));
            }
        }
        if to <= from {
            return Err(QueryError::Invalid(format!(
                "empty range: `to` ({to}) must be after `from` ({from})"
            )));
        }
        let step = match step {
            StepSpec::Fixed(s) => s,
            StepSpec::Auto { max_points } => {
                let budget = max_points
                    .unwrap_or(limits.default_points)
                    .min(limits.max_points);
                Step::auto(from, to, budget)
            }
        };
        let w = Window {
            from: step.floor(from),
            to,
            step,
        };
        if w.buckets() > limits.max_points as i64 {
            return Err(QueryError::Limit(format!(
                "the range holds {} steps of {}; the limit is {} (query.max_points): use a coarser step, step=auto or a shorter range",
                w.buckets(),
                step.label(),
                limits.max_points
            )));
        }
        Ok(w)
    }

    pub fn buckets(&self) -> i64 {
        (self.to - self.from + self.step.width_s - 1) / self.step.width_s
    }

    /// Where the last bucket ends: buckets are whole, so past `to` unless
    /// `to` is on a step boundary.
    pub(crate) fn end(&self) -> i64 {
        self.from + self.buckets() * self.step.width_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_steps_read_the_widest_dividing_slots() {
        assert_eq!(Step::fixed(60).unwrap(), Step::MINUTE);
        assert_eq!(Step::fixed(300).unwrap().resolution, Resolution::Minute);
        assert_eq!(Step::fixed(7200).unwrap().resolution, Resolution::Hour);
        assert_eq!(Step::fixed(5400).unwrap().resolution, Resolution::Minute);
        assert_eq!(Step::fixed(7 * DAY_S).unwrap().resolution, Resolution::Day);
        assert!(Step::fixed(30).is_err());
        assert!(Step::fixed(90).is_err());
        assert_eq!(Step::fixed(21_600).unwrap().label(), "6h");
    }

    #[test]
    fn auto_picks_the_finest_step_within_budget() {
        let at = |span: i64, points: usize| Step::auto(1_000_000_020, 1_000_000_020 + span, points);
        assert_eq!(at(HOUR_S, 1440), Step::MINUTE);
        // A day is 1440 minutes, plus the bucket holding `from`: 2m.
        assert_eq!(at(DAY_S, 1440).width_s, 120);
        assert_eq!(at(DAY_S - 120, 1440).width_s, 60);
        assert_eq!(at(30 * DAY_S, 1440).width_s, HOUR_S);
        assert_eq!(at(30 * DAY_S, 100).width_s, 12 * HOUR_S);
        assert_eq!(at(3650 * DAY_S, 100).resolution, Resolution::Day);
        let w = at(3650 * DAY_S, 100).width_s;
        assert!((3650 * DAY_S + w - 1) / w < 100);
    }

    #[test]
    fn step_specs() {
        assert_eq!(
            StepSpec::parse("auto", Some(10)).unwrap(),
            StepSpec::Auto {
                max_points: Some(10)
            }
        );
        assert_eq!(
            StepSpec::parse("5m", None).unwrap(),
            StepSpec::Fixed(Step::fixed(300).unwrap())
        );
        assert_eq!(
            StepSpec::parse("3600", None).unwrap(),
            StepSpec::Fixed(Step::HOUR)
        );
        assert!(StepSpec::parse("15s", None).is_err());
        assert!(StepSpec::parse("soon", None).is_err());
    }
}
