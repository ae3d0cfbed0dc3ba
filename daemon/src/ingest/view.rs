//! A `tally.v1.PushRequest` as the ingest path reads it: borrowed columns.
//!
//! Decoding into the generated types makes an owned `String` for every
//! metric, label name and label value and a `Vec` for every series' numbers:
//! at one sample per series per message, about eight allocations per sample,
//! which was the largest single cost of labelled ingest. [`PushView::decode`]
//! instead borrows every string from the request's own bytes and appends
//! every series' numbers to request-wide columns, so a request costs a
//! handful of allocations whatever its size. Other protocols' readers
//! build the same view straight from their own bytes (`build`: OTLP
//! protobuf, remote-write, line protocol, Graphite), and it borrows from a
//! decoded request ([`PushView::of`]) where one is built (OTLP/HTTP JSON,
//! the write-ahead log's replay), so admission has one form to read. A view writes itself
//! out as a `tally.v1` request for the log (`encode`), with no owned
//! request in between.
//!
//! A series in the layout every encoder writes (its fields in number
//! order, numbers packed) is read in one tight pass (`fast`); anything
//! else goes to the exact reader, which is prost's: its primitives read
//! keys, varints and the numeric fields (packed or not), skip unknown
//! fields and check nested lengths, and the few checks written here (a
//! string's length and UTF-8) fail with prost's own messages, naming the
//! field. A property test holds the view to what `pb::PushRequest::decode`
//! makes of the same bytes, errors included. One difference is left:
//! prost's recursion limit for unknown groups is counted from each of the
//! request's own messages here, not from the request, so it allows at
//! most three levels more.

mod build;
mod encode;
pub(crate) mod fast;
mod grouped;

use std::fmt;
use std::ops::Range;

use prost::encoding::{check_wire_type, double, int32, int64, skip_field, DecodeContext, WireType};
use tally_proto::v1 as pb;

use crate::ingest::text::TextMemo;

pub use build::{Mark, ParseError, ViewBuilder};
pub use grouped::GroupedBuilder;

/// Why a request's bytes do not decode. Displays as prost's own message.
#[derive(Debug)]
pub enum ViewError {
    /// An error prost's primitives found.
    Wire(prost::DecodeError),
    /// More series (or sources) than the caller allows in one request: each
    /// costs a column entry of tens of bytes however few bytes it takes on
    /// the wire, so the count is bounded while decoding, before the memory
    /// is spent.
    TooManySeries { limit: usize },
    /// A length or string the checks written here refused. Boxed, as
    /// prost's own error is: a result of two words comes back in
    /// registers, and the parsers return one for every field they read.
    Own(Box<OwnError>),
}

/// [`ViewError::Own`]'s details.
#[derive(Debug)]
pub struct OwnError {
    why: &'static str,
    /// Innermost first: (message, field).
    stack: Vec<(&'static str, &'static str)>,
}

impl ViewError {
    /// Names the field the error happened in, as generated code does.
    pub(crate) fn at(mut self, message: &'static str, field: &'static str) -> ViewError {
        match &mut self {
            ViewError::Wire(e) => e.push(message, field),
            ViewError::Own(e) => e.stack.push((message, field)),
            ViewError::TooManySeries { .. } => {}
        }
        self
    }
}

impl From<prost::DecodeError> for ViewError {
    fn from(e: prost::DecodeError) -> ViewError {
        ViewError::Wire(e)
    }
}

impl fmt::Display for ViewError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ViewError::Wire(e) => e.fmt(f),
            ViewError::TooManySeries { limit } => write!(
                f,
                "the message holds more than {limit} series or sources (ingest.max_batch_samples): split it"
            ),
            ViewError::Own(e) => {
                f.write_str("failed to decode Protobuf message: ")?;
                for (message, field) in &e.stack {
                    write!(f, "{message}.{field}: ")?;
                }
                f.write_str(e.why)
            }
        }
    }
}

impl std::error::Error for ViewError {}

// The parsers return a `Result<(), ViewError>` for every field they read.
const _: () = assert!(std::mem::size_of::<Result<(), ViewError>>() <= 16);
const _: () = assert!(std::mem::size_of::<Result<(), ParseError>>() <= 16);

