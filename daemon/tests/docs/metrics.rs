//! Metric names: every `tally_*` name the docs give is one the daemon's
//! code names (in a string literal: the metrics it records, and the few
//! other names the docs may mention, such as the `tally_metric` label).

use std::collections::BTreeSet;
use std::path::Path;

use crate::markdown::Doc;

pub fn check(root: &Path, docs: &[Doc]) -> Vec<String> {
    let mut known = BTreeSet::new();
    collect_literals(&root.join("daemon/src"), &mut known);
    let mut problems = Vec::new();
    for doc in docs {
        for name in names(&doc.text) {
            if !known.contains(name) {
                problems.push(format!(
                    "{}: `{name}` is not a name daemon/src records",
                    doc.name
                ));
            }
        }
    }
    problems
}

/// `tally_…` words of `text`; a name cut short (`tally_mongodb_*`) is a
/// family, not a name.
fn names(text: &str) -> BTreeSet<&str> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("tally_") {
        let before = rest[..i].chars().next_back();
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        let word = &tail[..end];
        let whole = !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if whole && !word.ends_with('_') {
            out.insert(word);
        }
        rest = &tail[end..];
    }
    out
}

/// `"tally_…"` string literals of every `.rs` file under `dir`.
fn collect_literals(dir: &Path, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_literals(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            for piece in text.split("\"tally_").skip(1) {
                if let Some((name, _)) = piece.split_once('"') {
                    out.insert(format!("tally_{name}"));
                }
            }
        }
    }
}
