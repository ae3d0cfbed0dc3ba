//! Label names made from the keys of foreign protocols (an OTLP
//! attribute, an InfluxDB tag) for the view of one request: a key that is
//! already a label name is its own, any other is renamed
//! ([`crate::labels::label_name_from_key`]) into the request's arena.
//!
//! Why a memo: the semantic conventions name attributes with dots
//! (`cpu.mode`, `http.request.method`), so each such key is renamed, and
//! renaming built a `String` and copied it into the arena at every point
//! that carried it: four allocations a sample for a CPU's two attributes.
//! A request repeats its keys, so each is renamed once.

use bumpalo::Bump;
use std::borrow::Cow;

use super::text::NameTable;
use crate::labels::{key_is_its_label_name, label_name_from_key_cow};

/// Most renamed keys one request remembers; past them a key is renamed
/// at each use (still right, and the request's size bounds the cost).
const MAX_RENAMED: usize = 4096;

/// `key`'s label name: `key` itself when it already is one, else made in
/// `arena`.
pub(crate) fn label_name<'a>(arena: &'a Bump, key: &'a str) -> &'a str {
    match label_name_from_key_cow(key) {
        Cow::Borrowed(name) => name,
        Cow::Owned(name) => arena.alloc_str(&name),
    }
}

/// The renamed keys of one request; see the module's documentation.
pub(crate) struct KeyNames<'a> {
    renamed: NameTable<'a, &'a str>,
}

impl Default for KeyNames<'_> {
    fn default() -> Self {
        KeyNames {
            renamed: NameTable::with_cap(MAX_RENAMED),
        }
    }
}

impl<'a> KeyNames<'a> {
    /// [`label_name`], renaming each key once a request.
    pub(crate) fn name(&mut self, arena: &'a Bump, key: &'a str) -> &'a str {
        if key_is_its_label_name(key) {
            return key;
        }
        self.renamed.get_or_make(key, || label_name(arena, key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_renamed_once_a_request() {
        let arena = Bump::new();
        let mut names = KeyNames::default();
        let (first, again) = (
            names.name(&arena, "cpu.mode"),
            names.name(&arena, "cpu.mode"),
        );
        assert_eq!(first, "cpu_mode");
        assert!(std::ptr::eq(first, again), "the first renaming is reused");
        let used = arena.allocated_bytes();
        for _ in 0..100 {
            assert_eq!(names.name(&arena, "cpu.mode"), "cpu_mode");
            assert_eq!(names.name(&arena, "cpu"), "cpu");
            assert_eq!(names.name(&arena, "source"), "exported_source");
        }
        assert!(arena.allocated_bytes() <= used + 64, "renamed again");
    }
}
