//! The flush-time half of the rollups: a drained batch's members summed
//! into their groups' rollup series, which join the batch.
//!
//! A flush carries every active series of the fleet, but only a few rollup
//! series (one per group, metric and label set). The members are therefore
//! summed under keys borrowed from the batch, and a rollup series' id is
//! built, and its kind checked, once per rollup series rather than once per
//! member: at 100,000 members and 200 rollup series that is 200 ids and
//! lookups instead of 100,000.

use std::collections::BTreeMap;
use std::sync::Arc;

use hashbrown::HashMap;

use super::{RollupSeries, Rollups, PREALLOC_HASH};
use crate::aggregator::PreallocMarks;
use crate::labels::Labels;
use crate::model::{sum_in_range, EpochMinute, SampleKind, SeriesId, SeriesMinutes, Slot};

/// A rollup series within one flush: its group, metric and label set.
type Key<'d> = (Arc<str>, &'d str, &'d Labels);

/// One rollup series' sums within a flush, kept apart by the kind of the
/// members they came from: the series has one kind, and which one is only
/// known once its id is looked up.
#[derive(Default)]
struct Sums {
    /// The kind of its first member in the batch: the series' kind if it
    /// is new.
    first: Option<SampleKind>,
    gauge: Part,
    counter: Part,
}

#[derive(Default)]
struct Part {
    members: u64,
    minutes: BTreeMap<EpochMinute, Slot>,
}

impl Sums {
    fn part(&mut self, kind: SampleKind) -> &mut Part {
        match kind {
            SampleKind::Gauge => &mut self.gauge,
            _ => &mut self.counter,
        }
    }

    /// Takes the part of `kind`; the other part's members are skipped.
    fn take(mut self, kind: SampleKind, skipped: &mut u64) -> Part {
        let part = std::mem::take(self.part(kind));
        *skipped += self.gauge.members + self.counter.members;
        part
    }
}

impl Rollups {
    /// Adds the rollup series of a drained batch to it.
    pub fn expand(&self, mut drained: Vec<SeriesMinutes>) -> Vec<SeriesMinutes> {
        if !self.is_enabled() {
            return drained;
        }
        let mut skipped = 0u64;
        let sums = self.sum_members(&drained, &mut skipped);
        let rollups = self.admit(sums, &mut skipped);
        if skipped > 0 {
            metrics::counter!("tally_rollup_skipped_total").increment(skipped);
        }
        // Exactly: a drained batch comes without room to spare, and growing
        // it by doubling would take a whole batch's worth more.
        drained.reserve_exact(rollups.len());
        drained.extend(rollups);
        drained
    }

