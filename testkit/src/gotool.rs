//! Programs the tests build with Go from the Go module proxy (FerretDB,
//! the OpenTelemetry Collector): each has an install script under `tests/`
//! that builds it into `<target dir>/tools/bin` once and returns at once
//! while it is up to date, and exits with status 3, saying why, when no
//! usable Go toolchain is there. Without Go the tests that need the
//! program skip, with that reason.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::bins::{target_dir, workspace_root};
use crate::process::{drain_output, wait_for};

/// How long an installer may take (a first build compiles the program).
const INSTALL_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// The installers' exit status for "no usable Go".
const NO_GO: i32 = 3;

/// Whether a Go program can run here.
#[derive(Debug, Clone)]
pub enum Availability {
    Ready(PathBuf),
    /// Why the tests that need it are skipped.
    Skipped(String),
}

/// Runs `script` (relative to the workspace root) with `<target dir>/tools`
/// and returns `tools/bin/<bin>`; `Err` when the build failed although Go
/// is there (a test failure, not a skip).
pub fn install(script: &str, bin: &str) -> Result<Availability, String> {
    let tools = target_dir().join("tools");
    let script = workspace_root().join(script);
    let mut child = Command::new("bash")
        .arg(&script)
        .arg(&tools)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    let (out, err) = drain_output(&mut child);
    let status = wait_for(&mut child, INSTALL_TIMEOUT);
    let output = format!(
        "{}{}",
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default()
    );
    match status.and_then(|s| s.code()) {
        Some(0) => Ok(Availability::Ready(tools.join("bin").join(bin))),
        Some(NO_GO) => Ok(Availability::Skipped(output.trim().to_string())),
        Some(code) => Err(format!(
            "{} failed (exit {code}):\n{output}",
            script.display()
        )),
        None => Err(format!(
            "{} did not finish within {INSTALL_TIMEOUT:?}:\n{output}",
            script.display()
        )),
    }
}
