//! The document model: series, samples, slots, and the arithmetic that maps a
//! timestamp to its hour document and minute slot and to its day document,
//! hour entry and minute slot.
//!
//! Everything here is plain data and pure functions; the aggregator, the flush
//! pipeline, the stores and the query engine all speak these types.
//!
//! Time is Unix time in UTC. Unix time has no leap seconds, so every hour is
//! 3,600 s and every day 86,400 s and the mapping is integer division.

use std::borrow::Cow;
use std::fmt;
use std::hash::{Hash, Hasher};

use crate::labels::{metric_key, split_metric_key, Labels};

/// Seconds in a minute, hour and day: the three slot widths.
pub const MINUTE_S: i64 = 60;
pub const HOUR_S: i64 = 3_600;
pub const DAY_S: i64 = 86_400;

/// Longest accepted source name.
pub const MAX_SOURCE_LEN: usize = 128;
/// Longest accepted metric name.
pub const MAX_METRIC_LEN: usize = 200;

/// How a series' values are read. Mirrors `tally.v1.SampleKind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SampleKind {
    Gauge,
    DeltaCounter,
    CumulativeCounter,
}

impl SampleKind {
    /// Counters get a `rate`; gauges do not.
    pub fn is_counter(self) -> bool {
        !matches!(self, SampleKind::Gauge)
    }

    /// Stable one-byte code, used in stored documents.
    pub fn code(self) -> u8 {
        match self {
            SampleKind::Gauge => 1,
            SampleKind::DeltaCounter => 2,
            SampleKind::CumulativeCounter => 3,
        }
    }

    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(SampleKind::Gauge),
            2 => Some(SampleKind::DeltaCounter),
            3 => Some(SampleKind::CumulativeCounter),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SampleKind::Gauge => "gauge",
            SampleKind::DeltaCounter => "delta_counter",
            SampleKind::CumulativeCounter => "cumulative_counter",
        }
    }
}

/// Why a name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("is empty")]
    Empty,
    #[error("is {len} bytes long; the limit is {max}")]
    TooLong { len: usize, max: usize },
    #[error("contains {ch:?} at byte {at}; allowed are letters, digits and {allowed}")]
    BadChar {
        ch: char,
        at: usize,
        allowed: &'static str,
    },
}

const SOURCE_PUNCT: &str = "._:-";
const METRIC_PUNCT: &str = "._:/-";

/// Byte lookup tables: validation runs for every series group on the ingest
/// hot path.
const fn charset(punct: &str) -> [bool; 256] {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = (b as u8).is_ascii_alphanumeric();
        b += 1;
    }
    let p = punct.as_bytes();
    let mut i = 0;
    while i < p.len() {
        t[p[i] as usize] = true;
        i += 1;
    }
    t
}

static SOURCE_CHARS: [bool; 256] = charset(SOURCE_PUNCT);
static METRIC_CHARS: [bool; 256] = charset(METRIC_PUNCT);

fn validate_name(
    name: &str,
    max: usize,
    allowed: &[bool; 256],
    punct: &'static str,
) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > max {
        return Err(NameError::TooLong {
            len: name.len(),
            max,
        });
    }
    match name.bytes().position(|b| !allowed[b as usize]) {
        None => Ok(()),
        Some(at) => Err(NameError::BadChar {
            // The name may be non-ASCII; report the whole character.
            ch: name
                .get(at..)
                .and_then(|r| r.chars().next())
                .unwrap_or('\u{fffd}'),
            at,
            allowed: punct,
        }),
    }
}

/// A source is a server or agent id: 1–128 bytes of `[A-Za-z0-9._:-]`.
pub fn validate_source(name: &str) -> Result<(), NameError> {
    validate_name(name, MAX_SOURCE_LEN, &SOURCE_CHARS, SOURCE_PUNCT)
}

