//! Which next-period documents are due for pre-allocation, spread over the
//! end of the current period so the inserts do not all land at the boundary.
//! The decision per series is [`PreallocWindow::check`], shared by the
//! aggregator's series and the rollup series (`crate::rollup`), which only
//! exist at drain time.

use super::Aggregator;
use crate::model::{DocKey, EpochMinute, SeriesId, Tier, DAY_S, HOUR_S, MINUTE_S};

/// Where `now` stands against the ends of the current hour and day.
#[derive(Debug, Clone, Copy)]
pub struct PreallocWindow {
    now_s: i64,
    hour: i64,
    day: i64,
    hour_window_s: i64,
    day_window_s: i64,
}

/// What one series remembers between checks: the next-period documents it
/// already asked for, as hours and days since the epoch (0: none), so
/// that the marks take 8 bytes of a series' entry, not 16.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PreallocMarks {
    hour: u32,
    day: u32,
}

impl PreallocWindow {
    /// The window at `now_s`, or None while neither period's final window
    /// has begun (nothing can be due).
    pub fn at(now_s: i64, hour_window_s: i64, day_window_s: i64) -> Option<PreallocWindow> {
        let this_minute = now_s.div_euclid(MINUTE_S);
        let w = PreallocWindow {
            now_s,
            hour: Tier::Hour.period_start(this_minute),
            day: Tier::Day.period_start(this_minute),
            hour_window_s,
            day_window_s,
        };
        (w.hour_open() || w.day_open()).then_some(w)
    }

    fn hour_open(&self) -> bool {
        self.now_s >= self.hour + HOUR_S - self.hour_window_s
    }

    fn day_open(&self) -> bool {
        self.now_s >= self.day + DAY_S - self.day_window_s
    }

    /// Pushes onto `due` the next hour and day documents of `series` that are
    /// due now: the series was active in the current period (its last data
    /// is in minute `active_minute`), its moment, spread at random by `hash`
    /// over the period's final window, has come, and `marks` says it was not
    /// asked for yet. Each document is pushed once.
    pub fn check(
        &self,
        series: &SeriesId,
        hash: u64,
        active_minute: EpochMinute,
        marks: &mut PreallocMarks,
        due: &mut Vec<DocKey>,
    ) {
        let offset = |period: i64, window: i64| -> i64 {
            let h = hash ^ (period as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            (h % window.max(1) as u64) as i64
        };
        let periods = [
            (
                Tier::Hour,
                self.hour,
                HOUR_S,
                self.hour_window_s,
                &mut marks.hour,
            ),
            (
                Tier::Day,
                self.day,
                DAY_S,
                self.day_window_s,
                &mut marks.day,
            ),
        ];
        for (tier, current, length, window, mark) in periods {
            let next = current + length;
            // A period before the epoch or past a `u32` of them is never
            // due (nothing is ingested there).
            let Ok(index) = u32::try_from(next / length) else {
                continue;
            };
            if self.now_s >= next - window + offset(next, window)
                && *mark < index
                && tier.period_start(active_minute) == current
            {
                *mark = index;
                due.push(DocKey {
                    series: series.clone(),
                    tier,
                    period_start: next,
                });
            }
        }
    }
}

impl Aggregator {
    /// Documents of the next hour and day that are due for pre-allocation
    /// now (see [`PreallocWindow::check`]), at most about `limit`.
    pub fn due_preallocations(
        &self,
        now_s: i64,
        hour_window_s: i64,
        day_window_s: i64,
        limit: usize,
    ) -> Vec<DocKey> {
        let mut due = Vec::new();
        let Some(window) = PreallocWindow::at(now_s, hour_window_s, day_window_s) else {
            return due;
        };
        'shards: for cell in self.shards.iter() {
            let mut s = cell.shard.lock();
            for st in s.series.iter_mut() {
                if due.len() >= limit {
                    break 'shards;
                }
                if st.last_minute == EpochMinute::MIN {
                    // Only a cumulative counter's baseline so far: no data
                    // in any period yet.
                    continue;
                }
                window.check(&st.id, st.hash, st.last_minute, &mut st.prealloc, &mut due);
            }
        }
        due
    }
}
