//! Name matchers: how a reader picks sources, metrics and label values. One matcher is an
//! exact name, a glob (`web-*`), a list (`a,b,web-*`) or an anchored regular
//! expression, possibly negated (PromQL's `=`, `!=`, `=~`, `!~`).
//!
//! Stores use [`NameMatcher::literal_prefix`] to turn a matcher into a key
//! range and then filter with [`NameMatcher::matches`] themselves, so every
//! store applies exactly the same regular-expression dialect (Rust's
//! `regex`, the RE2 family PromQL uses) whatever its own engine would do.
//!
//! Globs are translated to that same dialect. `regex` matches in time
//! linear in the name's length, but proportional to the compiled
//! pattern's size too, so readers' patterns are bounded twice
//! ([`PatternLimits`]): by their length and by their compiled size (a
//! short `(.*){9999}` compiles to a large program). Runs of `*` in a glob
//! are one `*`, so a glob of ten thousand stars is as cheap as `*`.

use regex::{Regex, RegexBuilder};

use crate::labels::Labels;

/// The comparison a matcher makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchOp {
    Equal,
    NotEqual,
    Regex,
    NotRegex,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SelectorError {
    #[error("{pattern:?} is not a valid regular expression: {reason}")]
    BadRegex { pattern: String, reason: String },
    #[error("an empty pattern matches nothing; leave the parameter out to match everything")]
    Empty,
    #[error("the pattern is {len} bytes long; the limit is {max} (query.max_pattern_bytes)")]
    TooLong { len: usize, max: usize },
    #[error("label matchers {spec:?}: {reason}; write them as in PromQL, e.g. mode=\"idle\",cpu=~\"0|1\"")]
    BadMatchers { spec: String, reason: String },
    #[error("the pattern compiles to more than {max} bytes (query.max_pattern_compiled_bytes): simplify it, e.g. fewer repetitions or alternatives")]
    TooComplex { max: usize },
}

/// Bounds on a reader's pattern (`query.max_pattern_bytes`,
/// `query.max_pattern_compiled_bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatternLimits {
    /// Longest pattern text, in bytes.
    pub max_bytes: usize,
    /// Largest compiled program, in bytes.
    pub max_compiled_bytes: usize,
}

impl Default for PatternLimits {
    /// The `[query]` defaults, which also bound the operator's own patterns
    /// (rollup globs).
    fn default() -> Self {
        PatternLimits {
            max_bytes: 16 * 1024,
            max_compiled_bytes: 1 << 20,
        }
    }
}

impl PatternLimits {
    fn check_len(&self, pattern: &str) -> Result<(), SelectorError> {
        if pattern.len() > self.max_bytes {
            return Err(SelectorError::TooLong {
                len: pattern.len(),
                max: self.max_bytes,
            });
        }
        Ok(())
    }

    /// `pattern` anchored at both ends and compiled within the bound.
    fn compile(&self, pattern: &str) -> Result<Regex, SelectorError> {
        RegexBuilder::new(&format!("^(?:{pattern})$"))
            .size_limit(self.max_compiled_bytes)
            .build()
            .map_err(|e| match e {
                regex::Error::CompiledTooBig(_) => SelectorError::TooComplex {
                    max: self.max_compiled_bytes,
                },
                e => SelectorError::BadRegex {
                    pattern: pattern.to_string(),
                    reason: e.to_string(),
                },
            })
    }
}

/// One condition on a name.
#[derive(Debug, Clone)]
pub struct NameMatcher {
    op: MatchOp,
    /// The name (`Equal`, `NotEqual`) or the pattern as given (regexes).
    value: String,
    /// Anchored compiled pattern, for the regex ops.
    regex: Option<Regex>,
    /// Every name this matcher accepts starts with this.
    prefix: String,
    /// The names, when this matcher is a plain list of them (`a,b`).
    names: Option<Vec<String>>,
}

impl PartialEq for NameMatcher {
    fn eq(&self, other: &Self) -> bool {
        self.op == other.op && self.value == other.value
    }
}

