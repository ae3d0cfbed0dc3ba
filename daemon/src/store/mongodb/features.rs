//! What the server lacks of what the store uses, learnt once at the first
//! contact, and the fallback for each. MongoDB 4.4–8.0 has everything;
//! MongoDB-compatible servers may not (FerretDB 1.x has no TTL indexes, no
//! `collMod`, and refuses infinite doubles). Rather than guess from a
//! server's name, the store tries each feature and takes a refusal as the
//! answer: it warns once, exposes the answer as
//! `tally_mongodb_feature_missing{feature}` and falls back.
//!
//! | feature | used for | fallback |
//! | --- | --- | --- |
//! | `ttl_index` | deleting documents past retention | a plain index on the same field, and `tallyd` deletes them itself from the maintenance sweep (`expire.rs`), as on the embedded store |
//! | `coll_mod` | changing a TTL index's retention in place | drop the index and create it with the new retention |
//! | `unordered_updates` | one `update` command per batch of statements, which goes on past a duplicate key | a command whose reply does not account for every statement (FerretDB 1.x stops at the first error and reports it at index 0) is sent again one statement per command; the watermarks make the resent statements that had been applied count as skipped |
//! | `infinity` | the empty slot's `min: +∞`, `max: -∞` | empty slots hold `min: f64::MAX`, `max: -f64::MAX`: as neutral as the infinities for `$min`/`$max` of finite samples (the only kind ingest takes), and an empty slot is told by `n: 0` alone |

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use bson::raw::RawDocumentBuf;
use bson::{doc, Document};
use tracing::warn;

use super::command::{raw_command, to_raw, WriteCommand};
use super::errors::{not_implemented, parse_write_reply};
use super::flush_ids::WRITERS_COLLECTION;
use super::stats::Op;
use super::MongoStore;
use crate::store::StoreError;

/// A capability of the server the store relies on where it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Feature {
    /// TTL indexes (`expireAfterSeconds`).
    TtlIndex,
    /// `collMod` of an index's `expireAfterSeconds`.
    CollMod,
    /// Infinite doubles in stored documents.
    Infinity,
    /// An unordered multi-statement `update` that goes on past a statement's
    /// error and reports each error with its statement's index.
    UnorderedUpdates,
}

impl Feature {
    pub const ALL: [Feature; 4] = [
        Feature::TtlIndex,
        Feature::CollMod,
        Feature::Infinity,
        Feature::UnorderedUpdates,
    ];

    /// The `feature` label of `tally_mongodb_feature_missing`.
    pub fn as_str(self) -> &'static str {
        match self {
            Feature::TtlIndex => "ttl_index",
            Feature::CollMod => "coll_mod",
            Feature::Infinity => "infinity",
            Feature::UnorderedUpdates => "unordered_updates",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Feature::TtlIndex => 1,
            Feature::CollMod => 2,
            Feature::Infinity => 4,
            Feature::UnorderedUpdates => 8,
        }
    }

    fn fallback(self) -> &'static str {
        match self {
            Feature::TtlIndex => {
                "tallyd deletes documents past their retention itself, in its maintenance sweep"
            }
            Feature::CollMod => "a TTL index whose retention changed is dropped and made again",
            Feature::Infinity => {
                "empty slots are stored with min = f64::MAX and max = -f64::MAX instead of ±infinity"
            }
            Feature::UnorderedUpdates => {
                "an update command whose reply does not account for every statement is sent again one statement per command"
            }
        }
    }
}

/// The `_id` of the document in `tally_writers` the probes write;
/// writer ids cannot contain `~`, so it is nobody's reservation.
const PROBE_ID: &str = "~features";

/// What the server was found to lack. Until the first contact nothing is
/// known and nothing is assumed missing.
#[derive(Debug, Default)]
pub(super) struct Features {
    missing: AtomicU8,
    probed: AtomicBool,
}

impl Features {
    /// Whether the probes have run.
    pub(super) fn probed(&self) -> bool {
        self.probed.load(Ordering::Acquire)
    }

    pub(super) fn set_probed(&self) {
        self.probed.store(true, Ordering::Release);
    }

    pub(super) fn lacks(&self, f: Feature) -> bool {
        self.missing.load(Ordering::Acquire) & f.bit() != 0
    }

    /// Records a refusal: warns and sets the gauge the first time only.
    pub(super) fn mark_missing(&self, f: Feature, refusal: &str) {
        let before = self.missing.fetch_or(f.bit(), Ordering::AcqRel);
        if before & f.bit() == 0 {
            warn!(
                feature = f.as_str(),
                refusal,
                fallback = f.fallback(),
                "the MongoDB server lacks a feature Tally uses; falling back"
            );
            gauge(f, true);
        }
    }

