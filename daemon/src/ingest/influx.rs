//! What an InfluxDB line-protocol body means in Tally's model, for both of
//! InfluxDB's write APIs (`POST /write`, v1, and `POST /api/v2/write`, v2;
//! the HTTP side is in `crate::http`).
//!
//! - **Source**: the tag `influx.source_tag` (default `host`, the tag
//!   Telegraf puts on every line); it is taken off the labels. A line
//!   without it is refused (`missing_source`), the rest of the body kept.
//! - **Metric**: `<measurement>_<field>`, one series per field
//!   (`cpu,host=a usage_idle=97` → `cpu_usage_idle`).
//! - **Labels**: every other tag, its name sanitised as OTLP attribute
//!   names are ([`crate::labels::label_name_from_key`]).
//! - **Kind**: gauge. Floats, integers (`1i`), unsigned integers (`1u`) and
//!   booleans (1 and 0) are samples; integers beyond 2^53 lose precision as
//!   any f64 does. String fields are skipped, not refused: Tally keeps
//!   numbers only, and agents such as Telegraf mix strings into lines whose
//!   numbers are wanted (counted in `tally_influx_string_fields_total`).
//! - **Time**: the line's timestamp in the request's precision, truncated
//!   to milliseconds; a line without one is stamped with the time the
//!   request arrived.
//!
//! The text is read by InfluxData's own parser (`influxdb-line-protocol`),
//! except the plain lines nearly every agent sends, which `line` reads
//! without allocating, as that parser reads them (a property test holds
//! the two together). Tally adds what InfluxDB also refuses and that parser
//! lets through: a tag or a field given twice in one line. A line longer than
//! `influx.max_line_bytes` is refused unparsed. Every refused line is
//! reported by its number, and the good lines of the same body are kept.

mod config;
mod line;

pub use config::InfluxConfig;

use std::fmt;

use bumpalo::Bump;
use hashbrown::HashSet;
use influxdb_line_protocol::{parse_lines, split_lines, EscapedStr};
use smallvec::SmallVec;

use line::{Line, Value};
use tally_proto::v1 as pb;

use super::builder::{Budget, Full};
use super::key_names::label_name;
use super::text::same;
use super::view::{PushView, ViewBuilder};
use crate::aggregator::{IngestOutcome, RejectReason};

/// The unit of the timestamps in a body (`precision` in the query string).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    #[default]
    Nanoseconds,
    Microseconds,
    Milliseconds,
    Seconds,
    Minutes,
    Hours,
}

impl Precision {
    /// The v1 API's names (`n`, `ns`, `u`, `us`, `ms`, `s`, `m`, `h`); the v2
    /// API's (`ns`, `us`, `ms`, `s`) are among them. None for anything else.
    pub fn parse(text: &str) -> Option<Precision> {
        Some(match text {
            "" | "n" | "ns" => Precision::Nanoseconds,
            "u" | "us" | "µ" | "µs" => Precision::Microseconds,
            "ms" => Precision::Milliseconds,
            "s" => Precision::Seconds,
            "m" => Precision::Minutes,
            "h" => Precision::Hours,
            _ => return None,
        })
    }

    /// `ts` in this unit as Unix milliseconds, rounded down; None when it
    /// does not fit.
    fn to_ms(self, ts: i64) -> Option<i64> {
        match self {
            Precision::Nanoseconds => Some(ts.div_euclid(1_000_000)),
            Precision::Microseconds => Some(ts.div_euclid(1_000)),
            Precision::Milliseconds => Some(ts),
            Precision::Seconds => ts.checked_mul(1_000),
            Precision::Minutes => ts.checked_mul(60_000),
            Precision::Hours => ts.checked_mul(3_600_000),
        }
    }
}

/// One refused line: its number (1-based) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineProblem {
    pub line: u32,
    pub why: String,
}

impl fmt::Display for LineProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.why)
    }
}

/// A line-protocol body read into a view of it.
pub struct InfluxRequest<'a> {
    pub view: PushView<'a>,
    /// Samples refused while reading.
    pub refused: IngestOutcome,
    /// The line each series came from, in the order series were read.
    line_of: Vec<u32>,
    /// The order each series of the view was read in, by its place in the
    /// view (empty when the same).
    read_order: Vec<u32>,
    /// Lines holding a point (blank lines and comments are not counted).
    pub lines: u32,
    /// Lines refused while reading, the first `cap` of them.
    problems: Vec<LineProblem>,
    /// All lines refused while reading.
    refused_lines: u32,
    /// String fields skipped.
    pub string_fields: u64,
}

