//! Reading stored hour and day documents back, defensively: a document that
//! someone rewrote by hand, or that another version wrote, is reported as
//! corrupt with the field at fault rather than read as wrong numbers.

use bson::raw::{RawBsonRef, RawDocument};
use bson::spec::ElementType;

use super::documents::{HOURS, MINUTES, STALE_FIELD};
use super::ids::period_key;
use crate::model::{
    stale_marker, Resolution, SampleKind, Slot, Tier, HOUR_S, MINUTE_S, NO_LAST_MS,
};
use crate::store::{DocRead, ReadQuery};

#[derive(Debug, thiserror::Error)]
pub(super) enum DecodeError {
    #[error("`{0}` is missing")]
    Missing(String),
    #[error("`{field}` is {found:?}; expected {expected}")]
    Type {
        field: String,
        found: ElementType,
        expected: &'static str,
    },
    #[error("`{field}`: {reason}")]
    Value { field: String, reason: String },
    #[error("malformed BSON: {0}")]
    Bson(#[from] bson::raw::Error),
}

pub(super) fn type_error(
    field: impl Into<String>,
    v: RawBsonRef<'_>,
    expected: &'static str,
) -> DecodeError {
    DecodeError::Type {
        field: field.into(),
        found: v.element_type(),
        expected,
    }
}

/// A count, stored as Int64 but accepted as Int32 or an integral Double too,
/// in case someone rewrote the document.
pub(super) fn count_of(v: RawBsonRef<'_>) -> Option<u64> {
    match v {
        RawBsonRef::Int64(n) => u64::try_from(n).ok(),
        RawBsonRef::Int32(n) => u64::try_from(n).ok(),
        RawBsonRef::Double(f) if f.fract() == 0.0 && (0.0..1.8e19).contains(&f) => Some(f as u64),
        _ => None,
    }
}

fn number_of(v: RawBsonRef<'_>) -> Option<f64> {
    match v {
        RawBsonRef::Double(f) => Some(f),
        RawBsonRef::Int32(n) => Some(f64::from(n)),
        RawBsonRef::Int64(n) => Some(n as f64),
        _ => None,
    }
}

pub(super) fn decode_slot(
    v: RawBsonRef<'_>,
    path: &dyn Fn() -> String,
) -> Result<Slot, DecodeError> {
    let RawBsonRef::Document(d) = v else {
        return Err(type_error(path(), v, "a slot document"));
    };
    let field = |name: &str| -> Result<RawBsonRef<'_>, DecodeError> {
        d.get(name)?
            .ok_or_else(|| DecodeError::Missing(format!("{}.{name}", path())))
    };
    let num = |name: &str| -> Result<f64, DecodeError> {
        let v = field(name)?;
        number_of(v).ok_or_else(|| type_error(format!("{}.{name}", path()), v, "a number"))
    };
    let last = d.get("last")?;
    let mut slot = match d.get("n")? {
        Some(n) => {
            let n = count_of(n).ok_or_else(|| type_error(format!("{}.n", path()), n, "a count"))?;
            Slot::summary(n, num("sum")?, num("min")?, num("max")?)
        }
        // A minute of only a last sample (a cumulative counter's baseline)
        // in a document an upsert created rather than pre-allocation:
        // its statement set `last` and nothing else.
        None if last.is_some() && no_summary(d)? => Slot::EMPTY,
        None => return Err(DecodeError::Missing(format!("{}.n", path()))),
    };
    // Absent in documents written before slots kept their last sample, and
    // in an hour document's running slot.
    if let Some(last) = last {
        if let Some((t, v)) = decode_last(last, &|| format!("{}.last", path()))? {
            slot.last_ms = t;
            slot.last = v;
        }
    }
    Ok(slot)
}

