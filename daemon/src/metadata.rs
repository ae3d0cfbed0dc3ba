//! What agents say their metrics are: each metric family's type, help text
//! and unit, as remote-write metadata and OTLP descriptions carry them, so
//! the Prometheus API's `/api/v1/metadata` (and Grafana's metric browser)
//! shows the exporter's own words.
//!
//! The book is kept in memory only, and bounded: agents repeat it
//! (Prometheus sends its metadata every minute by default, OTLP with every
//! request), so a restarted daemon has it again within a minute, and
//! nothing an agent sends can make it grow past [`MAX_FAMILIES`] entries of
//! at most [`MAX_TEXT_BYTES`] each. Families beyond the cap are counted in
//! `tally_metadata_dropped_total` and keep the description the catalog gives
//! them.

use std::sync::Arc;

use hashbrown::HashMap;
use parking_lot::RwLock;

/// Most metric families described at once.
pub const MAX_FAMILIES: usize = 100_000;
/// Longest help text or unit kept; longer ones are cut at a character
/// boundary.
pub const MAX_TEXT_BYTES: usize = 1_024;

/// A metric family's type as Prometheus names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FamilyType {
    Counter,
    Gauge,
    Histogram,
    GaugeHistogram,
    Summary,
    Info,
    Stateset,
    Unknown,
}

impl FamilyType {
    /// The name `/api/v1/metadata` gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            FamilyType::Counter => "counter",
            FamilyType::Gauge => "gauge",
            FamilyType::Histogram => "histogram",
            FamilyType::GaugeHistogram => "gaugehistogram",
            FamilyType::Summary => "summary",
            FamilyType::Info => "info",
            FamilyType::Stateset => "stateset",
            FamilyType::Unknown => "unknown",
        }
    }
}

/// One family's description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Family {
    pub kind: FamilyType,
    pub help: Arc<str>,
    pub unit: Arc<str>,
}

/// The described families, by family name (`http_requests_total`, or a
/// histogram's `http_request_duration_seconds` without its suffixes).
#[derive(Debug, Default)]
pub struct MetadataBook {
    families: RwLock<HashMap<Box<str>, Family>>,
}

fn cut(s: &str) -> &str {
    if s.len() <= MAX_TEXT_BYTES {
        return s;
    }
    let mut end = MAX_TEXT_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl MetadataBook {
    pub fn new() -> MetadataBook {
        MetadataBook::default()
    }

    /// Records what an agent says of `family`. Unchanged descriptions (the
    /// usual case: agents repeat them) take only a read lock.
    pub fn record(&self, family: &str, kind: FamilyType, help: &str, unit: &str) {
        if family.is_empty() {
            return;
        }
        let (help, unit) = (cut(help), cut(unit));
        let same = |f: &Family| f.kind == kind && &*f.help == help && &*f.unit == unit;
        if self.families.read().get(family).is_some_and(same) {
            return;
        }
        let mut families = self.families.write();
        if families.len() >= MAX_FAMILIES && !families.contains_key(family) {
            metrics::counter!("tally_metadata_dropped_total").increment(1);
            return;
        }
        families.insert(
            family.into(),
            Family {
                kind,
                help: help.into(),
                unit: unit.into(),
            },
        );
    }

    /// What is known of `family` (for tests: the daemon reads a family's
    /// type with [`MetadataBook::kind`] and a series' with `of_series`).
    #[cfg(test)]
    pub(crate) fn get(&self, family: &str) -> Option<Family> {
        self.families.read().get(family).cloned()
    }

    /// The type of `family`, when it is described.
    pub fn kind(&self, family: &str) -> Option<FamilyType> {
        self.families.read().get(family).map(|f| f.kind)
    }

    /// The family a series name belongs to and its description: the name
    /// itself, or for a histogram's or summary's `_bucket`, `_sum` and
    /// `_count` series the name without the suffix.
    pub fn of_series(&self, name: &str) -> Option<(String, Family)> {
        let families = self.families.read();
        if let Some(f) = families.get(name) {
            return Some((name.to_string(), f.clone()));
        }
        ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
            let base = name.strip_suffix(suffix)?;
            let f = families.get(base)?;
            matches!(
                f.kind,
                FamilyType::Histogram | FamilyType::GaugeHistogram | FamilyType::Summary
            )
            .then(|| (base.to_string(), f.clone()))
        })
    }

    pub fn len(&self) -> usize {
        self.families.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_recorded_replaced_and_found_from_their_series() {
        let book = MetadataBook::new();
        book.record(
            "http_request_duration_seconds",
            FamilyType::Histogram,
            "Latency.",
            "seconds",
        );
        book.record("up", FamilyType::Gauge, "Up.", "");
        book.record("up", FamilyType::Gauge, "Target is up.", "");
        assert_eq!(book.len(), 2);
        assert_eq!(&*book.get("up").unwrap().help, "Target is up.");
        let (family, f) = book
            .of_series("http_request_duration_seconds_bucket")
            .unwrap();
        assert_eq!(family, "http_request_duration_seconds");
        assert_eq!(f.kind, FamilyType::Histogram);
        assert!(
            book.of_series("up_count").is_none(),
            "a gauge has no _count"
        );
        assert!(book.of_series("nothing").is_none());
    }

    #[test]
    fn texts_are_cut_and_the_book_is_bounded() {
        let book = MetadataBook::new();
        let long = "é".repeat(MAX_TEXT_BYTES);
        book.record("m", FamilyType::Counter, &long, "");
        let help = book.get("m").unwrap().help;
        assert!(help.len() <= MAX_TEXT_BYTES && help.chars().all(|c| c == 'é'));
        for i in 0..MAX_FAMILIES + 10 {
            book.record(&format!("f{i}"), FamilyType::Gauge, "", "");
        }
        assert_eq!(book.len(), MAX_FAMILIES);
        // A known family is still updated at the cap.
        book.record("m", FamilyType::Gauge, "now a gauge", "");
        assert_eq!(book.get("m").unwrap().kind, FamilyType::Gauge);
    }
}
