//! A per-series hash table: entries kept in fixed-size chunks, found
//! through a hash index of their positions. What the daemon keeps per
//! series is kept in it: the aggregator's series, the stores' pending
//! minutes and the catalog writer's record.
//!
//! A hash table that holds its entries inline doubles its buckets as it
//! grows, so between doublings up to half of them are empty; with 192-byte
//! series entries that is up to 192 bytes of empty room per series (just
//! past a million series, 2.1 buckets per entry). Here the hash index holds
//! 4-byte positions, whose empty buckets cost little, and the entries sit in
//! chunks allocated as they fill, reusing the positions of evicted series.
//! A position stays the entry's until it is removed, so other structures
//! (a shard's dirty list) can name an entry by it instead of by a probe.

use std::sync::Arc;

use hashbrown::{Equivalent as _, HashTable};

use crate::model::{series_hash, series_hasher, SeriesId, SeriesRef};

/// Entries per chunk: 1,024 series entries make a 256 KiB chunk, small
/// beside a large fleet and allocated at most once per 1,024 new series.
const CHUNK_BITS: u32 = 10;
const CHUNK: usize = 1 << CHUNK_BITS;

/// A table of `T` by a caller-computed 64-bit hash.
pub(crate) struct Table<T> {
    index: HashTable<u32>,
    chunks: Vec<Vec<Option<T>>>,
    /// Positions whose entries were removed, reused first.
    free: Vec<u32>,
}

impl<T> std::fmt::Debug for Table<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("entries", &self.index.len())
            .field("chunks", &self.chunks.len())
            .finish()
    }
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table {
            index: HashTable::new(),
            chunks: Vec::new(),
            free: Vec::new(),
        }
    }
}

fn at<T>(chunks: &[Vec<Option<T>>], pos: u32) -> Option<&T> {
    chunks
        .get((pos >> CHUNK_BITS) as usize)?
        .get(pos as usize & (CHUNK - 1))?
        .as_ref()
}

fn at_mut<T>(chunks: &mut [Vec<Option<T>>], pos: u32) -> Option<&mut T> {
    chunks
        .get_mut((pos >> CHUNK_BITS) as usize)?
        .get_mut(pos as usize & (CHUNK - 1))?
        .as_mut()
}

impl<T> Table<T> {
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// The entry at `pos`, if one is there.
    pub(crate) fn get(&self, pos: u32) -> Option<&T> {
        at(&self.chunks, pos)
    }

    /// One past the highest position ever used: every entry's position is
    /// below it.
    pub(crate) fn positions(&self) -> u32 {
        self.chunks
            .last()
            .map_or(0, |c| ((self.chunks.len() - 1) * CHUNK + c.len()) as u32)
    }

    pub(crate) fn get_mut(&mut self, pos: u32) -> Option<&mut T> {
        at_mut(&mut self.chunks, pos)
    }

    /// The first entry under `hash` that `eq` accepts, and its position.
    #[inline]
    pub(crate) fn find(&self, hash: u64, eq: impl Fn(&T) -> bool) -> Option<(u32, &T)> {
        let chunks = &self.chunks;
        let &pos = self.index.find(hash, |&p| at(chunks, p).is_some_and(&eq))?;
        Some((pos, at(chunks, pos)?))
    }

    #[inline]
    pub(crate) fn find_mut(&mut self, hash: u64, eq: impl Fn(&T) -> bool) -> Option<(u32, &mut T)> {
        let chunks = &self.chunks;
        let &pos = self.index.find(hash, |&p| at(chunks, p).is_some_and(&eq))?;
        Some((pos, at_mut(&mut self.chunks, pos)?))
    }

    /// Where an entry under `hash` would be looked at first, touched so the
    /// processor fetches it: the index's bucket and the entry it names. A
    /// wrong entry with the same tag only warms a line for nothing.
    #[inline]
    pub(crate) fn first_under(&self, hash: u64) -> Option<&T> {
        let &pos = self.index.find(hash, |_| true)?;
        at(&self.chunks, pos)
    }

    /// Adds `value`, which no entry equals, under `hash`; `hash_of` gives
    /// any entry's hash when the index grows.
    pub(crate) fn insert(
        &mut self,
        hash: u64,
        value: T,
        hash_of: impl Fn(&T) -> u64,
    ) -> (u32, &mut T) {
        let pos = self.place(hash, hash_of);
        let slot = &mut self.chunks[(pos >> CHUNK_BITS) as usize][pos as usize & (CHUNK - 1)];
        (pos, slot.insert(value))
    }