/// A source as stored: an agent's source, or a group rollup's `@<group>`
/// (see `rollup`), whose `@` no agent can send.
pub fn validate_stored_source(name: &str) -> Result<(), NameError> {
    validate_source(name.strip_prefix('@').unwrap_or(name))
}

/// A metric name: 1–200 bytes of `[A-Za-z0-9._:/-]`.
pub fn validate_metric(name: &str) -> Result<(), NameError> {
    validate_name(name, MAX_METRIC_LEN, &METRIC_CHARS, METRIC_PUNCT)
}

/// A series: one metric of one source, with one label set (often empty).
/// Names and labels are validated before one is made.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SeriesId {
    pub source: std::sync::Arc<str>,
    pub metric: std::sync::Arc<str>,
    pub labels: Labels,
}

impl SeriesId {
    /// Equality that compares addresses first: ids travel as the
    /// aggregator's one shared copy per series, so the tables that meet a
    /// series every flush (pending minutes, catalog records, baselines)
    /// seldom need to compare its names.
    pub fn same(&self, other: &SeriesId) -> bool {
        std::ptr::eq(self, other) || self == other
    }

    /// An unlabelled series.
    pub fn new(source: &str, metric: &str) -> Self {
        SeriesId {
            source: source.into(),
            metric: metric.into(),
            labels: Labels::none(),
        }
    }

    pub fn with_labels(source: &str, metric: &str, labels: Labels) -> Self {
        SeriesId {
            source: source.into(),
            metric: metric.into(),
            labels,
        }
    }

    pub fn series_ref(&self) -> SeriesRef<'_> {
        SeriesRef {
            source: &self.source,
            metric: &self.metric,
            labels: self.labels.as_str(),
        }
    }

    /// The metric followed by `{labels}` when there are any: what follows
    /// `source|` in a series key (see [`crate::labels`]).
    pub fn metric_key(&self) -> Cow<'_, str> {
        metric_key(&self.metric, self.labels.as_str())
    }

    /// `source|metric` or `source|metric{labels}`: the series' key in stores
    /// and catalog order. `|` is in neither name's charset, so the join is
    /// unambiguous; an unlabelled series' key is what it was before labels.
    /// (Key order is not the derived `Ord`: `a-b|m` sorts before `a|m`.)
    pub fn key(&self) -> String {
        let mk = self.metric_key();
        let mut k = String::with_capacity(self.source.len() + 1 + mk.len());
        k.push_str(&self.source);
        k.push('|');
        k.push_str(&mk);
        k
    }

    /// The series of a key made by [`SeriesId::key`], if it is one; names
    /// are not re-validated, labels must be canonical.
    pub fn from_key(key: &str) -> Option<SeriesId> {
        let (source, mk) = key.split_once('|')?;
        SeriesId::from_metric_key(source, mk)
    }

    /// The series of `source` and a metric key ([`SeriesId::metric_key`]).
    pub fn from_metric_key(source: &str, metric_key: &str) -> Option<SeriesId> {
        let (metric, labels) = split_metric_key(metric_key)?;
        let labels = if labels.is_empty() {
            Labels::none()
        } else {
            Labels::from_encoded(labels)?
        };
        Some(SeriesId::with_labels(source, metric, labels))
    }
}

impl Hash for SeriesId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.series_ref().hash(state)
    }
}

impl fmt::Display for SeriesId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}{}", self.source, self.metric, self.labels)
    }
}

/// A borrowed series id, so hot-path lookups need no allocation. `labels`
/// is the canonical encoding ([`crate::labels`]), empty when unlabelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeriesRef<'a> {
    pub source: &'a str,
    pub metric: &'a str,
    pub labels: &'a str,
}

impl<'a> SeriesRef<'a> {
    /// An unlabelled series.
    pub fn new(source: &'a str, metric: &'a str) -> Self {
        SeriesRef {
            source,
            metric,
            labels: "",
        }
    }
}

