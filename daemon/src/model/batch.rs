//! What a flush carries: each series' drained minutes, the hour- and
//! day-document updates they make, and the flush's identity.

use super::{day_slot, hour_slot, EpochMinute, SampleKind, SeriesId, Slot, Tier, MINUTE_S};

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
    /// Whether these minutes make the series' catalog entry due, when the
    /// aggregator that drained them kept track (see [`crate::catalog`]).
    pub catalog: CatalogDue,
}

/// Whether a series' drained minutes make its catalog entry due, as the
/// aggregator saw it when it drained them. It keeps each series' catalog
/// mark beside the series, so a flush settles this where it already holds
/// the series instead of finding every series again in the catalog writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CatalogDue {
    /// Not tracked (rollup series, minutes read back from a store, tests):
    /// the catalog writer decides by its own record.
    #[default]
    Unknown,
    /// Due: never recorded since the series came into memory, a minute
    /// before its recorded first, or `catalog.refresh` past its last.
    Due,
    /// Recorded already, or nothing a read would show.
    Covered,
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
    /// The hashes of the first `hashes.len()` series by
    /// [`super::series_hasher`], in their order: those the aggregator
    /// drained, whose hashes it kept. The rest (a flush's rollups, a batch
    /// read back from elsewhere) are hashed when asked for.
    pub hashes: Vec<u64>,
    /// Replay may begin at this flush: its marker in the write-ahead log
    /// carries the counters' baselines, or there is no log. The embedded
    /// store takes its checkpoints at such flushes, so that a replay from
    /// one folds no earlier part of the log again (`recovery.rs`).
    pub resumable: bool,
}

impl FlushBatch {
    /// The hash of the `i`th series by [`super::series_hasher`].
    pub fn hash_of(&self, i: usize) -> u64 {
        match self.hashes.get(i) {
            Some(&h) => h,
            None => super::series_hash(self.series[i].series.series_ref()),
        }
    }

    /// The hour and day documents the flush touches.
    pub fn document_count(&self) -> usize {
        self.series.iter().map(SeriesMinutes::document_count).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::super::time::at::{minute_at, ts};
    use super::*;

    #[test]
    fn series_update_splits_across_hours_and_days() {
        let base = minute_at(2026, 1, 31, 23, 58, 0);
        let minutes: Vec<_> = (0..4).map(|i| (base + i, Slot::of(i as f64))).collect();
        let u = SeriesUpdate::from_minutes(&SeriesMinutes {
            catalog: crate::model::CatalogDue::Unknown,
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
