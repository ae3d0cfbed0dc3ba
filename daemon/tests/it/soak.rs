//! The soak's short version: `scripts/soak` for two and a half minutes with
//! its faults scaled down (a SIGKILL of `tallyd` every 60 s; on the MongoDB
//! stand-in also a 15 s outage every 90 s) and a small fleet, on both
//! stores, against the binaries Cargo built for these tests (a debug build:
//! the hour on a release build is the script's own default, recorded in
//! BENCHMARKS.md). The script's exit status is the verdict: every
//! acknowledged sample verified exactly, the flush gaps and the p99 ack
//! latency within limits loose enough for a debug build on a busy 2-core
//! machine, a clean stop. RSS is reported, not checked: a run this short has
//! no steady state after its warm-up (the script says so).

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tally_testkit::bins::{workspace_root, Bin};

/// The run, verification included, is over in about three minutes; this
/// bounds a hung one.
const TIMEOUT: Duration = Duration::from_secs(600);

fn soak(store: &[&str], sources: &str, python: Option<&Path>) -> String {
    let tallyd = env!("CARGO_BIN_EXE_tallyd");
    // Built next to tallyd when missing or stale.
    Bin::Loadgen.beside(tallyd);
    let bin_dir = Path::new(tallyd).parent().unwrap();
    let dir = tempfile::Builder::new()
        .prefix("tally-soak-test-")
        .tempdir()
        .unwrap();
    let run_dir = dir.path().join("run");
    let out_path = dir.path().join("out.txt");
    let out = File::create(&out_path).unwrap();
    let mut cmd = Command::new("bash");
    cmd.arg(workspace_root().join("scripts/soak"))
        .args(store)
        .args(["--duration", "150s", "--kill-every", "60s"])
        .args(["--outage-every", "90s", "--outage-for", "15s"])
        .args(["--warmup", "30s", "--restart-warmup", "15s"])
        .args(["--sources", sources, "--metrics", "20"])
        .args(["--max-p99-ms", "2000", "--max-flush-gap", "30"])
        .arg("--bin-dir")
        .arg(bin_dir)
        .arg("--dir")
        .arg(&run_dir)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        // Its own process group: a run past the deadline is stopped with
        // everything it started.
        .process_group(0);
    if let Some(python) = python {
        cmd.env("STANDIN_PYTHON", python);
    }
    let mut child = cmd.spawn().unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > TIMEOUT {
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let Some(status) = status else {
        let group = format!("-{}", child.id());
        let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
        std::thread::sleep(Duration::from_secs(10));
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = child.wait();
        panic!(
            "scripts/soak did not finish within {TIMEOUT:?}:\n{}\n----- tallyd -----\n{}",
            std::fs::read_to_string(&out_path).unwrap_or_default(),
            tail(&run_dir.join("tallyd.log"))
        );
    };
    let output = std::fs::read_to_string(&out_path).unwrap_or_default();
    assert!(
        status.success(),
        "scripts/soak {store:?}: {status} after {:?}\n{output}\n----- tallyd -----\n{}",
        started.elapsed(),
        tail(&run_dir.join("tallyd.log"))
    );
    // The faults happened, and the report says what the checks found.
    assert!(output.contains("SIGKILLs: 2;"), "{output}");
    assert!(output.contains("soak: PASSED"), "{output}");
    assert!(
        output.contains("RSS less pending minutes after warm-up") && output.contains("not checked"),
        "{output}"
    );
    println!("{output}");
    output
}

/// The last 64 KiB of a file.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let from = text.len().saturating_sub(64 * 1024);
    let from = (from..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    text[from..].to_string()
}

#[test]
fn soak_short_on_the_embedded_store() {
    soak(&["--store", "embedded"], "50", None);
}

#[test]
fn soak_short_on_the_mongodb_standin() {
    let python = tally_testkit::mongo::standin_python()
        .unwrap_or_else(|e| panic!("the MongoDB stand-in's Python: {e}"));
    let output = soak(&["--store", "mongodb"], "10", Some(&python));
    // One outage in 150 s: at 90 s, for 15 s.
    assert!(output.contains("store outages: 1,"), "{output}");
}
