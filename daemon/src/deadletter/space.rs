//! The bound on the dead-letter directory: how many bytes its letter files
//! take, kept as a running count so that neither a write nor a scrape of
//! `tally_dead_letter_bytes` lists the directory. The count is taken from
//! the directory once, when first needed (the daemon asks at start), and
//! every write and removal of this process adjusts it; the data directory
//! lock makes this process the directory's only writer. The count's lock
//! is held through each write, so two writers (a flush setting letters
//! aside, a fold of the embedded store keeping a damaged series) cannot
//! both pass the bound on the same free bytes.

use std::path::Path;

use super::file::{self, LetterFile};
use super::{DeadLetterError, DeadLetters};

impl DeadLetters {
    /// The bytes the letter files take now.
    pub fn bytes(&self) -> Result<u64, DeadLetterError> {
        let mut held = self.bytes.lock();
        Ok(*self.counted(&mut held)?)
    }

    fn counted<'a>(&self, held: &'a mut Option<u64>) -> Result<&'a mut u64, DeadLetterError> {
        if held.is_none() {
            let sizes = file::sizes(&self.dir)?;
            *held = Some(sizes.iter().map(|(_, b)| *b).sum());
        }
        Ok(held.get_or_insert(0))
    }

    /// Writes `contents` as `path` durably, replacing what was there, unless
    /// that would take the directory past its bound. A write that does not
    /// grow the file (the same flush written again) is never refused.
    pub(super) fn replace(
        &self,
        path: &Path,
        contents: &LetterFile,
    ) -> Result<(), DeadLetterError> {
        let bytes = file::encode(path, contents)?;
        let mut held = self.bytes.lock();
        let total = self.counted(&mut held)?;
        let old = file::size(path)?;
        let new = bytes.len() as u64;
        let would = total.saturating_sub(old).saturating_add(new);
        if let Some(max) = self.max_bytes {
            if would > max && new > old {
                return Err(DeadLetterError::Full {
                    dir: self.dir.clone(),
                    would,
                    max,
                });
            }
        }
        file::write_bytes_synced(&self.dir, path, &bytes)?;
        *total = would;
        Ok(())
    }

    /// Removes the letter file `path` if it is there, durably.
    pub(super) fn remove(&self, path: &Path) -> Result<(), DeadLetterError> {
        let mut held = self.bytes.lock();
        let total = self.counted(&mut held)?;
        let old = file::size(path)?;
        file::remove_synced(&self.dir, path)?;
        *total = total.saturating_sub(old);
        Ok(())
    }
}
