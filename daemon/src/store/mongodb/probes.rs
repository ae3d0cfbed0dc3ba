//! The probes behind [`Features`](super::features::Features): each feature
//! tried once, at the first contact, on the small `tally_writers`
//! collection. Apart from the record of what is missing, because they send
//! commands, and the command layer consults that record.
//!
//! Any refusal marks the feature missing, whatever its code: servers that
//! speak the protocol differ in how they say no (FerretDB versions answer
//! `collMod` with codes a real server never uses), and a fallback costs
//! less than a daemon that cannot start. Only no answer at all (the
//! server unreachable, a timeout) is tried again with the next contact;
//! so is an answer that says "try again" (not primary, shutting down),
//! for [`PROBE_PATIENCE`] contacts, after which it counts as a refusal too.

use std::sync::atomic::Ordering;

use bson::raw::RawDocumentBuf;
use bson::{doc, Document};

use super::command::{raw_command, to_raw, WriteCommand};
use super::config::WRITERS_COLLECTION;
use super::errors::{not_implemented, parse_write_reply};
use super::features::Feature;
use super::indexes::FirstContact;
use super::stats::Op;
use super::wire::Wire;
use crate::store::StoreError;

/// First contacts on which a transient answer to a probe is tried again
/// rather than taken as a refusal.
pub(super) const PROBE_PATIENCE: u64 = 3;

/// The `_id` of the document in `tally_writers` the probes write;
/// writer ids cannot contain `~`, so it is nobody's reservation.
const PROBE_ID: &str = "~features";

impl FirstContact {
    /// Tries each feature once, on the small `tally_writers` collection:
    /// its own document there, a TTL index on a field no document has
    /// (which therefore never deletes anything), and a `collMod` that
    /// changes nothing. A refusal marks the feature missing; no answer
    /// fails the first contact, which is then tried again.
    pub(super) async fn probe_features(&self, wire: &Wire) -> Result<(), StoreError> {
        let probe = |u: Document| doc! { "q": { "_id": PROBE_ID }, "u": u, "upsert": true };
        // The document the next two probes need; if it is refused, they
        // answer for themselves.
        if let Some(why) = self
            .probe_update(wire, vec![probe(doc! { "$set": { "probe": true } })])
            .await?
        {
            tracing::warn!(refusal = %why, "the server refused the feature probes' document");
        }
        // A statement refused with a duplicate key, then one that works.
        let unordered = vec![
            doc! { "q": { "_id": PROBE_ID, "absent": true }, "u": { "$set": { "probe": true } }, "upsert": true },
            probe(doc! { "$set": { "probe": true } }),
        ];
        if let Some(why) = self.probe_update(wire, unordered).await? {
            wire.features.mark_missing(Feature::UnorderedUpdates, &why);
        }
        let infinities =
            doc! { "$set": { "infinity": f64::INFINITY, "negative_infinity": f64::NEG_INFINITY } };
        if let Some(why) = self.probe_update(wire, vec![probe(infinities)]).await? {
            wire.features.mark_missing(Feature::Infinity, &why);
        }
        let ttl = raw_command(&doc! {
            "createIndexes": WRITERS_COLLECTION,
            "indexes": [{ "key": { "ttl_probe": 1 }, "name": "ttl_probe_1", "expireAfterSeconds": i32::MAX }],
        });
        if let Some(why) = self.probe_command(wire, ttl).await? {
            wire.features.mark_missing(Feature::TtlIndex, &why);
        }
        let coll_mod = raw_command(&doc! { "collMod": WRITERS_COLLECTION });
        if let Some(why) = self.probe_command(wire, coll_mod).await? {
            wire.features.mark_missing(Feature::CollMod, &why);
        }
        Ok(())
    }

    /// Sends upserts as one unordered `update`. `Some(refusal)` when the
    /// server refused one for good, or its reply does not account for every
    /// statement (each upsert either matches, inserts or fails).
    async fn probe_update(
        &self,
        wire: &Wire,
        stmts: Vec<Document>,
    ) -> Result<Option<String>, StoreError> {
        let n = stmts.len();
        let mut cmd = WriteCommand::new("update", WRITERS_COLLECTION, "updates");
        for s in &stmts {
            cmd.push(&to_raw(s)?);
        }
        let cmd = cmd.finish(wire.write_concern.as_deref())?;
        let reply = match wire.send(Op::Probe, cmd, 0).await {
            Ok(reply) => reply,
            Err(f) => {
                let answered = f.code().is_some();
                return self.refusal(f.into_store(true), answered);
            }
        };
        match parse_write_reply(&reply, n) {
            Ok(r) if r.n as usize + r.duplicates.len() < n => Ok(Some(format!(
                "an unordered update of {n} statements answered {reply}"
            ))),
            Ok(_) => Ok(None),
            Err(e) => self.refusal(e, true),
        }
    }

    /// What a probe's failure means: a refusal (the feature is missing),
    /// or `Err` to try again with the next contact. `answered`: the server
    /// replied, with an error code.
    fn refusal(&self, e: StoreError, answered: bool) -> Result<Option<String>, StoreError> {
        let patient = self.contacts.load(Ordering::Acquire) < PROBE_PATIENCE;
        if e.is_retryable() && (!answered || patient) {
            return Err(e);
        }
        Ok(Some(e.to_string()))
    }

    /// Sends a command; `Some(refusal)` when the server refuses it, with
    /// whatever code.
    async fn probe_command(
        &self,
        wire: &Wire,
        cmd: RawDocumentBuf,
    ) -> Result<Option<String>, StoreError> {
        match wire.send(Op::Probe, cmd, 0).await {
            Ok(_) => Ok(None),
            Err(f) => {
                let answered = f.code().is_some();
                if f.code().is_some_and(not_implemented) {
                    return Ok(Some(f.message()));
                }
                self.refusal(f.into_store(false), answered)
            }
        }
    }
}
