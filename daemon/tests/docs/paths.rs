//! Paths and links: a code span that starts with one of the repository's
//! top-level entries (`daemon/…`, `scripts/…`, `docs/…`) must name a file
//! or folder that exists, and a relative link must reach an existing file
//! and, with a `#fragment`, one of that page's headings.
//!
//! The `//!` and `///` docs of every crate's Rust files are held to the
//! same: there a span may also name a file of the module's own folder
//! (`<name>.rs`, `seal/<name>.rs`, `tests/`), which must exist beside the
//! file, in the module's folder, or under the crate's `src/`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

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

/// Every path the Rust docs of the crates in `crates` name that exists
/// nowhere they could mean.
pub fn check_sources(root: &Path, crates: &[PathBuf]) -> Vec<String> {
    let tops = top_level(root);
    let mut problems = Vec::new();
    for dir in crates {
        let mut files = Vec::new();
        rust_files(dir, &mut files);
        files.sort();
        for file in files {
            let doc = Doc::rust_docs(root, &file);
            let bases = bases(root, dir, &file);
            for span in doc.spans() {
                let word = span.split_whitespace().next().unwrap_or("");
                let Some(p) = source_path(word, &tops) else {
                    continue;
                };
                if !bases.iter().any(|b| b.join(p).exists()) {
                    problems.push(format!("{}: `{span}`: no such path", doc.name));
                }
            }
        }
    }
    problems
}

/// The `.rs` files under `dir`, but the build's.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a crate's folder is readable") {
        let path = entry.expect("a readable entry").path();
        if path.is_dir() {
            if !path.ends_with("target") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Where a path in `file`'s docs may be rooted: the file's folder, its
/// module's folder (`<x>/` for `<x>.rs`), the crate's `src/`, the crate's
/// folder and the repository.
fn bases(root: &Path, crate_dir: &Path, file: &Path) -> Vec<PathBuf> {
    let dir = file.parent().expect("a file is in a folder");
    let mut out = vec![dir.to_path_buf()];
    if let Some(stem) = file.file_stem() {
        out.push(dir.join(stem));
    }
    out.extend([
        crate_dir.join("src"),
        crate_dir.to_path_buf(),
        root.to_path_buf(),
    ]);
    out
}

/// `word` as a path a Rust doc names: a repository path, or a Rust file
/// (`<name>.rs`, `seal/<name>.rs`).
fn source_path<'a>(word: &'a str, tops: &BTreeSet<String>) -> Option<&'a str> {
    repo_path(word, tops).or_else(|| {
        let word = word.trim_end_matches([',', '.', ':', ')']);
        let rust = word.ends_with(".rs") && !word.starts_with(['.', '/']);
        (rust && !word.contains(['*', '<', '{', '$', ':'])).then_some(word)
    })
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
    if word.contains(['*', '<', '{', '$', '…']) {
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