impl NameMatcher {
    /// Matches every name.
    pub fn any() -> NameMatcher {
        NameMatcher {
            op: MatchOp::Regex,
            value: ".*".into(),
            regex: None,
            prefix: String::new(),
            names: None,
        }
    }

    pub fn exact(name: &str) -> NameMatcher {
        NameMatcher {
            op: MatchOp::Equal,
            value: name.to_string(),
            regex: None,
            prefix: name.to_string(),
            names: Some(vec![name.to_string()]),
        }
    }

    /// A PromQL-style matcher: `op` with `value` (a regex for the regex ops,
    /// anchored at both ends as in PromQL), within the default limits.
    pub fn new(op: MatchOp, value: &str) -> Result<NameMatcher, SelectorError> {
        NameMatcher::new_within(op, value, &PatternLimits::default())
    }

    /// [`NameMatcher::new`] within `limits`.
    pub fn new_within(
        op: MatchOp,
        value: &str,
        limits: &PatternLimits,
    ) -> Result<NameMatcher, SelectorError> {
        match op {
            MatchOp::Equal => Ok(NameMatcher::exact(value)),
            MatchOp::NotEqual => Ok(NameMatcher {
                op,
                value: value.to_string(),
                regex: None,
                prefix: String::new(),
                names: None,
            }),
            MatchOp::Regex | MatchOp::NotRegex => {
                if op == MatchOp::Regex && value == ".*" {
                    return Ok(NameMatcher::any());
                }
                limits.check_len(value)?;
                let regex = limits.compile(value)?;
                let prefix = if op == MatchOp::Regex {
                    regex_literal_prefix(value)
                } else {
                    String::new()
                };
                Ok(NameMatcher {
                    op,
                    value: value.to_string(),
                    regex: Some(regex),
                    prefix,
                    names: None,
                })
            }
        }
    }

    /// The HTTP API's form: a comma-separated list of names and globs (`*`
    /// any run of characters, `?` one character). A single plain name is an
    /// exact match. Within the default limits.
    pub fn parse_list(spec: &str) -> Result<NameMatcher, SelectorError> {
        NameMatcher::parse_list_within(spec, &PatternLimits::default())
    }

    /// [`NameMatcher::parse_list`] within `limits`.
    pub fn parse_list_within(
        spec: &str,
        limits: &PatternLimits,
    ) -> Result<NameMatcher, SelectorError> {
        limits.check_len(spec)?;
        let items: Vec<&str> = spec
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        match items.as_slice() {
            [] => Err(SelectorError::Empty),
            [one] if !one.contains(['*', '?']) => Ok(NameMatcher::exact(one)),
            _ if items.iter().any(|g| g.bytes().all(|c| c == b'*')) => Ok(NameMatcher::any()),
            _ => {
                let alternatives: Vec<String> = items.iter().map(|g| glob_to_regex(g)).collect();
                // The translation may be longer than the glob; the glob's
                // own length was checked above.
                let unbounded_len = PatternLimits {
                    max_bytes: usize::MAX,
                    ..*limits
                };
                NameMatcher::new_within(MatchOp::Regex, &alternatives.join("|"), &unbounded_len)
                    .map(|mut m| {
                        // The regex prefix scan gives up on alternations; a glob
                        // list knows its common literal prefix exactly.
                        m.prefix = common_prefix(items.iter().map(|g| glob_literal_prefix(g)));
                        if !items.iter().any(|g| g.contains(['*', '?'])) {
                            let mut names: Vec<String> =
                                items.iter().map(|s| s.to_string()).collect();
                            names.sort();
                            names.dedup();
                            m.names = Some(names);
                        }
                        m
                    })
            }
        }
    }

    /// Exactly `names`, however many: for lists the daemon builds itself
    /// from its catalog, which no reader's limit applies to.
    pub fn one_of(names: &[String]) -> Result<NameMatcher, SelectorError> {
        let mut sorted = names.to_vec();
        sorted.sort();
        sorted.dedup();
        if let [one] = sorted.as_slice() {
            return Ok(NameMatcher::exact(one));
        }
        let alternatives: Vec<String> = sorted.iter().map(|n| regex::escape(n)).collect();
        let unbounded = PatternLimits {
            max_bytes: usize::MAX,
            max_compiled_bytes: usize::MAX,
        };
        let mut m = NameMatcher::new_within(MatchOp::Regex, &alternatives.join("|"), &unbounded)?;
        m.prefix = common_prefix(sorted.iter().map(String::as_str));
        m.names = Some(sorted);
        Ok(m)
    }

