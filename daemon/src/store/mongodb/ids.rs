//! Document ids (`<source>|<metric>[{<labels>}]|<period key>`) and the checks that keep
//! them unambiguous. Every read and write goes through `_id` alone, so its
//! format, fixed-width and time-sortable within a series, lives in one place.

use chrono::{Datelike, Timelike};

use crate::model::{validate_metric, validate_stored_source, SeriesId, Tier};
use crate::store::StoreError;

/// Writer ids are `[A-Za-z0-9_-]{1,64}`: they become a field name.
const MAX_WRITER_ID_LEN: usize = 64;

/// Period starts whose key has a four-digit year: 0000-01-01T00:00Z and the
/// last second of 9999. Keys outside would not sort as time does.
pub(super) const MIN_KEYED_S: i64 = -62_167_219_200;
pub(super) const MAX_KEYED_S: i64 = 253_402_300_799;

/// The period part of an `_id`, or `None` outside years 0000–9999.
pub(super) fn period_key(tier: Tier, start: i64) -> Option<String> {
    if !(MIN_KEYED_S..=MAX_KEYED_S).contains(&start) {
        return None;
    }
    let t = chrono::DateTime::from_timestamp(start, 0)?;
    let (y, mo, d, h) = (t.year(), t.month(), t.day(), t.hour());
    Some(match tier {
        Tier::Hour => format!("{y:04}{mo:02}{d:02}{h:02}"),
        Tier::Day => format!("{y:04}{mo:02}{d:02}"),
    })
}

/// `source|metric|`, or `source|metric{labels}|` for a labelled series:
/// the series key ([`SeriesId::key`]), so an unlabelled series keeps the ids
/// it had before labels, and one series' periods stay adjacent.
pub(super) fn series_prefix(series: &SeriesId) -> String {
    let mut p = series.key();
    p.push('|');
    p
}

/// The `_id` of one document; `Invalid` for names or periods that have none.
pub(super) fn doc_id(series: &SeriesId, tier: Tier, start: i64) -> Result<String, StoreError> {
    if start.rem_euclid(tier.period_s()) != 0 {
        return Err(StoreError::Invalid(
            format!(
                "{series}: {} document start {start} is not on a period boundary",
                tier.as_str()
            )
            .into(),
        ));
    }
    let key = period_key(tier, start).ok_or_else(|| {
        StoreError::Invalid(
            format!(
                "{series}: {} document start {start} is outside the years 0000-9999",
                tier.as_str()
            )
            .into(),
        )
    })?;
    Ok(format!("{}{key}", series_prefix(series)))
}

/// The `|` separator is only unambiguous if names cannot contain it; the
/// ingest path validates names, this guards every other caller.
pub(super) fn check_series(series: &SeriesId) -> Result<(), StoreError> {
    // Rollup series (`@<group>`) come from the flush pipeline, not agents.
    validate_stored_source(&series.source)
        .map_err(|e| StoreError::Invalid(format!("source {:?} {e}", series.source).into()))?;
    validate_metric(&series.metric)
        .map_err(|e| StoreError::Invalid(format!("metric {:?} {e}", series.metric).into()))?;
    Ok(())
}

pub(super) fn check_writer_id(writer_id: &str) -> Result<(), StoreError> {
    let ok = !writer_id.is_empty()
        && writer_id.len() <= MAX_WRITER_ID_LEN
        && writer_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(StoreError::Invalid(
            format!(
            "writer id {writer_id:?}: expected 1-{MAX_WRITER_ID_LEN} characters of [A-Za-z0-9_-]"
        )
            .into(),
        ))
    }
}

/// Seconds as a BSON date (a period start, a first or last sighting).
/// Callers pass checked times; out-of-range ones saturate rather than wrap.
pub(super) fn bson_date(seconds: i64) -> bson::DateTime {
    bson::DateTime::from_millis(seconds.saturating_mul(1000))
}
