//! The module map: `docs/architecture.md` and `daemon/src/lib.rs` list the
//! same modules (those `lib.rs` declares) and show the same data-path
//! diagram.

use std::collections::BTreeSet;
use std::path::Path;

use crate::markdown::{cells, Doc};

pub fn check(root: &Path) -> Vec<String> {
    let lib = std::fs::read_to_string(root.join("daemon/src/lib.rs")).unwrap();
    let page = Doc::load(root, &root.join("docs/architecture.md"));
    let mut problems = Vec::new();

    let declared: BTreeSet<String> = lib
        .lines()
        .filter_map(|l| {
            let l = l.trim().strip_prefix("pub ").unwrap_or(l.trim());
            l.strip_prefix("mod ")?
                .strip_suffix(';')
                .map(str::to_string)
        })
        .collect();
    let docs: String = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| format!("{}\n", l.strip_prefix(' ').unwrap_or(l)))
        .collect();
    for (what, listed) in [
        ("daemon/src/lib.rs's table", table_modules(&docs)),
        ("docs/architecture.md's table", table_modules(&page.prose)),
    ] {
        for m in declared.difference(&listed) {
            problems.push(format!("{what} does not list the module `{m}`"));
        }
        for m in listed.difference(&declared) {
            problems.push(format!("{what} lists `{m}`, which lib.rs does not declare"));
        }
    }

    let lib_diagram = first_text_block(&docs);
    let page_diagram = page
        .fences
        .iter()
        .find(|f| f.lang == "text")
        .map(|f| f.body.clone());
    if lib_diagram.is_none() || lib_diagram != page_diagram {
        problems.push(
            "the data-path diagrams of daemon/src/lib.rs and docs/architecture.md differ: \
             change both"
                .into(),
        );
    }
    problems
}

/// The modules of a `| module | … |` table: the first cells that are one
/// code span naming a module (`model`, or rustdoc's [`model`]).
fn table_modules(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(cells)
        .filter_map(|c| {
            let first = c.first()?.trim_start_matches('[').trim_end_matches(']');
            let name = first.strip_prefix('`')?.strip_suffix('`')?;
            name.chars()
                .all(|ch| ch.is_ascii_lowercase() || ch == '_')
                .then(|| name.to_string())
        })
        .collect()
}

/// The body of the first ```text block of `text`.
fn first_text_block(text: &str) -> Option<String> {
    let start = text.find("```text\n")? + "```text\n".len();
    let len = text[start..].find("```")?;
    Some(text[start..start + len].to_string())
}