/// About the fewest bytes a line agents send takes (a measurement, a
/// source tag, a field and its newline), to reserve a body's room by; what
/// they send has a tag or two besides the source.
const LINE_BYTES: usize = 24;
/// How much of a line is quoted in an answer.
const QUOTED: usize = 120;
/// Tags or fields of a line held without allocating while looking for
/// duplicates.
const SORTED_INLINE: usize = 32;
/// Up to this many keys, duplicates are looked for pair by pair.
const PAIRWISE: usize = 8;

/// Reads a body, stamping lines without a timestamp with `now_ms`. Names,
/// tags and values are borrowed from the body where it holds them as they
/// are; what must be made (a metric's `<measurement>_<field>`, a tag name
/// made a label name, an unescaped value) is made in `arena`, which lives
/// as long as the request. Bytes that are not UTF-8 refuse the lines they
/// are in. `Full` when the request would exceed `budget`.
pub fn convert<'a>(
    body: &'a [u8],
    arena: &'a Bump,
    precision: Precision,
    now_ms: i64,
    cfg: &InfluxConfig,
    cap: usize,
    budget: Budget,
) -> Result<InfluxRequest<'a>, Full> {
    let mut r = Reading {
        arena,
        line_of: Vec::new(),
        lines: 0,
        problems: Vec::new(),
        refused_lines: 0,
        string_fields: 0,
        labels: Vec::new(),
        names: Names::default(),
    };
    // A U+FFFD in a body that was UTF-8 is a character like any other;
    // in one that was not, it marks bytes that were replaced.
    // Checked whole first: much faster than the lossy decoder's walk, and
    // what every agent sends.
    let (text, lossy) = match std::str::from_utf8(body) {
        Ok(text) => (text, false),
        Err(_) => (&*arena.alloc_str(&String::from_utf8_lossy(body)), true),
    };
    let plain = !lossy && line::plain_body(text.as_bytes());
    let mut b = ViewBuilder::new(cap, budget);
    b.reserve_for(text.len(), LINE_BYTES, 2);
    r.line_of
        .reserve((text.len() / LINE_BYTES).min(budget.samples));
    let mut parsed = Line::default();
    for (i, raw) in lines(text, plain).enumerate() {
        let number = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let text = raw.strip_suffix('\r').unwrap_or(raw);
        let outcome = if text.len() > cfg.max_line_bytes {
            Err(Refusal::from(format!(
                "the line is {} bytes long; the limit is {} (influx.max_line_bytes)",
                text.len(),
                cfg.max_line_bytes
            )))
        } else if lossy && text.contains('\u{fffd}') {
            Err(Refusal::from("the line is not UTF-8 text".to_owned()))
        } else {
            let read = if line::fast(text, plain, &mut parsed) {
                Some(Ok(()))
            } else {
                parse_lines(text)
                    .next()
                    .map(|p| p.map(|p| line::of_reference(&p, |s| r.keep(s), &mut parsed)))
            };
            match read {
                // Blank, or a comment.
                None => continue,
                Some(Err(e)) => Err(Refusal::from(parse_error(text, &e))),
                Some(Ok(())) => r.line(&mut b, &parsed, number, precision, now_ms, cfg),
            }
        };
        r.lines += 1;
        match outcome {
            Ok(()) => {}
            Err(Refusal::Full) => return Err(Full),
            Err(Refusal::Line(reason, why)) => {
                r.refused_lines += 1;
                let why = format!("unable to parse '{}': {why}", quote(text));
                b.refuse(1, reason, || format!("line {number}: {why}"));
                if r.problems.len() < cap {
                    r.problems.push(LineProblem { line: number, why });
                }
            }
        }
    }
    let (view, refused, read_order) = b.finish_ordered();
    Ok(InfluxRequest {
        view,
        refused,
        line_of: r.line_of,
        read_order,
        lines: r.lines,
        problems: r.problems,
        refused_lines: r.refused_lines,
        string_fields: r.string_fields,
    })
}

/// A body being read.
struct Reading<'a> {
    arena: &'a Bump,
    line_of: Vec<u32>,
    lines: u32,
    problems: Vec<LineProblem>,
    refused_lines: u32,
    string_fields: u64,
    /// The line's labels, kept for its fields (room reused line to line).
    labels: Vec<(&'a str, &'a str)>,
    names: Names<'a>,
}

/// The metric names of the last line's fields, and the label names of its
/// tags: agents send line after line of one measurement with the same
/// fields and tags, whose names are then made once.
#[derive(Default)]
struct Names<'a> {
    measurement: &'a str,
    /// Field key and metric name, in the line's order.
    fields: Vec<(&'a str, &'a str)>,
    /// Tag key and label name, in the line's order (its source tag left
    /// out).
    tags: Vec<(&'a str, &'a str)>,
    /// Where a metric name is put together before it goes to the arena.
    name: String,
}

