//! Label sets: the dimensions beside a series' source and metric
//! (`cpu="0"`, `mode="idle"`), their rules, and the one canonical encoding
//! that every layer hashes, keys, orders and stores them by.
//!
//! # Canonical encoding
//!
//! Pairs sorted by name, each written `name="value"`, joined by `,`, with
//! `\` written `\\`, `"` written `\"` and a newline written `\n` inside a
//! value (Prometheus' text-format escaping). Names cannot hold `=`, `"` or
//! `,`, and a value's end is its first unescaped `"`, so the encoding can be
//! parsed back one way only: two different sets never share it. The empty
//! set encodes as the empty string, which is what keeps an unlabelled
//! series' ids and documents exactly as they were before labels existed.
//!
//! A series' *metric key* is its metric followed by `{<encoding>}` when it
//! has labels. No metric contains `{`, and a key ends at its matching `}`,
//! so `source|<metric key>` stays prefix-free: one series' period documents
//! stay adjacent in every store, and no series' key is a prefix of
//! another's followed by `|`.

use std::borrow::Cow;
use std::fmt;

/// A label set's pairs while it is checked and encoded.
pub type Pairs<'a> = smallvec::SmallVec<[(&'a str, &'a str); 16]>;

/// Longest accepted label name.
pub const MAX_LABEL_NAME_LEN: usize = 128;
/// Longest accepted label value (an empty value means the label is absent).
pub const MAX_LABEL_VALUE_LEN: usize = 256;
/// Longest accepted series key, `source|metric{labels}`, in bytes.
pub const MAX_SERIES_KEY_LEN: usize = 2048;
/// The label name that stands for a series' source in selectors and the
/// Prometheus-compatible API; no pushed label may use it.
pub const SOURCE_LABEL: &str = "source";
/// The label the Prometheus-compatible API gives every series with its
/// exact Tally metric name; no pushed label may use it either, or two
/// series would come out of that API with the same label set.
pub const TALLY_METRIC_LABEL: &str = "tally_metric";

/// Why a label set was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    #[error("label name is empty")]
    EmptyName,
    #[error("label name {name:?} is {len} bytes long; the limit is {MAX_LABEL_NAME_LEN}")]
    NameTooLong { name: String, len: usize },
    #[error("label name {name:?} has {ch:?} at byte {at}; names are [A-Za-z_][A-Za-z0-9_]*")]
    BadName { name: String, ch: char, at: usize },
    #[error("label name {0:?} is reserved (names starting with `__`; `source`, the series' source; `tally_metric`, its exact metric name in the Prometheus API)")]
    Reserved(String),
    #[error("label {name:?} has a {len}-byte value; the limit is {MAX_LABEL_VALUE_LEN}")]
    ValueTooLong { name: String, len: usize },
    #[error("label {0:?} is given twice")]
    Duplicate(String),
    #[error("{count} labels; the limit is {max} (ingest.max_labels)")]
    TooMany { count: usize, max: usize },
    #[error("series key is {len} bytes long; the limit is {MAX_SERIES_KEY_LEN} (source, metric and labels together)")]
    KeyTooLong { len: usize },
}

/// A label name made from a foreign protocol's key (an OTLP attribute, an
/// InfluxDB tag, a Graphite tag), as Prometheus' OTLP translation makes
/// one: every character outside `[A-Za-z0-9_]` becomes `_`
/// (`http.method` → `http_method`) and a name starting with a digit gets a
/// `key_` prefix. Two rules are Tally's own: a name starting with `__`
/// (reserved) also gets `key_`, and `source` (the label Tally gives the
/// source) becomes `exported_source`.
pub fn label_name_from_key(key: &str) -> String {
    label_name_from_key_cow(key).into_owned()
}

