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

    /// The finest step that keeps `[from, to)` within `max_points` buckets,
    /// counted as the read counts them: from the step boundary at or before
    /// `from` (see [`Window::buckets`]).
    pub fn auto(from: i64, to: i64, max_points: usize) -> Step {
        let budget = max_points.max(1) as i64;
        let fits = |w: i64| buckets(from, to, w) <= budget;
        let width = AUTO_STEPS_S
            .iter()
            .copied()
            .find(|&w| fits(w))
            .unwrap_or_else(|| {
                // Whole days past the table: the fewest that fit. The span
                // over the budget is a lower bound; flooring `from` to a
                // wider step adds at most one bucket, so a day or two more
                // always fits.
                let span = (to - from).max(1);
                let least = ((span + DAY_S * budget - 1) / (DAY_S * budget)).max(1);
                (least..)
                    .map(|days| days * DAY_S)
                    .find(|&w| fits(w) || w >= MAX_STEP_S)
                    .unwrap_or(MAX_STEP_S)
            });
        Step::fixed(width.min(MAX_STEP_S)).unwrap_or(Step::DAY)
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

/// Buckets of `width_s` seconds a read of `[from, to)` holds: they start
/// at the step boundary at or before `from`, the last one reaches `to`.
fn buckets(from: i64, to: i64, width_s: i64) -> i64 {
    let start = from.div_euclid(width_s) * width_s;
    (to - start + width_s - 1) / width_s
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
        // Minute-aligned, not aligned to anything wider.
        let from = 1_000_000_020;
        let at = |span: i64, points: usize| Step::auto(from, from + span, points);
        assert_eq!(at(HOUR_S, 1440), Step::MINUTE);
        // A day is exactly 1440 minutes from a minute boundary.
        assert_eq!(at(DAY_S, 1440), Step::MINUTE);
        assert_eq!(at(DAY_S + 60, 1440).width_s, 120);
        assert_eq!(at(30 * DAY_S, 100).width_s, 12 * HOUR_S);
        assert_eq!(at(3650 * DAY_S, 100).resolution, Resolution::Day);
        let w = at(3650 * DAY_S, 100).width_s;
        assert!(buckets(from, from + 3650 * DAY_S, w) <= 100);
        // Thirty days are 1440 half hours: they fit from a half-hour
        // boundary, and one more bucket is needed from anywhere else.
        let aligned = 1_000_000_800;
        assert_eq!(aligned % 1800, 0);
        let month = |from: i64| Step::auto(from, from + 30 * DAY_S, 1440).width_s;
        assert_eq!(month(aligned), 30 * MINUTE_S);
        assert_eq!(month(aligned + 60), HOUR_S);
    }

    proptest::proptest! {
        /// `auto` picks a step within the budget, and the next finer step it
        /// could have picked would not fit: the finest that fits.
        #[test]
        fn auto_is_the_finest_step_that_fits(
            from in -MAX_TIME_S / 2..MAX_TIME_S / 2,
            span in 1i64..400 * DAY_S,
            points in 1usize..5_000,
        ) {
            let to = from + span;
            let step = Step::auto(from, to, points);
            let w = step.width_s;
            proptest::prop_assert!(buckets(from, to, w) <= points as i64, "{w}s");
            // The step `auto` would have tried just before `w`: the table's
            // previous entry, or for whole days past it, one day less.
            let finer = match AUTO_STEPS_S.iter().position(|&s| s == w) {
                Some(i) => i.checked_sub(1).map(|j| AUTO_STEPS_S[j]),
                None => Some((w - DAY_S).max(7 * DAY_S)),
            };
            if let Some(f) = finer {
                proptest::prop_assert!(buckets(from, to, f) > points as i64, "{f}s fits finer than {w}s");
            }
        }

        /// At the boundary: a range of exactly `n` aligned steps gets that
        /// step with a budget of `n`, and a coarser one with `n - 1`.
        #[test]
        fn a_range_of_exactly_the_budget_gets_its_step(
            i in 0usize..AUTO_STEPS_S.len(),
            n in 2i64..3_000,
            k in -1_000_000i64..1_000_000,
        ) {
            let w = AUTO_STEPS_S[i];
            let from = k * w;
            let to = from + n * w;
            proptest::prop_assert_eq!(Step::auto(from, to, n as usize).width_s, w);
            proptest::prop_assert!(Step::auto(from, to, n as usize - 1).width_s > w);
        }
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