/// Whether a slot without `n` has none of the summary's other fields.
fn no_summary(d: &RawDocument) -> Result<bool, DecodeError> {
    for name in ["sum", "min", "max"] {
        if d.get(name)?.is_some() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A slot's `last: {t, v}`: the sample's Unix-ms time and value; none when
/// `t` is the empty slot's [`NO_LAST_MS`].
fn decode_last(
    v: RawBsonRef<'_>,
    path: &dyn Fn() -> String,
) -> Result<Option<(i64, f64)>, DecodeError> {
    let RawBsonRef::Document(d) = v else {
        return Err(type_error(path(), v, "a {t, v} document"));
    };
    let field = |name: &str| -> Result<RawBsonRef<'_>, DecodeError> {
        d.get(name)?
            .ok_or_else(|| DecodeError::Missing(format!("{}.{name}", path())))
    };
    let t = match field("t")? {
        RawBsonRef::Int64(t) => t,
        RawBsonRef::Int32(t) => i64::from(t),
        other => return Err(type_error(format!("{}.t", path()), other, "an Int64 time")),
    };
    let stale = matches!(d.get(STALE_FIELD)?, Some(RawBsonRef::Boolean(true)));
    let v = match field("v")? {
        RawBsonRef::Null if stale => stale_marker(),
        RawBsonRef::Null => f64::NAN,
        v => number_of(v).ok_or_else(|| type_error(format!("{}.v", path()), v, "a number"))?,
    };
    Ok((t != NO_LAST_MS).then_some((t, v)))
}

/// A numeric field name of `values` (a minute or an hour) below `limit`.
fn slot_index(key: &str, limit: usize, path: &dyn Fn() -> String) -> Result<i64, DecodeError> {
    match key.parse::<usize>() {
        Ok(i) if i < limit && (i == 0 || !key.starts_with('0')) => Ok(i as i64),
        _ => Err(DecodeError::Value {
            field: format!("{}.{key}", path()),
            reason: format!("not a slot name (0-{})", limit - 1),
        }),
    }
}

fn document_field<'a>(
    doc: &'a RawDocument,
    name: &str,
) -> Result<Option<&'a RawDocument>, DecodeError> {
    match doc.get(name)? {
        None => Ok(None),
        Some(RawBsonRef::Document(d)) => Ok(Some(d)),
        Some(v) => Err(type_error(name, v, "a document")),
    }
}

/// Which documents and slots a read wants; everything `decode` needs.
pub(super) struct ReadPlan<'a> {
    pub(super) query: &'a ReadQuery,
    /// `<source>|<metric>|`: every id of the series starts with it.
    pub(super) prefix: String,
    pub(super) writer: &'a str,
}

/// Slots read so far, as (bucket start, slot).
type Slots = Vec<(i64, Slot)>;

