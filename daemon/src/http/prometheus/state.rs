//! What the Prometheus API reads: the query engine, its own cache of
//! metric names, and how series are shown. It is this API's state alone,
//! not the HTTP listener's, so the API depends on nothing around it and the
//! listener mounts it like any other router.

use std::sync::Arc;

use crate::promql::{Context, LabelScheme, NameCache, PrometheusConfig};
use crate::query::QueryEngine;

#[derive(Clone)]
pub(crate) struct PromState {
    pub(super) engine: Arc<QueryEngine>,
    /// Shared by every request, so the catalog scan behind it is rare.
    pub(super) names: Arc<NameCache>,
    pub(super) scheme: Arc<LabelScheme>,
}

impl PromState {
    pub(crate) fn new(engine: Arc<QueryEngine>, cfg: &PrometheusConfig) -> PromState {
        PromState {
            engine,
            names: Arc::new(NameCache::new()),
            scheme: Arc::new(LabelScheme::new(&cfg.source_label)),
        }
    }

    pub(super) fn ctx(&self) -> Context<'_> {
        Context {
            engine: &self.engine,
            names: &self.names,
            scheme: &self.scheme,
        }
    }
}