impl<'a> Names<'a> {
    /// Starts a line of `measurement`, forgetting the names of another.
    fn start(&mut self, measurement: &'a str) {
        if !same(self.measurement, measurement) {
            self.measurement = measurement;
            self.fields.clear();
        }
    }

    /// True when `line`'s fields are, in order, the leading keys kept from
    /// the last line of its measurement: that line's keys were found
    /// distinct, so these are. Agents repeat a measurement's fields line
    /// after line, and sorting each line's keys to look for one given
    /// twice took 1.6% of the daemon's time on W1 (twenty fields a line).
    fn known_fields(&self, line: &Line<'_>) -> bool {
        same(self.measurement, line.measurement)
            && line.fields.len() <= self.fields.len()
            && line
                .fields
                .iter()
                .zip(&self.fields)
                .all(|((key, _), (known, _))| same(key, known))
    }

    /// The line's `i`th field is not a number: the names kept stop before
    /// it, so that they stay the leading keys of one line.
    fn skip(&mut self, i: usize) {
        self.fields.truncate(i);
    }

    /// The label name of the line's `i`th tag other than its source, `key`:
    /// the last line's when it had that tag there.
    fn label(&mut self, i: usize, key: &'a str, arena: &'a Bump) -> &'a str {
        remembered(&mut self.tags, i, key, || label_name(arena, key))
    }

    /// The metric name of the line's `i`th field, `key`: the last line's
    /// when it had that field there, else made in `arena`.
    fn metric(&mut self, i: usize, key: &'a str, arena: &'a Bump) -> &'a str {
        let (measurement, name) = (self.measurement, &mut self.name);
        remembered(&mut self.fields, i, key, || {
            name.clear();
            name.push_str(measurement);
            name.push('_');
            name.push_str(key);
            arena.alloc_str(name)
        })
    }
}

/// The name `memo` holds for `key` at its `i`th place, or the one `make`
/// makes, then kept there (when the places before it are filled).
fn remembered<'a>(
    memo: &mut Vec<(&'a str, &'a str)>,
    i: usize,
    key: &'a str,
    make: impl FnOnce() -> &'a str,
) -> &'a str {
    if let Some(&(k, name)) = memo.get(i) {
        if same(k, key) {
            return name;
        }
    }
    let name = make();
    memo.truncate(i);
    if memo.len() == i {
        memo.push((key, name));
    }
    name
}

/// The body's lines. Only a quote (a string field may hold a newline) or
/// a backslash (an escaped newline continues the line) make InfluxDB's
/// rules for where a line ends differ from splitting at each newline; a
/// body with neither, which is what most agents send, is split at its
/// newlines without looking at every character. `plain`: the body is
/// known to hold neither.
fn lines(body: &str, plain: bool) -> Box<dyn Iterator<Item = &str> + '_> {
    if !plain && memchr::memchr2(b'"', b'\\', body.as_bytes()).is_some() {
        Box::new(split_lines(body))
    } else {
        // memchr's one iterator over the body: `split('\n')` searched
        // afresh from each line, a tenth of reading W1's lines.
        let mut start = 0;
        let ends = memchr::memchr_iter(b'\n', body.as_bytes()).chain(std::iter::once(body.len()));
        Box::new(ends.map(move |end| {
            let line = body.get(start..end).unwrap_or_default();
            start = end + 1;
            line
        }))
    }
}

/// Why a line was not taken.
enum Refusal {
    /// The request is over its budget: refuse it whole.
    Full,
    Line(RejectReason, String),
}

impl From<String> for Refusal {
    fn from(why: String) -> Refusal {
        Refusal::Line(RejectReason::InvalidPoint, why)
    }
}

impl From<Full> for Refusal {
    fn from(_: Full) -> Refusal {
        Refusal::Full
    }
}

impl<'a> Reading<'a> {
    /// Adds one read line's fields as series.
    fn line(
        &mut self,
        b: &mut ViewBuilder<'a>,
        line: &Line<'a>,
        number: u32,
        precision: Precision,
        now_ms: i64,
        cfg: &InfluxConfig,
    ) -> Result<(), Refusal> {
        if let Some(dup) = duplicate(&line.tags) {
            return Err(format!("tag {dup:?} is given twice").into());
        }
        if !self.names.known_fields(line) {
            if let Some(dup) = duplicate(&line.fields) {
                return Err(format!("field {dup:?} is given twice").into());
            }
        }
        let ts_ms = match line.timestamp {
            None => now_ms,
            Some(ts) => precision
                .to_ms(ts)
                .ok_or_else(|| format!("timestamp {ts} does not fit in the precision given"))?,
        };
        let Some((at, &(_, source))) = line
            .tags
            .iter()
            .enumerate()
            .find(|(_, (k, _))| same(k, &cfg.source_tag))
        else {
            return Err(Refusal::Line(
                RejectReason::MissingSource,
                format!(
                    "no tag {:?} names its source (influx.source_tag)",
                    cfg.source_tag
                ),
            ));
        };
        let arena = self.arena;
        self.labels.clear();
        for (i, &(key, value)) in line.tags.iter().enumerate() {
            if i != at {
                let name = self.names.label(self.labels.len(), key, arena);
                self.labels.push((name, value));
            }
        }
        self.names.start(line.measurement);
        for (i, &(key, value)) in line.fields.iter().enumerate() {
            let Value::Number(v) = value else {
                self.string_fields += 1;
                self.names.skip(i);
                continue;
            };
            let metric = self.names.metric(i, key, arena);
            let mark = b.mark();
            for &(name, value) in &self.labels {
                b.label(name, value);
            }
            b.sample(ts_ms, v);
            b.end_series(mark, source, metric, pb::SampleKind::Gauge as i32)?;
            self.line_of.push(number);
        }
        Ok(())
    }

