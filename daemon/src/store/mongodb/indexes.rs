//! The first contact with the server, made lazily before the first
//! operation that reaches it and retried until it works, so the daemon
//! starts and ingests while MongoDB is down: the feature probes
//! (`features.rs`) and the TTL indexes that expire documents after the
//! retention, made or altered when the retention changed (plain indexes
//! for the retention sweep where the server has no TTL).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use tracing::{debug, error, info, warn};

use super::command::raw_command;
use super::errors::{as_i64, not_implemented, Failure};
use super::features::Feature;
use super::stats::Op;
use super::wire::Wire;
use crate::store::StoreError;

/// Field of the hour and day documents' TTL index.
pub(super) const PERIOD_FIELD: &str = "t";

/// Field of the series catalog's TTL index.
pub(super) const LAST_SEEN_FIELD: &str = "last_seen";

/// Name of the series catalog's index by metric.
pub(super) const METRIC_INDEX: &str = "metric_1__id_1";

/// After index creation failed for a reason retrying cannot fix (say, the
/// user may not run `collMod`), writes go on without it and the next attempt
/// waits this long, so the log is not flooded.
const INDEX_RETRY_AFTER_FAILURE: Duration = Duration::from_secs(300);

const NAMESPACE_NOT_FOUND: i32 = 26;
const INDEX_OPTIONS_CONFLICT: i32 = 85;
const INDEX_KEY_SPECS_CONFLICT: i32 = 86;

/// The first contact's state: whether the indexes are in place, when to
/// try again after a failure, and how many contacts the probes had.
pub(super) struct FirstContact {
    /// (hour documents, day documents) in seconds: the TTL indexes'.
    pub(super) retention: (u64, u64),
    indexes_ready: AtomicBool,
    /// Serialises index attempts; holds when the next one may run after a
    /// failure retrying could not fix.
    index_attempt: tokio::sync::Mutex<Option<Instant>>,
    /// First contacts tried so far, for the probes' patience with
    /// transient answers.
    pub(super) contacts: AtomicU64,
}

impl FirstContact {
    pub(super) fn new(retention: (u64, u64)) -> FirstContact {
        FirstContact {
            retention,
            indexes_ready: AtomicBool::new(false),
            index_attempt: tokio::sync::Mutex::new(None),
            contacts: AtomicU64::new(0),
        }
    }
}

impl FirstContact {
    /// Probes the server's features (once) and makes sure the TTL indexes
    /// exist, before the first operation that reaches the server. A
    /// retryable failure fails the operation (it would fail anyway); any
    /// other failure of the indexes is logged and retried later, without
    /// holding up writes.
    pub(super) async fn ready(&self, wire: &Wire) -> Result<(), StoreError> {
        if self.indexes_ready.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut next_attempt = self.index_attempt.lock().await;
        if self.indexes_ready.load(Ordering::Acquire) {
            return Ok(());
        }
        if next_attempt.is_some_and(|t| Instant::now() < t) {
            return Ok(());
        }
        if !wire.features.probed() {
            self.contacts.fetch_add(1, Ordering::AcqRel);
            match self.probe_features(wire).await {
                Ok(()) => {}
                Err(e) if e.is_retryable() => return Err(e),
                // Not expected (every answer is a refusal or a retry), but
                // no probe may stop the store: what is not known missing
                // is assumed present, and a write that needs it says so.
                Err(e) => warn!(error = %e, "the feature probes failed; going on without them"),
            }
            wire.features.set_probed();
        }
        let made = self.ensure_indexes(wire).await;
        wire.features.publish();
        match made {
            Ok(()) => {
                self.indexes_ready.store(true, Ordering::Release);
                *next_attempt = None;
                Ok(())
            }
            Err(e) if e.is_retryable() => Err(e),
            Err(e) => {
                wire.count_error(Op::Indexes, &e);
                error!(error = %e, retry_in = ?INDEX_RETRY_AFTER_FAILURE,
                    "cannot create the TTL indexes; documents will not expire until this is fixed");
                *next_attempt = Some(Instant::now() + INDEX_RETRY_AFTER_FAILURE);
                Ok(())
            }
        }
    }

    async fn ensure_indexes(&self, wire: &Wire) -> Result<(), StoreError> {
        for (coll, field, ttl) in [
            (wire.hour.name(), PERIOD_FIELD, self.retention.0),
            (wire.day.name(), PERIOD_FIELD, self.retention.1),
            (wire.series.name(), LAST_SEEN_FIELD, self.retention.1),
        ] {
            // A second round only when a concurrent creation (another daemon
            // starting at the same time) made ours conflict.
            match self.ensure_ttl_index(wire, coll, field, ttl).await {
                Err(f)
                    if matches!(
                        f.code(),
                        Some(INDEX_OPTIONS_CONFLICT | INDEX_KEY_SPECS_CONFLICT)
                    ) =>
                {
                    self.ensure_ttl_index(wire, coll, field, ttl)
                        .await
                        .map_err(|f| f.into_store(true))?;
                }
                other => other.map_err(|f| f.into_store(true))?,
            }
        }
        self.ensure_metric_index(wire)
            .await
            .map_err(|f| f.into_store(true))
    }

