//! Sealing a day document's hour from the hour document: read both, and
//! `$set` exactly the slots that differ, so the day's block of the hour
//! equals the hour's slots and the day's running slot the sum of its hours.
//!
//! A seal is idempotent: a second one finds nothing to change. That is what
//! makes it safe to repeat after a crash, for a late sample, or from another
//! daemon writing to the same rollup series. Two seals of one day document
//! at once cannot lose each other's hours: each statement is filtered on
//! the day's running slot as read (`total.n`, `total.sum`), so the second
//! matches nothing, is refused as a duplicate key by its upsert, and is
//! read and built again. The day document is read before the hour
//! document, so what a seal writes is never older than a seal it did not
//! see; and a block is never set to fewer samples than it holds.

use bson::doc;
use bson::raw::{RawBsonRef, RawDocument, RawDocumentBuf};
use futures::TryStreamExt;
use hashbrown::HashMap;
use mongodb::error::Error as DriverError;

use super::queue::{Items, Share};
use super::Sealer;
use crate::model::{Slot, Tier, DAY_S, HOUR_S};
use crate::store::mongodb::command::{bson_len, Work};
use crate::store::mongodb::decode::{decode_slot, type_error, DecodeError};
use crate::store::mongodb::documents::{encode_last, EmptyBounds, HOURS, MINUTES};
use crate::store::mongodb::errors::classify;
use crate::store::mongodb::features::Feature;
use crate::store::mongodb::ids::{bson_date, doc_id};
use crate::store::mongodb::stats::Op;
use crate::store::StoreError;

/// Hour documents per read. A batch holds each hour document, its day
/// document's hour (about 4 KB each) and the statement built from them
/// at once; at 500 that was a 6 MiB rise a minute after every hour
/// boundary, a quarter of the daemon's memory at 1,000 series. A seal is
/// upkeep, beside the flushes, so the extra round trips cost nothing a
/// flush waits for.
const SEAL_BATCH: usize = 100;

/// Rounds for a document whose running slot keeps changing under the seal
/// (other daemons sealing other hours of the same day).
const SEAL_ROUNDS: usize = 3;

/// Ids per page of a pass loaded from the server.
const LOAD_PAGE: usize = 10_000;

/// What sealing a share did.
pub(super) enum Sealed {
    /// Sealed (the documents that could be).
    Done,
    /// A page of a loading pass' ids: the first of a new read of them when
    /// `restarted`, the last when `done`.
    Page {
        ids: Vec<String>,
        restarted: bool,
        done: bool,
    },
}

/// The read of a pass' ids, kept from one page to the next.
pub(super) struct LoadCursor {
    hour: i64,
    cursor: mongodb::Cursor<RawDocumentBuf>,
}

impl Sealer {
    /// Seals one share, or loads a page of its pass' ids.
    pub(super) async fn seal_share(&self, share: &Share) -> Result<Sealed, StoreError> {
        let ids: Vec<String> = match &share.items {
            Items::Load => return self.load_page(share.hour).await,
            Items::Ids(ids) => ids.clone(),
            Items::Series(series) => series
                .iter()
                .map(|s| doc_id(s, Tier::Hour, share.hour))
                .collect::<Result<_, _>>()?,
        };
        self.seal_hour_ids(share.hour, &ids).await?;
        Ok(Sealed::Done)
    }

    /// Seals the day documents of the hour documents `ids`, all of `hour`.
    pub(super) async fn seal_hour_ids(&self, hour: i64, ids: &[String]) -> Result<(), StoreError> {
        for chunk in ids.chunks(SEAL_BATCH) {
            self.seal_ids(hour, chunk).await?;
        }
        Ok(())
    }

    /// The next page of the hour documents of `hour` this writer wrote,
    /// each page within the store's deadline. A read that fails is started
    /// again by the next call.
    async fn load_page(&self, hour: i64) -> Result<Sealed, StoreError> {
        let mut slot = self.load_cursor.lock().await;
        let open = slot.take().filter(|c| c.hour == hour);
        let restarted = open.is_none();
        let page = async {
            let mut load = match open {
                Some(load) => load,
                None => {
                    let cursor = self
                        .written_in(hour, &self.conn.writer.watermark_path, LOAD_PAGE)
                        .await?;
                    LoadCursor { hour, cursor }
                }
            };
            let (ids, exhausted) = next_ids(&mut load.cursor, LOAD_PAGE).await?;
            Ok::<_, DriverError>((ids, (!exhausted).then_some(load)))
        };
        let page = async { page.await.map_err(|e| classify(&e, false)) };
        let (ids, rest) = self
            .conn
            .wire
            .timed(
                Op::Read,
                128,
                self.conn.wire.timeout,
                "hour documents to seal: ",
                page,
            )
            .await?;
        let done = rest.is_none();
        *slot = rest;
        Ok(Sealed::Page {
            ids,
            restarted,
            done,
        })
    }

