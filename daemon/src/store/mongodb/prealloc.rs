//! Making documents exist before their first update: pre-allocation ahead
//! of time (driven by the daemon's maintenance, beside the flushes), and
//! the first-sighting insert of the day documents a flush reached that the
//! store does not know (driven by the store's upkeep, never by the flush:
//! the flush upserts). Both insert the full empty document, so updates and
//! seals fill slots that are already there; the look-up comes first
//! because a blind insert would resend 135 KB per day document after every
//! restart.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use bson::doc;
use bson::raw::RawDocument;
use futures::stream::{self, StreamExt, TryStreamExt};
use mongodb::error::Error as DriverError;
use parking_lot::Mutex;

use super::command::{by_tier, chunk_by_bytes, Work};
use super::documents::{EmptyBounds, Templates};
use super::errors::{all_or_worst, classify};
use super::features::{Feature, Features};
use super::ids::{check_series, doc_id};
use super::known_docs::{KnownDocs, KNOWN_DOCS_CAP};
use super::stats::Op;
use super::Conn;
use crate::model::{DocKey, SeriesId, Tier};
use crate::store::{PreallocStats, StoreError};

/// Ids per existence look-up: ~70 bytes each, so well under a megabyte.
const IDS_PER_LOOKUP: usize = 10_000;

/// First-sighted documents waiting at most: beyond, the seal's upsert
/// makes them (sparse), which costs nothing but their growth.
const SIGHTINGS_CAP: usize = 100_000;

/// First-sighted documents inserted per upkeep call: day documents are
/// ~135 KB each, so about 70 MB on the wire at most.
const SIGHTINGS_PER_CALL: usize = 500;

/// Pre-allocated documents built and sent at a time: about 30 day
/// documents. The driver copies a command once more as it serialises it,
/// growing its buffer by doubling, so a part costs about four times this
/// while it is in flight.
const INSERT_PART_BYTES: usize = 4 << 20;

/// Documents flushes reached before the store knew them to exist, waiting
/// for the upkeep to insert them pre-allocated: a bounded queue, each
/// document once.
#[derive(Debug, Default)]
pub(super) struct Sightings {
    queue: VecDeque<DocKey>,
    queued: hashbrown::HashSet<DocKey>,
}

impl Sightings {
    /// Queues `docs` (those not queued yet), as long as there is room.
    pub(super) fn add(&mut self, docs: Vec<DocKey>) {
        for d in docs {
            if self.queue.len() >= SIGHTINGS_CAP {
                metrics::counter!("tally_mongodb_sightings_dropped_total").increment(1);
                continue;
            }
            if self.queued.insert(d.clone()) {
                self.queue.push_back(d);
            }
        }
    }

    /// The next documents to insert.
    pub(super) fn take(&mut self) -> Vec<DocKey> {
        let n = self.queue.len().min(SIGHTINGS_PER_CALL);
        let out: Vec<DocKey> = self.queue.drain(..n).collect();
        for d in &out {
            self.queued.remove(d);
        }
        out
    }

    /// Documents whose insert failed: they wait again, at the front.
    pub(super) fn failed(&mut self, docs: Vec<DocKey>) {
        for d in docs.into_iter().rev() {
            if self.queued.insert(d.clone()) {
                self.queue.push_front(d);
            }
        }
    }
}

/// One document a flush touches.
pub(super) struct PlannedDoc<'a> {
    pub(super) tier: Tier,
    pub(super) start: i64,
    pub(super) id: String,
    /// Of `id`, for the first-sighting memory.
    pub(super) hash: u64,
    pub(super) series: &'a SeriesId,
    /// For a flush's documents: the index of the series in the flush.
    pub(super) origin: usize,
}

/// What pre-allocation keeps: the empty documents it inserts, and the
/// bounded memory of documents known to exist.
pub(super) struct Prealloc {
    templates: Templates,
    /// Pre-allocated documents for a server that refuses infinities.
    finite_templates: Templates,
    known: Mutex<KnownDocs>,
    hasher: ahash::RandomState,
}

impl Prealloc {
    pub(super) fn new() -> Prealloc {
        Prealloc {
            templates: Templates::new(EmptyBounds::Infinite),
            finite_templates: Templates::new(EmptyBounds::Finite),
            known: Mutex::new(KnownDocs::new(KNOWN_DOCS_CAP)),
            hasher: ahash::RandomState::new(),
        }
    }

