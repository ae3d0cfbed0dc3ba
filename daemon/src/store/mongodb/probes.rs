//! The probes behind [`Features`](super::features::Features): each feature
//! tried once, at the first contact, on the small `tally_writers`
//! collection. Apart from the record of what is missing, because they send
//! commands, and the command layer consults that record.

use bson::raw::RawDocumentBuf;
use bson::{doc, Document};

use super::command::{raw_command, to_raw, WriteCommand};
use super::errors::{not_implemented, parse_write_reply};
use super::features::Feature;
use super::flush_ids::WRITERS_COLLECTION;
use super::stats::Op;
use super::MongoStore;
use crate::store::StoreError;

/// The `_id` of the document in `tally_writers` the probes write;
/// writer ids cannot contain `~`, so it is nobody's reservation.
const PROBE_ID: &str = "~features";

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
