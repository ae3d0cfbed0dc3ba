//! Runs the real `tallyd` and `tally-loadgen` binaries for end-to-end tests.
//!
//! `tally-loadgen` is this crate's binary (`CARGO_BIN_EXE_tally-loadgen`).
//! `tallyd` belongs to another crate, whose binaries Cargo does not build
//! for this crate's tests; it is expected at `<target dir>/<profile>/tallyd`,
//! next to the loadgen. `cargo test --workspace` builds it anyway (the
//! daemon's own tests need it). When it is missing, or older than any file
//! under `daemon/src`, `proto/` or the daemon's `Cargo.toml` (so that
//! `cargo test -p tally-loadgen` never tests a stale daemon), the harness
//! runs `cargo build -p tallyd` with the same profile and target directory
//! first, once per test binary. If that build fails but a `tallyd` exists,
//! the tests use it and say so.
//!
//! A [`Daemon`] runs on ephemeral loopback ports in its own temporary data
//! directory; the ports come from its `tallyd listening grpc=… http=…` log
//! line. Dropping it kills the process, so a failing test leaves nothing
//! behind; during a panic the daemon's log is printed.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long the daemon may take to print its listening line.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// `<target dir>/<profile>`, where Cargo put the loadgen.
fn profile_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_tally-loadgen"))
        .parent()
        .expect("the loadgen binary has a directory")
        .to_path_buf()
}

/// The `tallyd` binary, built (or brought up to date) on first use.
pub fn tallyd() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = profile_dir();
        let bin = dir.join(format!("tallyd{}", std::env::consts::EXE_SUFFIX));
        let target_dir = dir.parent().expect("a target directory");
        let profile = dir.file_name().and_then(|p| p.to_str()).unwrap_or("debug");
        let cargo = option_env!("CARGO").unwrap_or("cargo");
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the workspace root");
        let inputs = [
            workspace.join("daemon/src"),
            workspace.join("daemon/Cargo.toml"),
            workspace.join("proto"),
        ];
        let built = std::fs::metadata(&bin).and_then(|m| m.modified()).ok();
        let changed = inputs.iter().filter_map(|p| newest(p)).max();
        if built.is_some_and(|b| changed.is_none_or(|c| c <= b)) {
            return bin;
        }
        let mut cmd = Command::new(cargo);
        cmd.current_dir(workspace)
            .args(["build", "--quiet", "-p", "tallyd", "--target-dir"])
            .arg(target_dir);
        match profile {
            "debug" => {}
            "release" => {
                cmd.arg("--release");
            }
            other => {
                cmd.args(["--profile", other]);
            }
        }
        match cmd.status() {
            Ok(s) if s.success() => {}
            outcome if bin.exists() => eprintln!(
                "warning: `cargo build -p tallyd` failed ({outcome:?}); testing the existing {}",
                bin.display()
            ),
            outcome => panic!(
                "`cargo build -p tallyd` failed ({outcome:?}) and there is no {}",
                bin.display()
            ),
        }
        assert!(bin.exists(), "no tallyd at {}", bin.display());
        bin
    })
}

/// The latest modification time of `path` or any file below it.
fn newest(path: &Path) -> Option<std::time::SystemTime> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_dir() {
        return meta.modified().ok();
    }
    std::fs::read_dir(path)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| newest(&e.path()))
        .max()
}

/// A running `tallyd`.
pub struct Daemon {
    env: Vec<(String, String)>,
    dir: tempfile::TempDir,
    child: Option<Child>,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    logs: Arc<Mutex<String>>,
}

