//! Checks on configuration values, shared by every component's config type.
//!
//! Each component validates its own section (`IngestConfig::check`,
//! `FlushConfig::check`, …) into one [`Problems`] list, so an operator sees
//! every bad setting at once instead of fixing one per restart. This module
//! is a leaf: components and `config` both use it, and it uses neither.

use std::time::Duration;

/// Seconds in a minute, an hour and a day, for durations in messages.
pub(crate) const MINUTE: u64 = 60;
pub(crate) const HOUR: u64 = 3_600;
pub(crate) const DAY: u64 = 86_400;

pub(crate) const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Validation failures as (dotted key, message) pairs.
#[derive(Debug, Default)]
pub struct Problems(Vec<(&'static str, String)>);

impl Problems {
    pub fn into_vec(self) -> Vec<(&'static str, String)> {
        self.0
    }

    pub fn fail(&mut self, key: &'static str, message: impl Into<String>) {
        self.0.push((key, message.into()));
    }

    pub fn require(&mut self, ok: bool, key: &'static str, message: impl Into<String>) {
        if !ok {
            self.fail(key, message);
        }
    }

    pub fn at_least(&mut self, value: usize, min: usize, key: &'static str) {
        self.require(value >= min, key, format!("must be at least {min}"));
    }

    pub fn positive(&mut self, value: Duration, key: &'static str) {
        self.require(!value.is_zero(), key, "must be greater than 0");
    }

    pub fn min_duration(&mut self, value: Duration, min: Duration, key: &'static str) {
        self.require(
            value >= min,
            key,
            format!("must be at least {}", format_duration(min)),
        );
    }

    pub fn at_most(&mut self, value: Duration, max: Duration, key: &'static str) {
        self.require(
            value <= max,
            key,
            format!("must be at most {}", format_duration(max)),
        );
    }

    pub fn shorter_than(
        &mut self,
        value: Duration,
        period: Duration,
        key: &'static str,
        what: &str,
    ) {
        self.require(
            value < period,
            key,
            format!("must be shorter than {what} ({})", format_duration(period)),
        );
    }
}

/// Formats in the largest unit that divides evenly, so messages say "14d"
/// or "90m" rather than humantime's "1year 1month ..." spellings.
pub fn format_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        let s = d.as_secs();
        for (unit, size) in [("d", DAY), ("h", HOUR), ("m", MINUTE)] {
            if s != 0 && s.is_multiple_of(size) {
                return format!("{}{unit}", s / size);
            }
        }
        return format!("{s}s");
    }
    let nanos = d.as_nanos();
    for (unit, size) in [("ms", 1_000_000), ("us", 1_000)] {
        if nanos.is_multiple_of(size) {
            return format!("{}{unit}", nanos / size);
        }
    }
    format!("{nanos}ns")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_format() {
        for (d, s) in [
            (Duration::ZERO, "0s"),
            (Duration::from_secs(1), "1s"),
            (Duration::from_secs(90), "90s"),
            (Duration::from_secs(5400), "90m"),
            (Duration::from_secs(7200), "2h"),
            (Duration::from_secs(400 * 86_400), "400d"),
            (Duration::from_millis(100), "100ms"),
            (Duration::from_micros(1500), "1500us"),
            (Duration::from_nanos(7), "7ns"),
        ] {
            assert_eq!(format_duration(d), s);
            assert_eq!(humantime::parse_duration(s).unwrap(), d, "{s}");
        }
    }

    #[test]
    fn problems_collect_every_failure() {
        let mut p = Problems::default();
        p.at_least(0, 1, "a.b");
        p.positive(Duration::ZERO, "a.c");
        p.min_duration(secs(1), secs(HOUR), "a.d");
        p.at_most(secs(2 * DAY), secs(DAY), "a.e");
        p.shorter_than(secs(HOUR), secs(HOUR), "a.f", "an hour");
        p.require(true, "a.g", "never");
        assert_eq!(
            p.into_vec(),
            vec![
                ("a.b", "must be at least 1".to_string()),
                ("a.c", "must be greater than 0".to_string()),
                ("a.d", "must be at least 1h".to_string()),
                ("a.e", "must be at most 1d".to_string()),
                ("a.f", "must be shorter than an hour (1h)".to_string()),
            ]
        );
    }
}
