//! What a Prometheus remote-write 1.0 request means in Tally's model.
//!
//! - **Source**: the first of `remote_write.source_labels` (default
//!   `instance`) present on the series; that label is taken off the series'
//!   labels, as it is the series' source (PromQL shows it as `instance`, see
//!   `promql::names`). A series with
//!   none is refused (`missing_source`), the rest of the request kept.
//! - **Metric**: `__name__`; every other label is kept as it is.
//! - **Kind**: remote-write 1.0 carries no types with the samples. When the
//!   same request carries metadata for the series' family, it decides:
//!   counters, and a histogram's or summary's `_count`, `_sum` and `_bucket`,
//!   are cumulative counters, the rest gauges. Otherwise the naming
//!   conventions decide: a name ending in `_total`, `_count`, `_sum` or
//!   `_bucket` is a cumulative counter, any other a gauge. (Prometheus sends
//!   metadata in requests of their own; what they say is kept in the
//!   daemon's [`MetadataBook`], which decides the kind of the families it
//!   describes in later requests too, and gives `/api/v1/metadata` its
//!   type, help and unit.)
//! - **A kind once taken stays**: where a family's metadata says otherwise
//!   than the series' name, a series the daemon holds keeps the kind it
//!   has, whichever way the next request says it. A series typed by
//!   metadata and later sent without it, or known by its name before the
//!   metadata came, is taken as the kind it is, not refused
//!   `kind_conflict` (which Prometheus would drop the batch over). Only
//!   such series are looked up.
//! - **Staleness markers** (the NaN Prometheus writes when a series
//!   disappears) are kept as samples: the minute's last sample, which ends
//!   the series at its time for instant selectors (see `promql::select`)
//!   and enters no aggregate.
//!
//! The request is read straight from its bytes into the view admission
//! reads (`parse`), with no owned message on the way.

mod config;
mod fast;
mod parse;

use hashbrown::HashMap;
use tally_proto::prometheus as rw;
use tally_proto::v1 as pb;

pub use config::RemoteWriteConfig;
pub use parse::{Parse, ParseError};

use crate::metadata::{FamilyType, MetadataBook};

/// The kind of a series the daemon holds: (source, metric, labels).
pub type KnownKind<'a> = &'a (dyn Fn(&str, &str, &[(&str, &str)]) -> Option<pb::SampleKind> + Sync);

const COUNTER_SUFFIXES: [&str; 4] = ["_total", "_count", "_sum", "_bucket"];

/// A `MetricMetadata.type` as sent (unknown values as `Unknown`).
fn family_type_of(t: i32) -> FamilyType {
    use rw::metric_metadata::MetricType as T;
    match T::try_from(t).unwrap_or(T::Unknown) {
        T::Counter => FamilyType::Counter,
        T::Gauge => FamilyType::Gauge,
        T::Histogram => FamilyType::Histogram,
        T::Gaugehistogram => FamilyType::GaugeHistogram,
        T::Summary => FamilyType::Summary,
        T::Info => FamilyType::Info,
        T::Stateset => FamilyType::Stateset,
        T::Unknown => FamilyType::Unknown,
    }
}

/// How the series of one metric name take their kind, given what the
/// family's metadata (the request's or the book's) says of it: that,
/// else the name; but where the two disagree, the kind of the series in
/// memory when there is one. Decided once per name in a request, as a
/// request repeats a few names over thousands of series.
#[derive(Debug, Clone, Copy)]
enum KindRule {
    /// Metadata and name agree, or only the name speaks.
    Is(pb::SampleKind),
    /// They disagree: the series held keeps its kind; a new one takes
    /// this, the metadata's.
    HeldElse(pb::SampleKind),
}

impl KindRule {
    fn of(name: &str, by_metadata: Option<pb::SampleKind>) -> KindRule {
        let by_name = kind_by_name(name);
        match by_metadata {
            None => KindRule::Is(by_name),
            Some(said) if said == by_name => KindRule::Is(said),
            Some(said) => KindRule::HeldElse(said),
        }
    }

    /// A series' kind; `known` (a look into memory) is asked only where
    /// the rule needs it.
    fn kind(self, known: impl FnOnce() -> Option<pb::SampleKind>) -> pb::SampleKind {
        match self {
            KindRule::Is(kind) => kind,
            KindRule::HeldElse(said) => known().unwrap_or(said),
        }
    }
}