    /// Sets the gauge of every feature not found missing to 0, once the
    /// probes ran, so a scrape tells "present" from "not known yet".
    pub(super) fn publish(&self) {
        for f in Feature::ALL {
            gauge(f, self.lacks(f));
        }
    }

    pub(super) fn missing(&self) -> Vec<Feature> {
        Feature::ALL
            .into_iter()
            .filter(|&f| self.lacks(f))
            .collect()
    }
}

fn gauge(f: Feature, missing: bool) {
    metrics::gauge!("tally_mongodb_feature_missing", "feature" => f.as_str()).set(if missing {
        1.0
    } else {
        0.0
    });
}

impl MongoStore {
    /// The features this store found the server lacking, so far.
    pub fn missing_features(&self) -> Vec<Feature> {
        self.features.missing()
    }

    /// Tries each feature once, on the small `tally_writers` collection:
    /// its own document there, a TTL index on a field no document has
    /// (which therefore never deletes anything), and a `collMod` that
    /// changes nothing. A refusal marks the feature missing; a failure that
    /// retrying may fix fails the first contact, which is then tried again.
    pub(super) async fn probe_features(&self) -> Result<(), StoreError> {
        let probe = |u: Document| doc! { "q": { "_id": PROBE_ID }, "u": u, "upsert": true };
        // The document the next two probes need.
        self.probe_update(vec![probe(doc! { "$set": { "probe": true } })])
            .await?;
        // A statement refused with a duplicate key, then one that works.
        let unordered = vec![
            doc! { "q": { "_id": PROBE_ID, "absent": true }, "u": { "$set": { "probe": true } }, "upsert": true },
            probe(doc! { "$set": { "probe": true } }),
        ];
        if let Some(why) = self.probe_update(unordered).await? {
            self.features.mark_missing(Feature::UnorderedUpdates, &why);
        }
        let infinities =
            doc! { "$set": { "infinity": f64::INFINITY, "negative_infinity": f64::NEG_INFINITY } };
        if let Some(why) = self.probe_update(vec![probe(infinities)]).await? {
            self.features.mark_missing(Feature::Infinity, &why);
        }
        let ttl = raw_command(&doc! {
            "createIndexes": WRITERS_COLLECTION,
            "indexes": [{ "key": { "ttl_probe": 1 }, "name": "ttl_probe_1", "expireAfterSeconds": i32::MAX }],
        });
        if let Some(why) = self.probe_command(ttl).await? {
            self.features.mark_missing(Feature::TtlIndex, &why);
        }
        let coll_mod = raw_command(&doc! { "collMod": WRITERS_COLLECTION });
        if let Some(why) = self.probe_command(coll_mod).await? {
            self.features.mark_missing(Feature::CollMod, &why);
        }
        Ok(())
    }

    /// Sends upserts as one unordered `update`. `Some(refusal)` when the
    /// server refused one for good, or its reply does not account for every
    /// statement (each upsert either matches, inserts or fails).
    async fn probe_update(&self, stmts: Vec<Document>) -> Result<Option<String>, StoreError> {
        let n = stmts.len();
        let mut cmd = WriteCommand::new("update", WRITERS_COLLECTION, "updates");
        for s in &stmts {
            cmd.push(&to_raw(s)?);
        }
        let cmd = cmd.finish(self.write_concern.as_deref())?;
        let reply = match self.command(Op::Probe, cmd, 0, true).await {
            Ok(reply) => reply,
            Err(StoreError::Invalid(refusal)) => return Ok(Some(refusal)),
            Err(e) => return Err(e),
        };
        match parse_write_reply(&reply, n) {
            Ok(r) if r.n as usize + r.duplicates.len() < n => Ok(Some(format!(
                "an unordered update of {n} statements answered {reply}"
            ))),
            Ok(_) => Ok(None),
            Err(StoreError::Invalid(refusal)) => Ok(Some(refusal)),
            Err(e) => Err(e),
        }
    }

    /// Sends a command; `Some(refusal)` when the server says it does not
    /// implement it.
    async fn probe_command(&self, cmd: RawDocumentBuf) -> Result<Option<String>, StoreError> {
        match self.send(Op::Probe, cmd, 0).await {
            Ok(_) => Ok(None),
            Err(f) if f.code().is_some_and(not_implemented) => Ok(Some(f.message())),
            Err(f) => Err(f.into_store(false)),
        }
    }
}
