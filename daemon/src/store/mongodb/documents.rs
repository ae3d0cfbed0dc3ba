//! Pre-allocated documents: every slot present and empty, so later updates
//! only change numbers that are already there and a document never grows.
//! The constant parts are serialised once, because a day document is about
//! 135 KB and pre-allocation makes many of them.

use bson::raw::RawDocumentBuf;

use super::ids::{bson_date, doc_id};
use crate::labels::Labels;
use crate::model::{is_stale_marker, SeriesId, Slot, Tier, NO_LAST_MS};

/// Minute slots of an hour, hour slots of a day.
pub(super) const MINUTES: usize = 60;
pub(super) const HOURS: usize = 24;

/// What an empty slot's `min` and `max` hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EmptyBounds {
    /// `+∞` and `-∞`: what the merge of no samples is.
    Infinite,
    /// `f64::MAX` and `-f64::MAX`, for servers that refuse infinities. Just
    /// as neutral for `$min`/`$max` of finite samples, and readers tell an
    /// empty slot by `n: 0`.
    Finite,
}

/// An empty slot; `with_last` adds the empty last sample, which every `$max`
/// of a real sample replaces (see [`encode_last`]).
fn empty_slot(bounds: EmptyBounds, with_last: bool) -> RawDocumentBuf {
    let (min, max) = match bounds {
        EmptyBounds::Infinite => (f64::INFINITY, f64::NEG_INFINITY),
        EmptyBounds::Finite => (f64::MAX, -f64::MAX),
    };
    let mut s = RawDocumentBuf::new();
    s.append("n", 0_i64);
    s.append("sum", 0.0_f64);
    s.append("min", min);
    s.append("max", max);
    if with_last {
        s.append("last", encode_last(&Slot::EMPTY));
    }
    s
}

/// The constant parts of pre-allocated documents, serialised once, so a
/// pre-allocated document costs a few memory copies.
///
/// Every slot carries the minute's last sample but an hour document's
/// running slot (`total`), which flushes update with every statement: its
/// last sample is its newest minute's.
pub(super) struct Templates {
    hour_total: RawDocumentBuf,
    slot: RawDocumentBuf,
    empty: RawDocumentBuf,
    hour_values: RawDocumentBuf,
    day_values: RawDocumentBuf,
}

impl Templates {
    pub(super) fn new(bounds: EmptyBounds) -> Templates {
        let slot = empty_slot(bounds, true);
        let mut hour_values = RawDocumentBuf::new();
        for m in 0..MINUTES {
            hour_values.append_ref(m.to_string(), &slot);
        }
        // `total` first: an hourly read of a day document finds it at once.
        let mut day_hour = RawDocumentBuf::new();
        day_hour.append_ref("total", &slot);
        for m in 0..MINUTES {
            day_hour.append_ref(m.to_string(), &slot);
        }
        let mut day_values = RawDocumentBuf::new();
        for h in 0..HOURS {
            day_values.append_ref(h.to_string(), &day_hour);
        }
        Templates {
            hour_total: empty_slot(bounds, false),
            slot,
            empty: RawDocumentBuf::new(),
            hour_values,
            day_values,
        }
    }

    /// About the BSON bytes of a `tier` document: all but its names.
    pub(super) fn approx_len(&self, tier: Tier) -> usize {
        128 + match tier {
            Tier::Hour => self.hour_total.as_bytes().len() + self.hour_values.as_bytes().len(),
            Tier::Day => self.slot.as_bytes().len() + self.day_values.as_bytes().len(),
        }
    }

    /// The full empty document: every slot present, `w: {}`, no `k`; a
    /// labelled series' labels in `l`.
    pub(super) fn document(
        &self,
        id: &str,
        series: &SeriesId,
        tier: Tier,
        start: i64,
    ) -> RawDocumentBuf {
        let mut d = RawDocumentBuf::new();
        d.append_ref("_id", id);
        d.append_ref("s", &*series.source);
        d.append_ref("m", &*series.metric);
        if !series.labels.is_empty() {
            d.append("l", labels_doc(&series.labels));
        }
        d.append_ref("t", bson_date(start));
        d.append_ref("w", &self.empty);
        match tier {
            Tier::Hour => {
                d.append_ref("total", &self.hour_total);
                d.append_ref("values", &self.hour_values);
            }
            Tier::Day => {
                d.append_ref("total", &self.slot);
                d.append_ref("values", &self.day_values);
            }
        }
        d
    }
}

fn reference_size(tier: Tier) -> usize {
    let series = SeriesId::new("db-00001", "op_counter");
    let start = 1_773_446_400; // 2026-03-14T00:00Z
    let id = doc_id(&series, tier, start).unwrap_or_default();
    Templates::new(EmptyBounds::Infinite)
        .document(&id, &series, tier, start)
        .as_bytes()
        .len()
}

/// BSON bytes of a pre-allocated hour document of the series
/// `db-00001/op_counter`; every byte of a longer source or metric name adds
/// two (it is in `_id` and in `s` or `m`).
pub fn hour_doc_bson_size() -> usize {
    reference_size(Tier::Hour)
}

/// BSON bytes of a pre-allocated day document of `db-00001/op_counter`; see
/// [`hour_doc_bson_size`].
pub fn day_doc_bson_size() -> usize {
    reference_size(Tier::Day)
}
/// A label set as the `l` field of a document: `{name: value, ...}` in
/// name order. Readers take the series from `_id`; the field is there for
/// people and for queries a MongoDB user writes by hand.
pub(super) fn labels_doc(labels: &Labels) -> RawDocumentBuf {
    let mut d = RawDocumentBuf::new();
    for (name, value) in labels.pairs() {
        d.append(name, value.as_ref());
    }
    d
}

/// A slot's `last` as stored: `{t, v}`, compared by MongoDB's `$max` as
/// [`crate::model::newer_sample`] compares samples (time first, then
/// value). NaN is stored as null: some servers refuse NaN in any message
/// (FerretDB 1.x), and null sorts below every number exactly as NaN does
/// in MongoDB's order, so `$max` keeps the same sample either way. The
/// staleness marker, a NaN whose bits null would lose, is
/// `{t, v: null, stale: true}`: a document with one more field sorts after
/// an equal shorter one, so at the same time the marker is above a NaN and
/// below a number, as [`crate::model::newer_sample`] has it. The empty
/// slot's is `{t: i64::MIN, v: 0}`.
pub(super) fn encode_last(slot: &Slot) -> RawDocumentBuf {
    let (t, v) = slot.last_sample().unwrap_or((NO_LAST_MS, 0.0));
    let mut d = RawDocumentBuf::new();
    d.append("t", t);
    if v.is_nan() {
        d.append("v", bson::RawBson::Null);
        if is_stale_marker(v) {
            d.append(STALE_FIELD, true);
        }
    } else {
        d.append("v", v);
    }
    d
}

/// The field that marks a stored last sample as the staleness marker.
pub(super) const STALE_FIELD: &str = "stale";