    pub fn op(&self) -> MatchOp {
        self.op
    }

    pub fn value(&self) -> &str {
        &self.value
    }

    pub fn matches(&self, name: &str) -> bool {
        match self.op {
            MatchOp::Equal => name == self.value,
            MatchOp::NotEqual => name != self.value,
            MatchOp::Regex => self.regex.as_ref().is_none_or(|r| r.is_match(name)),
            MatchOp::NotRegex => !self.regex.as_ref().is_some_and(|r| r.is_match(name)),
        }
    }

    /// The one name this matcher accepts, if it accepts exactly one.
    pub fn exact_name(&self) -> Option<&str> {
        (self.op == MatchOp::Equal).then_some(self.value.as_str())
    }

    /// The names this matcher accepts, when it is a finite list of them.
    pub fn names(&self) -> Option<&[String]> {
        self.names.as_deref()
    }

    /// Accepts every name.
    pub fn is_any(&self) -> bool {
        self.op == MatchOp::Regex && self.regex.is_none()
    }

    /// A prefix shared by every accepted name (possibly empty).
    pub fn literal_prefix(&self) -> &str {
        &self.prefix
    }
}

/// One condition on a label's value, with PromQL's meaning: a series
/// without the label has it with the empty value, so `mode=""` selects the
/// series that have no `mode` and `mode!=""` those that have one.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelMatcher {
    pub name: String,
    pub matcher: NameMatcher,
}

impl LabelMatcher {
    /// `name op value` within `limits` (the regex ops are anchored).
    pub fn new(
        name: &str,
        op: MatchOp,
        value: &str,
        limits: &PatternLimits,
    ) -> Result<LabelMatcher, SelectorError> {
        Ok(LabelMatcher {
            name: name.to_string(),
            matcher: NameMatcher::new_within(op, value, limits)?,
        })
    }

    pub fn matches(&self, labels: &Labels) -> bool {
        let value = labels.get(&self.name);
        self.matcher.matches(value.as_deref().unwrap_or(""))
    }
}

/// Parses label matchers written as in PromQL, `mode="idle",cpu=~"0|1"`
/// (braces optional), within `limits`: the HTTP API's `labels` parameter.
/// PromQL's own parser reads the quoting and escapes; the patterns are
/// then compiled the way every other matcher is.
pub fn parse_label_matchers(
    spec: &str,
    limits: &PatternLimits,
) -> Result<Vec<LabelMatcher>, SelectorError> {
    limits.check_len(spec)?;
    let inner = spec.trim();
    let inner = inner
        .strip_prefix('{')
        .and_then(|s| s.strip_suffix('}'))
        .unwrap_or(inner);
    if inner.trim().is_empty() {
        return Ok(Vec::new());
    }
    // A metric name in front keeps the parser from refusing a selector
    // whose matchers all accept the empty value (`mode=""`).
    let bad = |reason: String| SelectorError::BadMatchers {
        spec: spec.chars().take(200).collect(),
        reason,
    };
    let expr = promql_parser::parser::parse(&format!("m{{{inner}}}")).map_err(bad)?;
    let promql_parser::parser::Expr::VectorSelector(vs) = expr else {
        return Err(bad("not a list of label matchers".into()));
    };
    let mut out = Vec::new();
    for m in vs.matchers.matchers.iter().filter(|m| m.name != "__name__") {
        if m.name == crate::labels::SOURCE_LABEL {
            return Err(bad("select sources with the `source` parameter".into()));
        }
        let op = match m.op {
            promql_parser::label::MatchOp::Equal => MatchOp::Equal,
            promql_parser::label::MatchOp::NotEqual => MatchOp::NotEqual,
            promql_parser::label::MatchOp::Re(_) => MatchOp::Regex,
            promql_parser::label::MatchOp::NotRe(_) => MatchOp::NotRegex,
        };
        out.push(LabelMatcher::new(&m.name, op, &m.value, limits)?);
    }
    if !vs.matchers.or_matchers.is_empty() {
        return Err(bad("`or` between matchers is not supported".into()));
    }
    Ok(out)
}