impl ReadPlan<'_> {
    fn in_range(&self, t: i64) -> bool {
        self.query.from <= t && t < self.query.to
    }

    pub(super) fn decode(&self, raw: &RawDocument) -> Result<DocRead, DecodeError> {
        let start = self.period_start(raw)?;
        let kind = decode_kind(raw)?;
        let watermark = self.watermark(raw)?;
        let mut slots = Slots::new();
        match (self.query.tier, self.query.resolution) {
            (Tier::Hour, Resolution::Day | Resolution::Hour) => {
                if let Some(v) = raw.get("total")? {
                    let mut total = decode_slot(v, &|| "total".into())?;
                    if let Some((t, v)) = minutes_last(raw)? {
                        total.see(t, v);
                    }
                    if !total.is_empty() && self.in_range(start) {
                        slots.push((start, total));
                    }
                }
            }
            (Tier::Day, Resolution::Day) => {
                if let Some(v) = raw.get("total")? {
                    self.push_slot(&mut slots, start, v, &|| "total".into())?;
                }
            }
            (Tier::Hour, Resolution::Minute) => self.hour_minutes(raw, start, &mut slots)?,
            (Tier::Day, res) => self.day_slots(raw, start, res, &mut slots)?,
        }
        // A document made by the fallback upsert has its slots in the order
        // they were first written, not in time order.
        slots.sort_by_key(|&(t, _)| t);
        Ok(DocRead {
            period_start: start,
            kind,
            watermark,
            slots,
        })
    }

    /// The period start from `t`, checked against the id.
    fn period_start(&self, raw: &RawDocument) -> Result<i64, DecodeError> {
        let q = self.query;
        let t = match raw.get("t")? {
            Some(RawBsonRef::DateTime(t)) => t.timestamp_millis(),
            Some(v) => return Err(type_error("t", v, "a date")),
            None => return Err(DecodeError::Missing("t".into())),
        };
        let period_ms = q.tier.period_s() * 1000;
        if t.rem_euclid(period_ms) != 0 {
            return Err(DecodeError::Value {
                field: "t".into(),
                reason: format!("{t} ms is not the start of a {} period", q.tier.as_str()),
            });
        }
        let start = t / 1000;
        // The id and `t` must name the same period, or the range scan could
        // return a document under the wrong time.
        let expected = period_key(q.tier, start).map(|k| format!("{}{k}", self.prefix));
        match raw.get("_id")? {
            Some(RawBsonRef::String(id)) if Some(id) == expected.as_deref() => Ok(start),
            other => Err(DecodeError::Value {
                field: "_id".into(),
                reason: format!("{other:?} does not match t = {start}"),
            }),
        }
    }

    /// This writer's watermark, 0 when it never wrote the document.
    fn watermark(&self, raw: &RawDocument) -> Result<u64, DecodeError> {
        let Some(w) = document_field(raw, "w")? else {
            return Ok(0);
        };
        match w.get(self.writer)? {
            None => Ok(0),
            Some(v) => {
                count_of(v).ok_or_else(|| type_error(format!("w.{}", self.writer), v, "a flush id"))
            }
        }
    }

    /// Adds the slot `v` at `bucket`, unless it is empty or out of range.
    fn push_slot(
        &self,
        out: &mut Slots,
        bucket: i64,
        v: RawBsonRef<'_>,
        path: &dyn Fn() -> String,
    ) -> Result<(), DecodeError> {
        let slot = decode_slot(v, path)?;
        if !slot.is_empty() && self.in_range(bucket) {
            out.push((bucket, slot));
        }
        Ok(())
    }

    /// The minute slots of an hour document.
    fn hour_minutes(
        &self,
        raw: &RawDocument,
        start: i64,
        out: &mut Slots,
    ) -> Result<(), DecodeError> {
        let Some(values) = document_field(raw, "values")? else {
            return Ok(());
        };
        for entry in values {
            let (key, v) = entry?;
            let m = slot_index(key, MINUTES, &|| "values".into())?;
            self.push_slot(out, start + m * MINUTE_S, v, &|| format!("values.{key}"))?;
        }
        Ok(())
    }

    /// The hour slots (`res` is `Hour`) or minute slots of a day document.
    fn day_slots(
        &self,
        raw: &RawDocument,
        start: i64,
        res: Resolution,
        out: &mut Slots,
    ) -> Result<(), DecodeError> {
        let Some(hours) = document_field(raw, "values")? else {
            return Ok(());
        };
        for entry in hours {
            let (hkey, v) = entry?;
            let h = slot_index(hkey, HOURS, &|| "values".into())?;
            let hour_start = start + h * HOUR_S;
            let RawBsonRef::Document(hour) = v else {
                return Err(type_error(format!("values.{hkey}"), v, "a document"));
            };
            if res == Resolution::Hour {
                if let Some(v) = hour.get("total")? {
                    self.push_slot(out, hour_start, v, &|| format!("values.{hkey}.total"))?;
                }
                continue;
            }
            // Hours wholly outside the range are not decoded.
            if hour_start + HOUR_S <= self.query.from || hour_start >= self.query.to {
                continue;
            }
            for entry in hour {
                let (mkey, v) = entry?;
                if mkey == "total" {
                    continue;
                }
                let m = slot_index(mkey, MINUTES, &|| format!("values.{hkey}"))?;
                let path = || format!("values.{hkey}.{mkey}");
                self.push_slot(out, hour_start + m * MINUTE_S, v, &path)?;
            }
        }
        Ok(())
    }
}

/// The newest last sample of an hour document's minutes: its running
/// slot's, which is not stored (see `documents`).
fn minutes_last(raw: &RawDocument) -> Result<Option<(i64, f64)>, DecodeError> {
    let Some(values) = document_field(raw, "values")? else {
        return Ok(None);
    };
    let mut newest = Slot::EMPTY;
    for entry in values {
        let (key, v) = entry?;
        let RawBsonRef::Document(minute) = v else {
            return Err(type_error(format!("values.{key}"), v, "a slot document"));
        };
        if let Some(last) = minute.get("last")? {
            if let Some((t, v)) = decode_last(last, &|| format!("values.{key}.last"))? {
                newest.see(t, v);
            }
        }
    }
    Ok(newest.last_sample())
}

/// `k`: absent until the first write.
fn decode_kind(raw: &RawDocument) -> Result<Option<SampleKind>, DecodeError> {
    match raw.get("k")? {
        None | Some(RawBsonRef::Null) => Ok(None),
        Some(RawBsonRef::String(s)) => {
            kind_from_str(s)
                .map(Some)
                .ok_or_else(|| DecodeError::Value {
                    field: "k".into(),
                    reason: format!("unknown kind {s:?}"),
                })
        }
        Some(v) => Err(type_error("k", v, "a kind string")),
    }
}

pub(super) fn kind_from_str(s: &str) -> Option<SampleKind> {
    [
        SampleKind::Gauge,
        SampleKind::DeltaCounter,
        SampleKind::CumulativeCounter,
    ]
    .into_iter()
    .find(|k| k.as_str() == s)
}
