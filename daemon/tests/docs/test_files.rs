//! Where unit tests live, one convention (`docs/contributing.md`): in the
//! file they test, in `mod tests`; when they outgrow it, a file module
//! `<x>.rs` moves them to `<x>_tests.rs` beside it (declared with
//! `#[path = "<x>_tests.rs"]`), a folder module (`<x>/mod.rs`, or `<x>.rs`
//! beside `<x>/`) to `<x>/tests.rs`. No other `#[path]` is used, and no
//! `<x>_tests.rs` file lacks its module.

use std::path::{Path, PathBuf};

use crate::paths::rust_files;

pub fn check(root: &Path, crates: &[PathBuf]) -> Vec<String> {
    let mut problems = Vec::new();
    for dir in crates {
        let mut files = Vec::new();
        rust_files(&dir.join("src"), &mut files);
        files.sort();
        for file in &files {
            let rel = file.strip_prefix(root).unwrap_or(file).display();
            let text = std::fs::read_to_string(file).unwrap();
            let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
            let expected = format!("#[path = \"{stem}_tests.rs\"]");
            for line in text.lines().map(str::trim) {
                if line.starts_with("#[path") && line != expected {
                    problems.push(format!(
                        "{rel}: `{line}`: tests of a file module are `{stem}_tests.rs`, \
                         of a folder module `tests.rs` in its folder (no `#[path]`)"
                    ));
                }
            }
            if let Some(tested) = stem.strip_suffix("_tests") {
                let declared = std::fs::read_to_string(file.with_file_name(format!("{tested}.rs")))
                    .is_ok_and(|t| t.contains(&format!("#[path = \"{stem}.rs\"]")));
                if !declared {
                    problems.push(format!(
                        "{rel}: not declared by `{tested}.rs` as its `mod tests`"
                    ));
                }
            }
        }
    }
    problems
}
