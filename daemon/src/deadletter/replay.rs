//! The replay marker: how applying dead letters again stays exactly once
//! across a crash.
//!
//! A replay applies every dead letter as one flush with a new id, above
//! every flush before it. Before anything is sent, the marker records that
//! id and the files it covers; a crash then leaves the marker, and the
//! next replay applies the same files with the same id, so the documents'
//! watermarks skip what had landed. Once the store has it durably (and
//! what it still refuses is written as that flush's own dead letters), the
//! marker is marked done, and only then are the files it covers deleted:
//! a crash while deleting leaves a done marker, whose files are deleted
//! without applying anything again. `tallyd` does not start over a marker
//! that is not done, since its own flushes could then move watermarks past
//! the replay's id.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::file::{self, Letter};
use super::{DeadLetterError, DeadLetters};

const MARKER: &str = "replay.json";

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

    /// Starts a replay of every file there is now, as flush `flush_id`.
    /// None when there is nothing to replay.
    pub fn begin_replay(&self, flush_id: u64) -> Result<Option<ReplayMarker>, DeadLetterError> {
        let files: Vec<String> = self
            .list()?
            .into_iter()
            .filter_map(|(p, _)| Some(p.file_name()?.to_str()?.to_owned()))
            .collect();
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

    /// The letters of the files `marker` covers that are still there.
    pub fn letters_of(&self, marker: &ReplayMarker) -> Result<Vec<Letter>, DeadLetterError> {
        let mut letters = Vec::new();
        for (path, f) in self.list()? {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if marker.files.iter().any(|f| f == name) {
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
            file::remove_synced(&self.dir, &self.dir.join(name))?;
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