    /// Seals the day documents of the hour documents `ids`, all of `hour`.
    async fn seal_ids(&self, hour: i64, ids: &[String]) -> Result<(), StoreError> {
        let day_start = hour.div_euclid(DAY_S) * DAY_S;
        let index = usize::try_from((hour - day_start) / HOUR_S).unwrap_or(0);
        let bounds = if self.conn.wire.features.lacks(Feature::Infinity) {
            EmptyBounds::Finite
        } else {
            EmptyBounds::Infinite
        };
        let mut pending: Vec<String> = ids.to_vec();
        for _ in 0..SEAL_ROUNDS {
            // The day documents first: the hours read after them are at
            // least as new as what another daemon's seal put in them.
            let day_ids: Vec<String> = pending.iter().filter_map(|id| day_id_of(id)).collect();
            let days = self
                .fetch(Tier::Day, &day_ids, day_projection(index))
                .await?;
            let hours = self.fetch(Tier::Hour, &pending, hour_projection()).await?;
            let (stmts, of_stmt) = self.statements(&hours, &days, index, day_start, bounds);
            if stmts.is_empty() {
                return Ok(());
            }
            let send = [(
                self.conn.wire.day.name(),
                stmts.iter().map(|s| s.as_ref()).collect(),
            )];
            let replies = match self
                .conn
                .wire
                .write_all(Op::Update, &send, &mut Work::default())
                .await
            {
                Ok(replies) => replies,
                Err(StoreError::Invalid(why)) => {
                    // Refused for good (a document rewritten by hand into
                    // a shape the statement cannot apply to): retrying
                    // would hold every seal behind it.
                    metrics::counter!("tally_mongodb_seal_refused_total")
                        .increment(stmts.len() as u64);
                    tracing::error!(hour, documents = stmts.len(), error = %why, "the server refused these seals; their day documents stay as they are");
                    return Ok(());
                }
                Err(e) => return Err(e),
            };
            let sealed = stmts.len()
                - replies
                    .iter()
                    .map(|(_, r)| r.duplicates.len())
                    .sum::<usize>();
            metrics::counter!("tally_mongodb_sealed_documents_total").increment(sealed as u64);
            pending = replies
                .iter()
                .flat_map(|(_, r)| r.duplicates.iter())
                .filter_map(|&i| of_stmt.get(i).cloned())
                .collect();
            if pending.is_empty() {
                return Ok(());
            }
        }
        Err(StoreError::Unavailable(format!(
            "{} day documents changed under each of {SEAL_ROUNDS} seals of hour {hour}; trying again later",
            pending.len()
        ).into()))
    }

    /// The seal statements of `hours` into `days` (the day documents as
    /// read), and the hour document each one is of. A day document whose
    /// seal cannot be built is left out, and said so.
    fn statements(
        &self,
        hours: &HashMap<String, RawDocumentBuf>,
        days: &HashMap<String, RawDocumentBuf>,
        index: usize,
        day_start: i64,
        bounds: EmptyBounds,
    ) -> (Vec<RawDocumentBuf>, Vec<String>) {
        let mut stmts = Vec::new();
        let mut of_stmt = Vec::new();
        for (id, hour_doc) in hours {
            let Some(day_id) = day_id_of(id) else {
                continue;
            };
            let day_doc = days.get(&day_id).map(|d| d.as_ref());
            match seal_statement(&day_id, hour_doc, day_doc, index, day_start, bounds) {
                Ok(Some(stmt)) => {
                    stmts.push(stmt);
                    of_stmt.push(id.clone());
                }
                Ok(None) => {}
                Err(e) => {
                    // One document someone rewrote must not hold up
                    // the others: it stays as it is, and says so.
                    metrics::counter!("tally_mongodb_seal_refused_total").increment(1);
                    tracing::error!(
                        hour_document = %self.conn.wire.doc_name(Tier::Hour, id),
                        error = %e,
                        "cannot seal this hour into its day document"
                    );
                }
            }
        }
        (stmts, of_stmt)
    }

