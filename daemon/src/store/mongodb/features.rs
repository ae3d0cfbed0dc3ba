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

use tracing::warn;

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
