//! The series catalog's write side: which series exist, their kind, and
//! when they were first and last seen, kept in the store for discovery.
//!
//! Writing the catalog per sample would double the write load, so the flush
//! pipeline reports each applied batch here and only three things reach the
//! store: a series this daemon has not recorded yet, a series whose
//! `last_seen` moved on by at least `refresh` since it was last recorded,
//! and a series with a sample for a minute before its recorded `first_seen`
//! (a late sample, within `ingest.lateness_window`).
//! A cumulative counter's minute holding only its baseline counts for
//! neither `first_seen` nor `last_seen`, as no read shows it. (A fourth,
//! which ingest's lateness window and clock skew bound rule out: minutes
//! before 1970 or past the year 10,000, which no mark holds, are written
//! every time they are shown.)
//! The store's upsert keeps the extremes, so several daemons (or a restarted
//! one) recording the same series agree. Discovery is thus fresh to one
//! flush for new series and to `refresh` for `last_seen`.
//!
//! Where that is decided: for the aggregator's series, by each series'
//! [`Mark`], which the aggregator keeps and checks as it drains them; for
//! what it does not track (rollup series, tests), by the marks of this
//! writer's own record of what it wrote. One rule decides for both.

mod config;
mod mark;

pub use config::CatalogConfig;
pub use mark::{Mark, RefreshMinutes};

use std::sync::Arc;

use hashbrown::HashMap;
use parking_lot::Mutex;

use crate::model::{CatalogDue, EpochMinute, SampleKind, SeriesId, SeriesMinutes, Slot, MINUTE_S};
use crate::store::CatalogEntry;
use crate::table::SeriesMap;

/// What was written of a series no aggregator's mark tracks: its mark, as
/// the store took it, and its kind (a change is written at once).
struct Recorded {
    mark: Mark,
    kind: SampleKind,
}

/// The series recorded, in the chunked per-series table: at a million
/// series a map holding these entries inline had two buckets per entry.
type RecordedSet = SeriesMap<Recorded>;

pub struct CatalogWriter {
    /// What was written of the series no [`Mark`] tracks. Keyed by the
    /// aggregator's own `Arc` of each series, so a recorded series costs a
    /// pointer here, not another copy of its names.
    recorded: Mutex<RecordedSet>,
    /// Entries the store refused to take; they go with the next write
    /// whatever series it carries, so a series that never flushes again
    /// is still catalogued. Bounded by the series that failed.
    failed: Mutex<HashMap<Arc<SeriesId>, CatalogEntry>>,
    refresh: RefreshMinutes,
}

/// The entries a batch made due, each naming the series by its shared id.
#[derive(Debug, Default)]
pub struct Due {
    /// In series order, as `due` builds it (`recorded` relies on it).
    entries: Vec<CatalogEntry>,
    /// The series of the entries no [`Mark`] tracks: once written, they
    /// go in the writer's own record.
    untracked: Vec<Arc<SeriesId>>,
}

impl Due {
    /// What the store is asked to upsert.
    pub fn entries(&self) -> &[CatalogEntry] {
        &self.entries
    }
}

impl std::ops::Deref for Due {
    type Target = [CatalogEntry];

    fn deref(&self) -> &[CatalogEntry] {
        &self.entries
    }
}

impl CatalogWriter {
    pub fn new(refresh: std::time::Duration) -> CatalogWriter {
        CatalogWriter {
            recorded: Mutex::new(RecordedSet::default()),
            failed: Mutex::new(HashMap::new()),
            refresh: RefreshMinutes::of(refresh),
        }
    }