    /// Documents of `tier` by id, with `projection`.
    async fn fetch(
        &self,
        tier: Tier,
        ids: &[String],
        projection: bson::Document,
    ) -> Result<HashMap<String, RawDocumentBuf>, StoreError> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let filter = doc! { "_id": { "$in": ids } };
        let bytes = bson_len(&filter) + bson_len(&projection);
        let coll = self.conn.wire.collection(tier);
        let read = async {
            let mut cursor = coll
                .find(filter)
                .projection(projection)
                .batch_size(u32::try_from(ids.len()).unwrap_or(u32::MAX))
                .await?;
            let mut out = HashMap::with_capacity(ids.len());
            while let Some(d) = cursor.try_next().await? {
                if let Ok(id) = d.get_str("_id") {
                    out.insert(id.to_string(), d);
                }
            }
            Ok::<_, DriverError>(out)
        };
        let read = async { read.await.map_err(|e| classify(&e, false)) };
        self.conn
            .wire
            .timed(Op::Read, bytes, self.conn.wire.timeout, "seal read: ", read)
            .await
    }
}

impl Sealer {
    /// A read of the ids of the hour documents of `hour` that hold the
    /// watermark at `watermark_path`, in pages of `page`.
    pub(super) async fn written_in(
        &self,
        hour: i64,
        watermark_path: &str,
        page: usize,
    ) -> Result<mongodb::Cursor<RawDocumentBuf>, DriverError> {
        let filter = doc! { "t": bson_date(hour), watermark_path: { "$exists": true } };
        self.conn
            .wire
            .hour
            .find(filter)
            .projection(doc! { "_id": 1 })
            .batch_size(u32::try_from(page).unwrap_or(u32::MAX))
            .await
    }
}

/// Up to `max` more ids of `cursor`, and whether it has no more.
pub(super) async fn next_ids(
    cursor: &mut mongodb::Cursor<RawDocumentBuf>,
    max: usize,
) -> Result<(Vec<String>, bool), DriverError> {
    let mut ids = Vec::new();
    while ids.len() < max {
        match cursor.try_next().await? {
            Some(d) => {
                if let Ok(id) = d.get_str("_id") {
                    ids.push(id.to_string());
                }
            }
            None => return Ok((ids, true)),
        }
    }
    Ok((ids, false))
}

/// `<source>|<metric>|YYYYMMDD` of `<source>|<metric>|YYYYMMDDHH`.
fn day_id_of(hour_id: &str) -> Option<String> {
    let cut = hour_id.len().checked_sub(2)?;
    hour_id
        .is_char_boundary(cut)
        .then(|| hour_id[..cut].to_string())
}

fn hour_projection() -> bson::Document {
    doc! { "s": 1, "m": 1, "l": 1, "k": 1, "total": 1, "values": 1 }
}

/// The day's running slot, every other hour's running slot, and the whole
/// block of hour `index`.
fn day_projection(index: usize) -> bson::Document {
    let mut p = doc! { "total": 1 };
    for h in 0..HOURS {
        if h == index {
            p.insert(format!("values.{h}"), 1);
        } else {
            p.insert(format!("values.{h}.total"), 1);
        }
    }
    p
}

/// Whether two stored slots hold the same: every empty slot is the same,
/// whatever bounds the server keeps in it.
fn same(a: &Slot, b: &Slot) -> bool {
    a.n == b.n
        && (a.n == 0
            || (a.sum.to_bits() == b.sum.to_bits()
                && a.min.to_bits() == b.min.to_bits()
                && a.max.to_bits() == b.max.to_bits()))
        && a.last_sample().map(|(t, v)| (t, v.to_bits()))
            == b.last_sample().map(|(t, v)| (t, v.to_bits()))
}

fn sub<'a>(d: Option<&'a RawDocument>, key: &str) -> Result<Option<&'a RawDocument>, DecodeError> {
    let Some(d) = d else { return Ok(None) };
    match d.get(key)? {
        None => Ok(None),
        Some(RawBsonRef::Document(s)) => Ok(Some(s)),
        Some(v) => Err(type_error(key, v, "a document")),
    }
}

/// The slot at `key` of `d`, empty when absent.
fn slot_at(d: Option<&RawDocument>, key: &str) -> Result<Slot, DecodeError> {
    match d.map(|d| d.get(key)).transpose()?.flatten() {
        None => Ok(Slot::EMPTY),
        Some(v) => decode_slot(v, &|| key.to_string()),
    }
}

fn encode_slot(s: &Slot, bounds: EmptyBounds) -> Result<RawDocumentBuf, DecodeError> {
    let n = i64::try_from(s.n).map_err(|_| DecodeError::Value {
        field: "total.n".into(),
        reason: format!("{} does not fit an Int64", s.n),
    })?;
    let (min, max) = match (s.n, bounds) {
        (0, EmptyBounds::Infinite) => (f64::INFINITY, f64::NEG_INFINITY),
        (0, EmptyBounds::Finite) => (f64::MAX, -f64::MAX),
        _ => (s.min, s.max),
    };
    let mut d = RawDocumentBuf::new();
    d.append("n", n);
    d.append("sum", if s.n == 0 { 0.0 } else { s.sum });
    d.append("min", min);
    d.append("max", max);
    d.append("last", encode_last(s));
    Ok(d)
}

