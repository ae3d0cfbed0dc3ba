//! Where the workspace's binaries are, for the tests that run them.
//!
//! Cargo builds a package's own binaries before that package's integration
//! tests and tells them where with `env!("CARGO_BIN_EXE_<name>")`; that
//! path is exact whatever the target directory, profile or build directory,
//! so the kit takes it as a parameter rather than guessing. A binary of
//! *another* package (the load generator for the daemon's tests, the daemon
//! for the load generator's) Cargo neither builds nor locates: it is
//! expected in the same directory (`<target dir>/<profile>`), and
//! [`Bin::beside`] builds it first with `cargo build`, for the same profile
//! and target directory, when it is missing or older than any of its
//! sources, so a test never runs a stale binary. If that build fails but a
//! binary exists, the tests use it and say so.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::SystemTime;

/// A binary of this workspace that tests run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bin {
    Tallyd,
    Loadgen,
}

impl Bin {
    /// The binary's file name, without the platform's suffix.
    pub fn name(self) -> &'static str {
        match self {
            Bin::Tallyd => "tallyd",
            Bin::Loadgen => "tally-loadgen",
        }
    }

    fn package(self) -> &'static str {
        match self {
            Bin::Tallyd => "tallyd",
            Bin::Loadgen => "tally-loadgen",
        }
    }

    /// What the binary is built from, relative to the workspace root.
    fn sources(self) -> [&'static str; 3] {
        match self {
            Bin::Tallyd => ["daemon/src", "daemon/Cargo.toml", "proto"],
            Bin::Loadgen => ["loadgen/src", "loadgen/Cargo.toml", "proto"],
        }
    }

    /// This binary, for a test crate for which Cargo built `own` (pass
    /// `env!("CARGO_BIN_EXE_<name>")` of one of its package's binaries):
    /// `own` itself when it is this binary, otherwise the file next to it,
    /// brought up to date first (once per test process).
    pub fn beside(self, own: &str) -> &'static Path {
        static FOUND: [OnceLock<PathBuf>; 2] = [OnceLock::new(), OnceLock::new()];
        FOUND[self as usize].get_or_init(|| {
            let own = Path::new(own);
            if own.file_stem().and_then(|s| s.to_str()) == Some(self.name()) {
                return own.to_path_buf();
            }
            let dir = own.parent().expect("a binary has a directory");
            let bin = dir.join(format!("{}{}", self.name(), std::env::consts::EXE_SUFFIX));
            if !is_fresh(&bin, self.sources()) {
                self.build(dir, &bin);
            }
            bin
        })
    }

    /// `cargo build` of this binary into the profile directory `dir`.
    fn build(self, dir: &Path, bin: &Path) {
        let target_dir = dir
            .parent()
            .expect("a profile directory is in a target directory");
        let mut cmd = Command::new(option_env!("CARGO").unwrap_or("cargo"));
        cmd.current_dir(workspace_root())
            .args([
                "build",
                "--quiet",
                "-p",
                self.package(),
                "--bin",
                self.name(),
            ])
            .arg("--target-dir")
            .arg(target_dir);
        match dir.file_name().and_then(|p| p.to_str()) {
            Some("debug") | None => {}
            Some("release") => {
                cmd.arg("--release");
            }
            Some(other) => {
                cmd.args(["--profile", other]);
            }
        }
        match cmd.status() {
            Ok(s) if s.success() => {}
            outcome if bin.exists() => eprintln!(
                "warning: `cargo build -p {}` failed ({outcome:?}); testing the existing {}",
                self.package(),
                bin.display()
            ),
            outcome => panic!(
                "`cargo build -p {}` failed ({outcome:?}) and there is no {}",
                self.package(),
                bin.display()
            ),
        }
    }
}

/// The workspace root (this crate sits right under it).
pub fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
}

/// The Cargo target directory the running test was built in (tests are
/// `<target dir>/<profile>/deps/<test>`), else `CARGO_TARGET_DIR`, else
/// `target/` in the workspace. Tools the tests build or install live under
/// it: it is ignored by version control and per build tree.
pub fn target_dir() -> PathBuf {
    let from_exe = std::env::current_exe().ok().and_then(|exe| {
        let deps = exe.parent()?;
        let target = deps.parent()?.parent()?;
        (deps.file_name()? == "deps").then(|| target.to_path_buf())
    });
    from_exe
        .or_else(|| std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from))
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// True when `bin` exists and no file of `sources` is newer.
fn is_fresh(bin: &Path, sources: [&str; 3]) -> bool {
    let built = std::fs::metadata(bin).and_then(|m| m.modified()).ok();
    let changed = sources
        .iter()
        .filter_map(|p| newest(&workspace_root().join(p)))
        .max();
    built.is_some_and(|b| changed.is_none_or(|c| c <= b))
}

/// The latest modification time of `path` or any file below it.
fn newest(path: &Path) -> Option<SystemTime> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_dir() {
        return meta.modified().ok();
    }
    std::fs::read_dir(path)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| newest(&e.path()))
        .max()
}