/// Whether every matcher in `all` accepts `labels` (true for none).
pub fn all_match_labels(all: &[LabelMatcher], labels: &Labels) -> bool {
    all.iter().all(|m| m.matches(labels))
}

/// Whether every matcher in `all` accepts `name` (PromQL: matchers on one
/// label are ANDed).
pub fn all_match(all: &[NameMatcher], name: &str) -> bool {
    all.iter().all(|m| m.matches(name))
}

/// The longest prefix every name accepted by all of `all` must start with.
pub fn combined_prefix(all: &[NameMatcher]) -> &str {
    all.iter()
        .map(NameMatcher::literal_prefix)
        .max_by_key(|p| p.len())
        .unwrap_or("")
}

fn glob_to_regex(glob: &str) -> String {
    let mut re = String::with_capacity(glob.len() + 8);
    let mut star = false;
    for c in glob.chars() {
        // `**` matches what `*` does: one `.*` keeps the program small.
        let repeat = star && c == '*';
        star = c == '*';
        match c {
            '*' if repeat => {}
            '*' => re.push_str(".*"),
            '?' => re.push('.'),
            c => re.push_str(&regex::escape(&c.to_string())),
        }
    }
    re
}

fn glob_literal_prefix(glob: &str) -> &str {
    &glob[..glob.find(['*', '?']).unwrap_or(glob.len())]
}

fn common_prefix<'a>(mut names: impl Iterator<Item = &'a str>) -> String {
    let Some(first) = names.next() else {
        return String::new();
    };
    let mut len = first.len();
    for n in names {
        len = first
            .bytes()
            .zip(n.bytes())
            .take(len)
            .take_while(|(a, b)| a == b)
            .count();
    }
    // Names differing inside a multi-byte character share only the bytes
    // before it.
    while !first.is_char_boundary(len) {
        len -= 1;
    }
    first[..len].to_string()
}

/// A conservative literal prefix of a regex: the leading run of plain
/// characters, dropping the last one if a quantifier follows it. Any
/// top-level-looking alternation gives up (empty prefix), since `a|b` has no
/// common prefix worth finding.
fn regex_literal_prefix(pattern: &str) -> String {
    if pattern.contains('|') {
        return String::new();
    }
    let mut prefix = String::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        let literal = match c {
            '\\' => match chars.peek() {
                Some(&e) if "._-:/*?+()[]{}|^$\\".contains(e) => {
                    chars.next();
                    e
                }
                _ => break,
            },
            c if c.is_ascii_alphanumeric() || "_-:/".contains(c) => c,
            _ => break,
        };
        if matches!(chars.peek(), Some('*' | '?' | '+' | '{')) {
            break;
        }
        prefix.push(literal);
    }
    prefix
}

#[cfg(test)]
mod tests {
    use super::common_prefix;

    #[test]
    fn common_prefix_stops_at_a_character_boundary() {
        // Found by fuzzing: two names that differ inside a 4-byte character.
        let names = ["\u{105BB}", "\u{16F8F}"];
        assert_eq!(common_prefix(names.into_iter()), "");
        assert_eq!(common_prefix(["ab\u{E9}", "ab\u{E8}"].into_iter()), "ab");
    }

    use super::*;