impl Hash for SeriesRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Must match `SeriesId::hash`, which delegates here.
        state.write(self.source.as_bytes());
        state.write_u8(0xff);
        state.write(self.metric.as_bytes());
        state.write_u8(0xff);
        state.write(self.labels.as_bytes());
    }
}

impl hashbrown::Equivalent<SeriesId> for SeriesRef<'_> {
    fn equivalent(&self, key: &SeriesId) -> bool {
        *self.source == *key.source
            && *self.metric == *key.metric
            && self.labels == key.labels.as_str()
    }
}

impl hashbrown::Equivalent<std::sync::Arc<SeriesId>> for SeriesRef<'_> {
    fn equivalent(&self, key: &std::sync::Arc<SeriesId>) -> bool {
        self.equivalent(&**key)
    }
}

/// A slot: count, running sum, minimum and maximum of the samples in it.
///
/// The empty slot has `n = 0`, `min = +inf` and `max = -inf`, so that merging
/// is plain `min`/`max` with no special case, exactly as `$min`/`$max` behave
/// on a pre-allocated MongoDB document. An empty slot is "no data", never a
/// zero point.
/// The largest magnitude of any sum the daemon keeps in a slot. A sample
/// that would take its minute's sum (or a cumulative counter's increase)
/// beyond it is rejected, and a rollup leaves out a member that would take
/// its sum beyond it. Every stored sum is a sum of such bounded sums, one
/// per flush and minute (a day's total at a flush a second is at most 1440
/// × 86400 ≈ 1.2e8 of them), and `f64::MAX / MAX_SUM` ≈ 1.8e8, so finite
/// input never adds up to infinity in a minute, hour or day slot.
pub const MAX_SUM: f64 = 1e300;