    /// The first entry under `hash` that `eq` accepts, or `make()` added
    /// under it; `hash_of` as for [`Table::insert`].
    pub(crate) fn find_or_insert(
        &mut self,
        hash: u64,
        eq: impl Fn(&T) -> bool,
        make: impl FnOnce() -> T,
        hash_of: impl Fn(&T) -> u64,
    ) -> (u32, &mut T) {
        let chunks = &self.chunks;
        let found = self
            .index
            .find(hash, |&p| at(chunks, p).is_some_and(&eq))
            .copied();
        let pos = match found {
            Some(pos) => pos,
            None => self.place(hash, hash_of),
        };
        // Found there, or an empty position just taken for `make()`.
        let entry = self.chunks[(pos >> CHUNK_BITS) as usize][pos as usize & (CHUNK - 1)]
            .get_or_insert_with(make);
        (pos, entry)
    }

    /// An empty position, reused or new, indexed under `hash`.
    fn place(&mut self, hash: u64, hash_of: impl Fn(&T) -> u64) -> u32 {
        let pos = match self.free.pop() {
            Some(pos) => pos,
            None => self.new_position(),
        };
        // A growing index rehashes only the entries already in it, all of
        // them in place.
        let chunks = &self.chunks;
        self.index
            .insert_unique(hash, pos, |&p| at(chunks, p).map_or(0, &hash_of));
        pos
    }

    /// An empty position after the last, in a new chunk when the last is full.
    fn new_position(&mut self) -> u32 {
        if self.chunks.last().is_none_or(|c| c.len() == CHUNK) {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        let last = self.chunks.len() - 1;
        let chunk = &mut self.chunks[last];
        chunk.push(None);
        ((last << CHUNK_BITS) + chunk.len() - 1) as u32
    }

    /// Takes out the first entry under `hash` that `eq` accepts; its
    /// position is reused.
    pub(crate) fn remove(&mut self, hash: u64, eq: impl Fn(&T) -> bool) -> Option<T> {
        let chunks = &self.chunks;
        let found = self
            .index
            .find_entry(hash, |&p| at(chunks, p).is_some_and(&eq))
            .ok()?;
        let (pos, _) = found.remove();
        let value = self.chunks[(pos >> CHUNK_BITS) as usize][pos as usize & (CHUNK - 1)].take();
        self.free.push(pos);
        value
    }

    /// Keeps the entries `keep` accepts; the others' positions are reused.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        let Table {
            index,
            chunks,
            free,
        } = self;
        index.retain(|&mut pos| {
            let chunk = &mut chunks[(pos >> CHUNK_BITS) as usize];
            let slot = &mut chunk[pos as usize & (CHUNK - 1)];
            if slot.as_ref().is_some_and(&mut keep) {
                return true;
            }
            *slot = None;
            free.push(pos);
            false
        });
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten().flatten()
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.chunks.iter_mut().flatten().flatten()
    }
}

/// A [`Table`] of values by series, each entry naming its series by the
/// aggregator's shared id: what the stores' pending minutes and the catalog
/// writer keep per series.
/// Series are hashed by the process' [`series_hasher`], so a caller that
/// holds a series' hash already (a flush's batch does) passes it in.
pub(crate) struct SeriesMap<V> {
    table: Table<(Arc<SeriesId>, V)>,
}

impl<V> Default for SeriesMap<V> {
    fn default() -> Self {
        SeriesMap {
            table: Table::default(),
        }
    }
}

impl<V> std::fmt::Debug for SeriesMap<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeriesMap")
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

impl<V> SeriesMap<V> {
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    pub(crate) fn get(&self, series: &SeriesId) -> Option<&V> {
        let hash = series_hasher().hash_one(series);
        let (_, (_, v)) = self.table.find(hash, |(s, _)| s.same(series))?;
        Some(v)
    }

    /// The first entry under `hash`, whichever series it is: for reading an
    /// entry into the cache ahead of its lookup, where a wrong one only
    /// warms a line for nothing.
    pub(crate) fn first_under(&self, hash: u64) -> Option<&V> {
        self.table.first_under(hash).map(|(_, v)| v)
    }

