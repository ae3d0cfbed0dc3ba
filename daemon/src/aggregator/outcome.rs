//! What ingest reports back about a request: which samples were accepted,
//! which were refused and why. Every protocol front door turns an
//! [`IngestOutcome`] into its own answer (per-sample rejections, partial
//! success, counts).

use crate::model::{SampleKind, SeriesRef};

/// Why a sample (or a whole series group) was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectReason {
    InvalidSource,
    InvalidMetric,
    InvalidKind,
    NonFiniteValue,
    TooOld,
    TooFarAhead,
    LengthMismatch,
    KindConflict,
    OutOfOrder,
    NegativeDelta,
    SeriesLimit,
    /// The source declared a bad group list; checked by ingest.
    InvalidGroup,
    /// The request's token may not push for this source; checked by ingest.
    SourceNotAllowed,
    /// A finite value whose counter increase or minute sum would leave
    /// [`crate::model::MAX_SUM`].
    Overflow,
    /// A bad label name or value, a duplicate, too many labels, or a series
    /// key too long; checked by the protocol front door.
    InvalidLabel,
    /// The source tracks `ingest.max_series_per_source` series already.
    SourceSeriesLimit,
    /// OTLP, remote-write, InfluxDB line protocol, Graphite: no configured
    /// source attribute, label, tag or path component present.
    MissingSource,
    /// OTLP, remote-write: a point that cannot be read as samples;
    /// InfluxDB line protocol, Graphite: a line that cannot be parsed.
    InvalidPoint,
}

impl RejectReason {
    pub const ALL: [RejectReason; 18] = [
        RejectReason::InvalidSource,
        RejectReason::InvalidMetric,
        RejectReason::InvalidKind,
        RejectReason::NonFiniteValue,
        RejectReason::TooOld,
        RejectReason::TooFarAhead,
        RejectReason::LengthMismatch,
        RejectReason::KindConflict,
        RejectReason::OutOfOrder,
        RejectReason::NegativeDelta,
        RejectReason::SeriesLimit,
        RejectReason::InvalidGroup,
        RejectReason::SourceNotAllowed,
        RejectReason::Overflow,
        RejectReason::InvalidLabel,
        RejectReason::SourceSeriesLimit,
        RejectReason::MissingSource,
        RejectReason::InvalidPoint,
    ];

    /// Label value for `tally_samples_rejected_total{reason=…}`.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::InvalidSource => "invalid_source",
            RejectReason::InvalidMetric => "invalid_metric",
            RejectReason::InvalidKind => "invalid_kind",
            RejectReason::NonFiniteValue => "non_finite_value",
            RejectReason::TooOld => "too_old",
            RejectReason::TooFarAhead => "too_far_ahead",
            RejectReason::LengthMismatch => "length_mismatch",
            RejectReason::KindConflict => "kind_conflict",
            RejectReason::OutOfOrder => "out_of_order",
            RejectReason::NegativeDelta => "negative_delta",
            RejectReason::SeriesLimit => "series_limit",
            RejectReason::InvalidGroup => "invalid_group",
            RejectReason::SourceNotAllowed => "source_not_allowed",
            RejectReason::Overflow => "overflow",
            RejectReason::InvalidLabel => "invalid_label",
            RejectReason::SourceSeriesLimit => "source_series_limit",
            RejectReason::MissingSource => "missing_source",
            RejectReason::InvalidPoint => "invalid_point",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One rejected sample, or a whole series group when `sample_index` is None.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    pub source_index: u32,
    pub series_index: u32,
    pub sample_index: Option<u32>,
    pub reason: RejectReason,
    pub detail: String,
}

/// The samples of one series in a request, borrowed from the decoded message.
#[derive(Debug, Clone, Copy)]
pub struct SeriesBatch<'a> {
    pub source: &'a str,
    pub metric: &'a str,
    /// The label set's canonical encoding ([`crate::labels`]), already
    /// validated by the front door; empty when unlabelled.
    pub labels: &'a str,
    /// None when the client sent an unknown or unspecified kind.
    pub kind: Option<SampleKind>,
    pub timestamps_ms: &'a [i64],
    pub values: &'a [f64],
    /// A cumulative counter's start time per value (0 where unknown), or
    /// empty: see `tally.v1.SeriesSamples.start_times_ms`.
    pub start_times_ms: &'a [i64],
    /// Position in the request, echoed in rejections.
    pub source_index: u32,
    pub series_index: u32,
}

impl<'a> SeriesBatch<'a> {
    /// The series the group is of.
    #[inline]
    pub fn key(&self) -> SeriesRef<'a> {
        SeriesRef {
            source: self.source,
            metric: self.metric,
            labels: self.labels,
        }
    }
}