/// A run of one of a request's columns. Its ends are 32-bit because every
/// fold reads a series' row (88 bytes with `usize` ranges, 56 with these):
/// a column holds at most one element per byte of a request (under 2^31
/// by `ingest.max_message_bytes`), or, converted from another protocol,
/// per sample of its body or per 32 bytes of its label budget. Past
/// that, which no request can reach, a run would read as empty, never out
/// of bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Run {
    start: u32,
    end: u32,
}

impl Run {
    /// The run from `start` to `end`.
    fn new(start: usize, end: usize) -> Run {
        let at = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
        Run {
            start: at(start),
            end: at(end),
        }
    }

    /// An empty run at the end of `column`, to be ended later.
    fn at_end<T>(column: &[T]) -> Run {
        Run::new(column.len(), column.len())
    }

    /// This run, ended at the end of `column`.
    fn ended<T>(self, column: &[T]) -> Run {
        Run::new(self.start as usize, column.len())
    }

    fn range(self) -> Range<usize> {
        self.start as usize..self.end as usize
    }

    fn len(self) -> usize {
        self.range().len()
    }

    /// The run's elements of `column`.
    fn of<T>(self, column: &[T]) -> &[T] {
        column.get(self.range()).unwrap_or_default()
    }
}

/// One source's part of a request.
#[derive(Debug, Clone, PartialEq)]
struct SourceCols<'a> {
    source: &'a str,
    series: Run,
    groups: Run,
}

/// One series' part of a request: its strings borrowed, its numbers and
/// labels as runs of the request's columns.
#[derive(Debug, Clone, PartialEq)]
struct SeriesCols<'a> {
    metric: &'a str,
    kind: i32,
    labels: Run,
    timestamps_ms: Run,
    values: Run,
    start_times_ms: Run,
}

const _: () = assert!(std::mem::size_of::<SeriesCols<'static>>() <= 56);

/// A push request's sources, series, labels and samples, borrowed from its
/// bytes or from its decoded form.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct PushView<'a> {
    sources: Vec<SourceCols<'a>>,
    series: Vec<SeriesCols<'a>>,
    labels: Vec<(&'a str, &'a str)>,
    groups: Vec<&'a str>,
    timestamps_ms: Vec<i64>,
    values: Vec<f64>,
    start_times_ms: Vec<i64>,
}

/// A source of a [`PushView`].
#[derive(Clone, Copy)]
pub struct SourceView<'v, 'a> {
    view: &'v PushView<'a>,
    cols: &'v SourceCols<'a>,
}

/// A series of a [`PushView`], in the shape of `tally.v1.SeriesSamples`.
#[derive(Debug, Clone, Copy)]
pub struct SeriesView<'v> {
    pub metric: &'v str,
    /// The `tally.v1.SampleKind` as sent (unknown values included).
    pub kind: i32,
    pub labels: &'v [(&'v str, &'v str)],
    pub timestamps_ms: &'v [i64],
    pub values: &'v [f64],
    pub start_times_ms: &'v [i64],
}

impl<'v, 'a> SourceView<'v, 'a> {
    pub fn source(&self) -> &'a str {
        self.cols.source
    }

    /// The rollup groups the source declares.
    pub fn groups(&self) -> &'v [&'a str] {
        self.cols.groups.of(&self.view.groups)
    }

    pub fn series(&self) -> impl ExactSizeIterator<Item = SeriesView<'v>> + 'v {
        let view = self.view;
        self.cols
            .series
            .of(&view.series)
            .iter()
            .map(move |s| SeriesView {
                metric: s.metric,
                kind: s.kind,
                labels: s.labels.of(&view.labels),
                timestamps_ms: s.timestamps_ms.of(&view.timestamps_ms),
                values: s.values.of(&view.values),
                start_times_ms: s.start_times_ms.of(&view.start_times_ms),
            })
    }

    /// How many series the source sends.
    pub fn series_len(&self) -> usize {
        self.cols.series.len()
    }
}

impl<'a> PushView<'a> {
    /// The request's sources in order.
    pub fn sources(&self) -> impl ExactSizeIterator<Item = SourceView<'_, 'a>> {
        self.sources
            .iter()
            .map(move |cols| SourceView { view: self, cols })
    }