    /// [`SeriesMap::get`] by name, the value mutable, with nothing allocated.
    pub(crate) fn get_mut_by(&mut self, series: SeriesRef<'_>) -> Option<&mut V> {
        let hash = series_hasher().hash_one(series);
        let (_, (_, v)) = self
            .table
            .find_mut(hash, |(s, _)| series.equivalent(&**s))?;
        Some(v)
    }

    /// `series`' value, made by `make()` if it has none.
    pub(crate) fn get_or_insert_with(
        &mut self,
        series: &Arc<SeriesId>,
        make: impl FnOnce() -> V,
    ) -> &mut V {
        self.entry(series, make).1
    }

    /// [`SeriesMap::get_or_insert_with`], with the entry's position.
    ///
    /// An entry found under another copy of the same id takes `series`'
    /// copy: entries loaded from disk at startup name their series by
    /// copies of their own, and the aggregator meets each series again
    /// under its one shared id, so keeping the loaded copy would hold a
    /// second copy of every series' names until the entry goes.
    pub(crate) fn entry(
        &mut self,
        series: &Arc<SeriesId>,
        make: impl FnOnce() -> V,
    ) -> (u32, &mut V) {
        self.entry_hashed(series, series_hash(series.series_ref()), make)
    }

    /// [`SeriesMap::entry`] where `hash` is `series`' hash by
    /// [`series_hasher`] (see [`crate::model::FlushBatch::hash_of`]).
    pub(crate) fn entry_hashed(
        &mut self,
        series: &Arc<SeriesId>,
        hash: u64,
        make: impl FnOnce() -> V,
    ) -> (u32, &mut V) {
        debug_assert_eq!(hash, series_hash(series.series_ref()));
        let (pos, (s, v)) = self.table.find_or_insert(
            hash,
            |(s, _)| s.same(series),
            || (series.clone(), make()),
            |(s, _)| series_hash(s.series_ref()),
        );
        if !Arc::ptr_eq(s, series) {
            *s = series.clone();
        }
        (pos, v)
    }

    /// The position of `series`' entry, if it has one.
    pub(crate) fn position(&self, series: &SeriesId) -> Option<u32> {
        let hash = series_hasher().hash_one(series);
        self.table
            .find(hash, |(s, _)| s.same(series))
            .map(|(pos, _)| pos)
    }

    /// One past the highest position of an entry (see [`SeriesMap::at`]).
    pub(crate) fn positions(&self) -> u32 {
        self.table.positions()
    }

    /// The entry at position `pos`, if one is there. Positions stay put
    /// while nothing is inserted or removed, so a walk over them can be
    /// done in parts, letting go of a lock between them.
    pub(crate) fn at(&self, pos: u32) -> Option<(&Arc<SeriesId>, &V)> {
        self.table.get(pos).map(|(s, v)| (s, v))
    }