/// What happened to one request's samples.
///
/// Every rejection is counted; at most [`IngestOutcome::listing`]'s limit
/// are listed with their detail (`ingest.max_rejections_reported` for a
/// request), so that a request refused sample by sample costs a bounded
/// answer. The default lists none.
#[derive(Debug, Clone, Default)]
pub struct IngestOutcome {
    pub accepted: u64,
    pub rejected: u64,
    pub rejections: Vec<Rejection>,
    pub rejections_truncated: bool,
    /// Rejected sample counts, indexed like [`RejectReason::ALL`].
    pub rejected_by_reason: [u64; RejectReason::ALL.len()],
    /// Cumulative counters seen going down (a restart of the counted process).
    pub counter_resets: u64,
    /// Most rejections listed; the rest only counted.
    pub(super) limit: usize,
}

impl IngestOutcome {
    /// An outcome that lists up to `limit` rejections.
    pub fn listing(limit: usize) -> IngestOutcome {
        IngestOutcome {
            limit,
            ..IngestOutcome::default()
        }
    }

    /// Refuses all of `b`'s samples, for checks made before the aggregator.
    pub fn reject_series(
        &mut self,
        b: &SeriesBatch<'_>,
        reason: RejectReason,
        detail: impl FnOnce() -> String,
    ) {
        let count = b.values.len().max(b.timestamps_ms.len()) as u64;
        self.reject(b, None, count, reason, detail);
    }

    /// Refuses `count` samples a front door dropped while turning its
    /// protocol's request into a `tally.v1` one: they have no place in that
    /// request, so their rejection carries `u32::MAX` indices.
    pub fn reject_unplaced(
        &mut self,
        count: u64,
        reason: RejectReason,
        detail: impl FnOnce() -> String,
    ) {
        let nowhere = SeriesBatch {
            source: "",
            metric: "",
            labels: "",
            kind: None,
            timestamps_ms: &[],
            values: &[],
            start_times_ms: &[],
            source_index: u32::MAX,
            series_index: u32::MAX,
        };
        self.reject(&nowhere, None, count, reason, detail);
    }

    /// Adds `other`'s counts and rejections to these, listing no more than
    /// this outcome's limit.
    pub fn merge(&mut self, other: IngestOutcome) {
        self.accepted += other.accepted;
        self.rejected += other.rejected;
        self.counter_resets += other.counter_resets;
        for (mine, theirs) in self
            .rejected_by_reason
            .iter_mut()
            .zip(other.rejected_by_reason)
        {
            *mine += theirs;
        }
        let room = self.limit.saturating_sub(self.rejections.len());
        self.rejections_truncated |= other.rejections_truncated || other.rejections.len() > room;
        self.rejections
            .extend(other.rejections.into_iter().take(room));
    }

    pub(super) fn reject(
        &mut self,
        b: &SeriesBatch<'_>,
        sample_index: Option<u32>,
        count: u64,
        reason: RejectReason,
        detail: impl FnOnce() -> String,
    ) {
        self.rejected += count;
        self.rejected_by_reason[reason.index()] += count;
        if self.rejections.len() < self.limit {
            self.rejections.push(Rejection {
                source_index: b.source_index,
                series_index: b.series_index,
                sample_index,
                reason,
                detail: detail(),
            });
        } else {
            self.rejections_truncated = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refuse(out: &mut IngestOutcome, n: u32) {
        for i in 0..n {
            let b = SeriesBatch {
                source: "s",
                metric: "m",
                labels: "",
                kind: None,
                timestamps_ms: &[1],
                values: &[1.0],
                start_times_ms: &[],
                source_index: 0,
                series_index: i,
            };
            out.reject_series(&b, RejectReason::TooOld, || format!("group {i}"));
        }
    }

    #[test]
    fn an_outcome_lists_up_to_its_limit_and_counts_the_rest() {
        let mut out = IngestOutcome::listing(2);
        refuse(&mut out, 3);
        assert_eq!(out.rejected, 3);
        assert_eq!(out.rejected_by_reason[RejectReason::TooOld.index()], 3);
        let listed: Vec<u32> = out.rejections.iter().map(|r| r.series_index).collect();
        assert_eq!(listed, [0, 1]);
        assert!(out.rejections_truncated);

        let mut none = IngestOutcome::default();
        refuse(&mut none, 1);
        assert_eq!((none.rejected, none.rejections.len()), (1, 0));
        assert!(none.rejections_truncated);
    }

    #[test]
    fn a_merge_lists_no_more_than_the_outcome_merged_into_allows() {
        let mut request = IngestOutcome::listing(3);
        refuse(&mut request, 2);
        let mut part = IngestOutcome::listing(10);
        refuse(&mut part, 2);
        request.merge(part);
        assert_eq!(request.rejected, 4);
        assert_eq!(request.rejections.len(), 3);
        assert!(request.rejections_truncated);

        let mut roomy = IngestOutcome::listing(10);
        let mut full = IngestOutcome::listing(1);
        refuse(&mut full, 2);
        roomy.merge(full);
        assert_eq!(roomy.rejections.len(), 1);
        assert!(
            roomy.rejections_truncated,
            "what the part left out stays told"
        );
    }
}
