//! Names numbered as a stream repeats them: each key is numbered the
//! first time it comes, found again by that number or by its hash, and
//! keeps a small state (`S`) beside it. Keys live end to end in one buffer
//! and the table holds only their numbers, so a steady stream of known
//! keys allocates nothing, and clearing keeps the memory for the next use.
//!
//! Two users:
//! - the write-ahead log's compact records (`wal::compact`): a segment
//!   numbers each source and series the first time it holds them, and
//!   later records name them by number; the state is what a series' last
//!   sample predicts of its next. Encoder and reader each keep one, built
//!   the same way from the same records, started afresh with every
//!   segment.
//! - a Graphite batch (`graphite::batch`): each line's source is numbered
//!   as the line is added, and the state chains the source's lines.
//!
//! It is bounded: past [`MAX_KEYS`] keys or [`MAX_KEY_BYTES`] bytes of
//! them, nothing more is added. The log's encoder then spells new keys out
//! in full, and its reader refuses a record that would take it past the
//! bound, which an intact log never holds; a Graphite batch counts as full.

use std::ops::Range;

use hashbrown::HashTable;

use super::text::same_bytes;

/// Most keys a dictionary holds.
pub const MAX_KEYS: usize = 1 << 21;
/// Most bytes of keys a dictionary holds.
pub const MAX_KEY_BYTES: usize = 128 << 20;

/// Keys numbered in the order they came, each with a state; see the
/// module's documentation.
pub struct Dict<S> {
    /// Numbers, found by the hash of their key.
    table: HashTable<u32>,
    /// Each number's key, in `arena`.
    spans: Vec<Range<u32>>,
    arena: Vec<u8>,
    states: Vec<S>,
    hasher: ahash::RandomState,
}

impl<S> Default for Dict<S> {
    fn default() -> Self {
        Dict {
            table: HashTable::new(),
            spans: Vec::new(),
            arena: Vec::new(),
            states: Vec::new(),
            hasher: ahash::RandomState::new(),
        }
    }
}

impl<S> Dict<S> {
    /// Forgets every key, keeping the memory for the next use (a segment,
    /// a batch).
    pub fn clear(&mut self) {
        self.table.clear();
        self.spans.clear();
        self.arena.clear();
        self.states.clear();
    }

    /// Keys held; they are numbered from 0 in the order they came.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Key `id` and its state, if it is known.
    #[inline]
    pub fn entry(&self, id: u32) -> Option<(&[u8], &S)> {
        Some((self.key(id)?, self.states.get(id as usize)?))
    }

    /// Key `id`, if it is known.
    #[inline]
    pub fn key(&self, id: u32) -> Option<&[u8]> {
        let span = self.spans.get(id as usize)?;
        self.arena.get(span.start as usize..span.end as usize)
    }

    /// Key `id` and its state, if it is known.
    #[inline]
    pub fn entry_mut(&mut self, id: u32) -> Option<(&[u8], &mut S)> {
        let span = self.spans.get(id as usize)?;
        let key = self.arena.get(span.start as usize..span.end as usize)?;
        Some((key, self.states.get_mut(id as usize)?))
    }

    /// The number of `key`, trying `hint` first, then its hash. The caller
    /// picks the likely number: the log the one after the last series
    /// found (agents send their series in the same order every time), a
    /// Graphite batch the last line's source (agents send a source's
    /// metrics together). When it is right, no hash is taken.
    #[inline]
    pub fn find(&self, key: &[u8], hint: u32) -> Option<u32> {
        if self.key(hint).is_some_and(|k| same_bytes(k, key)) {
            return Some(hint);
        }
        self.find_by_hash(key)
    }

    /// The number of `key`, by its hash alone (the caller has already
    /// ruled out the likely one).
    pub fn find_by_hash(&self, key: &[u8]) -> Option<u32> {
        let hash = self.hasher.hash_one(key);
        self.table
            .find(hash, |&id| self.key(id).is_some_and(|k| same_bytes(k, key)))
            .copied()
    }

    /// Whether a key of `len` bytes still fits.
    pub fn has_room(&self, len: usize) -> bool {
        self.spans.len() < MAX_KEYS && self.arena.len() + len <= MAX_KEY_BYTES
    }

    /// Numbers `key` (which must not be known) and keeps `state` with it;
    /// `None` when the dictionary is full.
    pub fn insert(&mut self, key: &[u8], state: S) -> Option<u32> {
        if !self.has_room(key.len()) {
            return None;
        }
        let id = self.spans.len() as u32;
        let start = self.arena.len() as u32;
        self.arena.extend_from_slice(key);
        self.spans.push(start..self.arena.len() as u32);
        self.states.push(state);
        let hash = self.hasher.hash_one(key);
        let (spans, arena, hasher) = (&self.spans, &self.arena, &self.hasher);
        self.table.insert_unique(hash, id, |&other| {
            let span = &spans[other as usize];
            hasher.hash_one(&arena[span.start as usize..span.end as usize])
        });
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_numbered_in_order_and_found_with_or_without_a_hint() {
        let mut d: Dict<u8> = Dict::default();
        assert_eq!(d.insert(b"a", 1), Some(0));
        assert_eq!(d.insert(b"bc", 2), Some(1));
        assert_eq!(d.insert(b"", 3), Some(2));
        assert_eq!(d.find(b"bc", 1), Some(1));
        assert_eq!(d.find(b"bc", 0), Some(1));
        assert_eq!(d.find(b"bc", 99), Some(1));
        assert_eq!(d.find(b"", 0), Some(2));
        assert_eq!(d.find(b"x", 0), None);
        let (key, state) = d.entry_mut(1).unwrap();
        assert_eq!((key, *state), (&b"bc"[..], 2));
        assert_eq!(d.entry(2), Some((&b""[..], &3)));
        assert_eq!(d.entry(3), None);
        assert_eq!(d.len(), 3);
        d.clear();
        assert_eq!(d.len(), 0);
        assert_eq!(d.find(b"a", 0), None);
        assert_eq!(d.insert(b"bc", 5), Some(0));
    }

    #[test]
    fn a_full_dictionary_takes_nothing_more() {
        let mut d: Dict<()> = Dict::default();
        let big = vec![7u8; MAX_KEY_BYTES];
        assert!(!d.has_room(MAX_KEY_BYTES + 1));
        assert_eq!(d.insert(&big, ()), Some(0));
        assert_eq!(d.insert(b"a", ()), None);
        assert_eq!(d.len(), 1);
    }
}
