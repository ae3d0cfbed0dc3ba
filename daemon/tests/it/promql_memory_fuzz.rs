//! The PromQL memory fuzzer (`scripts/promql-memory-fuzz`, run with 10,000
//! queries against a release build by `scripts/fuzz`) in small: 200
//! generated queries against this build's `tallyd` on loopback, with a
//! 256 MiB read budget, failing on resident memory beyond that budget plus
//! the allocator's slack, on any 5xx and on a crash: about 10 s on a debug
//! build (260 series, ranges up to 6 h at steps down to 1 s).
//!
//! Skips, saying why, where there is no `python3` (the fuzzer uses only
//! its standard library).

use std::path::Path;
use std::process::Command;

#[test]
fn generated_queries_stay_within_the_read_budget() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipped: no python3 to run scripts/promql-memory-fuzz");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new("python3")
        .arg(root.join("scripts/promql-memory-fuzz"))
        .args([
            "--count",
            "200",
            "--hosts",
            "10",
            "--workers",
            "2",
            "--quick",
        ])
        .args(["--seed", "11", "--timeout", "60"])
        .arg("--tallyd")
        .arg(env!("CARGO_BIN_EXE_tallyd"))
        .output()
        .expect("python3 runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    assert!(
        out.status.success(),
        "the PromQL memory fuzzer failed:\n{text}"
    );
}
