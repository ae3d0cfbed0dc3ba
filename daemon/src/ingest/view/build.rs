//! Builds a [`PushView`] straight from another protocol's request, so that
//! remote-write, line protocol and the rest reach admission the way
//! `tally.v1` does: every name and label borrowed from the request's own
//! (decompressed) bytes, every number appended to request-wide columns, and
//! no owned intermediate request on the way.
//!
//! A parser appends one series at a time: its labels and samples (and,
//! for a cumulative counter that says when it started, its start times)
//! into the columns, then [`ViewBuilder::end_series`] with its source, metric and
//! kind (or [`ViewBuilder::drop_series`] to take back what it appended).
//! Protocols interleave sources (a Prometheus shard mixes targets), while a
//! view holds each source's series together; since a series refers to its
//! columns by ranges, [`ViewBuilder::finish`] regroups series by source by
//! reordering the series table alone, in order of each source's first
//! appearance.

use hashbrown::HashMap;

use super::{PushView, Run, SeriesCols, SourceCols, ViewError};
use crate::aggregator::{IngestOutcome, RejectReason};
use crate::ingest::builder::{Budget, Full};
use crate::ingest::text::same;

/// Why a protocol's body did not become a view.
#[derive(Debug)]
pub enum ParseError {
    /// Its bytes are not the protocol's message.
    Wire(ViewError),
    /// It would exceed its [`Budget`].
    Full,
}

impl ParseError {
    /// Names the field a wire error happened in, as generated code does.
    pub(crate) fn at(self, message: &'static str, field: &'static str) -> ParseError {
        match self {
            ParseError::Wire(e) => ParseError::Wire(e.at(message, field)),
            full => full,
        }
    }
}

impl From<ViewError> for ParseError {
    fn from(e: ViewError) -> ParseError {
        ParseError::Wire(e)
    }
}

impl From<prost::DecodeError> for ParseError {
    fn from(e: prost::DecodeError) -> ParseError {
        ParseError::Wire(ViewError::Wire(e))
    }
}

impl From<Full> for ParseError {
    fn from(_: Full) -> ParseError {
        ParseError::Full
    }
}

/// What each series costs beyond its names, for [`Budget::bytes`] (as the
/// owned builder counts it, so both refuse the same requests).
const SERIES_OVERHEAD: usize = 64;

/// A [`PushView`] under construction.
pub struct ViewBuilder<'a> {
    view: PushView<'a>,
    /// Each series' source, as an index into `names`, in series order.
    source_of: Vec<u32>,
    names: Vec<&'a str>,
    index: HashMap<&'a str, u32>,
    /// The previous series' source: series mostly come grouped by source,
    /// so this saves hashing the name for each.
    last: Option<u32>,
    refused: IngestOutcome,
    budget: Budget,
    samples: usize,
    bytes: usize,
}

/// Where the series being appended starts in each column.
#[derive(Debug, Clone, Copy)]
pub struct Mark {
    labels: usize,
    samples: usize,
    start_times: usize,
}