    /// [`SeriesMap::at`], the value mutable.
    pub(crate) fn at_mut(&mut self, pos: u32) -> Option<(&Arc<SeriesId>, &mut V)> {
        self.table.get_mut(pos).map(|(s, v)| (&*s, v))
    }

    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.table.iter_mut().map(|(_, v)| v)
    }

    pub(crate) fn remove(&mut self, series: &SeriesId) -> Option<V> {
        let hash = series_hasher().hash_one(series);
        let (_, v) = self.table.remove(hash, |(s, _)| s.same(series))?;
        Some(v)
    }

    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&V) -> bool) {
        self.table.retain(|(_, v)| keep(v));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn a_series_hashes_alike_by_id_by_name_and_as_a_batch_carries_it() {
        let id = Arc::new(SeriesId::with_labels(
            "web-1",
            "cpu",
            crate::labels::Labels::from_pairs([("mode", "idle")], 8).unwrap(),
        ));
        let by_name = series_hash(SeriesRef {
            source: "web-1",
            metric: "cpu",
            labels: id.labels.as_str(),
        });
        assert_eq!(by_name, series_hasher().hash_one(&*id));
        let mut map = SeriesMap::default();
        *map.entry_hashed(&id, by_name, || 0).1 += 1;
        *map.entry(&Arc::new((*id).clone()), || 0).1 += 1;
        assert_eq!(map.len(), 1);
        assert_eq!(map.get(&id), Some(&2));
    }

    fn h(k: u32) -> u64 {
        // Few distinct hashes, so entries share buckets and tags.
        u64::from(k % 7).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u32),
        Remove(u32),
        Find(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..3000u32).prop_map(Op::Insert),
            (0..3000u32).prop_map(Op::Remove),
            (0..3000u32).prop_map(Op::Find),
        ]
    }

    proptest! {
        #[test]
        fn behaves_as_a_map_and_positions_stay_put(ops in proptest::collection::vec(op(), 1..400)) {
            let mut t: Table<(u32, u64)> = Table::default();
            let mut model: HashMap<u32, (u64, u32)> = HashMap::new();
            let mut stamp = 0u64;
            for op in ops {
                match op {
                    Op::Insert(k) => {
                        if let Some((_, e)) = t.find_mut(h(k), |e| e.0 == k) {
                            stamp += 1;
                            e.1 = stamp;
                            model.get_mut(&k).unwrap().0 = stamp;
                        } else {
                            stamp += 1;
                            let (pos, e) = t.insert(h(k), (k, stamp), |e| h(e.0));
                            prop_assert_eq!(*e, (k, stamp));
                            model.insert(k, (stamp, pos));
                        }
                    }
                    Op::Remove(k) if k % 2 == 0 => {
                        t.retain(|e| e.0 != k);
                        model.remove(&k);
                    }
                    Op::Remove(k) => {
                        let got = t.remove(h(k), |e| e.0 == k).map(|e| e.1);
                        prop_assert_eq!(got, model.remove(&k).map(|(stamp, _)| stamp));
                    }
                    Op::Find(k) => {
                        let got = t.find(h(k), |e| e.0 == k).map(|(p, e)| (e.1, p));
                        prop_assert_eq!(got, model.get(&k).copied());
                    }
                }
                prop_assert_eq!(t.len(), model.len());
            }
            for (k, (stamp, pos)) in &model {
                prop_assert_eq!(t.get(*pos), Some(&(*k, *stamp)));
            }
            let mut all: Vec<u32> = t.iter().map(|e| e.0).collect();
            all.sort_unstable();
            let mut want: Vec<u32> = model.keys().copied().collect();
            want.sort_unstable();
            prop_assert_eq!(all, want);
        }
    }

    #[test]
    fn find_or_insert_makes_only_what_is_missing() {
        let mut t: Table<(u32, u32)> = Table::default();
        let (first, e) = t.find_or_insert(h(1), |e| e.0 == 1, || (1, 10), |e| h(e.0));
        *e = (1, 11);
        let (pos, e) = t.find_or_insert(h(1), |e| e.0 == 1, || (1, 99), |e| h(e.0));
        assert_eq!((pos, *e), (first, (1, 11)));
        let (pos, e) = t.find_or_insert(h(8), |e| e.0 == 8, || (8, 80), |e| h(e.0));
        assert_eq!(*e, (8, 80));
        assert_ne!(pos, first);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn an_entry_takes_the_copy_of_its_id_it_meets_last() {
        let loaded = Arc::new(SeriesId::new("host-1", "cpu"));
        let shared = Arc::new(SeriesId::new("host-1", "cpu"));
        let mut m: SeriesMap<u32> = SeriesMap::default();
        let (pos, v) = m.entry(&loaded, || 1);
        *v += 1;
        let (again, v) = m.entry(&shared, || 99);
        assert_eq!((again, *v), (pos, 2), "the same entry, not a new one");
        let (key, _) = m.at(pos).unwrap();
        assert!(Arc::ptr_eq(key, &shared));
        assert_eq!(Arc::strong_count(&loaded), 1, "the loaded copy is let go");
        assert_eq!(m.position(&loaded), Some(pos));
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn removed_positions_are_reused_before_a_new_chunk() {
        let mut t: Table<u32> = Table::default();
        for k in 0..CHUNK as u32 {
            t.insert(h(k), k, |&e| h(e));
        }
        assert_eq!(t.chunks.len(), 1);
        t.retain(|&e| e % 2 == 0);
        for k in 0..(CHUNK / 2) as u32 {
            t.insert(h(k), CHUNK as u32 + k, |&e| h(e));
        }
        assert_eq!(t.chunks.len(), 1);
        assert_eq!(t.len(), CHUNK);
        t.insert(h(0), 5 * CHUNK as u32, |&e| h(e));
        assert_eq!(t.chunks.len(), 2);
        assert!(t.get(CHUNK as u32 * 2).is_none());
    }
}
