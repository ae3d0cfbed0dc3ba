//! A connection's parsed lines gathered into one request for admission.
//!
//! A line's text is gone by the time its batch is admitted (the
//! connection's buffer is read into again), so the batch keeps what it
//! needs of each line in one text buffer (and each source's name once, in
//! its dictionary), and hands admission a view borrowing from them.
//! Clearing keeps the buffers: a connection's batches cost no allocation
//! once the first has grown them.
//!
//! Admission takes a request's series grouped by source. Lines need not
//! come so: an agent that sends its metrics one after another names each
//! source once per metric, and a batch that spans two of a sender's rounds
//! names a source again after the others. So each source is numbered as
//! its lines are added (the `dict` the write-ahead log numbers series
//! with), its name kept once, and its lines chained in the order they
//! came; the view then walks the chains, source by source.
//! (Handing the builder the lines in their own order made it hash a
//! line's source again whenever it was not the line before's, and reorder
//! the whole request behind it once a source came again: the view was
//! about a seventh of reading a Graphite stream in a profile of W1.)

use std::ops::Range;

use tally_proto::v1 as pb;

use super::{clip, component, Line, LineError};
use crate::ingest::builder::Budget;
use crate::ingest::dict::Dict;
use crate::ingest::view::{GroupedBuilder, PushView};
use crate::labels::label_name_from_key_cow;

/// The end of a source's chain of lines.
const END: u32 = u32::MAX;

/// What each series costs beyond its names, for [`Budget::bytes`], as the
/// view builder counts it.
const SERIES_OVERHEAD: usize = 64;

/// Lines gathered into one request; see the module's documentation.
pub struct Batch {
    /// Metrics, label names and values, one after another (sources are
    /// kept in `sources`).
    text: String,
    series: Vec<Gathered>,
    labels: Vec<(Range<usize>, Range<usize>)>,
    /// The batch's sources, numbered in the order they first came, each
    /// with its chain of lines.
    sources: Dict<Chain>,
    /// The number of the last line's source.
    last: u32,
    source_component: usize,
    budget: Budget,
    /// Bytes of names and labels held, against `budget.bytes`, counted as
    /// the view counts them.
    bytes: usize,
    /// Lines added, kept or refused.
    pub lines: usize,
}

/// One line's series, its strings as ranges of the batch's text.
struct Gathered {
    metric: Range<usize>,
    labels: Range<usize>,
    ts_ms: i64,
    value: f64,
    /// The next line of the same source, or [`END`].
    next: u32,
}

/// One source's lines, first to last.
struct Chain {
    first: u32,
    last: u32,
}

impl Batch {
    /// An empty batch; `source_component` is 1-based.
    pub fn new(source_component: usize, budget: Budget) -> Batch {
        Batch {
            text: String::new(),
            series: Vec::new(),
            labels: Vec::new(),
            sources: Dict::default(),
            last: END,
            source_component,
            budget,
            bytes: 0,
            lines: 0,
        }
    }

    /// Samples in the batch.
    pub fn samples(&self) -> usize {
        self.series.len()
    }

    /// Adds a parsed line, stamped `now_ms` if it has no timestamp. `Full`
    /// when the batch cannot take it (the caller admits the batch and adds
    /// the line to the next one).
    pub fn push(&mut self, line: &Line<'_>, now_ms: i64) -> Result<(), PushError> {
        let n = self.source_component;
        let path = line.path;
        // A path without a dot is one component: nothing is left for the
        // metric.
        let found = match n {
            0 | 1 => Some((0, line.first_end)),
            n => component(path, n),
        };
        let whole = |&(s, e): &(usize, usize)| e - s < path.len();
        let Some((s, e, source)) = found
            .filter(whole)
            .and_then(|(s, e)| Some((s, e, path.get(s..e)?)))
        else {
            return Err(PushError::Line(LineError::NoMetric {
                path: clip(path),
                component: n,
            }));
        };
        let label_bytes: usize = match line.tags.is_empty() {
            true => 0,
            false => line
                .tags
                .iter()
                .map(|(k, v)| label_name_from_key_cow(k).len() + v.len() + SERIES_OVERHEAD / 2)
                .sum(),
        };
        // The metric is the path without the source and one dot.
        let bytes = SERIES_OVERHEAD + line.path.len() - source.len() - 1 + label_bytes;
        if self.series.len() + 1 > self.budget.samples || self.bytes + bytes > self.budget.bytes {
            return Err(PushError::Full);
        }
        let source = self.number(source).ok_or(PushError::Full)?;
        self.bytes += bytes;
        // The path without the source's component and one dot.
        let start = self.text.len();
        if s > 0 {
            self.text.push_str(&path[..s - 1]);
        }
        if e < path.len() {
            if s > 0 {
                self.text.push('.');
            }
            self.text.push_str(&path[e + 1..]);
        }
        let metric = start..self.text.len();
        let first = self.labels.len();
        if !line.tags.is_empty() {
            for (k, v) in line.tags.iter() {
                let name = self.put(&label_name_from_key_cow(k));
                let value = self.put(v);
                self.labels.push((name, value));
            }
        }
        // The bytes budget takes SERIES_OVERHEAD for each line, which
        // keeps a batch far below u32::MAX lines (a request's counts are
        // u32 too).
        let at = u32::try_from(self.series.len()).unwrap_or(END);
        self.series.push(Gathered {
            metric,
            labels: first..self.labels.len(),
            ts_ms: line.ts_ms.unwrap_or(now_ms),
            value: line.value,
            next: END,
        });
        self.chain(source, at);
        self.lines += 1;
        Ok(())
    }