impl<'a> ViewBuilder<'a> {
    /// A builder keeping at most `cap` rejection details, within `budget`.
    pub fn new(cap: usize, budget: Budget) -> ViewBuilder<'a> {
        ViewBuilder {
            view: PushView::default(),
            source_of: Vec::new(),
            names: Vec::new(),
            index: HashMap::new(),
            last: None,
            refused: IngestOutcome::listing(cap),
            budget,
            samples: 0,
            bytes: 0,
        }
    }

    /// Makes room for the series a body of `bytes` holds, if each takes
    /// at least `bytes_per_series` of it (within the budget's samples),
    /// with `labels` labels each: grown one push at a time, the columns
    /// were copied over and over, a twentieth of reading a line-protocol
    /// body.
    pub fn reserve_for(&mut self, bytes: usize, bytes_per_series: usize, labels: usize) {
        let series = bytes / bytes_per_series.max(1);
        self.reserve(series, labels.saturating_mul(series));
    }

    /// Makes room for `series` series of one sample (at most the budget's
    /// samples) and `labels` labels in all.
    fn reserve(&mut self, series: usize, labels: usize) {
        let series = series.min(self.budget.samples);
        self.view.series.reserve(series);
        self.source_of.reserve(series);
        self.view
            .labels
            .reserve(labels.min(series.saturating_mul(8)));
        self.view.timestamps_ms.reserve(series);
        self.view.values.reserve(series);
    }

    /// Where the next series starts.
    pub fn mark(&self) -> Mark {
        Mark {
            labels: self.view.labels.len(),
            samples: self.view.values.len(),
            start_times: self.view.start_times_ms.len(),
        }
    }

    pub fn label(&mut self, name: &'a str, value: &'a str) {
        self.view.labels.push((name, value));
    }

    pub fn sample(&mut self, ts_ms: i64, value: f64) {
        self.view.timestamps_ms.push(ts_ms);
        self.view.values.push(value);
    }

    /// A start time of the series being appended (`tally.v1`'s
    /// `start_times_ms`: one per sample, or none at all).
    pub fn start_time(&mut self, start_ms: i64) {
        self.view.start_times_ms.push(start_ms);
    }

    /// The labels appended since `mark`, to read or reorder.
    pub fn labels_since(&mut self, mark: Mark) -> &mut [(&'a str, &'a str)] {
        &mut self.view.labels[mark.labels..]
    }

    /// Keeps the labels appended since `mark` whose name `keep` accepts,
    /// in their order.
    pub fn retain_labels(&mut self, mark: Mark, mut keep: impl FnMut(&str) -> bool) {
        let tail = &mut self.view.labels[mark.labels..];
        let mut kept = 0;
        for i in 0..tail.len() {
            if keep(tail[i].0) {
                tail.swap(kept, i);
                kept += 1;
            }
        }
        self.view.labels.truncate(mark.labels + kept);
    }

    /// The samples appended since `mark`.
    pub fn samples_since(&self, mark: Mark) -> usize {
        self.view.values.len() - mark.samples
    }

    /// Takes back everything appended since `mark`.
    pub fn drop_series(&mut self, mark: Mark) {
        self.view.labels.truncate(mark.labels);
        self.view.timestamps_ms.truncate(mark.samples);
        self.view.values.truncate(mark.samples);
        self.view.start_times_ms.truncate(mark.start_times);
    }

    /// Ends the series appended since `mark`; `Full` once the request
    /// would exceed its budget (the caller then refuses it whole).
    pub fn end_series(
        &mut self,
        mark: Mark,
        source: &'a str,
        metric: &'a str,
        kind: i32,
    ) -> Result<(), Full> {
        let labels = Run::new(mark.labels, self.view.labels.len());
        let samples = Run::new(mark.samples, self.view.values.len());
        self.bytes += SERIES_OVERHEAD
            + metric.len()
            + labels
                .of(&self.view.labels)
                .iter()
                .map(|(n, v)| n.len() + v.len() + SERIES_OVERHEAD / 2)
                .sum::<usize>();
        self.samples += samples.len();
        if self.samples > self.budget.samples || self.bytes > self.budget.bytes {
            return Err(Full);
        }
        let at = self.source_index(source);
        self.source_of.push(at);
        self.view.series.push(SeriesCols {
            metric,
            kind,
            labels,
            timestamps_ms: samples,
            values: samples,
            start_times_ms: Run::new(mark.start_times, self.view.start_times_ms.len()),
        });
        Ok(())
    }

    fn source_index(&mut self, source: &'a str) -> u32 {
        // The same slice when a parser passes one name for many series
        // (an OTLP resource's source): no compare.
        let known = |name: &str| std::ptr::eq(name, source) || same(name, source);
        if let Some(at) = self.last.filter(|&at| known(self.names[at as usize])) {
            return at;
        }
        let next = self.names.len() as u32;
        let at = *self.index.entry(source).or_insert(next);
        if at == next {
            self.names.push(source);
        }
        self.last = Some(at);
        at
    }

    /// Counts `count` samples the parser refused (no series to show them).
    pub fn refuse(&mut self, count: u64, reason: RejectReason, detail: impl FnOnce() -> String) {
        self.refused.reject_unplaced(count, reason, detail);
    }

    /// Series ended so far.
    pub fn series_len(&self) -> usize {
        self.view.series.len()
    }

    /// The view, its series grouped by source, and what the parser refused.
    pub fn finish(self) -> (PushView<'a>, IngestOutcome) {
        let (view, refused, _) = self.finish_ordered();
        (view, refused)
    }

    /// [`ViewBuilder::finish`], and the order each series of the view was
    /// ended in, by its place in the view (empty when that is the same
    /// order: sources were not interleaved).
    pub fn finish_ordered(mut self) -> (PushView<'a>, IngestOutcome, Vec<u32>) {
        let grouped = self.source_of.windows(2).all(|w| w[0] <= w[1]);
        let mut ended = Vec::new();
        if !grouped {
            // A counting sort, stable: each source's series keep their
            // order. (A comparison sort of the series, tens of bytes each,
            // was a twentieth of reading a Graphite connection's lines
            // when they came through here.)
            let mut next = vec![0u32; self.names.len() + 1];
            for &at in &self.source_of {
                next[at as usize + 1] += 1;
            }
            for i in 1..next.len() {
                next[i] += next[i - 1];
            }
            ended = vec![0u32; self.source_of.len()];
            for (i, &at) in self.source_of.iter().enumerate() {
                let slot = &mut next[at as usize];
                ended[*slot as usize] = i as u32;
                *slot += 1;
            }
            let series = std::mem::take(&mut self.view.series);
            self.view.series = ended.iter().map(|&i| series[i as usize].clone()).collect();
            self.source_of = ended.iter().map(|&i| self.source_of[i as usize]).collect();
        }
        let mut start = 0;
        for (at, &source) in self.names.iter().enumerate() {
            let len = self.source_of[start..]
                .iter()
                .take_while(|&&s| s as usize == at)
                .count();
            self.view.sources.push(SourceCols {
                source,
                series: Run::new(start, start + len),
                groups: Run::default(),
            });
            start += len;
        }
        (self.view, self.refused, ended)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget() -> Budget {
        Budget {
            samples: 1000,
            bytes: 1 << 20,
        }
    }

    fn add<'a>(b: &mut ViewBuilder<'a>, source: &'a str, metric: &'a str, v: f64) {
        let m = b.mark();
        b.label("k", metric);
        b.sample(1000, v);
        b.end_series(m, source, metric, 1).unwrap();
    }

    /// Interleaved sources come out grouped, each in first-seen order,
    /// each source's series in the order sent, each with its own columns.
    #[test]
    fn interleaved_sources_are_grouped_in_order() {
        let mut b = ViewBuilder::new(10, budget());
        add(&mut b, "a", "m1", 1.0);
        add(&mut b, "b", "m2", 2.0);
        add(&mut b, "a", "m3", 3.0);
        let m = b.mark();
        b.label("x", "y");
        b.sample(5, 5.0);
        b.drop_series(m);
        add(&mut b, "c", "m4", 4.0);
        add(&mut b, "b", "m5", 5.0);
        let (view, refused) = b.finish();
        assert_eq!(refused.rejected, 0);
        type Series<'x> = Vec<(&'x str, f64, &'x str)>;
        let got: Vec<(&str, Series<'_>)> = view
            .sources()
            .map(|s| {
                let series = s
                    .series()
                    .map(|x| (x.metric, x.values[0], x.labels[0].1))
                    .collect();
                (s.source(), series)
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("a", vec![("m1", 1.0, "m1"), ("m3", 3.0, "m3")]),
                ("b", vec![("m2", 2.0, "m2"), ("m5", 5.0, "m5")]),
                ("c", vec![("m4", 4.0, "m4")]),
            ]
        );
        assert_eq!(view.samples(), 5);
    }

    #[test]
    fn a_request_past_its_budget_is_full() {
        let mut b = ViewBuilder::new(
            10,
            Budget {
                samples: 2,
                bytes: 1 << 20,
            },
        );
        add(&mut b, "a", "m", 1.0);
        add(&mut b, "a", "m", 1.0);
        let m = b.mark();
        b.sample(1, 1.0);
        assert_eq!(b.end_series(m, "a", "m", 1), Err(Full));
        let long = "v".repeat(100);
        let mut b = ViewBuilder::new(
            10,
            Budget {
                samples: 10,
                bytes: 100,
            },
        );
        let m = b.mark();
        b.label("name", &long);
        b.sample(1, 1.0);
        assert_eq!(b.end_series(m, "a", "m", 1), Err(Full));
    }
}
