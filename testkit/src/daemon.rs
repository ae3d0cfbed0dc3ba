//! Runs the real `tallyd` binary for end-to-end tests.
//!
//! Each [`Daemon`] is its own process on ephemeral loopback ports with its
//! own temporary data directory. The real ports are read from the startup
//! log line (`tallyd listening grpc=… http=… store=…`); after that a
//! background thread keeps draining stderr into a shared buffer, so the pipe
//! never fills and a failing test can show what the daemon said.
//!
//! Dropping a [`Daemon`] kills the process (SIGKILL) if it is still running,
//! so a failing or panicking test never leaves a daemon behind. When the
//! drop happens during a panic the daemon's log is printed to stderr.
//!
//! The binary is a parameter of [`DaemonOpts::new`]: see [`crate::bins`]
//! for where a test crate gets it.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tally_proto::v1::ingest_client::IngestClient;
use tally_proto::v1::query_client::QueryClient;
use tonic::transport::Channel;

use crate::process;

/// How long the daemon may take to print its listening line.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// What to start the daemon with, on top of the harness's own flags
/// (ports, data directory, log format).
#[derive(Debug, Clone)]
pub struct DaemonOpts {
    /// The `tallyd` executable.
    pub bin: PathBuf,
    /// Extra command-line arguments.
    pub args: Vec<String>,
    /// Extra environment variables, e.g. `TALLYD_FLUSH_INTERVAL`.
    pub env: Vec<(String, String)>,
    /// The data directory, if not a fresh temporary one (e.g. one on a
    /// small file system the test made).
    pub data_dir: Option<PathBuf>,
    /// The open-file limit (`RLIMIT_NOFILE`, soft and hard) to run the
    /// daemon under, if not the test's own.
    pub open_files: Option<u64>,
}

impl DaemonOpts {
    /// Runs the `tallyd` at `bin` with nothing but the harness's flags.
    pub fn new(bin: impl Into<PathBuf>) -> DaemonOpts {
        DaemonOpts {
            bin: bin.into(),
            args: Vec::new(),
            env: Vec::new(),
            data_dir: None,
            open_files: None,
        }
    }

    /// Runs the daemon with at most `n` open files (soft and hard limit),
    /// through `sh -c 'ulimit -n'`, which then `exec`s it: same process.
    pub fn open_files(mut self, n: u64) -> DaemonOpts {
        self.open_files = Some(n);
        self
    }

    /// Runs in `dir` instead of a fresh temporary directory.
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> DaemonOpts {
        self.data_dir = Some(dir.into());
        self
    }

    pub fn arg(mut self, arg: impl Into<String>) -> DaemonOpts {
        self.args.push(arg.into());
        self
    }

    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> DaemonOpts {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Shorthand for `TALLYD_FLUSH_INTERVAL`.
    pub fn flush_interval(self, interval: &str) -> DaemonOpts {
        self.env("TALLYD_FLUSH_INTERVAL", interval)
    }

    /// `--store mongodb` on `database` of the server at `uri`.
    pub fn mongodb(self, uri: &str, database: &str) -> DaemonOpts {
        self.arg("--store")
            .arg("mongodb")
            .arg("--mongodb-uri")
            .arg(uri)
            .env("TALLYD_MONGODB_DATABASE", database)
    }
}

/// A running `tallyd` process.
pub struct Daemon {
    opts: DaemonOpts,
    /// Removed with the daemon; the data directory unless the options name
    /// one.
    _dir: tempfile::TempDir,
    data: PathBuf,
    child: Option<Child>,
    grpc: SocketAddr,
    http: SocketAddr,
    /// Everything the daemon wrote to stderr, ANSI codes stripped, across
    /// restarts.
    logs: Arc<Mutex<String>>,
}

impl Daemon {
    /// Starts `tallyd` on a fresh temporary data directory and waits until
    /// it listens. Panics (with the daemon's output) if it does not within
    /// [`STARTUP_TIMEOUT`].
    pub fn start(opts: DaemonOpts) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("tallyd-e2e-")
            .tempdir()
            .expect("creating a temporary data directory");
        let logs = Arc::new(Mutex::new(String::new()));
        let data = opts
            .data_dir
            .clone()
            .unwrap_or_else(|| dir.path().to_path_buf());
        let (child, grpc, http) = spawn(&opts, &data, &logs, None);
        Daemon {
            opts,
            _dir: dir,
            data,
            child: Some(child),
            grpc,
            http,
            logs,
        }
    }

