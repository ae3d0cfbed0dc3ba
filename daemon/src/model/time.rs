//! Minutes, hours and days: the tiers and resolutions, and where a minute
//! lands in its hour and day documents.

/// Seconds in a minute, hour and day: the three slot widths.
pub const MINUTE_S: i64 = 60;
pub const HOUR_S: i64 = 3_600;
pub const DAY_S: i64 = 86_400;

/// A minute, counted from the Unix epoch: the aggregator's bucket key.
pub type EpochMinute = i64;

/// The minute a millisecond timestamp falls in (floors towards -inf).
pub fn minute_of_ms(ts_ms: i64) -> EpochMinute {
    ts_ms.div_euclid(60_000)
}

/// The two document tiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tier {
    /// One document per series per hour: 60 minute slots + the hour's slot.
    Hour,
    /// One document per series per day: 24 hour entries of (hour slot + 60
    /// minute slots) + the day's slot.
    Day,
}

impl Tier {
    pub fn period_s(self) -> i64 {
        match self {
            Tier::Hour => HOUR_S,
            Tier::Day => DAY_S,
        }
    }

    /// Start (Unix seconds) of the document of this tier holding `minute`.
    pub fn period_start(self, minute: EpochMinute) -> i64 {
        (minute * MINUTE_S).div_euclid(self.period_s()) * self.period_s()
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Hour => "hour",
            Tier::Day => "day",
        }
    }
}

/// The width of a returned point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resolution {
    Minute,
    Hour,
    Day,
}

impl Resolution {
    pub fn width_s(self) -> i64 {
        match self {
            Resolution::Minute => MINUTE_S,
            Resolution::Hour => HOUR_S,
            Resolution::Day => DAY_S,
        }
    }

    /// Start of the bucket holding Unix second `t`.
    pub fn floor(self, t: i64) -> i64 {
        t.div_euclid(self.width_s()) * self.width_s()
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Resolution::Minute => "1m",
            Resolution::Hour => "1h",
            Resolution::Day => "1d",
        }
    }
}

/// Where a minute lands in an hour document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HourSlot {
    /// Unix seconds of the hour's start.
    pub hour_start: i64,
    /// 0..60.
    pub minute: u8,
}

/// Where a minute lands in a day document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DaySlot {
    /// Unix seconds of the day's start (00:00 UTC).
    pub day_start: i64,
    /// 0..24.
    pub hour: u8,
    /// 0..60.
    pub minute: u8,
}

pub fn hour_slot(minute: EpochMinute) -> HourSlot {
    let hour_start = Tier::Hour.period_start(minute);
    HourSlot {
        hour_start,
        // In 0..60 by construction of the euclidean division above.
        minute: (minute - hour_start / MINUTE_S) as u8,
    }
}

pub fn day_slot(minute: EpochMinute) -> DaySlot {
    let day_start = Tier::Day.period_start(minute);
    let minute_of_day = minute - day_start / MINUTE_S;
    DaySlot {
        day_start,
        hour: (minute_of_day / 60) as u8,
        minute: (minute_of_day % 60) as u8,
    }
}

/// Calendar times for the model's tests.
#[cfg(test)]
pub(super) mod at {
    use super::{minute_of_ms, EpochMinute};
    use chrono::{TimeZone, Utc};

    /// The minute holding the UTC time given.
    pub fn minute_at(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> EpochMinute {
        let t = Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap();
        minute_of_ms(t.timestamp_millis())
    }

    /// The Unix seconds of a whole UTC hour.
    pub fn ts(y: i32, mo: u32, d: u32, h: u32) -> i64 {
        Utc.with_ymd_and_hms(y, mo, d, h, 0, 0).unwrap().timestamp()
    }
}

#[cfg(test)]
mod tests {
    use super::at::{minute_at, ts};
    use super::*;

    #[test]
    fn minute_floors_negative_timestamps() {
        assert_eq!(minute_of_ms(0), 0);
        assert_eq!(minute_of_ms(59_999), 0);
        assert_eq!(minute_of_ms(60_000), 1);
        assert_eq!(minute_of_ms(-1), -1);
    }

    #[test]
    fn example_sample_lands_in_minute_6_of_hour_23() {
        // A sample at 2015-05-29T23:06:37Z: its hour doc starts 23:00.
        let m = minute_at(2015, 5, 29, 23, 6, 37);
        let hs = hour_slot(m);
        assert_eq!(hs.hour_start, ts(2015, 5, 29, 23));
        assert_eq!(hs.minute, 6);
        let ds = day_slot(m);
        assert_eq!(ds.day_start, ts(2015, 5, 29, 0));
        assert_eq!((ds.hour, ds.minute), (23, 6));
    }

    #[test]
    fn boundaries_hour_day_month_year() {
        // Last minute of a year, and the first of the next.
        let last = minute_at(2025, 12, 31, 23, 59, 59);
        let first = minute_at(2026, 1, 1, 0, 0, 0);
        assert_eq!(first, last + 1);
        assert_eq!(hour_slot(last).hour_start, ts(2025, 12, 31, 23));
        assert_eq!(hour_slot(last).minute, 59);
        assert_eq!(
            day_slot(last),
            DaySlot {
                day_start: ts(2025, 12, 31, 0),
                hour: 23,
                minute: 59
            }
        );
        assert_eq!(
            hour_slot(first),
            HourSlot {
                hour_start: ts(2026, 1, 1, 0),
                minute: 0
            }
        );
        assert_eq!(day_slot(first).day_start, ts(2026, 1, 1, 0));
        // Month end in a leap year.
        let feb29 = minute_at(2024, 2, 29, 12, 30, 0);
        assert_eq!(day_slot(feb29).day_start, ts(2024, 2, 29, 0));
        assert_eq!(day_slot(feb29 + 12 * 60).day_start, ts(2024, 3, 1, 0));
        // Hour boundary inside a day.
        let m = minute_at(2026, 11, 22, 9, 59, 59);
        assert_eq!(hour_slot(m + 1).hour_start, ts(2026, 11, 22, 10));
        assert_eq!(day_slot(m + 1).hour, 10);
        // Before the epoch.
        let pre = minute_at(1969, 12, 31, 23, 59, 0);
        assert_eq!(day_slot(pre).day_start, -DAY_S);
        assert_eq!((day_slot(pre).hour, day_slot(pre).minute), (23, 59));
    }
}