    /// `{metric: 1, _id: 1}` on the series catalog, so that a listing of
    /// one metric across sources (`{metric, _id: {$gt: cursor}}` sorted by
    /// `_id`, see `catalog.rs`) reads that metric's index keys only, already
    /// in `_id` order, instead of the whole `_id` range. An index on the same
    /// key under another name (made by hand, or by another daemon) is
    /// adopted.
    async fn ensure_metric_index(&self, wire: &Wire) -> Result<(), Failure> {
        let spec = doc! { "key": { "metric": 1, "_id": 1 }, "name": METRIC_INDEX };
        let cmd = raw_command(&doc! { "createIndexes": wire.series.name(), "indexes": [spec] });
        match wire.send(Op::Indexes, cmd, 0).await {
            Ok(_) => Ok(()),
            Err(f) if f.code() == Some(INDEX_OPTIONS_CONFLICT) => Ok(()),
            Err(f) => Err(f),
        }
    }

    /// Makes `{<field>: 1}` on `coll` a TTL index of `ttl` seconds, or a
    /// plain index where the server has no TTL (the retention sweep's
    /// deletes then use it). The index is found by its key, so one created
    /// by hand under another name is adopted rather than duplicated; a new
    /// one gets the server's default name, `<field>_1`.
    async fn ensure_ttl_index(
        &self,
        wire: &Wire,
        coll: &str,
        field: &str,
        ttl: u64,
    ) -> Result<(), Failure> {
        let existing = self.index_on(wire, coll, field).await?;
        let ttl_i32 = i32::try_from(ttl).unwrap_or(i32::MAX);
        if wire.features.lacks(Feature::TtlIndex) {
            if existing.is_none() {
                self.create_index(wire, coll, field, None).await?;
            }
            return Ok(());
        }
        match existing {
            None => self.create_index(wire, coll, field, Some(ttl_i32)).await?,
            Some(spec)
                if spec.get("expireAfterSeconds").and_then(as_i64) == Some(i64::from(ttl_i32)) =>
            {
                debug!(
                    collection = coll,
                    expire_after_s = ttl,
                    "TTL index in place"
                );
            }
            Some(spec) => self.change_ttl(wire, coll, field, ttl_i32, &spec).await?,
        }
        Ok(())
    }

    /// The spec of the index whose key is `{<field>: 1}`, if any.
    async fn index_on(
        &self,
        wire: &Wire,
        coll: &str,
        field: &str,
    ) -> Result<Option<Document>, Failure> {
        let list = raw_command(&doc! { "listIndexes": coll, "cursor": { "batchSize": 1000 } });
        let specs = match wire.send(Op::Indexes, list, 0).await {
            Ok(reply) => reply
                .get_document("cursor")
                .and_then(|c| c.get_array("firstBatch"))
                .cloned()
                .unwrap_or_default(),
            // The collection does not exist yet.
            Err(f) if f.code() == Some(NAMESPACE_NOT_FOUND) => Vec::new(),
            Err(f) => return Err(f),
        };
        Ok(specs.into_iter().find_map(|s| match s {
            Bson::Document(s)
                if s.get_document("key")
                    .is_ok_and(|k| k.len() == 1 && k.get(field).and_then(as_i64) == Some(1)) =>
            {
                Some(s)
            }
            _ => None,
        }))
    }

    /// Creates `{<field>: 1}` named `<field>_1`, a TTL index when `ttl` is
    /// given.
    async fn create_index(
        &self,
        wire: &Wire,
        coll: &str,
        field: &str,
        ttl: Option<i32>,
    ) -> Result<(), Failure> {
        let mut spec = doc! { "key": { field: 1 }, "name": format!("{field}_1") };
        if let Some(ttl) = ttl {
            spec.insert("expireAfterSeconds", ttl);
        }
        let cmd = raw_command(&doc! { "createIndexes": coll, "indexes": [spec] });
        wire.send(Op::Indexes, cmd, 0).await?;
        match ttl {
            Some(ttl) => info!(
                collection = coll,
                expire_after_s = ttl,
                "created the TTL index"
            ),
            None => info!(
                collection = coll,
                field, "created an index for the retention sweep (the server has no TTL indexes)"
            ),
        }
        Ok(())
    }

    /// Changes the TTL of the index `spec` (the retention changed): with
    /// `collMod`, or where the server has none, by making it again.
    async fn change_ttl(
        &self,
        wire: &Wire,
        coll: &str,
        field: &str,
        ttl: i32,
        spec: &Document,
    ) -> Result<(), Failure> {
        let old = spec.get("expireAfterSeconds").cloned();
        if !wire.features.lacks(Feature::CollMod) {
            let cmd = raw_command(&doc! {
                "collMod": coll,
                "index": { "keyPattern": { field: 1 }, "expireAfterSeconds": ttl },
            });
            match wire.send(Op::Indexes, cmd, 0).await {
                Ok(_) => {
                    info!(collection = coll, old = ?old, new = ttl,
                        "changed the TTL index's expireAfterSeconds (the retention changed)");
                    return Ok(());
                }
                Err(f) if f.code().is_some_and(not_implemented) => {
                    wire.features.mark_missing(Feature::CollMod, &f.message())
                }
                Err(f) => return Err(f),
            }
        }
        let name = spec.get_str("name").unwrap_or_default().to_string();
        let drop = raw_command(&doc! { "dropIndexes": coll, "index": name.as_str() });
        wire.send(Op::Indexes, drop, 0).await?;
        self.create_index(wire, coll, field, Some(ttl)).await?;
        info!(collection = coll, old = ?old, new = ttl, dropped = %name,
            "made the TTL index again with the new retention");
        Ok(())
    }
}
