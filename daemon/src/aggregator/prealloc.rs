//! Which next-period documents are due for pre-allocation, spread over the
//! end of the current period so the inserts do not all land at the boundary.

use super::Aggregator;
use crate::model::{DocKey, EpochMinute, Tier, DAY_S, HOUR_S, MINUTE_S};

impl Aggregator {
    /// Documents of the next hour and day that are due for pre-allocation
    /// now. Each series active in the current period gets a moment spread
    /// at random (by hash) over the final `window` of the period, so inserts
    /// do not all land at the boundary. Each document is returned once.
    pub fn due_preallocations(
        &self,
        now_s: i64,
        hour_window_s: i64,
        day_window_s: i64,
        limit: usize,
    ) -> Vec<DocKey> {
        let mut due = Vec::new();
        let this_minute = now_s.div_euclid(MINUTE_S);
        let hour = Tier::Hour.period_start(this_minute);
        let day = Tier::Day.period_start(this_minute);
        let (next_hour, next_day) = (hour + HOUR_S, day + DAY_S);
        let hour_open = now_s >= next_hour - hour_window_s;
        let day_open = now_s >= next_day - day_window_s;
        if !hour_open && !day_open {
            return due;
        }
        let offset = |hash: u64, period: i64, window: i64| -> i64 {
            let h = hash ^ (period as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            (h % window.max(1) as u64) as i64
        };
        'shards: for cell in self.shards.iter() {
            let mut s = cell.shard.lock();
            for st in s.series.iter_mut() {
                if due.len() >= limit {
                    break 'shards;
                }
                let active_minute = st.last_minute;
                if active_minute == EpochMinute::MIN {
                    // Only a cumulative counter's baseline so far: no data
                    // in any period yet.
                    continue;
                }
                if hour_open
                    && st.prealloc_hour < next_hour
                    && Tier::Hour.period_start(active_minute) == hour
                    && now_s
                        >= next_hour - hour_window_s + offset(st.hash, next_hour, hour_window_s)
                {
                    st.prealloc_hour = next_hour;
                    due.push(DocKey {
                        series: (*st.id).clone(),
                        tier: Tier::Hour,
                        period_start: next_hour,
                    });
                }
                if due.len() >= limit {
                    break 'shards;
                }
                if day_open
                    && st.prealloc_day < next_day
                    && Tier::Day.period_start(active_minute) == day
                    && now_s >= next_day - day_window_s + offset(st.hash, next_day, day_window_s)
                {
                    st.prealloc_day = next_day;
                    due.push(DocKey {
                        series: (*st.id).clone(),
                        tier: Tier::Day,
                        period_start: next_day,
                    });
                }
            }
        }
        due
    }
}
