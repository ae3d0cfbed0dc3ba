//! Dead letters: the parts of flushes a store refused for good, kept in the
//! data directory so that nothing acknowledged is lost to a refusal.
//!
//! A store that refuses one statement (a document it cannot update, a
//! statement shape an older server does not know) applies the rest of the
//! flush; the flush pipeline retries the refused part a few times, then
//! hands it here. [`DeadLetters::write`] makes it durable (a file per
//! flush, written whole, synced, then renamed into place) before the
//! pipeline lets the write-ahead log release the flush, so at every instant
//! each acknowledged sample is in the store, in the log or in a dead letter.
//! Writing a flush's file again (its replay from the log after a crash)
//! replaces it, so a document the replay applied is never in both places.
//!
//! The embedded store keeps here, through [`SetAside`], the pending minutes
//! of a series whose document it finds damaged, one file per series and
//! run (`damaged-*.json` beside the flushes' `flush-*.json`); every command
//! reads both.
//!
//! The directory is bounded by `flush.dead_letters_max_bytes`, counted as
//! files are written and removed (`space.rs`): a write past it fails with
//! [`DeadLetterError::Full`] and the pipeline holds the flush.
//!
//! `tallyd dead-letters list|replay|drop` (see [`replay`]) shows them,
//! applies them again once the operator fixed the cause, exactly once, or
//! drops them.
//!
//! The refusing state ([`Refusing`]) sits here too: when a store refuses a
//! whole flush, the pipeline holds it and ingest stops acknowledging until
//! the store takes it.

mod file;
mod replay;
mod report;
mod space;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::model::{FlushBatch, SeriesMinutes};
use crate::store::{Refusal, SetAside};

pub use file::{Letter, LetterFile, StoredSlot};
pub use replay::{ReplayMarker, ReplayQueue, PART_BYTES};
pub use report::report;

/// The directory under `data_dir` that holds dead letters.
pub const DIR: &str = "dead-letters";

#[derive(Debug, thiserror::Error)]
pub enum DeadLetterError {
    #[error("dead letters in {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("dead-letter file {path} cannot be read: {reason}")]
    Format { path: PathBuf, reason: String },
    #[error("{0}")]
    Store(#[from] crate::store::StoreError),
    #[error("{0}")]
    Refused(String),
    /// Writing would take the directory past its bound.
    #[error(
        "dead letters in {dir} would take {would} bytes, past flush.dead_letters_max_bytes ({max}): \
         fix what the store refuses, stop tallyd and run `tallyd dead-letters replay`, or \
         `tallyd dead-letters drop`, or raise the setting; the flush is held until then"
    )]
    Full { dir: PathBuf, would: u64, max: u64 },
}

/// The dead-letter directory of one daemon.
#[derive(Debug, Clone)]
pub struct DeadLetters {
    dir: PathBuf,
    store: &'static str,
    /// The bound of a replay part: [`PART_BYTES`], smaller in tests.
    part_bytes: u64,
    /// The bound on the directory's bytes (`flush.dead_letters_max_bytes`);
    /// None: no bound (a replay, which deletes at least what it writes).
    max_bytes: Option<u64>,
    /// The bytes of letter files in the directory (see `space.rs`); shared
    /// by clones, so every writer of this process keeps the one count.
    bytes: Arc<Mutex<Option<u64>>>,
}

impl DeadLetters {
    /// Dead letters under `data_dir`; the directory is made on the first
    /// write. `store` names the store they were refused by.
    pub fn new(data_dir: &Path, store: &'static str) -> DeadLetters {
        DeadLetters {
            dir: data_dir.join(DIR),
            store,
            part_bytes: PART_BYTES,
            max_bytes: None,
            bytes: Arc::default(),
        }
    }

    /// Refuses writes that would take the directory past `max` bytes
    /// ([`DeadLetterError::Full`]).
    pub fn with_max_bytes(mut self, max: u64) -> DeadLetters {
        self.max_bytes = Some(max);
        self
    }