/// [`label_name_from_key`], borrowing `key` when it is already the name.
pub fn label_name_from_key_cow(key: &str) -> std::borrow::Cow<'_, str> {
    if key_is_its_label_name(key) {
        return std::borrow::Cow::Borrowed(key);
    }
    std::borrow::Cow::Owned(rename_key(key))
}

/// Whether [`label_name_from_key`] leaves `key` as it is.
pub fn key_is_its_label_name(key: &str) -> bool {
    let plain = key.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_');
    let renamed = key.starts_with(|c: char| c.is_ascii_digit())
        || key.starts_with("__")
        || key == SOURCE_LABEL
        || key == TALLY_METRIC_LABEL;
    plain && !renamed
}

fn rename_key(key: &str) -> String {
    let mut name: String = key
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if name.starts_with(|c: char| c.is_ascii_digit()) || name.starts_with("__") {
        name.insert_str(0, "key_");
    }
    if name == SOURCE_LABEL || name == TALLY_METRIC_LABEL {
        name.insert_str(0, "exported_");
    }
    name
}

/// Checks a label name: `[A-Za-z_][A-Za-z0-9_]*`, 1–128 bytes, not reserved.
pub fn validate_label_name(name: &str) -> Result<(), LabelError> {
    let bytes = name.as_bytes();
    let Some(&first) = bytes.first() else {
        return Err(LabelError::EmptyName);
    };
    if name.len() > MAX_LABEL_NAME_LEN {
        return Err(LabelError::NameTooLong {
            name: clip(name).into(),
            len: name.len(),
        });
    }
    let bad = if first.is_ascii_digit() {
        Some(0)
    } else {
        bytes
            .iter()
            .position(|&b| !(b.is_ascii_alphanumeric() || b == b'_'))
    };
    if let Some(at) = bad {
        return Err(LabelError::BadName {
            name: clip(name).into(),
            ch: name
                .get(at..)
                .and_then(|r| r.chars().next())
                .unwrap_or('\u{fffd}'),
            at,
        });
    }
    if name.starts_with("__") || name == SOURCE_LABEL || name == TALLY_METRIC_LABEL {
        return Err(LabelError::Reserved(name.into()));
    }
    Ok(())
}

/// A label name's first 64 bytes (on a character boundary), for messages.
fn clip(s: &str) -> &str {
    let mut end = s.len().min(64);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A validated label set in its canonical encoding. Cheap to compare, hash
/// and order; the empty set is the empty string.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Labels(Box<str>);

impl Labels {
    /// The empty set: an unlabelled series.
    pub fn none() -> Labels {
        Labels(Box::from(""))
    }

    /// Validates and encodes `pairs` in any order. Pairs with an empty value
    /// are dropped (an empty value means the label is absent).
    pub fn from_pairs<'a, I>(pairs: I, max_labels: usize) -> Result<Labels, LabelError>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let mut pairs: Pairs<'_> = pairs.into_iter().collect();
        let mut out = String::new();
        encode_into(&mut out, &mut pairs, max_labels)?;
        Ok(Labels(out.into_boxed_str()))
    }

    /// Wraps an encoding the ingest front door made with [`encode_into`].
    pub(crate) fn from_validated(encoded: &str) -> Labels {
        Labels(encoded.into())
    }

    /// Wraps an encoding read back from a store or a key, checking that it
    /// is canonical (sorted, unique, valid names, escaped values).
    pub fn from_encoded(encoded: &str) -> Option<Labels> {
        let pairs = decode(encoded)?;
        let mut again = String::with_capacity(encoded.len());
        let mut borrowed: Pairs<'_> = pairs.iter().map(|(n, v)| (*n, v.as_ref())).collect();
        encode_into(&mut again, &mut borrowed, usize::MAX).ok()?;
        (again == encoded).then(|| Labels(encoded.into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The pairs, sorted by name, values unescaped.
    pub fn pairs(&self) -> Vec<(&str, Cow<'_, str>)> {
        decode(&self.0).unwrap_or_default()
    }

    /// The pairs as a map, the shape responses carry them in.
    pub fn to_map(&self) -> std::collections::BTreeMap<String, String> {
        self.pairs()
            .into_iter()
            .map(|(n, v)| (n.to_string(), v.into_owned()))
            .collect()
    }

    /// The value of label `name`, if the set has it.
    pub fn get(&self, name: &str) -> Option<Cow<'_, str>> {
        self.pairs()
            .into_iter()
            .find_map(|(n, v)| (n == name).then_some(v))
    }

    /// The set keeping only the labels `keep` says yes to.
    pub fn retain(&self, mut keep: impl FnMut(&str) -> bool) -> Labels {
        let pairs = self.pairs();
        let kept: Vec<(&str, &str)> = pairs
            .iter()
            .filter(|(n, _)| keep(n))
            .map(|(n, v)| (*n, v.as_ref()))
            .collect();
        let mut out = String::new();
        write_sorted(&mut out, &kept);
        Labels(out.into_boxed_str())
    }
}

impl fmt::Display for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, "{{{}}}", self.0)
        }
    }
}