/// Whether `sum` may be kept in a slot: within ±[`MAX_SUM`] (so not NaN).
#[inline]
pub fn sum_in_range(sum: f64) -> bool {
    sum.abs() <= MAX_SUM
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slot {
    pub n: u64,
    pub sum: f64,
    pub min: f64,
    pub max: f64,
}

impl Default for Slot {
    fn default() -> Self {
        Slot::EMPTY
    }
}

impl Slot {
    pub const EMPTY: Slot = Slot {
        n: 0,
        sum: 0.0,
        min: f64::INFINITY,
        max: f64::NEG_INFINITY,
    };

    pub fn of(value: f64) -> Slot {
        Slot {
            n: 1,
            sum: value,
            min: value,
            max: value,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    #[inline]
    pub fn add(&mut self, value: f64) {
        self.n += 1;
        self.sum += value;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    #[inline]
    pub fn merge(&mut self, other: &Slot) {
        self.n += other.n;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    pub fn avg(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / self.n as f64)
    }

    /// Counters: the slot's sum spread over its width in seconds.
    pub fn rate(&self, width_s: i64) -> Option<f64> {
        (self.n > 0).then(|| self.sum / width_s as f64)
    }
}

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

/// Identity of a stored document.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DocKey {
    pub series: SeriesId,
    pub tier: Tier,
    /// Unix seconds of the period's start.
    pub period_start: i64,
}

/// Minute slots of one series drained from the aggregator, sorted by minute.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesMinutes {
    pub series: std::sync::Arc<SeriesId>,
    pub kind: SampleKind,
    /// Inline when one, as nearly always (a flush drains each series'
    /// current minute): a batch of a million series then holds no separate
    /// allocation per series.
    pub minutes: Minutes,
}

/// A series' minutes in a batch, ascending.
pub type Minutes = smallvec::SmallVec<[(EpochMinute, Slot); 1]>;

impl SeriesMinutes {
    /// The hour- and day-document updates of these minutes.
    pub fn update(&self) -> SeriesUpdate {
        SeriesUpdate::from_minutes(self)
    }

    /// How many hour and day documents the minutes lie in.
    pub fn document_count(&self) -> usize {
        let mut count = 0;
        let (mut hour, mut day) = (None, None);
        for &(m, _) in &self.minutes {
            let (h, d) = (hour_slot(m).hour_start, day_slot(m).day_start);
            count += usize::from(hour != Some(h)) + usize::from(day != Some(d));
            (hour, day) = (Some(h), Some(d));
        }
        count
    }
}

/// The update to one hour document: its touched minutes and their sum.
#[derive(Debug, Clone, PartialEq)]
pub struct HourDocUpdate {
    pub hour_start: i64,
    /// (minute of hour, slot), ascending, no duplicates.
    pub minutes: Vec<(u8, Slot)>,
    /// The merge of `minutes`, added to the hour's running slot.
    pub total: Slot,
}

/// The update to one hour entry of a day document.
#[derive(Debug, Clone, PartialEq)]
pub struct DayHourUpdate {
    pub hour: u8,
    pub minutes: Vec<(u8, Slot)>,
    pub total: Slot,
}

/// The update to one day document.
#[derive(Debug, Clone, PartialEq)]
pub struct DayDocUpdate {
    pub day_start: i64,
    /// Ascending by hour, no duplicates.
    pub hours: Vec<DayHourUpdate>,
    /// The merge of all hours, added to the day's running slot.
    pub total: Slot,
}

/// All document updates of one series in one flush. `hours` and `days`
/// hold the same minutes ([`SeriesUpdate::from_minutes`] makes both from
/// one list), so a store may keep either and derive the other.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesUpdate {
    pub series: std::sync::Arc<SeriesId>,
    pub kind: SampleKind,
    pub hours: Vec<HourDocUpdate>,
    pub days: Vec<DayDocUpdate>,
}

impl SeriesUpdate {
    /// Folds a series' minute slots into hour- and day-document updates.
    /// `minutes` must be sorted by minute with no duplicates.
    pub fn from_minutes(m: &SeriesMinutes) -> SeriesUpdate {
        let mut hours: Vec<HourDocUpdate> = Vec::new();
        let mut days: Vec<DayDocUpdate> = Vec::new();
        for &(minute, slot) in &m.minutes {
            let hs = hour_slot(minute);
            match hours.last_mut() {
                Some(h) if h.hour_start == hs.hour_start => {
                    h.minutes.push((hs.minute, slot));
                    h.total.merge(&slot);
                }
                _ => hours.push(HourDocUpdate {
                    hour_start: hs.hour_start,
                    minutes: vec![(hs.minute, slot)],
                    total: slot,
                }),
            }
            let ds = day_slot(minute);
            if days.last().map(|d| d.day_start) != Some(ds.day_start) {
                days.push(DayDocUpdate {
                    day_start: ds.day_start,
                    hours: Vec::new(),
                    total: Slot::EMPTY,
                });
            }
            // Just pushed or matched above, so `last_mut` is always Some.
            if let Some(d) = days.last_mut() {
                d.total.merge(&slot);
                match d.hours.last_mut() {
                    Some(h) if h.hour == ds.hour => {
                        h.minutes.push((ds.minute, slot));
                        h.total.merge(&slot);
                    }
                    _ => d.hours.push(DayHourUpdate {
                        hour: ds.hour,
                        minutes: vec![(ds.minute, slot)],
                        total: slot,
                    }),
                }
            }
        }
        SeriesUpdate {
            series: m.series.clone(),
            kind: m.kind,
            hours,
            days,
        }
    }

    /// The minute slots this update was made of, ascending: the inverse of
    /// [`SeriesUpdate::from_minutes`].
    pub fn minutes(&self) -> impl Iterator<Item = (EpochMinute, Slot)> + '_ {
        self.hours.iter().flat_map(|h| {
            let first = h.hour_start.div_euclid(MINUTE_S);
            h.minutes
                .iter()
                .map(move |&(m, slot)| (first + EpochMinute::from(m), slot))
        })
    }
}

/// Identity of one flush. Stores record the highest sequence applied to each
/// document (its watermark), so a flush replayed after an ambiguous failure
/// is recognised and skipped instead of counted twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlushId(pub u64);

