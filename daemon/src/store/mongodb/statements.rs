//! The update statement of one document of a flush: the watermark filter
//! that makes replays harmless, and `$inc`/`$min`/`$max` of exactly the
//! slots the flush touched. Kept apart from sending so the exactly-once
//! shape of a statement can be read, and tested, on its own.

use bson::raw::RawDocumentBuf;

use super::documents::{encode_last, labels_doc, MINUTES};
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
    /// `$inc` of `n` and `sum` and `$min`/`$max` of the bounds, when the
    /// slot has values (a minute of only a last sample has none, and its
    /// infinite bounds could not be sent to a server that refuses them).
    fn add(&mut self, prefix: &str, slot: &Slot) -> Result<(), StoreError> {
        if !slot.has_values() {
            return Ok(());
        }
        let n = i64::try_from(slot.n).map_err(|_| {
            StoreError::Invalid(format!("slot count {} does not fit an Int64", slot.n).into())
        })?;
        self.inc.append(format!("{prefix}.n"), n);
        self.inc.append(format!("{prefix}.sum"), slot.sum);
        self.min.append(format!("{prefix}.min"), slot.min);
        self.max.append(format!("{prefix}.max"), slot.max);
        Ok(())
    }

    /// `$max` of a minute's last sample: a late sample never replaces a
    /// newer one, and applying it twice changes nothing.
    fn add_last(&mut self, prefix: &str, slot: &Slot) {
        if slot.last_sample().is_some() {
            self.max.append(format!("{prefix}.last"), encode_last(slot));
        }
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
        // Empty operator documents are left out: servers before 5.0 refuse them.
        for (op, doc) in [("$inc", ops.inc), ("$min", ops.min), ("$max", ops.max)] {
            if !doc.is_empty() {
                u.append(op, doc);
            }
        }
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
            StoreError::Invalid(
                format!(
                    "{series}: minute {minute} of hour {} is out of range",
                    h.hour_start
                )
                .into(),
            )
        })?;
        cell.get_or_insert(Slot::EMPTY).merge(slot);
    }
    let mut ops = SlotOps::default();
    for (m, slot) in minutes.iter().enumerate() {
        if let Some(slot) = slot {
            let prefix = format!("values.{m}");
            ops.add(&prefix, slot)?;
            ops.add_last(&prefix, slot);
        }
    }
    // The hour's running slot keeps no last sample: it would cost every
    // statement a third more `$max`, and is the last of its minutes.
    ops.add("total", &h.total)?;
    Ok(ops)
}
