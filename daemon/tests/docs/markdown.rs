//! Just enough Markdown for the checks: fenced code blocks, inline code
//! spans, links and headings (with the anchors GitHub gives them).

use std::path::{Path, PathBuf};

/// One document, read and split.
pub struct Doc {
    /// Relative to the repository's root, for messages.
    pub name: String,
    pub path: PathBuf,
    pub text: String,
    /// Fenced code blocks: the info string (`sh`, `toml`...) and the lines.
    pub fences: Vec<Fence>,
    /// The text outside fenced blocks, fences replaced by blank lines.
    pub prose: String,
}

pub struct Fence {
    pub lang: String,
    /// The lines, less the indentation of the opening fence.
    pub body: String,
    indent: usize,
}

impl Doc {
    pub fn load(root: &Path, path: &Path) -> Doc {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        Doc::parse(root, path, text)
    }

    /// The `//!` and `///` docs of a Rust file, as one document: every
    /// other line left blank, so that line numbers and fences hold.
    pub fn rust_docs(root: &Path, path: &Path) -> Doc {
        let code = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let mut text = String::with_capacity(code.len() / 4);
        for line in code.lines() {
            let t = line.trim_start();
            let doc = t.strip_prefix("//!").or_else(|| t.strip_prefix("///"));
            if let Some(doc) = doc.filter(|_| !t.starts_with("////")) {
                text.push_str(doc.strip_prefix(' ').unwrap_or(doc));
            }
            text.push('\n');
        }
        Doc::parse(root, path, text)
    }

    fn parse(root: &Path, path: &Path, text: String) -> Doc {
        let (fences, prose) = split(&text);
        Doc {
            name: path
                .strip_prefix(root)
                .unwrap_or(path)
                .display()
                .to_string(),
            path: path.to_path_buf(),
            text,
            fences,
            prose,
        }
    }

    /// The inline code spans of the prose.
    pub fn spans(&self) -> Vec<&str> {
        spans(&self.prose)
    }

    /// Link targets of the prose: `[text](target)`.
    pub fn links(&self) -> Vec<&str> {
        let mut out = Vec::new();
        let mut rest = self.prose.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let end = rest.find([')', ' ', '\n']).unwrap_or(rest.len());
            out.push(&rest[..end]);
            rest = &rest[end..];
        }
        out
    }

    /// The anchors of the document's headings.
    pub fn anchors(&self) -> Vec<String> {
        self.prose
            .lines()
            .filter(|l| l.starts_with('#'))
            .map(|l| slug(l.trim_start_matches('#')))
            .collect()
    }
}

/// Fenced blocks, and the text with them blanked out.
fn split(text: &str) -> (Vec<Fence>, String) {
    let mut fences = Vec::new();
    let mut prose = String::with_capacity(text.len());
    let mut open: Option<Fence> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        match (&mut open, trimmed.strip_prefix("```")) {
            (None, Some(info)) => {
                open = Some(Fence {
                    lang: info.trim().to_string(),
                    body: String::new(),
                    indent: line.len() - trimmed.len(),
                })
            }
            (Some(_), Some(_)) => fences.extend(open.take()),
            (Some(f), None) => {
                let indent = line.len() - trimmed.len();
                f.body.push_str(&line[indent.min(f.indent)..]);
                f.body.push('\n');
            }
            (None, None) => prose.push_str(line),
        }
        prose.push('\n');
    }
    (fences, prose)
}

/// Inline code spans (single backticks).
pub fn spans(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut parts = line.split('`');
        parts.next();
        while let (Some(code), Some(_)) = (parts.next(), parts.next()) {
            out.push(code);
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces
/// as hyphens.
pub fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The cells of a table row, trimmed; None for a line that is not a row.
pub fn cells(line: &str) -> Option<Vec<&str>> {
    let inner = line.trim().strip_prefix('|')?.strip_suffix('|')?;
    Some(inner.split(" | ").map(str::trim).collect())
}

#[test]
fn slugs_are_githubs() {
    assert_eq!(slug(" `[grpc]`"), "grpc");
    assert_eq!(slug(" tally.v1"), "tallyv1");
    assert_eq!(slug(" I/O errors"), "io-errors");
    assert_eq!(
        slug(" Configuring agents: OTLP and remote-write"),
        "configuring-agents-otlp-and-remote-write"
    );
}

#[test]
fn fences_and_spans_are_found() {
    let (fences, prose) = split("a `x`\n   ```sh\n   cargo t\n   ```\nb `y` `z`\n");
    assert_eq!(fences.len(), 1);
    assert_eq!(fences[0].lang, "sh");
    assert_eq!(fences[0].body, "cargo t\n");
    assert_eq!(spans(&prose), ["x", "y", "z"]);
}