    /// The pre-allocated documents this server stores.
    pub(super) fn templates(&self, features: &Features) -> &Templates {
        if features.lacks(Feature::Infinity) {
            &self.finite_templates
        } else {
            &self.templates
        }
    }

    pub(super) fn planned<'a>(
        &self,
        tier: Tier,
        start: i64,
        id: String,
        series: &'a SeriesId,
    ) -> PlannedDoc<'a> {
        PlannedDoc {
            tier,
            start,
            hash: self.hasher.hash_one(&id),
            id,
            series,
            origin: 0,
        }
    }

    /// The documents of `docs` the first-sighting memory does not hold.
    pub(super) fn unknown<'d, 's>(&self, docs: &'d [PlannedDoc<'s>]) -> Vec<&'d PlannedDoc<'s>> {
        let known = self.known.lock();
        docs.iter()
            .filter(|d| !known.contains(d.tier, d.start, d.hash))
            .collect()
    }

    /// Adds documents known to exist to the first-sighting memory.
    pub(super) fn remember<'d, 's: 'd>(&self, docs: impl IntoIterator<Item = &'d PlannedDoc<'s>>) {
        let mut known = self.known.lock();
        for d in docs {
            known.insert(d.tier, d.start, d.hash);
        }
    }
}

impl Conn {
    pub(super) async fn preallocate_inner(
        &self,
        keys: &[DocKey],
    ) -> Result<PreallocStats, StoreError> {
        let mut docs: Vec<PlannedDoc<'_>> = Vec::with_capacity(keys.len());
        let mut seen = hashbrown::HashSet::new();
        let mut stats = PreallocStats::default();
        for k in keys {
            check_series(&k.series)?;
            let id = doc_id(&k.series, k.tier, k.period_start)?;
            if !seen.insert((k.tier, id.clone())) {
                stats.already_present += 1;
                continue;
            }
            docs.push(self.prealloc.planned(k.tier, k.period_start, id, &k.series));
        }
        let unknown = self.prealloc.unknown(&docs);
        stats.already_present += docs.len() - unknown.len();
        if unknown.is_empty() {
            return Ok(stats);
        }
        self.ready().await?;
        let (created, present) = self.ensure_exist(&unknown, &mut Work::default()).await?;
        stats.created = created;
        stats.already_present += present;
        Ok(stats)
    }