impl Daemon {
    /// Starts `tallyd` with extra `TALLYD_*` settings on a new data dir.
    pub fn start(env: &[(&str, &str)]) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("loadgen-e2e-")
            .tempdir()
            .expect("creating a temporary data directory");
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let logs = Arc::new(Mutex::new(String::new()));
        let (child, grpc, http) = spawn(&env, dir.path(), &logs);
        Daemon {
            env,
            dir,
            child: Some(child),
            grpc,
            http,
            logs,
        }
    }

    pub fn grpc_url(&self) -> String {
        format!("http://{}", self.grpc)
    }

    pub fn http_url(&self) -> String {
        format!("http://{}", self.http)
    }

    pub fn logs(&self) -> String {
        self.logs.lock().unwrap().clone()
    }

    /// SIGTERM (tallyd flushes everything it acknowledged and exits 0),
    /// then a new process on the same data directory. Ports change.
    pub fn restart(&mut self) {
        let mut child = self.child.take().expect("tallyd is running");
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("running kill(1)");
        assert!(status.success(), "kill -TERM failed");
        let status = wait_for(&mut child, Duration::from_secs(40));
        assert!(
            status.is_some_and(|s| s.success()),
            "tallyd did not exit cleanly on SIGTERM: {status:?}\n{}",
            self.logs()
        );
        let (child, grpc, http) = spawn(&self.env, self.dir.path(), &self.logs);
        self.child = Some(child);
        self.grpc = grpc;
        self.http = http;
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("===== tallyd log =====\n{}\n===== end =====", self.logs());
        }
    }
}

fn wait_for(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

fn spawn(
    env: &[(String, String)],
    data_dir: &Path,
    logs: &Arc<Mutex<String>>,
) -> (Child, SocketAddr, SocketAddr) {
    let mut cmd = Command::new(tallyd());
    cmd.args([
        "--grpc-listen",
        "127.0.0.1:0",
        "--http-listen",
        "127.0.0.1:0",
        "--log-format",
        "text",
    ])
    .arg("--data-dir")
    .arg(data_dir.join("data"))
    .current_dir(data_dir)
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    // The developer's shell must not change the daemon under test.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("TALLYD_") {
            cmd.env_remove(&name);
        }
    }
    cmd.env_remove("RUST_LOG").env("NO_COLOR", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("starting tallyd");
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel();
    let buffer = logs.clone();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            buffer.lock().unwrap().push_str(&line);
            buffer.lock().unwrap().push('\n');
            if let Some(addrs) = parse_listening(&line) {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(addrs);
                }
            }
        }
    });
    match rx.recv_timeout(STARTUP_TIMEOUT) {
        Ok((grpc, http)) => (child, grpc, http),
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            std::thread::sleep(Duration::from_millis(50));
            panic!("tallyd did not start listening\n{}", logs.lock().unwrap());
        }
    }
}

/// `(grpc, http)` from `… tallyd listening grpc=127.0.0.1:N http=127.0.0.1:M …`.
fn parse_listening(line: &str) -> Option<(SocketAddr, SocketAddr)> {
    if !line.contains("tallyd listening") {
        return None;
    }
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|t| t.strip_prefix(name))
            .and_then(|v| v.trim_matches('"').parse().ok())
    };
    Some((field("grpc=")?, field("http=")?))
}

/// What a loadgen run printed and how it ended.
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Run {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// stdout as the `--json` report.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not a JSON report ({e})\nstdout:\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }

    pub fn describe(&self) -> String {
        format!(
            "exit {:?} after {:?}\nstdout:\n{}\nstderr:\n{}",
            self.status.code(),
            self.elapsed,
            self.stdout,
            self.stderr
        )
    }
}

/// Runs `tally-loadgen` with `args`, killing it after `timeout`.
pub fn loadgen(args: &[&str], timeout: Duration) -> Run {
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tally-loadgen"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting tally-loadgen");
    // Drain both pipes while waiting, so neither can fill and block it.
    let read = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = read(Box::new(child.stdout.take().expect("stdout")));
    let err = read(Box::new(child.stderr.take().expect("stderr")));
    let Some(status) = wait_for(&mut child, timeout) else {
        // Killed by wait_for: show what it said so far.
        let stderr = err.join().unwrap_or_default();
        panic!("tally-loadgen {args:?} did not finish within {timeout:?}\n{stderr}");
    };
    Run {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        elapsed: started.elapsed(),
    }
}