    /// The number of source `name`, numbering it if it is new; `None`
    /// when the dictionary is full (`dict::MAX_KEYS` sources or
    /// `dict::MAX_KEY_BYTES` of their names). The last line's source is
    /// tried first: most agents send a source's metrics together, and then
    /// no hash is taken.
    fn number(&mut self, name: &str) -> Option<u32> {
        let name = name.as_bytes();
        let at = match self.sources.find(name, self.last) {
            Some(at) => at,
            None => self.sources.insert(
                name,
                Chain {
                    first: END,
                    last: END,
                },
            )?,
        };
        self.last = at;
        Some(at)
    }

    /// Puts line `at` at the end of source `source`'s chain.
    fn chain(&mut self, source: u32, at: u32) {
        let Some((_, c)) = self.sources.entry_mut(source) else {
            return;
        };
        match self.series.get_mut(c.last as usize) {
            Some(last) => last.next = at,
            None => c.first = at,
        }
        c.last = at;
    }

    fn put(&mut self, s: &str) -> Range<usize> {
        let start = self.text.len();
        self.text.push_str(s);
        start..self.text.len()
    }

    /// The batch as the view admission reads, grouped by source, each
    /// source's lines in the order they came (the conversion refuses
    /// nothing: refused lines are counted by the listener).
    pub fn view(&self) -> PushView<'_> {
        // Within its budget already, and chained by source: the series go
        // straight into the view's columns.
        let mut b = GroupedBuilder::with_capacity(self.series.len(), self.labels.len());
        let text = self.text.as_str();
        let gauge = pb::SampleKind::Gauge as i32;
        for id in 0..self.sources.len() as u32 {
            // Every name was a `&str` when it was numbered, so none is
            // skipped here.
            let Some((source, chain)) = self.sources.entry(id) else {
                continue;
            };
            let Ok(source) = std::str::from_utf8(source) else {
                continue;
            };
            b.source(source);
            let mut at = chain.first;
            while let Some(g) = self.series.get(at as usize) {
                // Most lines have no tags: no slice of them is taken.
                let tags = match g.labels.is_empty() {
                    true => &[][..],
                    false => &self.labels[g.labels.clone()],
                };
                let labels = tags
                    .iter()
                    .map(|(name, value)| (&text[name.clone()], &text[value.clone()]));
                b.series(&text[g.metric.clone()], gauge, labels, g.ts_ms, g.value);
                at = g.next;
            }
        }
        b.finish()
    }

    /// Empties the batch, keeping its buffers.
    pub fn clear(&mut self) {
        self.text.clear();
        self.series.clear();
        self.labels.clear();
        self.sources.clear();
        self.last = END;
        self.bytes = 0;
        self.lines = 0;
    }
}

