//! How redb's errors become [`StoreError`]s. Its own room because every
//! other part of the store reports through it, the file-level parts
//! (`db.rs`) and the value-level ones (the flush log, documents) alike.

use super::layout::FILE_NAME;
use crate::store::{Cause, StoreError};

/// Maps a redb error onto the store's error kinds.
pub(super) fn db_err(e: impl Into<redb::Error>) -> StoreError {
    match e.into() {
        redb::Error::Corrupted(reason) => StoreError::Corrupt {
            doc: FILE_NAME.to_string(),
            reason,
        },
        e @ (redb::Error::TableTypeMismatch { .. }
        | redb::Error::TypeDefinitionChanged { .. }
        | redb::Error::TableIsMultimap(_)
        | redb::Error::UpgradeRequired(_)) => StoreError::Corrupt {
            doc: FILE_NAME.to_string(),
            reason: e.to_string(),
        },
        redb::Error::DatabaseAlreadyOpen => StoreError::Unavailable(
            format!("{FILE_NAME} is already open (is another tallyd using the same --data-dir?)")
                .into(),
        ),
        e => StoreError::Io(Cause::of(e.to_string(), e)),
    }
}

pub(super) fn invalid(msg: String) -> StoreError {
    StoreError::Invalid(msg.into())
}