    /// Every member's minutes merged into its groups' sums, in the order
    /// the batch first names each rollup series (so that, as members come
    /// in the batch, the first ones get the room `rollup.max_series` has).
    ///
    /// A member's sums are found by numbers this flush gives its source,
    /// metric, label set and groups: the names were read per member before,
    /// a third of the flush's cost at 100,000 series. A label set is looked
    /// up once per member rather than once per member and group, and an
    /// unlabelled member's not at all: each lookup compares it with the
    /// first member's copy, in another series' id, which has left the
    /// caches by then.
    fn sum_members<'d>(
        &self,
        drained: &'d [SeriesMinutes],
        skipped: &mut u64,
    ) -> Vec<(Key<'d>, Sums)> {
        let mut sums: Vec<(Key<'d>, Sums)> = Vec::new();
        let mut at: HashMap<(u32, u32, u32), usize> = HashMap::new();
        let mut sources = Numbered::default();
        let mut metrics = Numbered::default();
        let mut label_sets = LabelSets::default();
        // Each source's groups with their numbers, asked once per source
        // and flush; none for a rollup series.
        let mut of_source: Vec<Vec<(u32, Arc<str>)>> = Vec::new();
        let mut group_numbers: HashMap<Arc<str>, u32> = HashMap::new();
        for member in drained.chunks(WARM_CHUNK).flat_map(warmed) {
            let source = sources.number(&member.series.source);
            if source as usize == of_source.len() {
                of_source.push(self.numbered_groups(&member.series.source, &mut group_numbers));
            }
            let groups = &of_source[source as usize];
            if groups.is_empty() {
                continue;
            }
            let metric = metrics.number(&member.series.metric);
            let labels = label_sets.number(&member.series.labels);
            // Counters are stored as deltas whatever the agent sent.
            let kind = match member.kind {
                SampleKind::Gauge => SampleKind::Gauge,
                _ => SampleKind::DeltaCounter,
            };
            for (number, group) in groups {
                let key = (*number, metric, labels);
                let i = *at.entry(key).or_insert_with(|| {
                    let named = (group.clone(), &*member.series.metric, &member.series.labels);
                    sums.push((named, Sums::default()));
                    sums.len() - 1
                });
                let s = &mut sums[i].1;
                s.first.get_or_insert(kind);
                let part = s.part(kind);
                part.members += 1;
                for (m, slot) in &member.minutes {
                    let merged = part.minutes.entry(*m).or_default();
                    // Members' sums are each bounded; many of them
                    // together may not be.
                    if sum_in_range(merged.sum + slot.sum) {
                        merged.merge(slot);
                    } else {
                        *skipped += 1;
                    }
                }
            }
        }
        sums
    }

    /// `source`'s groups, each with its number in this flush; none for a
    /// rollup series' own source.
    fn numbered_groups(
        &self,
        source: &str,
        numbers: &mut HashMap<Arc<str>, u32>,
    ) -> Vec<(u32, Arc<str>)> {
        if Rollups::is_rollup_source(source) {
            return Vec::new();
        }
        self.groups_of(source)
            .iter()
            .map(|g| {
                let next = numbers.len() as u32;
                (*numbers.entry(g.clone()).or_insert(next), g.clone())
            })
            .collect()
    }

    /// The rollup series of `sums` that may be written: known ones of the
    /// kind they have, new ones while there is room (`rollup.max_series`).
    fn admit(&self, sums: Vec<(Key<'_>, Sums)>, skipped: &mut u64) -> Vec<SeriesMinutes> {
        let mut out = Vec::with_capacity(sums.len());
        let mut kinds = self.kinds.lock();
        for ((group, metric, labels), s) in sums {
            let Some(first) = s.first else { continue };
            let id = SeriesId::with_labels(&Rollups::source(&group), metric, labels.clone());
            let kind = match kinds.get(&id) {
                Some(r) => r.kind,
                None if kinds.len() >= self.cfg.max_series => {
                    *skipped += s.gauge.members + s.counter.members;
                    continue;
                }
                None => {
                    let r = RollupSeries {
                        kind: first,
                        last_minute: EpochMinute::MIN,
                        hash: PREALLOC_HASH.hash_one(&id),
                        prealloc: PreallocMarks::default(),
                    };
                    kinds.insert(Arc::new(id.clone()), r);
                    self.learn_label_set(&id);
                    first
                }
            };
            let part = s.take(kind, skipped);
            let Some((&last, _)) = part.minutes.last_key_value() else {
                continue;
            };
            if let Some(r) = kinds.get_mut(&id) {
                r.last_minute = r.last_minute.max(last);
            }
            out.push(SeriesMinutes {
                catalog: crate::model::CatalogDue::Unknown,
                series: Arc::new(id),
                kind,
                minutes: part.minutes.into_iter().collect(),
            });
        }
        out
    }
}

/// Members whose ids are read ahead together (see [`warmed`]).
const WARM_CHUNK: usize = 128;

/// `chunk`, each member's id read first. A drained batch's ids are spread
/// over the heap, so at 100,000 members reading each where the loop meets
/// it waited on memory once per member: over half of the sums' time,
/// while the flush holds every request back. Read together, with nothing
/// but independent loads in between, their misses overlap.
fn warmed(chunk: &[SeriesMinutes]) -> &[SeriesMinutes] {
    for member in chunk {
        std::hint::black_box(Arc::as_ptr(&member.series.source));
    }
    chunk
}

/// Numbers for the names of one flush's members, found by the address of
/// the name first: the aggregator keeps one shared copy of each source and
/// metric name, so a member's name is read only when its copy is new to the
/// flush. Equal names in different copies still get one number.
#[derive(Default)]
struct Numbered<'d> {
    by_address: HashMap<*const u8, u32>,
    by_name: HashMap<&'d str, u32>,
}

impl<'d> Numbered<'d> {
    fn number(&mut self, name: &'d Arc<str>) -> u32 {
        // The batch holds every copy for the whole flush, so an address
        // cannot be reused for another name meanwhile.
        let address = Arc::as_ptr(name) as *const u8;
        if let Some(&n) = self.by_address.get(&address) {
            return n;
        }
        let next = self.by_name.len() as u32;
        let n = *self.by_name.entry(&**name).or_insert(next);
        self.by_address.insert(address, n);
        n
    }
}

/// Numbers for the label sets of one flush's members. Each series has its
/// own copy of its labels, so they are found by their bytes; the empty set,
/// every unlabelled series', is number 0 without a lookup.
#[derive(Default)]
struct LabelSets<'d> {
    by_set: HashMap<&'d Labels, u32>,
}

impl<'d> LabelSets<'d> {
    fn number(&mut self, labels: &'d Labels) -> u32 {
        if labels.is_empty() {
            return 0;
        }
        let next = self.by_set.len() as u32 + 1;
        *self.by_set.entry(labels).or_insert(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_has_one_number_whichever_copy_carries_it() {
        let (a, a_again, b) = (
            Arc::<str>::from("m"),
            Arc::<str>::from("m"),
            Arc::<str>::from("n"),
        );
        let mut numbers = Numbered::default();
        assert_eq!(numbers.number(&a), 0);
        assert_eq!(numbers.number(&b), 1);
        assert_eq!(numbers.number(&a_again), 0);
        assert_eq!(numbers.number(&a), 0);
        assert_eq!(numbers.number(&b), 1);
    }

    #[test]
    fn a_label_set_has_one_number_whichever_copy_carries_it() {
        let set = |pairs: &[(&str, &str)]| Labels::from_pairs(pairs.iter().copied(), 8).unwrap();
        let (cpu0, cpu0_again, cpu1) = (
            set(&[("cpu", "0")]),
            set(&[("cpu", "0")]),
            set(&[("cpu", "1")]),
        );
        let (none, none_again) = (Labels::none(), set(&[]));
        let mut numbers = LabelSets::default();
        assert_eq!(numbers.number(&none), 0);
        let first = numbers.number(&cpu0);
        let second = numbers.number(&cpu1);
        assert_ne!(first, 0);
        assert_ne!(second, 0);
        assert_ne!(first, second);
        assert_eq!(numbers.number(&cpu0_again), first);
        assert_eq!(numbers.number(&none_again), 0);
        assert_eq!(numbers.number(&cpu1), second);
    }
}