    /// Inserts first-sighted documents that do not exist yet; on failure
    /// hands them back, to wait for the next call.
    pub(super) async fn insert_sighted(
        &self,
        keys: Vec<DocKey>,
    ) -> Result<(), (StoreError, Vec<DocKey>)> {
        let created = match self.preallocate_inner(&keys).await {
            Ok(stats) => stats.created,
            Err(e) => return Err((e, keys)),
        };
        self.wire
            .counters
            .first_sighting_documents
            .fetch_add(created as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Makes sure every document of `docs` exists, inserting the missing
    /// ones pre-allocated. Returns (created, already present).
    pub(super) async fn ensure_exist(
        &self,
        docs: &[&PlannedDoc<'_>],
        work: &mut Work,
    ) -> Result<(usize, usize), StoreError> {
        if docs.is_empty() {
            return Ok((0, 0));
        }
        let existing = self.existing(docs, work).await?;
        let (present, missing): (Vec<&PlannedDoc<'_>>, Vec<&PlannedDoc<'_>>) = docs
            .iter()
            .partition(|d| existing.contains(&(d.tier, d.id.clone())));
        self.prealloc.remember(present.iter().copied());
        if missing.is_empty() {
            return Ok((0, present.len()));
        }
        let (created, duplicates) = self.insert_empty(&missing, work).await?;
        self.prealloc.remember(missing.iter().copied());
        Ok((created, present.len() + duplicates))
    }

    /// Which of `docs` exist: an index-covered look-up of ids, far cheaper
    /// than sending 135 KB day documents to have them refused.
    async fn existing(
        &self,
        docs: &[&PlannedDoc<'_>],
        work: &mut Work,
    ) -> Result<hashbrown::HashSet<(Tier, String)>, StoreError> {
        let mut lookups = Vec::new();
        for (tier, of_tier) in by_tier(docs, |d| d.tier) {
            let ids: Vec<&str> = of_tier.iter().map(|d| d.id.as_str()).collect();
            for chunk in ids.chunks(IDS_PER_LOOKUP) {
                lookups.push((tier, chunk.to_vec()));
                work.round_trips += 1;
            }
        }
        let futures: Vec<_> = lookups
            .into_iter()
            .map(|(tier, ids)| self.existing_ids(tier, ids))
            .collect();
        let found: Vec<Result<Vec<(Tier, String)>, StoreError>> = stream::iter(futures)
            .buffer_unordered(self.wire.max_concurrent)
            .collect()
            .await;
        Ok(all_or_worst(found)?.into_iter().flatten().collect())
    }

    async fn existing_ids(
        &self,
        tier: Tier,
        ids: Vec<&str>,
    ) -> Result<Vec<(Tier, String)>, StoreError> {
        let n = ids.len();
        // Approximately: each id is a string element of the `$in` array.
        let bytes = 64 + ids.iter().map(|id| id.len() + 12).sum::<usize>();
        let filter = doc! { "_id": { "$in": ids } };
        let coll = self.wire.collection(tier);
        let lookup = async {
            let mut cursor = coll
                .find(filter)
                .projection(doc! { "_id": 1 })
                .batch_size(u32::try_from(n).unwrap_or(u32::MAX))
                .await?;
            let mut out = Vec::with_capacity(n);
            while let Some(d) = cursor.try_next().await? {
                if let Ok(id) = d.get_str("_id") {
                    out.push((tier, id.to_string()));
                }
            }
            Ok::<_, DriverError>(out)
        };
        let lookup = async { lookup.await.map_err(|e| classify(&e, false)) };
        self.wire
            .timed(
                Op::Lookup,
                bytes,
                self.wire.timeout,
                "existence look-up: ",
                lookup,
            )
            .await
    }

    /// Inserts the pre-allocated `missing` documents. Returns (created,
    /// refused as duplicates): a duplicate means someone else inserted it
    /// meanwhile.
    ///
    /// Built and sent [`INSERT_PART_BYTES`] at a time: a day document is
    /// about 135 KB, so building a whole tick's (up to
    /// `prealloc.max_per_second`) before sending any took 270 MB at 2,000
    /// documents, and a daemon of 1,000 series at 30 MiB jumped to 270 MiB
    /// at its first tick.
    async fn insert_empty(
        &self,
        missing: &[&PlannedDoc<'_>],
        work: &mut Work,
    ) -> Result<(usize, usize), StoreError> {
        let sizes = missing.iter().map(|d| {
            self.prealloc
                .templates(&self.wire.features)
                .approx_len(d.tier)
        });
        let (mut created, mut duplicates) = (0, 0);
        for (from, to) in chunk_by_bytes(sizes, usize::MAX, INSERT_PART_BYTES) {
            let (c, d) = self.insert_part(&missing[from..to], work).await?;
            created += c;
            duplicates += d;
        }
        Ok((created, duplicates))
    }

    async fn insert_part(
        &self,
        missing: &[&PlannedDoc<'_>],
        work: &mut Work,
    ) -> Result<(usize, usize), StoreError> {
        let built: Vec<(Tier, Vec<_>)> = by_tier(missing, |d| d.tier)
            .into_iter()
            .map(|(tier, docs)| {
                let docs = docs.iter().map(|d| {
                    self.prealloc
                        .templates(&self.wire.features)
                        .document(&d.id, d.series, d.tier, d.start)
                });
                (tier, docs.collect())
            })
            .collect();
        let groups: Vec<(&str, Vec<&RawDocument>)> = built
            .iter()
            .map(|(tier, docs)| {
                let docs = docs.iter().map(|d| d.as_ref()).collect();
                (self.wire.collection(*tier).name(), docs)
            })
            .collect();
        let replies = self.wire.write_all(Op::Insert, &groups, work).await?;
        let duplicates: usize = replies.iter().map(|(_, r)| r.duplicates.len()).sum();
        let created: u64 = replies.iter().map(|(_, r)| r.n).sum();
        Ok((created as usize, duplicates))
    }
}