/// One flush: the drained minutes of every active series. Kept as minutes,
/// as the aggregator drains them (one allocation per series); a store
/// groups them into document updates ([`SeriesMinutes::update`]) only
/// where and when it writes documents.
#[derive(Debug, Clone, PartialEq)]
pub struct FlushBatch {
    pub id: FlushId,
    pub series: Vec<SeriesMinutes>,
}

impl FlushBatch {
    /// The hour and day documents the flush touches.
    pub fn document_count(&self) -> usize {
        self.series.iter().map(SeriesMinutes::document_count).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn minute_at(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> EpochMinute {
        let t = Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap();
        minute_of_ms(t.timestamp_millis())
    }

    fn ts(y: i32, mo: u32, d: u32, h: u32) -> i64 {
        Utc.with_ymd_and_hms(y, mo, d, h, 0, 0).unwrap().timestamp()
    }

    #[test]
    fn stored_sources_admit_rollups_only_with_one_at() {
        assert!(validate_stored_source("@all").is_ok());
        assert!(validate_stored_source("web-1").is_ok());
        assert!(validate_stored_source("@@all").is_err());
        assert!(validate_stored_source("@").is_err());
        assert!(validate_source("@all").is_err());
    }

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

    #[test]
    fn slot_math() {
        let mut s = Slot::EMPTY;
        assert!(s.is_empty());
        assert_eq!(s.avg(), None);
        for v in [3.0, -1.0, 4.0] {
            s.add(v);
        }
        assert_eq!(
            s,
            Slot {
                n: 3,
                sum: 6.0,
                min: -1.0,
                max: 4.0
            }
        );
        assert_eq!(s.avg(), Some(2.0));
        assert_eq!(s.rate(60), Some(0.1));
        let mut t = Slot::EMPTY;
        t.merge(&s);
        assert_eq!(t, s);
        t.merge(&Slot::EMPTY);
        assert_eq!(t, s, "merging the empty slot changes nothing");
    }

    #[test]
    fn names_are_validated() {
        assert!(validate_source("db-01.eu:27017").is_ok());
        assert!(validate_metric("opcounters/insert").is_ok());
        assert_eq!(validate_source(""), Err(NameError::Empty));
        assert!(matches!(
            validate_source(&"a".repeat(129)),
            Err(NameError::TooLong { len: 129, max: 128 })
        ));
        assert!(matches!(
            validate_metric("a b"),
            Err(NameError::BadChar { ch: ' ', at: 1, .. })
        ));
        assert!(matches!(
            validate_source("srv/1"),
            Err(NameError::BadChar { ch: '/', .. })
        ));
        assert!(matches!(
            validate_metric("é"),
            Err(NameError::BadChar {
                ch: 'é', at: 0, ..
            })
        ));
    }

    #[test]
    fn series_update_splits_across_hours_and_days() {
        let base = minute_at(2026, 1, 31, 23, 58, 0);
        let minutes: Vec<_> = (0..4).map(|i| (base + i, Slot::of(i as f64))).collect();
        let u = SeriesUpdate::from_minutes(&SeriesMinutes {
            series: std::sync::Arc::new(SeriesId::new("a", "m")),
            kind: SampleKind::Gauge,
            minutes: minutes.into(),
        });
        assert_eq!(u.hours.len(), 2);
        assert_eq!(u.days.len(), 2);
        assert_eq!(u.hours[0].minutes.len(), 2);
        assert_eq!(u.hours[0].total.sum, 1.0);
        assert_eq!(u.hours[1].total.sum, 5.0);
        assert_eq!(u.days[1].day_start, ts(2026, 2, 1, 0));
        assert_eq!(u.days[1].hours[0].hour, 0);
        assert_eq!(u.days[0].hours[0].hour, 23);
        assert_eq!(u.days[0].total.n, 2);
    }
}
