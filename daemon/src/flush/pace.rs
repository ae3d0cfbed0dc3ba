//! Spacing flushes so that a store's server is never asked for more
//! statements per second than configured (`mongodb.max_statements_per_s`).
//!
//! A flush costs about one statement per touched document whatever the
//! interval, because a longer interval only puts more samples into the same
//! documents. So after a flush of `s` statements the next one waits until
//! `s / budget` seconds after this one began, and the fleet's statements
//! per second stay under the budget however large it grows. Samples merge
//! in memory meanwhile; reads merge memory, so they stay fresh, and the
//! aggregator's memory bound still holds (ingest pushes back at it).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

/// When the next flush may be cut.
#[derive(Debug)]
pub(super) struct Pace {
    /// Statements per second; None: no bound.
    budget: Option<f64>,
    not_before: Mutex<Option<Instant>>,
}

impl Pace {
    pub(super) fn new(budget: Option<f64>) -> Pace {
        Pace {
            budget: budget.filter(|b| *b > 0.0),
            not_before: Mutex::new(None),
        }
    }

    /// A flush that began at `started` sent `statements`.
    pub(super) fn flushed(&self, started: Instant, statements: usize) {
        let Some(budget) = self.budget else { return };
        let gap = Duration::from_secs_f64(statements as f64 / budget);
        let next = started + gap;
        let mut not_before = self.not_before.lock();
        if not_before.is_none_or(|t| t < next) {
            *not_before = Some(next);
        }
    }

    /// Whether a flush cut at `now` would outrun the budget.
    pub(super) fn holds(&self, now: Instant) -> bool {
        self.not_before.lock().is_some_and(|t| now < t)
    }
}

/// How long after `now` the flush ticks start: just after the first
/// wall-clock multiple of `interval` at least one interval away (a daemon
/// started just before a beat must not flush at once: tests and operators
/// rely on a long interval keeping data in the log). With an interval that divides a
/// minute, a flush then comes right after each minute begins, so a series'
/// last samples of the old minute are drained before its first ones of the
/// new minute arrive. Ticks at other times drained both minutes of nearly
/// every series at once, each pair in an allocation of its own (80 MB at a
/// million series, every minute). The offset leaves samples stamped just
/// before the boundary time to arrive.
pub(super) fn until_beat(interval: Duration, now: SystemTime) -> Duration {
    let since = now
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let step = interval.as_nanos().max(1);
    let offset = (interval / 20).min(BEAT_OFFSET).as_nanos();
    let next = (since + step).div_ceil(step) * step + offset;
    Duration::from_nanos(u64::try_from(next - since).unwrap_or(u64::MAX))
}

/// How long after a multiple of the interval a flush tick comes, at most.
const BEAT_OFFSET: Duration = Duration::from_millis(50);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flush_waits_its_statements_over_the_budget() {
        let pace = Pace::new(Some(1000.0));
        let t = Instant::now();
        assert!(!pace.holds(t), "nothing flushed yet");
        pace.flushed(t, 2500);
        assert!(pace.holds(t + Duration::from_millis(2400)));
        assert!(!pace.holds(t + Duration::from_millis(2500)));
        // A smaller flush later does not shorten a longer wait.
        pace.flushed(t + Duration::from_millis(100), 10);
        assert!(pace.holds(t + Duration::from_millis(2400)));
    }

    #[test]
    fn ticks_start_just_after_a_multiple_of_the_interval() {
        let at = |s: f64| UNIX_EPOCH + Duration::from_secs_f64(s);
        let ms = |d: Duration| d.as_millis();
        // 62.3 s past a minute: the first 5 s beat at least 5 s away is
        // 70 s, then 50 ms.
        assert_eq!(ms(until_beat(Duration::from_secs(5), at(62.3))), 7_750);
        assert_eq!(ms(until_beat(Duration::from_secs(1), at(62.3))), 1_750);
        // On a beat: the next one.
        assert_eq!(ms(until_beat(Duration::from_secs(5), at(65.0))), 5_050);
        // Just before a beat: not at once, the one after.
        let hour = Duration::from_secs(3600);
        assert_eq!(until_beat(hour, at(3599.0)).as_secs(), 3601);
        // A short interval: an offset of a twentieth of it.
        assert_eq!(ms(until_beat(Duration::from_millis(100), at(62.31))), 195);
    }

    #[test]
    fn no_budget_never_holds() {
        for budget in [None, Some(0.0)] {
            let pace = Pace::new(budget);
            let t = Instant::now();
            pace.flushed(t, 1_000_000);
            assert!(!pace.holds(t));
        }
    }
}