    /// [`Daemon::start`] on the blocking pool, so waiting for the listening
    /// line does not hold up the async runtime's worker.
    pub async fn start_async(opts: DaemonOpts) -> Daemon {
        tokio::task::spawn_blocking(move || Daemon::start(opts))
            .await
            .expect("starting tallyd panicked")
    }

    /// Stops the current process (SIGTERM, waiting for a clean exit) if it
    /// is still running, then starts a new one with the same options on the
    /// same data directory. Ports change.
    pub fn restart(&mut self) {
        self.try_restart().unwrap_or_else(|why| panic!("{why}"));
    }

    /// [`Daemon::restart`], but a daemon that exits before it listens (it
    /// refused its data, say) is an `Err` with its output, not a panic.
    pub fn try_restart(&mut self) -> Result<(), String> {
        if self.is_running() {
            self.sigterm();
            let status = self.wait(Duration::from_secs(40));
            assert!(
                status.success(),
                "tallyd exited with {status} on SIGTERM before the restart\n{}",
                self.logs()
            );
        }
        self.logs
            .lock()
            .unwrap()
            .push_str("\n----- harness: restarting tallyd on the same data dir -----\n");
        let (child, grpc, http) = try_spawn(&self.opts, &self.data, &self.logs, None)?;
        self.child = Some(child);
        self.grpc = grpc;
        self.http = http;
        Ok(())
    }

    /// SIGKILLs the current process (a crash: nothing is flushed or
    /// closed), then starts a new one on the same data directory and the
    /// same ports, so clients can reconnect to the address they know.
    pub fn crash_and_restart(&mut self) {
        self.crash();
        self.logs
            .lock()
            .unwrap()
            .push_str("\n----- harness: SIGKILLed; restarting on the same ports -----\n");
        let ports = Some((self.grpc, self.http));
        let (child, grpc, http) = spawn(&self.opts, &self.data, &self.logs, ports);
        self.child = Some(child);
        self.grpc = grpc;
        self.http = http;
    }