    /// The place among all the request's series of series `series_index`
    /// of source `source_index`, as rejections name them.
    pub fn series_at(&self, source_index: u32, series_index: u32) -> Option<usize> {
        let cols = self.sources.get(source_index as usize)?;
        let at = cols.series.start as usize + series_index as usize;
        cols.series.range().contains(&at).then_some(at)
    }

    /// How many series the request carries, over all sources.
    pub fn series_len(&self) -> usize {
        self.series.len()
    }

    /// About the bytes the request's label sets take encoded (`name="value"`
    /// and a comma each), to size their arena.
    pub fn label_bytes(&self) -> usize {
        self.labels
            .iter()
            .map(|(name, value)| name.len() + value.len() + 4)
            .sum()
    }

    /// Samples the request carries, counting each series' longer array (a
    /// series whose arrays disagree is rejected whole, all of it counted).
    pub fn samples(&self) -> usize {
        self.series
            .iter()
            .map(|s| s.values.len().max(s.timestamps_ms.len()))
            .sum()
    }

    /// Borrows a decoded request.
    pub fn of(req: &'a pb::PushRequest) -> PushView<'a> {
        // Its sizes are known: the columns are allocated once, not grown.
        let mut v = PushView {
            sources: Vec::with_capacity(req.sources.len()),
            groups: Vec::with_capacity(req.sources.iter().map(|s| s.groups.len()).sum()),
            ..PushView::default()
        };
        let (mut series, mut labels, mut ts, mut values, mut starts) = (0, 0, 0, 0, 0);
        for s in req.sources.iter().flat_map(|src| &src.series) {
            series += 1;
            labels += s.labels.len();
            ts += s.timestamps_ms.len();
            values += s.values.len();
            starts += s.start_times_ms.len();
        }
        v.series.reserve_exact(series);
        v.labels.reserve_exact(labels);
        v.timestamps_ms.reserve_exact(ts);
        v.values.reserve_exact(values);
        v.start_times_ms.reserve_exact(starts);
        for src in &req.sources {
            let series = Run::at_end(&v.series);
            let groups = Run::at_end(&v.groups);
            v.groups.extend(src.groups.iter().map(String::as_str));
            for s in &src.series {
                let labels = Run::at_end(&v.labels);
                v.labels
                    .extend(s.labels.iter().map(|l| (l.name.as_str(), l.value.as_str())));
                let cols = SeriesCols {
                    metric: &s.metric,
                    kind: s.kind,
                    labels: labels.ended(&v.labels),
                    timestamps_ms: extend(&mut v.timestamps_ms, &s.timestamps_ms),
                    values: extend(&mut v.values, &s.values),
                    start_times_ms: extend(&mut v.start_times_ms, &s.start_times_ms),
                };
                v.series.push(cols);
            }
            v.sources.push(SourceCols {
                source: &src.source,
                series: series.ended(&v.series),
                groups: groups.ended(&v.groups),
            });
        }
        v
    }

    /// Decodes a `tally.v1.PushRequest` from `bytes`, borrowing its strings;
    /// refuses one of more than `max_series` series or sources.
    pub fn decode(mut bytes: &'a [u8], max_series: usize) -> Result<PushView<'a>, ViewError> {
        let mut v = PushView::with_room_for(bytes.len());
        let mut memo = TextMemo::default();
        let ctx = DecodeContext::default();
        while !bytes.is_empty() {
            let (tag, wire_type) = fast::key(&mut bytes)?;
            match tag {
                1 => {
                    check_wire_type(WireType::LengthDelimited, wire_type)
                        .map_err(|e| ViewError::Wire(e).at("PushRequest", "sources"))?;
                    v.source_batch(&mut bytes, max_series, &mut memo)
                        .map_err(|e| e.at("PushRequest", "sources"))?
                }
                _ => skip_field(wire_type, tag, &mut bytes, ctx.clone())?,
            }
        }
        Ok(v)
    }

    /// A view with room for what an encoding of `len` bytes usually holds:
    /// a series takes at least about 24 bytes, a sample 9. Grown one push
    /// at a time, the columns were copied over and over; bounded, so that a
    /// large body reserves no more than a few megabytes before it proves
    /// it needs them.
    fn with_room_for(len: usize) -> PushView<'a> {
        const MOST: usize = 1 << 15;
        let series = (len / 24).min(MOST);
        let samples = (len / 9).min(MOST);
        PushView {
            sources: Vec::new(),
            series: Vec::with_capacity(series),
            labels: Vec::new(),
            groups: Vec::new(),
            timestamps_ms: Vec::with_capacity(samples),
            values: Vec::with_capacity(samples),
            start_times_ms: Vec::new(),
        }
    }

    fn source_batch(
        &mut self,
        buf: &mut &'a [u8],
        max_series: usize,
        memo: &mut TextMemo<'a>,
    ) -> Result<(), ViewError> {
        let mut cols = SourceCols {
            source: "",
            series: Run::at_end(&self.series),
            groups: Run::at_end(&self.groups),
        };
        nested(buf, |buf, tag, wire_type| match tag {
            1 => borrow_str(wire_type, buf)
                .map(|s| cols.source = s)
                .map_err(|e| e.at("SourceBatch", "source")),
            2 => self
                .series_samples(wire_type, buf, max_series, memo)
                .map_err(|e| e.at("SourceBatch", "series")),
            3 => borrow_str(wire_type, buf)
                .map(|g| self.groups.push(g))
                .map_err(|e| e.at("SourceBatch", "groups")),
            _ => Ok(skip_field(wire_type, tag, buf, DecodeContext::default())?),
        })?;
        cols.series = cols.series.ended(&self.series);
        cols.groups = cols.groups.ended(&self.groups);
        if self.sources.len() >= max_series {
            return Err(ViewError::TooManySeries { limit: max_series });
        }
        self.sources.push(cols);
        Ok(())
    }

    fn series_samples(
        &mut self,
        wire_type: WireType,
        buf: &mut &'a [u8],
        max_series: usize,
        memo: &mut TextMemo<'a>,
    ) -> Result<(), ViewError> {
        check_wire_type(WireType::LengthDelimited, wire_type)?;
        let cols = match self.fast_series(buf, memo) {
            Some(cols) => cols,
            None => self.exact_series(buf)?,
        };
        if self.series.len() >= max_series {
            return Err(ViewError::TooManySeries { limit: max_series });
        }
        self.series.push(cols);
        Ok(())
    }

    /// A `SeriesSamples` read field by field with prost's primitives, in
    /// any layout the wire allows.
    fn exact_series(&mut self, buf: &mut &'a [u8]) -> Result<SeriesCols<'a>, ViewError> {
        let mut cols = self.open_series();
        nested(buf, |buf, tag, wire_type| {
            let ctx = DecodeContext::default();
            let named = |field| move |e: ViewError| e.at("SeriesSamples", field);
            let prost = |r: Result<(), prost::DecodeError>, field| {
                r.map_err(|e| ViewError::Wire(e).at("SeriesSamples", field))
            };
            match tag {
                1 => borrow_str(wire_type, buf)
                    .map(|s| cols.metric = s)
                    .map_err(named("metric")),
                2 => prost(int32::merge(wire_type, &mut cols.kind, buf, ctx), "kind"),
                3 => prost(
                    int64::merge_repeated(wire_type, &mut self.timestamps_ms, buf, ctx),
                    "timestamps_ms",
                ),
                4 => prost(
                    double::merge_repeated(wire_type, &mut self.values, buf, ctx),
                    "values",
                ),
                5 => self.label(wire_type, buf).map_err(named("labels")),
                6 => prost(
                    int64::merge_repeated(wire_type, &mut self.start_times_ms, buf, ctx),
                    "start_times_ms",
                ),
                _ => Ok(skip_field(wire_type, tag, buf, ctx)?),
            }
        })?;
        Ok(self.end_series(cols))
    }

    /// A series' row with its runs opened at the columns' ends.
    fn open_series(&self) -> SeriesCols<'a> {
        SeriesCols {
            metric: "",
            kind: 0,
            labels: Run::at_end(&self.labels),
            timestamps_ms: Run::at_end(&self.timestamps_ms),
            values: Run::at_end(&self.values),
            start_times_ms: Run::at_end(&self.start_times_ms),
        }
    }

    /// `cols` with its runs ended at the columns' ends. A series' elements
    /// are contiguous in each column: it is decoded whole before the next
    /// one starts.
    fn end_series(&self, cols: SeriesCols<'a>) -> SeriesCols<'a> {
        SeriesCols {
            labels: cols.labels.ended(&self.labels),
            timestamps_ms: cols.timestamps_ms.ended(&self.timestamps_ms),
            values: cols.values.ended(&self.values),
            start_times_ms: cols.start_times_ms.ended(&self.start_times_ms),
            ..cols
        }
    }

    fn label(&mut self, wire_type: WireType, buf: &mut &'a [u8]) -> Result<(), ViewError> {
        check_wire_type(WireType::LengthDelimited, wire_type)?;
        let mut pair = ("", "");
        nested(buf, |buf, tag, wire_type| match tag {
            1 => borrow_str(wire_type, buf)
                .map(|s| pair.0 = s)
                .map_err(|e| e.at("Label", "name")),
            2 => borrow_str(wire_type, buf)
                .map(|s| pair.1 = s)
                .map_err(|e| e.at("Label", "value")),
            _ => Ok(skip_field(wire_type, tag, buf, DecodeContext::default())?),
        })?;
        self.labels.push(pair);
        Ok(())
    }
}

#[cfg(test)]
impl PushView<'_> {
    /// The view in the generated types, for tests to compare.
    pub(crate) fn to_request(&self) -> pb::PushRequest {
        let label = |&(name, value): &(&str, &str)| pb::Label {
            name: name.to_owned(),
            value: value.to_owned(),
        };
        let series = |s: SeriesView<'_>| pb::SeriesSamples {
            metric: s.metric.to_owned(),
            kind: s.kind,
            labels: s.labels.iter().map(label).collect(),
            timestamps_ms: s.timestamps_ms.to_vec(),
            values: s.values.to_vec(),
            start_times_ms: s.start_times_ms.to_vec(),
        };
        let sources = self
            .sources()
            .map(|src| pb::SourceBatch {
                source: src.source().to_owned(),
                groups: src.groups().iter().map(|g| (*g).to_owned()).collect(),
                series: src.series().map(series).collect(),
            })
            .collect();
        pb::PushRequest { sources }
    }
}