/// The statement that makes `day_id`'s block of hour `index` equal to
/// `hour_doc`, or None when it already is.
pub(super) fn seal_statement(
    day_id: &str,
    hour_doc: &RawDocument,
    day_doc: Option<&RawDocument>,
    index: usize,
    day_start: i64,
    bounds: EmptyBounds,
) -> Result<Option<RawDocumentBuf>, DecodeError> {
    let hour_values = sub(Some(hour_doc), "values")?;
    let day_values = sub(day_doc, "values")?;
    let block = sub(day_values, &index.to_string())?;
    let mut set = RawDocumentBuf::new();
    let last = set_minutes(&mut set, hour_values, block, index, bounds)?;
    let mut hour_total = slot_at(Some(hour_doc), "total")?;
    hour_total.see(last.last_ms, last.last);
    let block_total = slot_at(block, "total")?;
    if hour_total.n < block_total.n {
        // Hours only grow: this hour document is older than the block (or
        // expired and was made again by a late sample). Never go back.
        return Err(DecodeError::Value {
            field: "total.n".into(),
            reason: format!(
                "the hour holds {} samples, fewer than the {} its day block already has",
                hour_total.n, block_total.n
            ),
        });
    }
    if !same(&hour_total, &block_total) {
        set.append(
            format!("values.{index}.total"),
            encode_slot(&hour_total, bounds)?,
        );
    }
    let day_total = slot_at(day_doc, "total")?;
    let mut merged = Slot::EMPTY;
    for h in 0..HOURS {
        if h == index {
            merged.merge(&hour_total);
        } else {
            merged.merge(&slot_at(sub(day_values, &h.to_string())?, "total")?);
        }
    }
    if !same(&merged, &day_total) {
        set.append("total", encode_slot(&merged, bounds)?);
    }
    if set.as_bytes().len() <= 5 {
        return Ok(None);
    }
    if let Some(RawBsonRef::String(k)) = hour_doc.get("k")? {
        set.append("k", k);
    }
    upsert(day_id, hour_doc, &day_total, set, day_start).map(Some)
}

/// Appends to `set` the minutes of the hour's block in the day document
/// (`values.<index>`) that differ from the hour document's. Returns the
/// hour's newest sample: the hour document's running slot keeps none (see
/// `documents`), so the block's total takes it from its minutes.
fn set_minutes(
    set: &mut RawDocumentBuf,
    hour_values: Option<&RawDocument>,
    block: Option<&RawDocument>,
    index: usize,
    bounds: EmptyBounds,
) -> Result<Slot, DecodeError> {
    let mut last = Slot::EMPTY;
    for m in 0..MINUTES {
        let key = m.to_string();
        let want = slot_at(hour_values, &key)?;
        last.see(want.last_ms, want.last);
        if !same(&want, &slot_at(block, &key)?) {
            let path = format!("values.{index}.{m}");
            match hour_values.map(|v| v.get(&key)).transpose()?.flatten() {
                Some(raw) => set.append_ref(path, raw),
                None => set.append(path, encode_slot(&want, bounds)?),
            }
        }
    }
    Ok(last)
}

/// The seal's statement: `$set` applied only while the day's running slot
/// is still what was read (`day_total`), upserting the day document with
/// the hour document's names where it does not exist.
fn upsert(
    day_id: &str,
    hour_doc: &RawDocument,
    day_total: &Slot,
    set: RawDocumentBuf,
    day_start: i64,
) -> Result<RawDocumentBuf, DecodeError> {
    let mut q = RawDocumentBuf::new();
    q.append("_id", day_id);
    let n = i64::try_from(day_total.n).unwrap_or(i64::MAX);
    q.append("total.n", n);
    if day_total.sum.is_finite() {
        q.append("total.sum", day_total.sum);
    }
    let mut on_insert = RawDocumentBuf::new();
    for key in ["s", "m", "l"] {
        if let Some(v) = hour_doc.get(key)? {
            on_insert.append_ref(key, v);
        }
    }
    on_insert.append("t", bson_date(day_start));
    let mut u = RawDocumentBuf::new();
    u.append("$set", set);
    u.append("$setOnInsert", on_insert);
    let mut stmt = RawDocumentBuf::new();
    stmt.append("q", q);
    stmt.append("u", u);
    stmt.append("upsert", true);
    Ok(stmt)
}

#[cfg(test)]
#[path = "write_tests.rs"]
mod tests;