    /// Starts a process on the same data directory and ports and SIGKILLs
    /// it `after` later, whether or not it is listening yet: a crash during
    /// start, write-ahead log replay included. Leaves nothing running.
    pub fn crash_during_start(&mut self, after: Duration) {
        self.crash();
        let mut child = command(&self.opts, &self.data, Some((self.grpc, self.http)))
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.opts.bin.display()));
        std::thread::sleep(after);
        let _ = child.kill();
        let _ = child.wait();
        self.logs.lock().unwrap().push_str(&format!(
            "\n----- harness: a start SIGKILLed after {after:?} -----\n"
        ));
    }

    /// SIGKILLs the current process and reaps it.
    pub fn crash(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The daemon's data directory (the embedded store, the write-ahead log).
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// `http://127.0.0.1:PORT` of the gRPC listener.
    pub fn grpc_url(&self) -> String {
        format!("http://{}", self.grpc)
    }

    /// `http://127.0.0.1:PORT` of the HTTP listener, without a trailing slash.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.http)
    }

    /// The Graphite listener's address, when the daemon runs one
    /// (`TALLYD_GRAPHITE_LISTEN`), read from its latest listening line.
    pub fn graphite_addr(&self) -> Option<SocketAddr> {
        let logs = self.logs.lock().unwrap();
        let line = logs
            .lines()
            .rev()
            .find(|l| l.contains("tallyd listening"))?;
        line.split_whitespace()
            .find_map(|tok| tok.strip_prefix("graphite="))
            .and_then(|v| v.trim_matches('"').parse().ok())
    }

    /// The process id of the current process.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("tallyd is not running").id()
    }

    /// Everything the daemon has logged so far (all its processes).
    pub fn logs(&self) -> String {
        self.logs.lock().unwrap().clone()
    }

    /// A gRPC channel to the daemon, connected (bounded by a timeout).
    pub async fn channel(&self) -> Channel {
        let endpoint = Channel::from_shared(self.grpc_url())
            .expect("a valid gRPC URL")
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(15));
        match tokio::time::timeout(Duration::from_secs(10), endpoint.connect()).await {
            Ok(Ok(channel)) => channel,
            Ok(Err(e)) => panic!(
                "connecting to tallyd at {}: {e:?}\n{}",
                self.grpc_url(),
                self.logs()
            ),
            Err(_) => panic!(
                "connecting to tallyd at {} timed out\n{}",
                self.grpc_url(),
                self.logs()
            ),
        }
    }

    pub async fn ingest_client(&self) -> IngestClient<Channel> {
        IngestClient::new(self.channel().await)
    }

    pub async fn query_client(&self) -> QueryClient<Channel> {
        QueryClient::new(self.channel().await)
    }

    /// True while the current process has not exited.
    fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Stops the current process (SIGTERM, waiting for a clean exit) and
    /// leaves it stopped; [`Daemon::restart`] starts it again.
    pub async fn stop(&mut self) {
        if self.is_running() {
            self.sigterm();
            let status = self.wait_async(Duration::from_secs(40)).await;
            assert!(
                status.success(),
                "tallyd exited with {status} on SIGTERM\n{}",
                self.logs()
            );
        }
    }

    /// Runs `tallyd` with this daemon's options and data directory and
    /// `args` after them (a command such as `dead-letters replay`), to its
    /// end, at most `timeout`.
    pub async fn run_command(&self, args: &[&str], timeout: Duration) -> process::Run {
        let mut cmd = command(&self.opts, &self.data, None);
        cmd.args(args);
        tokio::task::spawn_blocking(move || process::run_command(cmd, timeout))
            .await
            .expect("running tallyd panicked")
    }

    /// Sends SIGTERM to the current process.
    pub fn sigterm(&mut self) {
        self.signal("TERM");
    }

    /// Sends SIGHUP to the current process: reload certificates and tokens.
    pub fn sighup(&mut self) {
        self.signal("HUP");
    }

    fn signal(&mut self, name: &str) {
        let pid = self.pid().to_string();
        let status = Command::new("kill")
            .args([&format!("-{name}"), &pid])
            .status()
            .expect("running kill(1)");
        assert!(status.success(), "kill -{name} {pid} failed: {status}");
    }

    /// Waits (at most `timeout`) until `needle` occurs at least `times` in
    /// the daemon's log; panics with the log if it does not.
    pub async fn wait_for_log(&self, needle: &str, times: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.logs().matches(needle).count() < times {
            assert!(
                Instant::now() < deadline,
                "{needle:?} did not appear {times} time(s) in the log within {timeout:?}\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits for the current process to exit and returns its status. If it
    /// has not exited within `timeout`, kills it and panics with its log.
    ///
    /// This blocks the calling thread; async tests use
    /// [`Daemon::wait_async`]. A gRPC client's connection task must keep
    /// running to answer the daemon's GOAWAY, and on a blocked
    /// current-thread runtime it cannot, which holds the daemon's graceful
    /// shutdown up to its deadline.
    fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let child = self.child.as_mut().expect("tallyd was never started");
        let pid = child.id();
        match process::wait_for(child, timeout) {
            Some(status) => status,
            None => panic!(
                "tallyd (pid {pid}) did not exit within {timeout:?}; killed it\n{}",
                self.logs()
            ),
        }
    }

    /// Waits for the current process to exit, without blocking the async
    /// runtime, and returns its status. If it has not exited within
    /// `timeout`, kills it and panics with its log.
    pub async fn wait_async(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            let child = self.child.as_mut().expect("tallyd was never started");
            match child.try_wait() {
                Ok(Some(status)) => return status,
                Ok(None) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                Ok(None) => {
                    let pid = child.id();
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "tallyd (pid {pid}) did not exit within {timeout:?}; killed it\n{}",
                        self.logs()
                    );
                }
                Err(e) => panic!("waiting for tallyd: {e}"),
            }
        }
    }

    /// Kills the current process with SIGKILL (no shutdown flush) and reaps it.
    fn kill(&mut self) {
        if let Some(child) = self.child.as_mut() {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "===== tallyd log (data dir {}) =====\n{}\n===== end of tallyd log =====",
                &self.data.display(),
                self.logs()
            );
        }
    }
}

/// The command line of one `tallyd` process: loopback ports chosen by the
/// OS, plain-text logs and `data_dir`, then the test's own options.
fn command(opts: &DaemonOpts, data_dir: &Path, ports: Option<(SocketAddr, SocketAddr)>) -> Command {
    let mut cmd = match opts.open_files {
        None => Command::new(&opts.bin),
        Some(n) => {
            let mut sh = Command::new("sh");
            sh.arg("-c")
                .arg(r#"ulimit -n "$0" && exec "$@""#)
                .arg(n.to_string())
                .arg(&opts.bin);
            sh
        }
    };
    let (grpc, http) = ports.map_or(
        ("127.0.0.1:0".to_owned(), "127.0.0.1:0".to_owned()),
        |(g, h)| (g.to_string(), h.to_string()),
    );
    cmd.args([
        "--grpc-listen",
        &grpc,
        "--http-listen",
        &http,
        "--log-format",
        "text",
    ])
    .arg("--data-dir")
    .arg(data_dir)
    .args(&opts.args)
    .current_dir(data_dir)
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    // Whatever the developer's shell exports must not change the daemon
    // under test: an unknown TALLYD_ variable is even a startup error.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("TALLYD_") {
            cmd.env_remove(&name);
        }
    }
    cmd.env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .env("RUST_BACKTRACE", "1");
    for (name, value) in &opts.env {
        cmd.env(name, value);
    }
    cmd
}

