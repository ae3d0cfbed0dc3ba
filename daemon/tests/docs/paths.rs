//! Paths and links: a code span that starts with one of the repository's
//! top-level entries (`daemon/…`, `scripts/…`, `docs/…`) must name a file
//! or folder that exists, and a relative link must reach an existing file
//! and, with a `#fragment`, one of that page's headings.

use std::collections::BTreeSet;
use std::path::Path;

use crate::markdown::Doc;

pub fn check(root: &Path, docs: &[Doc]) -> Vec<String> {
    let tops = top_level(root);
    let mut problems = Vec::new();
    for doc in docs {
        for span in doc.spans() {
            // `tests/ferretdb/install [TOOLS]`: the path is the first word.
            let word = span.split_whitespace().next().unwrap_or("");
            if let Some(p) = repo_path(word, &tops) {
                if !root.join(p).exists() {
                    problems.push(format!("{}: `{span}`: no such path", doc.name));
                }
            }
        }
        for link in doc.links() {
            problems.extend(check_link(doc, link, docs));
        }
    }
    problems
}

/// The repository's top-level files and folders, but the build's own.
fn top_level(root: &Path) -> BTreeSet<String> {
    std::fs::read_dir(root)
        .expect("the repository's root is readable")
        .map(|e| e.expect("a readable entry").file_name())
        .filter_map(|n| n.into_string().ok())
        .filter(|n| n != "target" && n != ".git")
        .collect()
}

/// `word` as a repository path: a path whose first component is a
/// top-level entry, with something after it or naming a file.
fn repo_path<'a>(word: &'a str, tops: &BTreeSet<String>) -> Option<&'a str> {
    let word = word.trim_end_matches([',', '.', ':', ')']);
    if word.contains(['*', '<', '{', '$']) {
        return None;
    }
    let first = word.split('/').next()?;
    (tops.contains(first) && (word.contains('/') || word.contains('.'))).then_some(word)
}

fn check_link(doc: &Doc, link: &str, docs: &[Doc]) -> Vec<String> {
    if link.contains("://") || link.starts_with("mailto:") {
        return Vec::new();
    }
    let (file, fragment) = match link.split_once('#') {
        Some((f, frag)) => (f, Some(frag)),
        None => (link, None),
    };
    let dir = doc.path.parent().expect("a document is in a folder");
    let target = if file.is_empty() {
        doc.path.clone()
    } else {
        dir.join(file)
    };
    if !target.exists() {
        return vec![format!("{}: link `{link}`: no such file", doc.name)];
    }
    let Some(fragment) = fragment else {
        return Vec::new();
    };
    let target = target.canonicalize().expect("an existing path");
    let page = docs
        .iter()
        .find(|d| d.path.canonicalize().is_ok_and(|p| p == target));
    match page {
        Some(page) if !page.anchors().iter().any(|a| a == fragment) => vec![format!(
            "{}: link `{link}`: {} has no heading with the anchor #{fragment}",
            doc.name, page.name
        )],
        _ => Vec::new(),
    }
}