    /// The entries an applied batch makes due. Rollup series are
    /// catalogued too, under their `@<group>` source, so that the label
    /// sets of a group's metric are known after a restart; listings select
    /// them only by that exact source (see [`crate::store::source_selected`]).
    pub fn due<'a>(&self, batch: impl IntoIterator<Item = &'a SeriesMinutes>) -> Due {
        let recorded = self.recorded.lock();
        let mut failed = self.failed.lock();
        let mut due = Due::default();
        for s in batch {
            if s.catalog == CatalogDue::Covered {
                continue;
            }
            let Some(mut e) = entry(s) else {
                continue;
            };
            let untracked = s.catalog == CatalogDue::Unknown;
            if untracked && recorded.get(&s.series).is_some_and(|r| r.covers(&e)) {
                continue;
            }
            if !failed.is_empty() {
                if let Some(f) = failed.remove(&*s.series) {
                    e.first_seen = e.first_seen.min(f.first_seen);
                    e.last_seen = e.last_seen.max(f.last_seen);
                }
            }
            if untracked {
                due.untracked.push(e.series.clone());
            }
            due.entries.push(e);
        }
        // Which of these a mark tracks is not known here: recorded as
        // untracked, which costs a few entries' room until they go idle.
        for (series, e) in failed.drain() {
            due.untracked.push(series);
            due.entries.push(e);
        }
        drop((recorded, failed));
        // In series order, near enough the store's key order: the writes
        // go in parts (a fleet's first flush makes every series due), and
        // parts in the batch's hash order each touched pages all over both
        // catalog tables, rewriting them whole part after part (about 640
        // bytes written per new series at a million). Sorted, a part fills
        // a range of its own.
        due.entries.sort_unstable_by(|a, b| a.series.cmp(&b.series));
        due
    }

    /// The store did not take `due`: keep it for the next write.
    pub fn failed(&self, due: Due) {
        let mut failed = self.failed.lock();
        for e in due.entries {
            match failed.get_mut(&*e.series) {
                Some(f) => {
                    f.first_seen = f.first_seen.min(e.first_seen);
                    f.last_seen = f.last_seen.max(e.last_seen);
                    f.kind = e.kind;
                }
                None => {
                    failed.insert(e.series.clone(), e);
                }
            }
        }
    }

    /// Keeps for the next write what `batch`'s marks took as recorded, when
    /// finding its due entries failed.
    pub fn requeue(&self, batch: &[SeriesMinutes]) {
        let entries = batch
            .iter()
            .filter(|s| s.catalog == CatalogDue::Due)
            .filter_map(entry)
            .collect();
        self.failed(Due {
            entries,
            untracked: Vec::new(),
        });
    }

    /// The store took `due`.
    pub fn recorded(&self, due: Due) {
        if due.untracked.is_empty() {
            return;
        }
        let mut recorded = self.recorded.lock();
        for series in &due.untracked {
            // `entries` is in series order; a series a batch carried twice
            // has two entries, and the record takes both.
            let from = due.entries.partition_point(|e| e.series < *series);
            let to = due.entries.partition_point(|e| e.series <= *series);
            for e in &due.entries[from..to] {
                let Some((first, last)) = minutes_of(e) else {
                    // A mark cannot hold it: due whenever it is shown again.
                    continue;
                };
                let r = recorded.get_or_insert_with(&e.series, || Recorded {
                    mark: Mark::default(),
                    kind: e.kind,
                });
                r.mark.take(first, last, self.refresh);
                r.kind = e.kind;
            }
        }
    }

    /// Forgets series last recorded before `before` (Unix seconds), so the
    /// map follows the active series. A forgotten series that comes back is
    /// written once more, which the upsert absorbs.
    pub fn forget_idle(&self, before: i64) -> usize {
        // A minute starts before `before` exactly when it comes before
        // `before`'s own minute, rounded up.
        let before = before.div_euclid(MINUTE_S) + i64::from(before.rem_euclid(MINUTE_S) != 0);
        let before = u32::try_from(before.max(0)).unwrap_or(u32::MAX);
        let mut recorded = self.recorded.lock();
        let n = recorded.len();
        recorded.retain(|r| !r.mark.idle_before(before, self.refresh));
        n - recorded.len()
    }

    pub fn len(&self) -> usize {
        self.recorded.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Recorded {
    /// Whether writing `e` would add nothing to what the store holds.
    fn covers(&self, e: &CatalogEntry) -> bool {
        self.kind == e.kind
            && minutes_of(e).is_some_and(|(first, last)| self.mark.covers(first, last))
    }
}

/// The catalog entry of the minutes a read would show: a cumulative
/// counter's baseline-only minute is no data (see
/// [`crate::model::Slot::shows`]), so a counter is first seen with its
/// first increase, and a batch holding only its baseline records nothing.
fn entry(s: &SeriesMinutes) -> Option<CatalogEntry> {
    let (first, last) = shown_minutes(s.kind, &s.minutes)?;
    Some(CatalogEntry {
        series: s.series.clone(),
        kind: s.kind,
        first_seen: first * MINUTE_S,
        last_seen: last * MINUTE_S,
    })
}

/// An entry's span in the minutes a [`Mark`] holds, if it can.
fn minutes_of(e: &CatalogEntry) -> Option<(u32, u32)> {
    mark::held(
        e.first_seen.div_euclid(MINUTE_S),
        e.last_seen.div_euclid(MINUTE_S),
    )
}

/// The first and last shown minute of ascending `minutes` of a series of
/// `kind`.
fn shown_minutes(
    kind: SampleKind,
    minutes: &[(EpochMinute, Slot)],
) -> Option<(EpochMinute, EpochMinute)> {
    let mut shown = minutes
        .iter()
        .filter(|(_, slot)| slot.shows(Some(kind)))
        .map(|(m, _)| *m);
    let first = shown.next()?;
    Some((first, shown.next_back().unwrap_or(first)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{SampleKind, Slot};
    use std::sync::Arc;
    use std::time::Duration;

    fn sm(source: &str, kind: SampleKind, minutes: &[i64]) -> SeriesMinutes {
        SeriesMinutes {
            catalog: crate::model::CatalogDue::Unknown,
            series: Arc::new(SeriesId::new(source, "m")),
            kind,
            minutes: minutes.iter().map(|m| (*m, Slot::of(1.0))).collect(),
        }
    }

    /// What marks took as recorded in a batch whose due entries were never
    /// found goes with the next write; what they found covered does not.
    #[test]
    fn a_requeued_batch_goes_with_the_next_write() {
        let c = CatalogWriter::new(Duration::from_secs(600));
        let g = SampleKind::Gauge;
        let marked = |source: &str, catalog| SeriesMinutes {
            catalog,
            ..sm(source, g, &[100, 102])
        };
        c.requeue(&[
            marked("a", CatalogDue::Due),
            marked("b", CatalogDue::Covered),
        ]);
        let next = c.due([&marked("c", CatalogDue::Covered)]);
        assert_eq!(next.len(), 1);
        assert_eq!(&*next[0].series.source, "a");
        assert_eq!((next[0].first_seen, next[0].last_seen), (6000, 6120));
    }

    #[test]
    fn writes_new_series_then_only_coarse_refreshes() {
        let c = CatalogWriter::new(Duration::from_secs(600));
        let g = SampleKind::Gauge;
        let first = c.due([&sm("a", g, &[100, 101]), &sm("@all", g, &[100])]);
        assert_eq!(first.len(), 2, "rollup series are catalogued too");
        // In series order: `@all` before `a`.
        assert_eq!(&*first[0].series.source, "@all");
        assert_eq!((first[1].first_seen, first[1].last_seen), (6000, 6060));
        // Not confirmed yet: still due.
        assert_eq!(c.due([&sm("a", g, &[102])]).len(), 1);
        c.recorded(first);
        assert!(c.due([&sm("a", g, &[102])]).is_empty());
        assert!(c.due([&sm("a", g, &[110])]).is_empty());
        assert_eq!(c.due([&sm("a", g, &[111])]).len(), 1, "10 minutes on");
        assert_eq!(
            c.due([&sm("a", SampleKind::DeltaCounter, &[102])]).len(),
            1,
            "a kind change is recorded at once"
        );
        // A late sample for an earlier minute lowers first_seen at once.
        let late = c.due([&sm("a", g, &[60])]);
        assert_eq!(late.len(), 1);
        assert_eq!((late[0].first_seen, late[0].last_seen), (3600, 3600));
        c.recorded(late);
        assert!(c.due([&sm("a", g, &[60, 102])]).is_empty());
        // The rollup series last seen at minute 100, then `a` (101).
        assert_eq!(c.forget_idle(6060), 1);
        assert_eq!(c.forget_idle(6061), 1);
        assert!(c.is_empty());

        // A refused write goes with the next one, whatever it carries, with
        // the earliest first_seen kept.
        let refused = c.due([&sm("b", g, &[100, 103])]);
        c.failed(refused);
        let next = c.due([&sm("c", g, &[200])]);
        let mut names: Vec<(&str, i64)> = next
            .iter()
            .map(|e| (&*e.series.source, e.first_seen))
            .collect();
        names.sort();
        assert_eq!(names, [("b", 6000), ("c", 12000)]);
        c.failed(next);
        let again = c.due([&sm("b", g, &[300])]);
        let b = again.iter().find(|e| &*e.series.source == "b").unwrap();
        assert_eq!((b.first_seen, b.last_seen), (6000, 18000));
        assert_eq!(again.len(), 2);
    }

    /// What the writer records of untracked series it has written: a
    /// refused entry merged into the next write, a series twice in one
    /// batch; and minutes no mark holds, due every time.
    #[test]
    fn the_writers_record_takes_merged_and_repeated_entries() {
        let c = CatalogWriter::new(Duration::from_secs(600));
        let g = SampleKind::Gauge;
        c.failed(c.due([&sm("b", g, &[100, 103])]));
        let merged = c.due([&sm("b", g, &[105])]);
        assert_eq!((merged[0].first_seen, merged[0].last_seen), (6000, 6300));
        c.recorded(merged);
        assert!(
            c.due([&sm("b", g, &[101])]).is_empty(),
            "within what was written"
        );
        assert_eq!(c.due([&sm("b", g, &[99])]).len(), 1, "earlier than it");

        let twice = c.due([&sm("@x", g, &[100]), &sm("@x", g, &[200])]);
        assert_eq!(twice.len(), 2);
        c.recorded(twice);
        assert!(c.due([&sm("@x", g, &[100])]).is_empty());
        assert!(c.due([&sm("@x", g, &[200])]).is_empty());

        for _ in 0..2 {
            let early = c.due([&sm("old", g, &[-5])]);
            assert_eq!(early.len(), 1, "before 1970: no mark holds it");
            c.recorded(early);
        }
    }

    #[test]
    fn a_cumulative_counter_is_first_seen_with_its_first_increase() {
        let c = CatalogWriter::new(Duration::from_secs(600));
        let mut baseline = Slot::EMPTY;
        baseline.see(6_000_000, 100.0);
        let mut increase = Slot::EMPTY;
        increase.add_value(5.0);
        increase.see(6_060_000, 105.0);
        let counter = |minutes: &[(i64, Slot)]| SeriesMinutes {
            catalog: crate::model::CatalogDue::Unknown,
            series: Arc::new(SeriesId::new("a", "m")),
            kind: SampleKind::CumulativeCounter,
            minutes: minutes.iter().copied().collect(),
        };
        // A flush that drained only the baseline records nothing.
        assert!(c.due([&counter(&[(100, baseline)])]).is_empty());
        let due = c.due([&counter(&[(101, increase)])]);
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].first_seen, due[0].last_seen), (6060, 6060));
        // Both in one batch: the same.
        let both = c.due([&counter(&[(100, baseline), (101, increase)])]);
        assert_eq!((both[0].first_seen, both[0].last_seen), (6060, 6060));
        // A gauge's minute of a last sample only (NaN) is data.
        let mut nan = Slot::EMPTY;
        nan.see(6_000_000, f64::NAN);
        let gauge = SeriesMinutes {
            catalog: crate::model::CatalogDue::Unknown,
            kind: SampleKind::Gauge,
            ..counter(&[(100, nan)])
        };
        assert_eq!(c.due([&gauge])[0].first_seen, 6000);
    }

    /// What making a fleet's first registration due costs, sorting
    /// included: `cargo test --release -p tallyd --lib
    /// catalog::tests::due_at_a_million -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn due_at_a_million() {
        let c = CatalogWriter::new(Duration::from_secs(600));
        let hasher = ahash::RandomState::with_seeds(1, 2, 3, 4);
        let mut batch: Vec<SeriesMinutes> = (0..1_000_000)
            .map(|i| SeriesMinutes {
                catalog: crate::model::CatalogDue::Unknown,
                series: Arc::new(SeriesId::new(
                    &format!("src-{:06}", i / 20),
                    &format!("m_{:04}", i % 20),
                )),
                kind: SampleKind::Gauge,
                minutes: vec![(100, Slot::of(1.0))].into(),
            })
            .collect();
        batch.sort_by_key(|s| hasher.hash_one(&s.series));
        let started = std::time::Instant::now();
        let due = c.due(&batch);
        println!("{} due in {:?}", due.len(), started.elapsed());
    }
}
