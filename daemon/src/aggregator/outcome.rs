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
    /// When set, how many rejections this outcome lists, in place of the
    /// cap its callers pass: a chunk folded out of request order keeps
    /// more, to be put back in order and capped as it is merged (see
    /// `aggregator::folding`).
    pub(super) detail_cap: Option<usize>,
}

impl IngestOutcome {
    /// Refuses all of `b`'s samples, for checks made before the aggregator.
    pub fn reject_series(
        &mut self,
        cap: usize,
        b: &SeriesBatch<'_>,
        reason: RejectReason,
        detail: impl FnOnce() -> String,
    ) {
        let count = b.values.len().max(b.timestamps_ms.len()) as u64;
        self.reject(cap, b, None, count, reason, detail);
    }

    /// Refuses `count` samples a front door dropped while turning its
    /// protocol's request into a `tally.v1` one: they have no place in that
    /// request, so their rejection carries `u32::MAX` indices.
    pub fn reject_unplaced(
        &mut self,
        cap: usize,
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
        self.reject(cap, &nowhere, None, count, reason, detail);
    }

    /// Adds `other`'s counts and rejections to these, keeping at most `cap`
    /// rejections.
    pub fn merge(&mut self, other: IngestOutcome, cap: usize) {
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
        let room = cap.saturating_sub(self.rejections.len());
        self.rejections_truncated |= other.rejections_truncated || other.rejections.len() > room;
        self.rejections
            .extend(other.rejections.into_iter().take(room));
    }

    pub(super) fn reject(
        &mut self,
        cap: usize,
        b: &SeriesBatch<'_>,
        sample_index: Option<u32>,
        count: u64,
        reason: RejectReason,
        detail: impl FnOnce() -> String,
    ) {
        self.rejected += count;
        self.rejected_by_reason[reason.index()] += count;
        if self.rejections.len() < self.detail_cap.unwrap_or(cap) {
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
