//! Why a read is refused: a wrong request, a configured limit, a busy
//! daemon, or the store.
//!
//! Separate so that every part of the engine, and every protocol that maps
//! these to its own status codes, shares one error type and one wording
//! for a selection over its limit.

use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The request is wrong; the message says how.
    #[error("{0}")]
    Invalid(String),
    /// A configured limit refuses the request; the message names it.
    #[error("{0}")]
    Limit(String),
    /// The daemon cannot take this now (e.g. subscriber slots are full).
    #[error("{0}")]
    Busy(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A selection over `limit`; `n` is the count or a bound on it.
pub(super) fn too_many_series(n: &str, limit: usize, limit_name: &str) -> QueryError {
    QueryError::Limit(format!(
        "the selection matches {n} series; the limit is {limit} ({limit_name}): narrow the source or metric selector"
    ))
}