/// Appends `from` to a column, returning where it went.
fn extend<T: Copy>(column: &mut Vec<T>, from: &[T]) -> Run {
    let start = Run::at_end(column);
    column.extend_from_slice(from);
    start.ended(column)
}

pub(crate) fn own(why: &'static str) -> ViewError {
    ViewError::Own(Box::new(OwnError {
        why,
        stack: Vec::new(),
    }))
}

/// Reads an embedded message's fields with `field`, as prost's
/// `merge_loop` does: from the whole buffer up to the message's length, so
/// a field running past it fails the same way.
pub(crate) fn nested<'a>(
    buf: &mut &'a [u8],
    mut field: impl FnMut(&mut &'a [u8], u32, WireType) -> Result<(), ViewError>,
) -> Result<(), ViewError> {
    let len = fast::read_varint(buf)?;
    let limit = usize::try_from(len)
        .ok()
        .and_then(|len| buf.len().checked_sub(len))
        .ok_or_else(|| own("buffer underflow"))?;
    while buf.len() > limit {
        let (tag, wire_type) = fast::key(buf)?;
        field(buf, tag, wire_type)?;
    }
    if buf.len() != limit {
        return Err(own("delimited length exceeded"));
    }
    Ok(())
}

/// A string field, borrowed. Fails as prost's `string::merge` does.
pub(crate) fn borrow_str<'a>(
    wire_type: WireType,
    buf: &mut &'a [u8],
) -> Result<&'a str, ViewError> {
    check_wire_type(WireType::LengthDelimited, wire_type)?;
    let len = fast::read_varint(buf)?;
    let bytes = usize::try_from(len)
        .ok()
        .and_then(|len| buf.get(..len))
        .ok_or_else(|| own("buffer underflow"))?;
    *buf = &buf[bytes.len()..];
    std::str::from_utf8(bytes).map_err(|_| own("invalid string value: data is not UTF-8 encoded"))
}

#[cfg(test)]
mod tests;
