//! The drift checks: what keeps the documentation, and the code's
//! structure, true as both change. They read the repository's files (and
//! run `--help` of the binaries and cargo), start no daemon, and take a
//! second or two.
//!
//! - `paths`: every repository path and every link named in the docs exists,
//!   down to the heading a link points at, and every path the `//!` and `///`
//!   docs of the workspace's crates name;
//! - `config_keys`: every configuration key the docs name is in
//!   `config/tallyd.toml`, and `docs/configuration.md` lists every key of it
//!   with its default;
//! - `commands`: every `cargo`, `scripts/`, `tallyd` and `tally-loadgen`
//!   command the docs show names a real package, target, script and flags;
//! - `metrics`: every `tally_*` metric the docs name is one the daemon
//!   exports;
//! - `modules`: `docs/architecture.md` shows the modules and the data-path
//!   diagram that `daemon/src/lib.rs` shows;
//! - `cycles`: no import cycle between the files of a crate;
//! - `test_files`: unit tests follow the one convention for their files.
//!
//! Each check lists every problem it finds, each naming the file and what
//! to fix, rather than stopping at the first.

// A failed expectation panics: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod commands;
mod config_keys;
mod cycles;
mod markdown;
mod metrics;
mod modules;
mod paths;
mod test_files;

use std::path::{Path, PathBuf};

use markdown::Doc;

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the daemon's crate is in the workspace")
        .to_path_buf()
}

/// The documents the checks read: the front door, every page of `docs/`,
/// the benchmark sheet and the READMEs of the repository's folders.
fn docs() -> Vec<Doc> {
    let root = root();
    let mut files = vec![root.join("README.md"), root.join("BENCHMARKS.md")];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("a readable docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    files.extend(pages);
    for dir in ["loadgen", "dashboards"] {
        files.push(root.join(dir).join("README.md"));
    }
    let mut tests: Vec<PathBuf> = std::fs::read_dir(root.join("tests"))
        .expect("tests/ exists")
        .map(|e| e.expect("a readable tests/ entry").path().join("README.md"))
        .filter(|p| p.exists())
        .collect();
    tests.sort();
    files.extend(tests);
    files.iter().map(|f| Doc::load(&root, f)).collect()
}

/// Fails with every problem, one per line.
fn assert_none(check: &str, problems: Vec<String>) {
    assert!(
        problems.is_empty(),
        "{check}: {} problem(s):\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

#[test]
fn every_path_and_link_in_the_docs_exists() {
    assert_none("paths", paths::check(&root(), &docs()));
}

/// The folders of the workspace's crates, from the root manifest's
/// `members`.
fn crates() -> Vec<PathBuf> {
    let root = root();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let members = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("members"))
        .expect("the root manifest lists its members");
    members
        .split('"')
        .skip(1)
        .step_by(2)
        .map(|m| root.join(m))
        .collect()
}

#[test]
fn every_path_in_the_crates_rust_docs_exists() {
    let crates = crates();
    assert!(crates.len() >= 4, "{crates:?}");
    assert_none("paths in Rust docs", paths::check_sources(&root(), &crates));
}

#[test]
fn unit_test_files_follow_the_convention() {
    assert_none("test files", test_files::check(&root(), &crates()));
}

#[test]
fn every_config_key_in_the_docs_exists_and_every_key_is_documented() {
    assert_none("config keys", config_keys::check(&root(), &docs()));
}

#[test]
fn every_command_in_the_docs_names_real_targets_and_flags() {
    assert_none("commands", commands::check(&root(), &docs()));
}

#[test]
fn every_metric_in_the_docs_is_exported() {
    assert_none("metrics", metrics::check(&root(), &docs()));
}

#[test]
fn the_architecture_page_and_lib_rs_show_the_same_map() {
    assert_none("modules", modules::check(&root()));
}

#[test]
fn no_import_cycle_between_files() {
    let root = root();
    let mut problems = Vec::new();
    for crate_root in [
        "daemon/src/lib.rs",
        "daemon/src/main.rs",
        "loadgen/src/main.rs",
        "testkit/src/lib.rs",
    ] {
        problems.extend(cycles::check(&root, &root.join(crate_root)));
    }
    assert_none("import cycles", problems);
}

#[test]
fn the_import_cycle_check_finds_a_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\npub use a::A;\n").unwrap();
    std::fs::write(src.join("a.rs"), "use super::b::B;\npub struct A(B);\n").unwrap();
    std::fs::write(
        src.join("b.rs"),
        "pub struct B;\nfn f() { let _ = crate::a::A(B); }\n",
    )
    .unwrap();
    let found = cycles::check(src, &src.join("lib.rs"));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("a.rs") && found[0].contains("b.rs"),
        "{found:?}"
    );
    // A module's use of its own children is not an edge: no cycle.
    std::fs::write(src.join("b.rs"), "pub struct B;\n").unwrap();
    assert_eq!(
        cycles::check(src, &src.join("lib.rs")),
        Vec::<String>::new()
    );
}

#[test]
fn scripts_parse_and_bench_all_answers_help() {
    let root = root();
    let mut problems = Vec::new();
    let mut scripts: Vec<PathBuf> = std::fs::read_dir(root.join("scripts"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    scripts.sort();
    for script in &scripts {
        let out = std::process::Command::new("bash")
            .arg("-n")
            .arg(script)
            .output()
            .unwrap();
        if !out.status.success() {
            problems.push(format!(
                "{}: bash -n: {}",
                script.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    let help = std::process::Command::new("bash")
        .arg(root.join("scripts/bench-all"))
        .arg("--help")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&help.stdout);
    if !help.status.success() || !text.contains("usage: scripts/bench-all") {
        problems.push(format!("scripts/bench-all --help: {help:?}"));
    }
    assert_none("scripts", problems);
}
