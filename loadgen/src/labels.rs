//! `--labels NAME=COUNT,...`: the label sets every metric of the fleet is
//! sent with, and the daemon's canonical text of a set.
//!
//! `--labels cpu=4,mode=8` gives each metric 4 × 8 = 32 label sets, so 32
//! series per metric per source. Values are decimal indexes: `cpu` takes
//! `"0"`..`"3"` and `mode` `"0"`..`"7"`. Set `k` is `k` written in mixed
//! radix with the first label as its most significant digit, so sets are
//! numbered in the order nested loops over the flag's labels would give.
//! Like everything else in the fleet, a set is a pure function of its
//! number: nothing is drawn at run time.
//!
//! The canonical text is how `tallyd` writes a set (sorted by name,
//! `name="value"` joined by `,`, Prometheus escaping in values); `--verify`
//! matches the series it reads back by it, and since it is also PromQL
//! matcher syntax it doubles as the read's `labels` condition.

use std::fmt;
use std::str::FromStr;

/// Most label sets per metric. A source holds `metrics × sets` series, and
/// `tallyd` keeps at most 100,000 per source by default
/// (`ingest.max_series_per_source`).
pub const MAX_LABEL_SETS: usize = 100_000;

/// Longest label name `tallyd` accepts.
const MAX_NAME_LEN: usize = 128;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--labels {spec:?}: {why}; expected a list like cpu=4,mode=8 (label name = number of values)"
)]
pub struct LabelSpecError {
    spec: String,
    why: String,
}

/// The labels of `--labels`, in the order given, each with its number of
/// values. Empty: the fleet sends no labels at all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSpec {
    labels: Vec<(String, usize)>,
}

impl LabelSpec {
    /// Label sets per metric: the product of the counts, 1 without labels.
    pub fn sets(&self) -> usize {
        self.labels.iter().map(|(_, n)| *n).product()
    }

    /// The labels of set `set` in the flag's order, values as digits.
    pub fn pairs(&self, set: usize) -> Vec<(&str, String)> {
        let mut rest = set;
        let mut values = vec![0; self.labels.len()];
        for (i, (_, n)) in self.labels.iter().enumerate().rev() {
            values[i] = rest % n;
            rest /= n;
        }
        self.labels
            .iter()
            .zip(values)
            .map(|((name, _), v)| (name.as_str(), v.to_string()))
            .collect()
    }

    /// The canonical text of set `set` (empty without labels).
    pub fn canonical(&self, set: usize) -> String {
        canonical(self.pairs(set).iter().map(|(n, v)| (*n, v.as_str())))
    }
}

/// The canonical text of a label set given in any order: sorted by name,
/// `name="value"` joined by `,`, with `\`, `"` and newlines in values
/// escaped as in Prometheus' text format. Empty values are absent labels.
pub fn canonical<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut pairs: Vec<(&str, &str)> = pairs.into_iter().filter(|(_, v)| !v.is_empty()).collect();
    pairs.sort_unstable();
    let mut out = String::new();
    for (i, (name, value)) in pairs.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(name);
        out.push_str("=\"");
        for c in value.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out
}

impl FromStr for LabelSpec {
    type Err = LabelSpecError;

    fn from_str(s: &str) -> Result<Self, LabelSpecError> {
        let bad = |why: String| LabelSpecError {
            spec: s.to_string(),
            why,
        };
        let mut labels: Vec<(String, usize)> = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, count) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("{part:?} has no `=`")))?;
            let name = name.trim();
            check_name(name).map_err(bad)?;
            if labels.iter().any(|(n, _)| n == name) {
                return Err(bad(format!("label {name:?} is given twice")));
            }
            let count: usize = count
                .trim()
                .parse()
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| bad(format!("{count:?} is not a whole number of at least 1")))?;
            labels.push((name.to_string(), count));
        }
        let sets = labels
            .iter()
            .try_fold(1usize, |acc, (_, n)| acc.checked_mul(*n))
            .filter(|&p| p <= MAX_LABEL_SETS);
        if sets.is_none() {
            return Err(bad(format!(
                "more than {MAX_LABEL_SETS} label sets per metric"
            )));
        }
        Ok(LabelSpec { labels })
    }
}

/// The daemon's rules for a pushed label name, checked up front so a
/// typo fails before the load rather than as rejections.
fn check_name(name: &str) -> Result<(), String> {
    let mut bytes = name.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
    if !first_ok || !bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(format!("label name {name:?} is not [A-Za-z_][A-Za-z0-9_]*"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!("label name {name:?} is over {MAX_NAME_LEN} bytes"));
    }
    if name.starts_with("__") || name == "source" {
        return Err(format!(
            "label name {name:?} is reserved (`__` names, and `source`, which is the series' source)"
        ));
    }
    Ok(())
}

impl fmt::Display for LabelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .labels
            .iter()
            .map(|(name, n)| format!("{name}={n}"))
            .collect();
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_count_in_nested_loop_order() {
        let spec: LabelSpec = "mode=3, cpu=2".parse().unwrap();
        assert_eq!(spec.sets(), 6);
        assert_eq!(spec.to_string(), "mode=3,cpu=2");
        assert_eq!(spec.pairs(0), [("mode", "0".into()), ("cpu", "0".into())]);
        assert_eq!(spec.pairs(1), [("mode", "0".into()), ("cpu", "1".into())]);
        assert_eq!(spec.pairs(5), [("mode", "2".into()), ("cpu", "1".into())]);
        // Sorted by name, whatever the flag's order.
        assert_eq!(spec.canonical(5), r#"cpu="1",mode="2""#);
        let all: std::collections::BTreeSet<String> = (0..6).map(|k| spec.canonical(k)).collect();
        assert_eq!(all.len(), 6);
        let none = LabelSpec::default();
        assert_eq!((none.sets(), none.canonical(0)), (1, String::new()));
        assert_eq!("".parse::<LabelSpec>().unwrap(), none);
    }

    #[test]
    fn canonical_text_escapes_and_drops_empty_values() {
        let text = canonical([("b", "x\"y"), ("a", "1\\2\n"), ("c", "")]);
        assert_eq!(text, r#"a="1\\2\n",b="x\"y""#);
        // A value holding what looks like another label stays one value.
        assert_ne!(
            canonical([("a", r#"1",b="2"#)]),
            canonical([("a", "1"), ("b", "2")])
        );
    }

    #[test]
    fn bad_specs_are_refused_naming_the_problem() {
        for (spec, needle) in [
            ("cpu", "no `=`"),
            ("cpu=0", "at least 1"),
            ("cpu=x", "at least 1"),
            ("1cpu=2", "[A-Za-z_]"),
            ("cp-u=2", "[A-Za-z_]"),
            ("__name__=2", "reserved"),
            ("source=2", "reserved"),
            ("a=2,a=3", "twice"),
            ("a=1000,b=1000", "label sets per metric"),
        ] {
            let err = spec.parse::<LabelSpec>().unwrap_err().to_string();
            assert!(err.contains(needle), "{spec}: {err}");
        }
    }
}
