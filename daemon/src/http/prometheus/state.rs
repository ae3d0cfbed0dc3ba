//! What the Prometheus API reads: the query engine and its own cache of
//! metric names. It is this API's state alone, not the HTTP listener's, so
//! the API depends on nothing around it and the listener mounts it like
//! any other router.

use std::sync::Arc;

use super::names::NameCache;
use crate::query::QueryEngine;

#[derive(Clone)]
pub(crate) struct PromState {
    pub(super) engine: Arc<QueryEngine>,
    /// Shared by every request, so the catalog scan behind it is rare.
    pub(super) names: Arc<NameCache>,
}

impl PromState {
    pub(crate) fn new(engine: Arc<QueryEngine>) -> PromState {
        PromState {
            engine,
            names: Arc::new(NameCache::new()),
        }
    }
}