/// A series' kind from its family's metadata, when the request or the book
/// has it.
fn kind_by_metadata(
    name: &str,
    types: &HashMap<&str, FamilyType>,
    book: &MetadataBook,
) -> Option<pb::SampleKind> {
    let counter = pb::SampleKind::CumulativeCounter;
    let described = |family: &str| types.get(family).copied().or_else(|| book.kind(family));
    if let Some(t) = described(name) {
        return Some(match t {
            FamilyType::Counter => counter,
            _ => pb::SampleKind::Gauge,
        });
    }
    for suffix in ["_count", "_sum", "_bucket"] {
        let family = name.strip_suffix(suffix).and_then(described);
        match family {
            Some(FamilyType::Histogram | FamilyType::Summary) => return Some(counter),
            Some(_) => return Some(pb::SampleKind::Gauge),
            None => {}
        }
    }
    None
}

/// A series' kind by the naming conventions.
fn kind_by_name(name: &str) -> pb::SampleKind {
    if COUNTER_SUFFIXES.iter().any(|s| name.ends_with(s)) {
        pb::SampleKind::CumulativeCounter
    } else {
        pb::SampleKind::Gauge
    }
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;
    use crate::aggregator::{IngestOutcome, RejectReason};
    use crate::ingest::builder::Budget;
    use crate::model::STALE_NAN_BITS as STALE_NAN;

    /// The kind of a series named `name`, the way a parse decides it.
    fn series_kind(
        name: &str,
        types: &HashMap<&str, FamilyType>,
        book: &MetadataBook,
        known: impl FnOnce() -> Option<pb::SampleKind>,
    ) -> pb::SampleKind {
        KindRule::of(name, kind_by_metadata(name, types, book)).kind(known)
    }

    fn series(labels: &[(&str, &str)], samples: &[(i64, f64)]) -> rw::TimeSeries {
        rw::TimeSeries {
            labels: labels
                .iter()
                .map(|(n, v)| rw::Label {
                    name: (*n).into(),
                    value: (*v).into(),
                })
                .collect(),
            samples: samples
                .iter()
                .map(|(t, v)| rw::Sample {
                    timestamp: *t,
                    value: *v,
                })
                .collect(),
        }
    }

    /// Parses `req` as its sender encodes it; the view back in owned form.
    fn convert(
        req: &rw::WriteRequest,
        cfg: &RemoteWriteConfig,
        book: &MetadataBook,
        cap: usize,
        budget: Budget,
        known: KnownKind<'_>,
    ) -> Result<(pb::PushRequest, IngestOutcome), ParseError> {
        let bytes = req.encode_to_vec();
        let p = Parse {
            cfg,
            book,
            cap,
            budget,
            known,
        };
        p.view(&bytes).map(|(v, out)| (v.to_request(), out))
    }

    const BUDGET: Budget = Budget {
        samples: 1000,
        bytes: 1 << 20,
    };

    #[test]
    fn source_comes_off_the_labels_and_stale_markers_are_kept() {
        let req = rw::WriteRequest {
            timeseries: vec![
                series(
                    &[
                        ("__name__", "node_cpu_seconds_total"),
                        ("cpu", "0"),
                        ("instance", "h1"),
                        ("mode", "idle"),
                    ],
                    &[(1000, 5.0), (2000, f64::from_bits(STALE_NAN))],
                ),
                series(&[("__name__", "up")], &[(1000, 1.0)]),
                series(&[("instance", "h1")], &[(1000, 1.0), (2000, 2.0)]),
            ],
            metadata: vec![],
        };
        let (request, refused) = convert(
            &req,
            &RemoteWriteConfig::default(),
            &MetadataBook::new(),
            10,
            BUDGET,
            &|_, _, _| None,
        )
        .unwrap();
        assert_eq!(request.sources.len(), 1);
        let s = &request.sources[0];
        assert_eq!(s.source, "h1");
        assert_eq!(s.series[0].metric, "node_cpu_seconds_total");
        let bits: Vec<u64> = s.series[0].values.iter().map(|v| v.to_bits()).collect();
        assert_eq!(bits, [5.0f64.to_bits(), STALE_NAN]);
        assert_eq!(s.series[0].kind, pb::SampleKind::CumulativeCounter as i32);
        let names: Vec<&str> = s.series[0].labels.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["cpu", "mode"]);
        assert_eq!(refused.rejected, 3);
        assert_eq!(
            refused.rejected_by_reason[RejectReason::MissingSource as usize],
            1
        );
        assert_eq!(
            refused.rejected_by_reason[RejectReason::InvalidPoint as usize],
            2
        );
    }

    #[test]
    fn kinds_follow_metadata_then_names() {
        use rw::metric_metadata::MetricType as T;
        let meta = |fam: &str, t: T| rw::MetricMetadata {
            r#type: t as i32,
            metric_family_name: fam.into(),
            ..Default::default()
        };
        let req = rw::WriteRequest {
            timeseries: vec![],
            metadata: vec![
                meta("requests", T::Counter),
                meta("lat", T::Histogram),
                meta("temp_sum", T::Gauge),
            ],
        };
        let types: HashMap<&str, FamilyType> = req
            .metadata
            .iter()
            .map(|m| (m.metric_family_name.as_str(), family_type_of(m.r#type)))
            .collect();
        let c = pb::SampleKind::CumulativeCounter;
        let g = pb::SampleKind::Gauge;
        let none = MetadataBook::new();
        let kind = |name| series_kind(name, &types, &none, || None);
        assert_eq!(kind("requests"), c);
        assert_eq!(kind("lat_bucket"), c);
        assert_eq!(kind("lat"), g);
        assert_eq!(kind("temp_sum"), g);
        assert_eq!(kind("x_total"), c);
        assert_eq!(kind("y_bucket"), c);
        assert_eq!(kind("node_load1"), g);
    }

    /// Prometheus sends metadata in requests of their own: what one said
    /// decides the kinds of later requests, and is there for the API.
    #[test]
    fn metadata_of_an_earlier_request_decides_later_kinds() {
        use rw::metric_metadata::MetricType as T;
        let book = MetadataBook::new();
        let meta = rw::WriteRequest {
            timeseries: vec![],
            metadata: vec![rw::MetricMetadata {
                r#type: T::Gauge as i32,
                metric_family_name: "queue_total".into(),
                help: "Items queued.".into(),
                unit: "".into(),
            }],
        };
        let unknown: KnownKind<'_> = &|_, _, _| None;
        convert(
            &meta,
            &RemoteWriteConfig::default(),
            &book,
            10,
            BUDGET,
            unknown,
        )
        .unwrap();
        assert_eq!(&*book.get("queue_total").unwrap().help, "Items queued.");
        let req = rw::WriteRequest {
            timeseries: vec![series(
                &[("__name__", "queue_total"), ("instance", "h1")],
                &[(1000, 3.0)],
            )],
            metadata: vec![],
        };
        let (request, _) = convert(
            &req,
            &RemoteWriteConfig::default(),
            &book,
            10,
            BUDGET,
            unknown,
        )
        .unwrap();
        let s = &request.sources[0].series[0];
        assert_eq!(
            s.kind,
            pb::SampleKind::Gauge as i32,
            "not a counter by its name"
        );
    }

    #[test]
    fn a_request_past_its_budget_is_full() {
        let req = rw::WriteRequest {
            timeseries: vec![series(
                &[("__name__", "a"), ("instance", "h")],
                &[(1, 1.0); 5],
            )],
            metadata: vec![],
        };
        let budget = Budget {
            samples: 4,
            bytes: 1 << 20,
        };
        assert!(convert(
            &req,
            &RemoteWriteConfig::default(),
            &MetadataBook::new(),
            10,
            budget,
            &|_, _, _| None,
        )
        .is_err());
    }

    /// Where metadata and name disagree, a series in memory keeps the kind
    /// it has, whichever way it is sent; one not in memory takes what the
    /// metadata says; where they agree, nothing is looked up.
    #[test]
    fn a_series_keeps_its_kind_whichever_way_it_is_sent() {
        use rw::metric_metadata::MetricType as T;
        let with_meta: HashMap<&str, FamilyType> =
            [("queue_total", family_type_of(T::Gauge as i32))]
                .into_iter()
                .collect();
        let without: HashMap<&str, FamilyType> = HashMap::new();
        let (c, g) = (pb::SampleKind::CumulativeCounter, pb::SampleKind::Gauge);
        // Typed by the request's metadata (which `convert` puts in the
        // book), then sent without: in memory it stays a gauge.
        let book = MetadataBook::new();
        book.record("queue_total", FamilyType::Gauge, "", "");
        assert_eq!(series_kind("queue_total", &with_meta, &book, || None), g);
        assert_eq!(series_kind("queue_total", &without, &book, || Some(g)), g);
        // Known by its name first, then typed otherwise, by the request or
        // by metadata sent on its own: it stays a counter.
        let fresh = MetadataBook::new();
        assert_eq!(series_kind("queue_total", &without, &fresh, || None), c);
        assert_eq!(
            series_kind("queue_total", &with_meta, &fresh, || Some(c)),
            c
        );
        fresh.record("queue_total", FamilyType::Gauge, "", "");
        assert_eq!(series_kind("queue_total", &without, &fresh, || Some(c)), c);
        // Not in memory: the metadata decides.
        assert_eq!(series_kind("queue_total", &without, &fresh, || None), g);
        // Agreeing metadata, or none: never looked up.
        let agree: HashMap<&str, FamilyType> =
            [("hits_total", FamilyType::Counter)].into_iter().collect();
        let lookup = || -> Option<pb::SampleKind> { panic!("looked up") };
        assert_eq!(series_kind("hits_total", &agree, &book, lookup), c);
        assert_eq!(series_kind("node_load1", &without, &book, lookup), g);
    }
}