    #[test]
    fn exact_and_glob_lists() {
        let m = NameMatcher::parse_list("web-01").unwrap();
        assert_eq!(m.exact_name(), Some("web-01"));
        assert!(m.matches("web-01") && !m.matches("web-011"));

        let m = NameMatcher::parse_list("web-*").unwrap();
        assert_eq!(m.literal_prefix(), "web-");
        assert!(m.matches("web-") && m.matches("web-9.x") && !m.matches("db-1"));

        let m = NameMatcher::parse_list("host-1?,host-2").unwrap();
        assert_eq!(m.literal_prefix(), "host-");
        assert!(m.matches("host-10") && m.matches("host-2") && !m.matches("host-100"));
        assert_eq!(m.names(), None);
        let m = NameMatcher::parse_list("b,a,b").unwrap();
        assert_eq!(m.names(), Some(&["a".to_string(), "b".to_string()][..]));
        assert!(m.matches("a") && !m.matches("a,b"));

        // Regex metacharacters in names are literal in globs.
        let m = NameMatcher::parse_list("a.b*").unwrap();
        assert!(m.matches("a.bc") && !m.matches("axbc"));

        assert!(NameMatcher::parse_list("*").unwrap().is_any());
        let many: Vec<String> = (0..3000).map(|i| format!("m.{i:05}")).collect();
        let m = NameMatcher::one_of(&many).unwrap();
        assert_eq!(m.literal_prefix(), "m.0");
        assert!(m.matches("m.02999") && !m.matches("mx02999"));
        assert_eq!(m.names().map(<[String]>::len), Some(3000));
        assert_eq!(
            NameMatcher::parse_list(" , ").unwrap_err(),
            SelectorError::Empty
        );
    }

    #[test]
    fn patterns_are_bounded() {
        let stars = "*".repeat(10_000);
        assert!(NameMatcher::parse_list(&stars).unwrap().is_any());
        let m =
            NameMatcher::parse_list(&format!("a{}b{}", &stars[..5000], &stars[..5000])).unwrap();
        assert!(m.matches("ab") && m.matches("a-x-b") && !m.matches("ba"));
        assert_eq!(glob_to_regex("a**?*b"), "a.*..*b");
        let small = PatternLimits {
            max_bytes: 8,
            max_compiled_bytes: 1 << 20,
        };
        let e = NameMatcher::parse_list_within("abcdefghi*", &small).unwrap_err();
        assert_eq!(e, SelectorError::TooLong { len: 10, max: 8 });
        assert!(e.to_string().contains("query.max_pattern_bytes"));
        let e = NameMatcher::new(MatchOp::Regex, "(.*){9999}").unwrap_err();
        assert!(matches!(e, SelectorError::TooComplex { .. }), "{e:?}");
        assert!(e.to_string().contains("query.max_pattern_compiled_bytes"));
        let e = NameMatcher::new_within(MatchOp::NotRegex, "abcdefghi", &small).unwrap_err();
        assert!(matches!(e, SelectorError::TooLong { .. }));
    }

    #[test]
    fn promql_ops_are_anchored() {
        let m = NameMatcher::new(MatchOp::Regex, "web.*").unwrap();
        assert!(m.matches("web-1") && !m.matches("xweb-1"));
        assert_eq!(m.literal_prefix(), "web");
        let m = NameMatcher::new(MatchOp::NotRegex, "web.*").unwrap();
        assert!(!m.matches("web-1") && m.matches("xweb-1"));
        assert_eq!(m.literal_prefix(), "");
        let m = NameMatcher::new(MatchOp::NotEqual, "a").unwrap();
        assert!(!m.matches("a") && m.matches("b"));
        assert!(matches!(
            NameMatcher::new(MatchOp::Regex, "(").unwrap_err(),
            SelectorError::BadRegex { .. }
        ));
    }

    #[test]
    fn regex_prefixes_are_conservative() {
        assert_eq!(regex_literal_prefix("abc"), "abc");
        assert_eq!(regex_literal_prefix("abc+"), "ab");
        assert_eq!(regex_literal_prefix("web\\.1.*"), "web.1");
        assert_eq!(regex_literal_prefix("a|b"), "");
        assert_eq!(regex_literal_prefix("(ab)c"), "");
        assert_eq!(regex_literal_prefix("ab[0-9]"), "ab");
        let all = [
            NameMatcher::new(MatchOp::Regex, "w.*").unwrap(),
            NameMatcher::exact("web-1"),
        ];
        assert_eq!(combined_prefix(&all), "web-1");
        assert!(all_match(&all, "web-1") && !all_match(&all, "w2"));
    }
}
