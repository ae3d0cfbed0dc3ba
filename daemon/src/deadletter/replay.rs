//! The replay marker: how applying dead letters again stays exactly once
//! across a crash, part by part.
//!
//! A replay works through the files there are when it starts, in parts of
//! at most [`PART_BYTES`] of files (a file bigger than that is a part of
//! its own: a file is one flush's letters and is never split). Each part is
//! one flush with a new id, above every flush before it. Before anything of
//! a part is sent, the marker records that id and the files it covers; a
//! crash then leaves the marker, and the next replay applies the same files
//! with the same id first, so the documents' watermarks skip what had
//! landed, and then goes on with the next parts. Once the store has a part
//! durably (and what it still refuses is written as that flush's own dead
//! letters), the marker is marked done, and only then are the files it
//! covers deleted: a crash while deleting leaves a done marker, whose files
//! are deleted without applying anything again. Only then is the next part
//! read, so a replay holds one part in memory whatever the backlog.
//! `tallyd` does not start over a marker that is not done, since its own
//! flushes could then move watermarks past the replay's id.

use std::collections::VecDeque;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::file::{self, Letter};
use super::{DeadLetterError, DeadLetters};

const MARKER: &str = "replay.json";

/// The most bytes of dead-letter files one replay part reads. Sizes come
/// from the directory listing, so a part is planned before any file is
/// read. Parsed letters take less memory than their JSON (a minute slot is
/// about 190 bytes in the file and 56 in memory, twice while it becomes a
/// flush), so a part holds well under 200 MiB whatever the backlog; and at
/// about 350,000 minute slots it is a flush the store takes in seconds, so
/// a backlog goes at the store's pace with a durable point every part.
pub const PART_BYTES: u64 = 64 << 20;

/// The files a replay has yet to cover, by name, with their sizes, in the
/// order they are replayed.
pub type ReplayQueue = VecDeque<(String, u64)>;

/// A replay under way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayMarker {
    /// The id the letters are applied with.
    pub flush_id: u64,
    /// The files it covers, by name.
    pub files: Vec<String>,
    /// Set once the store holds the replay durably.
    pub done: bool,
}

impl DeadLetters {
    fn marker_path(&self) -> PathBuf {
        self.dir.join(MARKER)
    }

    /// The replay under way, if one was interrupted.
    pub fn replay_marker(&self) -> Result<Option<ReplayMarker>, DeadLetterError> {
        let path = self.marker_path();
        if !path.exists() {
            return Ok(None);
        }
        file::read(&path).map(Some)
    }

    /// The letter files there are now, oldest flush first, with their
    /// sizes: what a replay started now covers. Files written while it
    /// runs (what its parts set aside again) wait for the next replay.
    pub fn replay_queue(&self) -> Result<ReplayQueue, DeadLetterError> {
        file::sizes(&self.dir).map(VecDeque::from)
    }

    /// Starts the next part of a replay as flush `flush_id`: the files at
    /// the front of `queue`, at most [`PART_BYTES`] of them (see
    /// `DeadLetters::part_bytes`) but at least one. None when the queue is
    /// empty.
    pub fn begin_part(
        &self,
        flush_id: u64,
        queue: &mut ReplayQueue,
    ) -> Result<Option<ReplayMarker>, DeadLetterError> {
        let mut files = Vec::new();
        let mut bytes = 0u64;
        while let Some((_, size)) = queue.front() {
            if !files.is_empty() && bytes.saturating_add(*size) > self.part_bytes {
                break;
            }
            bytes = bytes.saturating_add(*size);
            if let Some((name, _)) = queue.pop_front() {
                files.push(name);
            }
        }
        if files.is_empty() {
            return Ok(None);
        }
        let marker = ReplayMarker {
            flush_id,
            files,
            done: false,
        };
        file::write_synced(&self.dir, &self.marker_path(), &marker)?;
        Ok(Some(marker))
    }

    /// The letters of the files `marker` covers that are still there. Only
    /// those files are read.
    pub fn letters_of(&self, marker: &ReplayMarker) -> Result<Vec<Letter>, DeadLetterError> {
        let mut letters = Vec::new();
        for name in &marker.files {
            if let Some(f) = file::read_letters(&self.dir.join(name))? {
                letters.extend(f.letters);
            }
        }
        Ok(letters)
    }

    /// Ends a replay the store holds durably: the marker done, the files it
    /// covered deleted (the replay's own refusals, in its flush's file,
    /// stay), the marker removed.
    pub fn finish_replay(&self, marker: &ReplayMarker) -> Result<(), DeadLetterError> {
        if !marker.done {
            let done = ReplayMarker {
                done: true,
                ..marker.clone()
            };
            file::write_synced(&self.dir, &self.marker_path(), &done)?;
        }
        let own = file::name(marker.flush_id);
        for name in marker.files.iter().filter(|n| **n != own) {
            self.remove(&self.dir.join(name))?;
        }
        file::remove_synced(&self.dir, &self.marker_path())
    }

    /// At the daemon's start: finishes a replay that is done, and refuses
    /// one that is not (see the module documentation).
    pub fn check_no_replay_pending(&self) -> Result<(), DeadLetterError> {
        match self.replay_marker()? {
            None => Ok(()),
            Some(m) if m.done => self.finish_replay(&m),
            Some(m) => Err(DeadLetterError::Refused(format!(
                "a dead-letter replay (flush {}) was interrupted; run `tallyd dead-letters replay` with the same settings to finish it before starting tallyd",
                m.flush_id
            ))),
        }
    }
}
