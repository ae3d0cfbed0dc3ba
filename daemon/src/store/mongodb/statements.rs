//! The update statement of one document of a flush: the watermark filter
//! that makes replays harmless, and `$inc`/`$min`/`$max` of exactly the
//! slots the flush touched. Kept apart from sending so the exactly-once
//! shape of a statement can be read, and tested, on its own.

use bson::raw::RawDocumentBuf;

use super::documents::{labels_doc, MINUTES};
use super::ids::bson_date;
use crate::model::{HourDocUpdate, SampleKind, SeriesId, Slot};
use crate::store::StoreError;

/// The three operator documents of one statement.
#[derive(Default)]
pub(super) struct SlotOps {
    inc: RawDocumentBuf,
    min: RawDocumentBuf,
    max: RawDocumentBuf,
}

impl SlotOps {
    fn add(&mut self, prefix: &str, slot: &Slot) -> Result<(), StoreError> {
        let n = i64::try_from(slot.n).map_err(|_| {
            StoreError::Invalid(format!("slot count {} does not fit an Int64", slot.n))
        })?;
        self.inc.append(format!("{prefix}.n"), n);
        self.inc.append(format!("{prefix}.sum"), slot.sum);
        self.min.append(format!("{prefix}.min"), slot.min);
        self.max.append(format!("{prefix}.max"), slot.max);
        Ok(())
    }
}

/// The parts of a statement every document of a flush shares.
pub(super) struct StatementCtx<'a> {
    pub(super) watermark_path: &'a str,
    pub(super) flush_id: i64,
}

impl StatementCtx<'_> {
    pub(super) fn statement(
        &self,
        id: &str,
        series: &SeriesId,
        kind: SampleKind,
        start: i64,
        ops: SlotOps,
    ) -> RawDocumentBuf {
        let mut gte = RawDocumentBuf::new();
        gte.append("$gte", self.flush_id);
        let mut not = RawDocumentBuf::new();
        not.append("$not", gte);
        let mut q = RawDocumentBuf::new();
        q.append_ref("_id", id);
        q.append(self.watermark_path, not);

        let mut set = RawDocumentBuf::new();
        set.append(self.watermark_path, self.flush_id);
        set.append_ref("k", kind.as_str());
        let mut on_insert = RawDocumentBuf::new();
        on_insert.append_ref("s", &*series.source);
        on_insert.append_ref("m", &*series.metric);
        if !series.labels.is_empty() {
            on_insert.append("l", labels_doc(&series.labels));
        }
        on_insert.append_ref("t", bson_date(start));

        let mut u = RawDocumentBuf::new();
        u.append("$inc", ops.inc);
        u.append("$min", ops.min);
        u.append("$max", ops.max);
        u.append("$set", set);
        u.append("$setOnInsert", on_insert);

        let mut stmt = RawDocumentBuf::new();
        stmt.append("q", q);
        stmt.append("u", u);
        stmt.append_ref("upsert", true);
        stmt
    }
}

/// The slot operations of one hour document. Minutes are merged first, so a
/// minute listed twice is added twice (as the embedded store does) instead
/// of becoming a duplicate path the server would refuse.
pub(super) fn hour_ops(series: &SeriesId, h: &HourDocUpdate) -> Result<SlotOps, StoreError> {
    let mut minutes = [None::<Slot>; MINUTES];
    for &(minute, ref slot) in &h.minutes {
        let cell = minutes.get_mut(usize::from(minute)).ok_or_else(|| {
            StoreError::Invalid(format!(
                "{series}: minute {minute} of hour {} is out of range",
                h.hour_start
            ))
        })?;
        cell.get_or_insert(Slot::EMPTY).merge(slot);
    }
    let mut ops = SlotOps::default();
    for (m, slot) in minutes.iter().enumerate() {
        if let Some(slot) = slot {
            ops.add(&format!("values.{m}"), slot)?;
        }
    }
    ops.add("total", &h.total)?;
    Ok(ops)
}