/// Starts one `tallyd` process and waits for its listening line.
fn spawn(
    opts: &DaemonOpts,
    data_dir: &Path,
    logs: &Arc<Mutex<String>>,
    ports: Option<(SocketAddr, SocketAddr)>,
) -> (Child, SocketAddr, SocketAddr) {
    try_spawn(opts, data_dir, logs, ports).unwrap_or_else(|why| panic!("{why}"))
}

fn try_spawn(
    opts: &DaemonOpts,
    data_dir: &Path,
    logs: &Arc<Mutex<String>>,
    ports: Option<(SocketAddr, SocketAddr)>,
) -> Result<(Child, SocketAddr, SocketAddr), String> {
    let mut child = command(opts, data_dir, ports)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", opts.bin.display()));
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel::<(SocketAddr, SocketAddr)>();
    let buffer = logs.clone();
    std::thread::Builder::new()
        .name(format!("tallyd-{}-stderr", child.id()))
        .spawn(move || drain_stderr(stderr, buffer, tx))
        .expect("spawning the stderr reader");

    match rx.recv_timeout(STARTUP_TIMEOUT) {
        Ok((grpc, http)) => Ok((child, grpc, http)),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            // stderr closed before the line: the daemon exited.
            let status = child.wait().ok();
            // Give the reader a moment to store the last lines.
            std::thread::sleep(Duration::from_millis(50));
            Err(format!(
                "tallyd exited ({status:?}) before printing its listening line\n{}",
                logs.lock().unwrap()
            ))
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "tallyd did not print its listening line within {STARTUP_TIMEOUT:?}; killed it\n{}",
                logs.lock().unwrap()
            );
        }
    }
}

/// Reads stderr line by line until EOF, appending to `buffer`, and reports
/// the listening addresses once.
fn drain_stderr(
    stderr: std::process::ChildStderr,
    buffer: Arc<Mutex<String>>,
    tx: mpsc::Sender<(SocketAddr, SocketAddr)>,
) {
    let mut reader = BufReader::new(stderr);
    let mut tx = Some(tx);
    let mut raw = Vec::new();
    loop {
        raw.clear();
        match reader.read_until(b'\n', &mut raw) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let line = strip_ansi(&String::from_utf8_lossy(&raw));
        buffer.lock().unwrap().push_str(&line);
        if let Some(addrs) = tx.as_ref().and_then(|_| parse_listening(&line)) {
            let _ = tx.take().unwrap().send(addrs);
        }
    }
}

/// Removes ANSI escape sequences (colours) from a log line.
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'[') {
            chars.next();
            // Parameters and intermediates up to the final byte (@ to ~).
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        } else {
            // A two-character escape.
            chars.next();
        }
    }
    out
}

/// `(grpc, http)` from the startup line
/// `… tallyd listening grpc=127.0.0.1:NNNN http=127.0.0.1:MMMM store=embedded`.
fn parse_listening(line: &str) -> Option<(SocketAddr, SocketAddr)> {
    if !line.contains("tallyd listening") {
        return None;
    }
    let field = |name: &str| -> Option<SocketAddr> {
        line.split_whitespace()
            .find_map(|tok| tok.strip_prefix(name))
            .and_then(|v| v.trim_matches('"').parse().ok())
    };
    Some((field("grpc=")?, field("http=")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_listening_line() {
        let line = "\u{1b}[2m2026-01-01T00:00:00.000000Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m \
                    \u{1b}[2mtallyd\u{1b}[0m\u{1b}[2m:\u{1b}[0m tallyd listening \
                    \u{1b}[3mgrpc\u{1b}[0m\u{1b}[2m=\u{1b}[0m127.0.0.1:4317 \
                    \u{1b}[3mhttp\u{1b}[0m\u{1b}[2m=\u{1b}[0m127.0.0.1:8080 \
                    \u{1b}[3mstore\u{1b}[0m\u{1b}[2m=\u{1b}[0m\"embedded\"\n";
        let (g, h) = parse_listening(&strip_ansi(line)).unwrap();
        assert_eq!(g, "127.0.0.1:4317".parse().unwrap());
        assert_eq!(h, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(parse_listening("INFO tallyd: embedded store open"), None);
    }
}
