//! Reading minute counts (`n`) out of hour and day documents fetched with a
//! projection of those counts only, for the one-time move of counters'
//! `first_seen` off their baseline minute (`baselines.rs`). Pure: no I/O.
//!
//! A minute whose slot is absent, or has no `n` (a document the fallback
//! upsert made, whose baseline statement set `last` only), counts 0, as a
//! read sees it. A count of the wrong type is "unreadable": the pass then
//! leaves the entry as it is rather than guess.

use bson::raw::{RawBsonRef, RawDocument, RawDocumentBuf};
use bson::Document;

use super::decode::count_of;
use super::documents::{HOURS, MINUTES};
use crate::model::{Tier, HOUR_S, MINUTE_S};

/// The path of the minute starting at `t` in its `tier` document, from
/// the document's root: `values.<M>` or `values.<H>.<M>`.
pub(super) fn minute_path(tier: Tier, t: i64) -> String {
    let m = t.rem_euclid(HOUR_S) / MINUTE_S;
    match tier {
        Tier::Hour => format!("values.{m}"),
        Tier::Day => {
            let h = t.rem_euclid(Tier::Day.period_s()) / HOUR_S;
            format!("values.{h}.{m}")
        }
    }
}

/// A projection of `t` and the `n` of each minute in `minutes` (starts, in
/// any order; repeats are merged by the document).
pub(super) fn count_projection(tier: Tier, minutes: impl IntoIterator<Item = i64>) -> Document {
    let mut p = Document::new();
    p.insert("t", 1);
    for t in minutes {
        p.insert(format!("{}.n", minute_path(tier, t)), 1);
    }
    p
}

/// A projection of `t` and every minute's `n` of a `tier` document.
pub(super) fn all_counts_projection(tier: Tier) -> Document {
    let hours = match tier {
        Tier::Hour => 1,
        Tier::Day => HOURS as i64,
    };
    let minutes = (0..hours * MINUTES as i64).map(|i| i * MINUTE_S);
    count_projection(tier, minutes)
}

/// The `n` of the minute starting at `t` in `doc`, a `tier` document that
/// holds it: 0 when the slot or its `n` is absent, None when unreadable.
pub(super) fn count_at(doc: &RawDocument, tier: Tier, t: i64) -> Option<u64> {
    let path = minute_path(tier, t);
    let mut at = doc;
    for name in path.split('.') {
        match at.get(name) {
            Ok(Some(RawBsonRef::Document(d))) => at = d,
            Ok(None) => return Some(0),
            _ => return None,
        }
    }
    match at.get("n") {
        Ok(None) => Some(0),
        Ok(Some(n)) => count_of(n),
        Err(_) => None,
    }
}

/// The period start of a `tier` document, from its `t`; None when it is
/// missing or not on a period boundary.
pub(super) fn period_of(doc: &RawDocument, tier: Tier) -> Option<i64> {
    let Ok(Some(RawBsonRef::DateTime(t))) = doc.get("t") else {
        return None;
    };
    let ms = t.timestamp_millis();
    let period_ms = tier.period_s() * 1000;
    (ms.rem_euclid(period_ms) == 0).then_some(ms / 1000)
}

/// The start of the first minute after `after` and up to `through` with a
/// sample, in `docs` (one series' `tier` documents in time order, each
/// with every minute's `n`). None when there is none in them, or a
/// document or count on the way is unreadable.
pub(super) fn first_counted(
    docs: &[RawDocumentBuf],
    tier: Tier,
    after: i64,
    through: i64,
) -> Option<i64> {
    for doc in docs {
        let start = period_of(doc, tier)?;
        if start > through {
            return None;
        }
        let minutes = tier.period_s() / MINUTE_S;
        for i in 0..minutes {
            let t = start + i * MINUTE_S;
            if t <= after {
                continue;
            }
            if t > through {
                return None;
            }
            if count_at(doc, tier, t)? > 0 {
                return Some(t);
            }
        }
    }
    None
}

#[cfg(test)]
#[path = "baseline_scan_tests.rs"]
mod tests;