/// Why [`Batch::push`] did not take a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushError {
    /// The batch is at its budget, or holds as many sources (or bytes of
    /// their names) as a dictionary does.
    Full,
    /// The line itself is refused.
    Line(LineError),
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::ingest::graphite::parse_line;

    const BUDGET: Budget = Budget {
        samples: 100,
        bytes: 1 << 20,
    };

    #[test]
    fn the_source_is_one_path_component() {
        let mut batch = Batch::new(1, BUDGET);
        let l = parse_line(b"web-01.cpu-0.cpu-idle;dc=eu 97 1700000000").unwrap();
        batch.push(&l, 0).unwrap();
        let mut second = Batch::new(2, BUDGET);
        let l = parse_line(b"collectd.web_01.load.load.shortterm 0.5").unwrap();
        second.push(&l, 42).unwrap();
        let only = parse_line(b"web-01 1").unwrap();
        assert!(matches!(
            second.push(&only, 0),
            Err(PushError::Line(LineError::NoMetric { .. }))
        ));
        assert!(matches!(
            batch.push(&only, 0),
            Err(PushError::Line(LineError::NoMetric { .. }))
        ));
        // Leading blanks: the first component is found within the path.
        let indented = parse_line(b"  web-02.load 1").unwrap();
        let mut third = Batch::new(1, BUDGET);
        third.push(&indented, 0).unwrap();
        let c = third.view().to_request();
        assert_eq!(
            (
                c.sources[0].source.as_str(),
                c.sources[0].series[0].metric.as_str()
            ),
            ("web-02", "load")
        );
        let c = batch.view().to_request();
        assert_eq!(c.sources[0].source, "web-01");
        let s = &c.sources[0].series[0];
        assert_eq!(s.metric, "cpu-0.cpu-idle");
        assert_eq!(
            (s.labels[0].name.as_str(), s.labels[0].value.as_str()),
            ("dc", "eu")
        );
        let c = second.view().to_request();
        assert_eq!(c.sources[0].source, "web_01");
        assert_eq!(
            c.sources[0].series[0].metric,
            "collectd.load.load.shortterm"
        );
        assert_eq!(c.sources[0].series[0].timestamps_ms, [42]);
        let mut last = Batch::new(3, BUDGET);
        last.push(&parse_line(b"a.b.host-9 1").unwrap(), 0).unwrap();
        let too_short = parse_line(b"a.b 1").unwrap();
        assert!(last.push(&too_short, 0).is_err());
        let c = last.view().to_request();
        assert_eq!(c.sources[0].source, "host-9");
        assert_eq!(c.sources[0].series[0].metric, "a.b");
    }

    #[test]
    fn a_full_batch_says_so() {
        let mut batch = Batch::new(
            1,
            Budget {
                samples: 2,
                bytes: 1 << 20,
            },
        );
        let l = parse_line(b"h.m 1 1").unwrap();
        batch.push(&l, 0).unwrap();
        batch.push(&l, 0).unwrap();
        assert_eq!(batch.push(&l, 0), Err(PushError::Full));
    }

    /// A line as the view holds it: source, metric, labels, time, value.
    type Seen = (String, String, Vec<(String, String)>, i64, f64);

    /// Each line of the batch's view, in the view's order.
    fn lines_of(batch: &Batch) -> Vec<Seen> {
        let req = batch.view().to_request();
        let mut out = Vec::new();
        for src in &req.sources {
            for s in &src.series {
                let labels = s.labels.iter().map(|l| (l.name.clone(), l.value.clone()));
                out.push((
                    src.source.clone(),
                    s.metric.clone(),
                    labels.collect(),
                    s.timestamps_ms[0],
                    s.values[0],
                ));
            }
        }
        out
    }

    /// Interleaved sources come out grouped in the order each first came,
    /// each source's lines in the order they came, a source named again
    /// after others included.
    #[test]
    fn interleaved_sources_come_grouped_each_in_order() {
        let mut batch = Batch::new(1, BUDGET);
        for line in [
            "a.m1 1 1",
            "b.m1 2 1",
            "a.m2;k=v 3 1",
            "c.m 4 1",
            "b.m2 5 1",
            "a.m1 6 2",
        ] {
            batch
                .push(&parse_line(line.as_bytes()).unwrap(), 0)
                .unwrap();
        }
        let got: Vec<(String, String, f64)> = lines_of(&batch)
            .into_iter()
            .map(|(s, m, _, _, v)| (s, m, v))
            .collect();
        let want = [
            ("a", "m1", 1.0),
            ("a", "m2", 3.0),
            ("a", "m1", 6.0),
            ("b", "m1", 2.0),
            ("b", "m2", 5.0),
            ("c", "m", 4.0),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|&(s, m, v)| (s.to_owned(), m.to_owned(), v))
            .collect();
        assert_eq!(got, want);
        assert_eq!(lines_of(&batch)[1].2, [("k".to_owned(), "v".to_owned())]);
    }

    proptest! {
        /// Whatever order lines come in, and whether the batch is new or
        /// cleared, the view holds every line once: grouped by source in
        /// the order each source first came (a stable sort of the lines),
        /// each with its own metric, labels, time and value.
        #[test]
        fn the_view_is_the_lines_stably_grouped_by_source(
            rounds in proptest::collection::vec(
                proptest::collection::vec((0u8..6, 0u8..4, any::<bool>(), -1000i32..1000), 0..40),
                1..3,
            ),
        ) {
            let mut batch = Batch::new(1, BUDGET);
            for lines in rounds {
                batch.clear();
                let mut want = Vec::new();
                let mut order: Vec<String> = Vec::new();
                for (i, &(source, metric, tagged, value)) in lines.iter().enumerate() {
                    let source = format!("host-{source}");
                    let tag = if tagged { format!(";t=x{i}") } else { String::new() };
                    let line = format!("{source}.m{metric}{tag} {value} {i}");
                    batch.push(&parse_line(line.as_bytes()).unwrap(), 0).unwrap();
                    let labels = if tagged { vec![("t".to_owned(), format!("x{i}"))] } else { vec![] };
                    if !order.contains(&source) {
                        order.push(source.clone());
                    }
                    want.push((source, format!("m{metric}"), labels, i as i64 * 1000, f64::from(value)));
                }
                want.sort_by_key(|l| order.iter().position(|s| *s == l.0));
                prop_assert_eq!(lines_of(&batch), want);
                prop_assert_eq!(batch.samples(), lines.len());
            }
        }
    }
}