    /// Replays in parts of at most `bytes` of files, so that tests see
    /// several parts without writing 64 MiB.
    #[cfg(test)]
    pub(crate) fn with_part_bytes(mut self, bytes: u64) -> DeadLetters {
        self.part_bytes = bytes;
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The letters of `refused`, parts of `batch`: each refusal's series
    /// with its minutes (of the refused hour only, when it names one).
    pub fn letters(batch: &FlushBatch, refused: &[Refusal]) -> Vec<Letter> {
        refused
            .iter()
            .filter_map(|r| {
                let sm = batch.series.get(r.series)?;
                Some(Letter::of(sm, r.hour_start, &r.error))
            })
            .filter(|l| !l.minutes.is_empty())
            .collect()
    }

    /// Makes `letters`, refused from flush `flush_id`, durable: written
    /// whole to a temporary file, synced, renamed over the flush's file,
    /// the directory synced. Replaces what an earlier attempt at the same
    /// flush wrote; no letters removes that file.
    pub fn write(&self, flush_id: u64, letters: Vec<Letter>) -> Result<(), DeadLetterError> {
        let path = self.dir.join(file::name(flush_id));
        if letters.is_empty() {
            return self.remove(&path);
        }
        let contents = LetterFile {
            version: file::VERSION,
            flush_id,
            store: self.store.to_owned(),
            written_ms: chrono::Utc::now().timestamp_millis(),
            letters,
        };
        self.replace(&path, &contents)
    }

    /// Every dead-letter file, in flush order.
    pub fn list(&self) -> Result<Vec<(PathBuf, LetterFile)>, DeadLetterError> {
        file::read_all(&self.dir)
    }

    /// The name of flush `flush_id`'s letter file.
    pub fn file_name(flush_id: u64) -> String {
        file::name(flush_id)
    }

    /// How many letters flush `flush_id`'s file holds; 0 without one.
    pub fn letters_in(&self, flush_id: u64) -> Result<usize, DeadLetterError> {
        let path = self.dir.join(file::name(flush_id));
        Ok(file::read_letters(&path)?.map_or(0, |f| f.letters.len()))
    }

    /// How many dead-letter files there are.
    pub fn count_files(&self) -> Result<usize, DeadLetterError> {
        file::count(&self.dir)
    }

    /// Removes the files of the given flushes (every file when `None`).
    /// Returns how many went.
    pub fn drop_files(&self, flushes: Option<&[u64]>) -> Result<usize, DeadLetterError> {
        let mut dropped = 0;
        for (path, f) in self.list()? {
            if flushes.is_none_or(|ids| ids.contains(&f.flush_id)) {
                self.remove(&path)?;
                dropped += 1;
            }
        }
        Ok(dropped)
    }
}

/// The embedded store's damaged documents: the pending minutes of such a
/// series are kept as a file of their own, durable before the store
/// forgets them. The file's flush is the run's first flush (what `list`
/// shows and `drop --flush` takes).
impl SetAside for DeadLetters {
    fn keep(&self, since: u64, minutes: &SeriesMinutes, error: &str) -> Result<(), String> {
        let letter = Letter::of(minutes, None, error);
        let path = self.dir.join(file::damaged_name(since, &letter.series));
        let contents = LetterFile {
            version: file::VERSION,
            flush_id: since,
            store: self.store.to_owned(),
            written_ms: chrono::Utc::now().timestamp_millis(),
            letters: vec![letter],
        };
        self.replace(&path, &contents).map_err(|e| e.to_string())
    }
}

/// Set while the store refuses whole flushes: the pipeline holds the flush
/// and retries it, readiness fails with the store's error, and ingest
/// answers with its protocol's retry signal, so that nothing is
/// acknowledged that the daemon could not keep. Also set while dead
/// letters cannot be written because the directory is at its bound.
#[derive(Debug, Default)]
pub struct Refusing(Mutex<Option<String>>);

impl Refusing {
    pub fn shared() -> Arc<Refusing> {
        Arc::new(Refusing::default())
    }

    /// The store's error while it refuses everything; None otherwise.
    pub fn why(&self) -> Option<String> {
        self.0.lock().clone()
    }

    pub(crate) fn set(&self, why: String) {
        *self.0.lock() = Some(why);
    }

    /// Clears the state; true when it was set.
    pub(crate) fn clear(&self) -> bool {
        self.0.lock().take().is_some()
    }
}

/// The series of `letters` as one flush's worth of minutes: letters of the
/// same series (from several flushes) merged minute by minute.
pub fn as_series(letters: &[Letter]) -> Result<Vec<SeriesMinutes>, DeadLetterError> {
    let mut by_key: std::collections::BTreeMap<&str, SeriesMinutes> = Default::default();
    for l in letters {
        match by_key.get_mut(l.series.as_str()) {
            Some(sm) => merge_minutes(sm, l),
            None => {
                by_key.insert(&l.series, l.series_minutes()?);
            }
        }
    }
    Ok(by_key.into_values().collect())
}

fn merge_minutes(sm: &mut SeriesMinutes, l: &Letter) {
    for s in &l.minutes {
        let slot = s.slot();
        match sm.minutes.binary_search_by_key(&s.minute, |&(m, _)| m) {
            Ok(i) => sm.minutes[i].1.merge(&slot),
            Err(i) => sm.minutes.insert(i, (s.minute, slot)),
        }
    }
}

#[cfg(test)]
mod tests;
