//! The data directory's lock: one process at a time works in a data
//! directory. The daemon and `tallyd dead-letters replay|drop` each take it,
//! so that a replay never runs beside the daemon it replays for (the
//! embedded store's file has a lock of its own; the write-ahead log, the
//! dead letters and a MongoDB writer's flush ids do not).

use std::fs::File;
use std::path::{Path, PathBuf};

/// The lock file under the data directory.
pub const LOCK_FILE: &str = "tallyd.lock";

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("cannot create or open {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("another tallyd process works in {dir} (it holds {LOCK_FILE}): stop it first, or give this one its own data_dir")]
    Held { dir: PathBuf },
}

/// Held while the process works in the directory; released when dropped,
/// and by the kernel when the process ends however it ends.
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
}

/// Takes the data directory's lock without waiting.
pub fn lock(dir: &Path) -> Result<DataDirLock, LockError> {
    let path = dir.join(LOCK_FILE);
    let open_err = |source| LockError::Open {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(open_err)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(open_err)?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(DataDirLock { _file: file }),
        Err(rustix::io::Errno::WOULDBLOCK) => Err(LockError::Held {
            dir: dir.to_owned(),
        }),
        Err(e) => Err(open_err(e.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = lock(dir.path()).unwrap();
        let e = lock(dir.path()).unwrap_err();
        assert!(e.to_string().contains("another tallyd process"), "{e}");
        drop(first);
        lock(dir.path()).unwrap();
    }
}