    /// A tag's text for the view: borrowed from the body when it is there
    /// as it is, else made in the arena.
    fn keep(&self, s: &EscapedStr<'a>) -> &'a str {
        match s {
            EscapedStr::SingleSlice(s) => s,
            EscapedStr::CopiedValue(s) => self.arena.alloc_str(s),
        }
    }
}

impl InfluxRequest<'_> {
    /// The refused lines: those refused while converting, then those with a
    /// sample the admission refused (its first reason each), in line order;
    /// at most `cap`. The second value counts every refused line, exactly
    /// where the outcome lists every rejection.
    pub fn refused_lines(&self, out: &IngestOutcome, cap: usize) -> (Vec<LineProblem>, u64) {
        let mut seen: HashSet<u32> = self.problems.iter().map(|p| p.line).collect();
        let mut list = self.problems.clone();
        let mut listed_samples = 0u64;
        for r in &out.rejections {
            let Some(line) = self
                .view
                .series_at(r.source_index, r.series_index)
                .map(|at| self.read_order.get(at).map_or(at, |&o| o as usize))
                .and_then(|o| self.line_of.get(o))
            else {
                continue;
            };
            listed_samples += 1;
            if seen.insert(*line) {
                list.push(LineProblem {
                    line: *line,
                    why: format!("{} ({})", r.reason.as_str(), r.detail),
                });
            }
        }
        let unplaced = out.rejected.saturating_sub(u64::from(self.refused_lines));
        let unlisted = unplaced.saturating_sub(listed_samples);
        let count = (seen.len() as u64 + unlisted).min(u64::from(self.lines));
        list.sort_by_key(|p| p.line);
        list.truncate(cap);
        (list, count)
    }
}

/// A key that appears twice, if any. A few keys are compared pairwise;
/// more are sorted, then neighbours compared, which for a line's few dozen
/// keys costs less than hashing them and allocates nothing.
fn duplicate<'a, T>(items: &[(&'a str, T)]) -> Option<&'a str> {
    if items.len() <= PAIRWISE {
        return items
            .iter()
            .enumerate()
            .find(|(i, (k, _))| items[..*i].iter().any(|(j, _)| j == k))
            .map(|(_, (k, _))| *k);
    }
    let mut all: SmallVec<[&str; SORTED_INLINE]> = items.iter().map(|(k, _)| *k).collect();
    all.sort_unstable();
    all.windows(2).find(|w| w[0] == w[1]).map(|w| w[0])
}

/// The parser's error, made specific where its own message is not.
fn parse_error(text: &str, e: &influxdb_line_protocol::Error) -> String {
    use influxdb_line_protocol::Error as E;
    const SHAPE: &str = "a line is measurement[,tag=value…] field=value[,field=value…] [timestamp], \
                         a value a float (1.5), an integer (1i), an unsigned integer (1u), a boolean \
                         (t, f) or a \"string\"; NaN and infinities are not values";
    match e {
        E::FieldSetMissing | E::GenericParsingError { .. } => {
            let fields = field_text(text);
            if fields.is_empty() {
                format!("no field set: {SHAPE}")
            } else {
                format!("invalid field set {:?}: {SHAPE}", quote(fields))
            }
        }
        other => other.to_string(),
    }
}

/// The field set's text: after the first space that is not escaped.
fn field_text(line: &str) -> &str {
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            ' ' => return line[i + 1..].trim_start().split(' ').next().unwrap_or(""),
            _ => {}
        }
    }
    ""
}

/// At most [`QUOTED`] bytes of `text`, cut at a character boundary.
fn quote(text: &str) -> String {
    if text.len() <= QUOTED {
        return text.to_owned();
    }
    let mut end = QUOTED;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
#[path = "influx_tests.rs"]
mod tests;
