//! Name matchers: how a reader picks sources and metrics. One matcher is an
//! exact name, a glob (`web-*`), a list (`a,b,web-*`) or an anchored regular
//! expression, possibly negated (PromQL's `=`, `!=`, `=~`, `!~`).
//!
//! Stores use [`NameMatcher::literal_prefix`] to turn a matcher into a key
//! range and then filter with [`NameMatcher::matches`] themselves, so every
//! store applies exactly the same regular-expression dialect (Rust's
//! `regex`, the RE2 family PromQL uses) whatever its own engine would do.

use regex::Regex;

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
    /// anchored at both ends as in PromQL).
    pub fn new(op: MatchOp, value: &str) -> Result<NameMatcher, SelectorError> {
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
                let regex =
                    Regex::new(&format!("^(?:{value})$")).map_err(|e| SelectorError::BadRegex {
                        pattern: value.to_string(),
                        reason: e.to_string(),
                    })?;
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
    /// exact match.
    pub fn parse_list(spec: &str) -> Result<NameMatcher, SelectorError> {
        let items: Vec<&str> = spec
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        match items.as_slice() {
            [] => Err(SelectorError::Empty),
            [one] if !one.contains(['*', '?']) => Ok(NameMatcher::exact(one)),
            ["*"] => Ok(NameMatcher::any()),
            _ => {
                let alternatives: Vec<String> = items.iter().map(|g| glob_to_regex(g)).collect();
                NameMatcher::new(MatchOp::Regex, &alternatives.join("|")).map(|mut m| {
                    // The regex prefix scan gives up on alternations; a glob
                    // list knows its common literal prefix exactly.
                    m.prefix = common_prefix(items.iter().map(|g| glob_literal_prefix(g)));
                    if !items.iter().any(|g| g.contains(['*', '?'])) {
                        let mut names: Vec<String> = items.iter().map(|s| s.to_string()).collect();
                        names.sort();
                        names.dedup();
                        m.names = Some(names);
                    }
                    m
                })
            }
        }
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
    for c in glob.chars() {
        match c {
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
        assert_eq!(
            NameMatcher::parse_list(" , ").unwrap_err(),
            SelectorError::Empty
        );
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
