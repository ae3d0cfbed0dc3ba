//! Builds the `tally.v1.PushRequest` the owned OTLP conversion makes (of
//! OTLP/HTTP JSON bodies, and as the oracle the OTLP view parser is tested
//! against): its series grouped by source, and the points the conversion
//! itself had to refuse counted in an [`IngestOutcome`] so they reach the
//! same metrics and answers as the aggregator's rejections. The [`Budget`]
//! every protocol's reading is held to lives here too. (OTLP protobuf,
//! remote-write, line protocol and Graphite build no request: they are
//! read into a view, `view/build.rs`.)

use hashbrown::HashMap;
use tally_proto::v1 as pb;

use crate::aggregator::{IngestOutcome, RejectReason};

/// A converted request under construction.
#[derive(Default)]
pub struct RequestBuilder {
    req: pb::PushRequest,
    /// Index in `req.sources` of each source seen.
    sources: HashMap<String, usize>,
    refused: IngestOutcome,
    /// Samples added, checked against `ingest.max_batch_samples` by
    /// admission.
    samples: usize,
    /// The ordinal of each series, by source index then series index.
    ordinals: Vec<Vec<SeriesOrdinal>>,
    next: SeriesOrdinal,
    /// The source of the previous push: points come grouped by source, so
    /// this saves hashing the source name for each.
    last: Option<usize>,
    /// Bytes of names and labels held, against `budget.bytes`.
    bytes: usize,
    budget: Budget,
}

/// What one converted request may hold, so that no input makes conversion
/// cost more than a bounded amount of memory: a histogram with thousands of
/// buckets and dozens of labels multiplies its bytes on the wire.
#[derive(Debug, Clone, Copy, Default)]
pub struct Budget {
    /// `ingest.max_batch_samples`.
    pub samples: usize,
    /// Bytes of metric names and labels.
    pub bytes: usize,
}

/// The converted request would exceed its [`Budget`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

/// What each series costs beyond its names, for [`Budget::bytes`].
const SERIES_OVERHEAD: usize = 64;

/// Where a series landed in the built request: the flattened order in
/// which series were added, which the front door uses to map rejections back
/// to its own points.
pub type SeriesOrdinal = u32;

impl RequestBuilder {
    /// A builder keeping at most `cap` rejection details, within `budget`.
    pub fn new(cap: usize, budget: Budget) -> RequestBuilder {
        RequestBuilder {
            refused: IngestOutcome::listing(cap),
            budget,
            ..RequestBuilder::default()
        }
    }

    /// Adds one series of `source`; `Full` once the request would exceed
    /// its budget (the caller then refuses the whole request).
    pub fn push(&mut self, source: &str, series: pb::SeriesSamples) -> Result<SeriesOrdinal, Full> {
        let bytes = SERIES_OVERHEAD
            + series.metric.len()
            + series
                .labels
                .iter()
                .map(|l| l.name.len() + l.value.len() + SERIES_OVERHEAD / 2)
                .sum::<usize>();
        self.samples += series.values.len();
        self.bytes += bytes;
        if self.samples > self.budget.samples || self.bytes > self.budget.bytes {
            return Err(Full);
        }
        let cached = self
            .last
            .filter(|&at| self.req.sources[at].source == source);
        let at = match cached.or_else(|| self.sources.get(source).copied()) {
            Some(at) => at,
            None => {
                let at = self.req.sources.len();
                self.req.sources.push(pb::SourceBatch {
                    source: source.to_owned(),
                    ..Default::default()
                });
                self.sources.insert(source.to_owned(), at);
                self.ordinals.push(Vec::new());
                at
            }
        };
        self.last = Some(at);
        let ordinal = self.next;
        self.next += 1;
        self.req.sources[at].series.push(series);
        self.ordinals[at].push(ordinal);
        Ok(ordinal)
    }

    /// Counts `count` samples the conversion refused.
    pub fn refuse(&mut self, count: u64, reason: RejectReason, detail: impl FnOnce() -> String) {
        self.refused.reject_unplaced(count, reason, detail);
    }

    /// Samples added so far.
    pub fn samples(&self) -> usize {
        self.samples
    }

    /// The request, what the conversion refused, and the ordinals.
    pub fn finish(self) -> Converted {
        Converted {
            request: self.req,
            refused: self.refused,
            ordinals: self.ordinals,
        }
    }
}

/// A protocol's request in `tally.v1` form.
pub struct Converted {
    pub request: pb::PushRequest,
    /// Samples the conversion refused.
    pub refused: IngestOutcome,
    /// `ordinals[source_index][series_index]`: the order in which the series
    /// was added, so a rejection finds the point it came from.
    pub ordinals: Vec<Vec<SeriesOrdinal>>,
}