/// Validates `pairs` (sorting them by name in place) and appends their
/// canonical encoding to `out`. The ingest hot path calls this with a
/// reused buffer, so a labelled series costs no allocation per request
/// beyond the buffer's growth.
pub fn encode_into(
    out: &mut String,
    pairs: &mut Pairs<'_>,
    max_labels: usize,
) -> Result<(), LabelError> {
    pairs.retain(|(_, v)| !v.is_empty());
    if pairs.len() > max_labels {
        return Err(LabelError::TooMany {
            count: pairs.len(),
            max: max_labels,
        });
    }
    pairs.sort_unstable_by(|a, b| a.0.cmp(b.0));
    for (i, (name, value)) in pairs.iter().enumerate() {
        validate_label_name(name)?;
        if i > 0 && pairs[i - 1].0 == *name {
            return Err(LabelError::Duplicate((*name).into()));
        }
        if value.len() > MAX_LABEL_VALUE_LEN {
            return Err(LabelError::ValueTooLong {
                name: (*name).into(),
                len: value.len(),
            });
        }
    }
    write_sorted(out, pairs);
    Ok(())
}

/// Appends the encoding of pairs already validated, sorted and unique.
fn write_sorted(out: &mut String, pairs: &[(&str, &str)]) {
    for (i, (name, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(name);
        out.push_str("=\"");
        escape_into(out, value);
        out.push('"');
    }
}

fn escape_into(out: &mut String, value: &str) {
    if !value.bytes().any(|b| matches!(b, b'\\' | b'"' | b'\n')) {
        out.push_str(value);
        return;
    }
    for ch in value.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Parses an encoding into its pairs; `None` if it is not well formed.
fn decode(encoded: &str) -> Option<Vec<(&str, Cow<'_, str>)>> {
    let mut pairs = Vec::new();
    let mut rest = encoded;
    while !rest.is_empty() {
        if !pairs.is_empty() {
            rest = rest.strip_prefix(',')?;
        }
        let (name, after) = rest.split_once("=\"")?;
        let (value, after) = unescape_until_quote(after)?;
        pairs.push((name, value));
        rest = after;
    }
    Some(pairs)
}

/// The escaped value up to its closing quote, and what follows the quote.
fn unescape_until_quote(s: &str) -> Option<(Cow<'_, str>, &str)> {
    let end = s.find(['"', '\\'])?;
    if s.as_bytes()[end] == b'"' {
        return Some((Cow::Borrowed(&s[..end]), &s[end + 1..]));
    }
    let mut value = String::from(&s[..end]);
    let mut chars = s[end..].char_indices();
    while let Some((i, ch)) = chars.next() {
        match ch {
            '"' => return Some((Cow::Owned(value), &s[end + i + 1..])),
            '\\' => match chars.next()?.1 {
                '\\' => value.push('\\'),
                '"' => value.push('"'),
                'n' => value.push('\n'),
                _ => return None,
            },
            c => value.push(c),
        }
    }
    None
}

/// The label encodings of one request's series, in one buffer: a front door
/// pushes each series' pairs in request order, then borrows the encodings
/// while it hands the series to the aggregator. An unlabelled series costs
/// nothing; a labelled one no allocation of its own.
#[derive(Debug, Default)]
pub struct LabelArena {
    buf: String,
    /// 16 bytes a series (an error boxed, offsets as `u32`: a request's
    /// names and labels are far below 4 GiB): inline errors made this
    /// 48, about 240 KB allocated and written per 5,000-series request.
    spans: Vec<Result<(u32, u32), Box<LabelError>>>,
}

impl LabelArena {
    /// An arena with room for `series` series and `bytes` bytes of
    /// encodings, so that a request's arena is not copied as it grows.
    pub fn with_capacity(series: usize, bytes: usize) -> LabelArena {
        LabelArena {
            buf: String::with_capacity(bytes),
            spans: Vec::with_capacity(series),
        }
    }

    /// Encodes one series' `pairs` (any order; sorted in place) and checks
    /// the whole key of `source|metric{labels}` against
    /// [`MAX_SERIES_KEY_LEN`]. Returns the series' index for
    /// [`LabelArena::get`]. The caller's `pairs` are reused series after
    /// series: filled in place, never moved.
    pub fn push(
        &mut self,
        source: &str,
        metric: &str,
        pairs: &mut Pairs<'_>,
        max_labels: usize,
    ) -> usize {
        let start = self.buf.len();
        let span = match encode_into(&mut self.buf, pairs, max_labels) {
            Ok(()) => {
                let labels = self.buf.len() - start;
                let len = source.len() + 1 + metric.len() + if labels > 0 { labels + 2 } else { 0 };
                match (u32::try_from(start), u32::try_from(self.buf.len())) {
                    (Ok(a), Ok(b)) if len <= MAX_SERIES_KEY_LEN => Ok((a, b)),
                    _ => Err(Box::new(LabelError::KeyTooLong { len })),
                }
            }
            Err(e) => Err(Box::new(e)),
        };
        if span.is_err() {
            self.buf.truncate(start);
        }
        self.spans.push(span);
        self.spans.len() - 1
    }

    /// The encoding of the series pushed as `index`, or why it was refused.
    pub fn get(&self, index: usize) -> Result<&str, &LabelError> {
        match self.spans.get(index) {
            Some(Ok((a, b))) => Ok(&self.buf[*a as usize..*b as usize]),
            Some(Err(e)) => Err(&**e),
            None => Ok(""),
        }
    }
}

/// What [`LabelArena::push`] checks of a series without labels: only the
/// length of its key.
pub fn check_unlabelled(source: &str, metric: &str) -> Result<(), LabelError> {
    let len = source.len() + 1 + metric.len();
    match len <= MAX_SERIES_KEY_LEN {
        true => Ok(()),
        false => Err(LabelError::KeyTooLong { len }),
    }
}

/// `metric` followed by `{labels}` when there are any: the part of a series
/// key after `source|`.
pub fn metric_key<'a>(metric: &'a str, labels: &str) -> Cow<'a, str> {
    if labels.is_empty() {
        Cow::Borrowed(metric)
    } else {
        Cow::Owned(format!("{metric}{{{labels}}}"))
    }
}

/// Splits a metric key into the metric and the labels' encoding (empty when
/// unlabelled); `None` if it has a `{` without the closing `}` at the end.
pub fn split_metric_key(key: &str) -> Option<(&str, &str)> {
    match key.split_once('{') {
        None => Some((key, "")),
        Some((metric, rest)) => Some((metric, rest.strip_suffix('}')?)),
    }
}

#[cfg(test)]
mod tests;
