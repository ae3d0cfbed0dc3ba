//! The MongoDB the integration tests talk to.
//!
//! [`mongo_target`] decides where MongoDB tests run:
//!
//! * If the environment variable `MONGODB_URI` is set, they run against that
//!   real server, each [`MongoTarget`] in a fresh database named
//!   `tally_test_<pid>_<nanos>_<n>`. Nothing is started; fault injection is
//!   unavailable ([`MongoTarget::standin`] returns `None`, and tests that need
//!   it print a note and return early). Call [`MongoTarget::cleanup`] to drop
//!   the database at the end of a test.
//! * Otherwise they run against the stand-in, `tests/mongo-standin/standin.py`
//!   (a small wire-protocol server over the PyPI engine `mongomock`; see the
//!   README next to it). Each [`MongoTarget`] gets its own stand-in process on
//!   an ephemeral loopback port.
//!
//! The stand-in needs Python 3 (`python3`, or `TALLY_STANDIN_PYTHON`) and, the
//! first time, PyPI: a virtualenv with the pinned requirements is built under
//! `<target>/tmp/mongo-standin/venv-<hash of requirements.txt>`. Parallel test
//! binaries coordinate through a lock file, and the venv is built in a
//! temporary directory that is then atomically renamed into place, so a
//! half-built venv is never used.
//!
//! The child's stdin is a pipe held by the [`Standin`] handle: the stand-in
//! exits when that pipe closes, so it dies with the test process even if the
//! process is killed. Dropping the handle also kills and reaps it.
//!
//! Fault injection (stand-in only), through control lines on that pipe:
//! * [`Standin::set_down`]: `true` closes every open connection and makes the
//!   stand-in close new ones at once (MongoDB down); `false` brings it back.
//! * [`Standin::drop_after_apply`]: the next `n` write commands (`insert`,
//!   `update`, `delete`, `findAndModify`) are applied, then the connection is
//!   closed without a reply: an ambiguous failure.
//! * [`Standin::fail_next`]: the next `n` write commands fail with the given
//!   error code without being applied.
//! * [`Standin::ttl_pass`]: run one TTL-monitor pass now.
//!
//! Set `TALLY_STANDIN_VERBOSE=1` to see the stand-in's log (every command
//! with `=2`) on stderr.

#![allow(dead_code)]

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long the stand-in may take to print `LISTENING <port>`.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a control command may take to be acknowledged.
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long building the venv (including `pip install`) may take.
pub const VENV_TIMEOUT: Duration = Duration::from_secs(600);

/// Server-selection timeout put in the stand-in's URI.
pub const SERVER_SELECTION_TIMEOUT_MS: u64 = 5_000;

/// Where the MongoDB tests run: a real server (`MONGODB_URI`) or a stand-in.
pub struct MongoTarget {
    /// A connection string for `mongodb::Client::with_uri_str`.
    pub uri: String,
    /// The database this target's test should use.
    pub database: String,
    standin: Option<Standin>,
}

impl MongoTarget {
    /// The stand-in behind this target, or `None` for a real server. Tests
    /// that need fault injection should skip (with a printed note) on `None`.
    pub fn standin(&self) -> Option<&Standin> {
        self.standin.as_ref()
    }

    /// True when running against a real server from `MONGODB_URI`.
    pub fn is_real_server(&self) -> bool {
        self.standin.is_none()
    }

    /// A new driver client for this target.
    pub async fn client(&self) -> mongodb::Client {
        mongodb::Client::with_uri_str(&self.uri)
            .await
            .unwrap_or_else(|e| panic!("cannot create a client for {}: {e}", self.uri))
    }

    /// The target's database through a new client.
    pub async fn db(&self) -> mongodb::Database {
        self.client().await.database(&self.database)
    }

    /// Drops the test database. Worth calling at the end of a test on a real
    /// server; harmless on the stand-in (which vanishes with its process).
    pub async fn cleanup(&self) {
        if self.standin.is_some() {
            return;
        }
        if let Ok(client) = mongodb::Client::with_uri_str(&self.uri).await {
            let _ = client.database(&self.database).drop().await;
        }
    }
}

/// Returns the MongoDB to test against; see the module docs. Starting a
/// stand-in blocks (on a blocking-pool thread), so this is `async`.
/// Panics with a clear message when the stand-in cannot be started.
pub async fn mongo_target() -> MongoTarget {
    tokio::task::spawn_blocking(mongo_target_blocking)
        .await
        .expect("mongo_target task panicked")
}

/// The blocking form of [`mongo_target`], for non-async callers.
pub fn mongo_target_blocking() -> MongoTarget {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    match std::env::var("MONGODB_URI") {
        Ok(uri) if !uri.trim().is_empty() => MongoTarget {
            uri: uri.trim().to_string(),
            database: format!("tally_test_{}_{}_{}", std::process::id(), nanos, n),
            standin: None,
        },
        _ => {
            let standin = Standin::start().unwrap_or_else(|e| panic!("MongoDB stand-in: {e}"));
            MongoTarget {
                uri: standin.uri(),
                database: format!("tally_test_{n}"),
                standin: Some(standin),
            }
        }
    }
}

/// A running stand-in process. Dropping it kills the process.
pub struct Standin {
    child: Mutex<Child>,
    stdin: Mutex<Option<ChildStdin>>,
    lines: Mutex<Receiver<String>>,
    log: Arc<Mutex<String>>,
    port: u16,
}

impl Standin {
    /// Builds the venv if needed and starts a stand-in on an ephemeral port.
    pub fn start() -> Result<Standin, String> {
        let python = venv_python()?;
        let script = standin_dir().join("standin.py");
        let verbose = std::env::var("TALLY_STANDIN_VERBOSE").unwrap_or_default();
        let mut cmd = Command::new(&python);
        cmd.arg(&script).args(["--port", "0"]);
        match verbose.as_str() {
            "" | "0" => {}
            "1" => {
                cmd.arg("-v");
            }
            _ => {
                cmd.arg("-vv");
            }
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("PYTHONUNBUFFERED", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env_remove("PYTHONPATH")
            .env_remove("PYTHONHOME");
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");

        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("standin-stdout".into())
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        let log = Arc::new(Mutex::new(String::new()));
        let log2 = Arc::clone(&log);
        let echo = !matches!(verbose.as_str(), "" | "0");
        std::thread::Builder::new()
            .name("standin-stderr".into())
            .spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if echo {
                        eprintln!("{line}");
                    }
                    let mut log = log2.lock().unwrap_or_else(|p| p.into_inner());
                    if log.len() > 64 * 1024 {
                        let cut = log.len() - 32 * 1024;
                        let cut = (cut..log.len())
                            .find(|&i| log.is_char_boundary(i))
                            .unwrap_or(0);
                        log.drain(..cut);
                    }
                    log.push_str(&line);
                    log.push('\n');
                }
            })
            .map_err(|e| e.to_string())?;

        let mut standin = Standin {
            child: Mutex::new(child),
            stdin: Mutex::new(Some(stdin)),
            lines: Mutex::new(rx),
            log,
            port: 0,
        };
        let first = standin.next_line(STARTUP_TIMEOUT);
        match first {
            Ok(line) => match line
                .strip_prefix("LISTENING ")
                .map(|p| p.trim().parse::<u16>())
            {
                Some(Ok(port)) => standin.port = port,
                _ => {
                    return Err(format!(
                        "unexpected first line {line:?} from the stand-in; its log:\n{}",
                        standin.log()
                    ))
                }
            },
            Err(e) => {
                // Give stderr a moment so the log explains the failure.
                std::thread::sleep(Duration::from_millis(200));
                return Err(format!("{e}; its log:\n{}", standin.log()));
            }
        }
        Ok(standin)
    }

    /// The loopback port the stand-in listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A driver URI for this stand-in: a direct connection to one standalone
    /// server, with a short server-selection timeout.
    pub fn uri(&self) -> String {
        format!(
            "mongodb://127.0.0.1:{}/?directConnection=true&serverSelectionTimeoutMS={}&connectTimeoutMS=5000",
            self.port, SERVER_SELECTION_TIMEOUT_MS
        )
    }

    /// What the stand-in has written to stderr (the last 32–64 KiB).
    pub fn log(&self) -> String {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// `true`: close every connection and refuse new ones (MongoDB down).
    /// `false`: accept connections again. Takes effect before this returns.
    pub fn set_down(&self, down: bool) {
        self.control(if down { "down" } else { "up" });
    }

    /// The next `n` write commands (`insert`, `update`, `delete`,
    /// `findAndModify`) are applied, then their connection is closed without
    /// a reply, so the driver sees a network error for a write that happened.
    pub async fn drop_after_apply(&self, n: u32) {
        self.control(&format!("dropAfterApply {n}"));
    }

    /// The next `n` write commands fail with error `code` (e.g. 91
    /// ShutdownInProgress, 10107 NotWritablePrimary) and are not applied.
    pub fn fail_next(&self, n: u32, code: i32) {
        self.control(&format!("failNext {n} {code}"));
    }

    /// Clears every fault, including `down`.
    pub fn reset_faults(&self) {
        self.control("reset");
    }

    /// Runs one TTL-monitor pass now (the stand-in's monitor otherwise runs
    /// every 60 s, as a real server's does); returns the documents deleted.
    pub fn ttl_pass(&self) -> u64 {
        let reply = self.control("ttlPass");
        reply
            .rsplit(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("bad ttlPass reply {reply:?}"))
    }

    /// Sends one control line and returns the stand-in's `OK ...` answer.
    /// Panics (with the stand-in's log) on any failure: it is a test helper.
    fn control(&self, line: &str) -> String {
        {
            let mut stdin = self.stdin.lock().unwrap_or_else(|p| p.into_inner());
            let pipe = stdin.as_mut().expect("stand-in stdin already closed");
            if let Err(e) = writeln!(pipe, "{line}").and_then(|_| pipe.flush()) {
                panic!("stand-in control {line:?}: {e}; its log:\n{}", self.log());
            }
        }
        match self.next_line(CONTROL_TIMEOUT) {
            Ok(reply) if reply.starts_with("OK") => reply,
            Ok(reply) => panic!("stand-in control {line:?} answered {reply:?}"),
            Err(e) => panic!("stand-in control {line:?}: {e}; its log:\n{}", self.log()),
        }
    }

    fn next_line(&self, timeout: Duration) -> Result<String, String> {
        let lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        match lines.recv_timeout(timeout) {
            Ok(line) => Ok(line),
            Err(RecvTimeoutError::Timeout) => {
                Err(format!("the stand-in said nothing within {timeout:?}"))
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = self
                    .child
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .try_wait()
                    .ok()
                    .flatten();
                Err(format!("the stand-in exited ({status:?})"))
            }
        }
    }
}

impl Drop for Standin {
    fn drop(&mut self) {
        // Closing stdin alone makes it exit; kill anyway so it is gone now.
        drop(self.stdin.lock().unwrap_or_else(|p| p.into_inner()).take());
        let child = self.child.get_mut().unwrap_or_else(|p| p.into_inner());
        let _ = child.kill();
        let _ = child.wait();
        if std::thread::panicking() && !self.log().is_empty() {
            eprintln!("---- MongoDB stand-in log ----\n{}", self.log());
        }
    }
}

/// `tests/mongo-standin` in the workspace.
pub fn standin_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("tests")
        .join("mongo-standin")
}

fn target_tmp_dir() -> PathBuf {
    match option_env!("CARGO_TARGET_TMPDIR") {
        Some(dir) => PathBuf::from(dir),
        None => match std::env::var_os("CARGO_TARGET_DIR") {
            Some(dir) => PathBuf::from(dir).join("tmp"),
            None => Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join("target")
                .join("tmp"),
        },
    }
}

/// The venv's python, building the venv once per requirements file.
fn venv_python() -> Result<PathBuf, String> {
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    VENV.get_or_init(ensure_venv).clone()
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Removes the lock file when dropped.
struct LockGuard(PathBuf);

impl Drop for LockGuard {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

fn venv_ready(venv: &Path) -> bool {
    venv.join(".ready").exists() && venv.join("bin").join("python").exists()
}

fn ensure_venv() -> Result<PathBuf, String> {
    let reqs = standin_dir().join("requirements.txt");
    let content = fs::read(&reqs).map_err(|e| format!("cannot read {}: {e}", reqs.display()))?;
    let base = target_tmp_dir().join("mongo-standin");
    fs::create_dir_all(&base).map_err(|e| format!("cannot create {}: {e}", base.display()))?;
    let tag = format!("{:016x}", fnv1a64(&content));
    let venv = base.join(format!("venv-{tag}"));
    let python = venv.join("bin").join("python");
    if venv_ready(&venv) {
        return Ok(python);
    }

    // One builder at a time across test binaries: an exclusive lock file.
    let lock_path = base.join(format!("venv-{tag}.lock"));
    let deadline = Instant::now() + VENV_TIMEOUT;
    let _guard = loop {
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&lock_path)
        {
            Ok(mut f) => {
                let _ = writeln!(f, "{}", std::process::id());
                break LockGuard(lock_path.clone());
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if venv_ready(&venv) {
                    return Ok(python);
                }
                let stale = fs::metadata(&lock_path)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > VENV_TIMEOUT + Duration::from_secs(60));
                if stale {
                    let _ = fs::remove_file(&lock_path);
                    continue;
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "timed out waiting for another test process to build {} (lock {})",
                        venv.display(),
                        lock_path.display()
                    ));
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            Err(e) => return Err(format!("cannot create {}: {e}", lock_path.display())),
        }
    };
    if venv_ready(&venv) {
        return Ok(python);
    }
    if venv.exists() {
        // A broken venv (e.g. its base python is gone): rebuild it.
        fs::remove_dir_all(&venv)
            .map_err(|e| format!("cannot remove broken {}: {e}", venv.display()))?;
    }

    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let tmp = base.join(format!("building-{}-{nanos}", std::process::id()));
    let result = build_venv(&tmp, &reqs).and_then(|()| {
        fs::rename(&tmp, &venv).or_else(|e| {
            if venv_ready(&venv) {
                Ok(())
            } else {
                Err(format!("cannot move the venv into {}: {e}", venv.display()))
            }
        })
    });
    let _ = fs::remove_dir_all(&tmp);
    result?;
    if venv_ready(&venv) {
        Ok(python)
    } else {
        Err(format!(
            "{} is not usable after building it",
            venv.display()
        ))
    }
}

fn build_venv(dir: &Path, reqs: &Path) -> Result<(), String> {
    let base_python = std::env::var("TALLY_STANDIN_PYTHON").unwrap_or_else(|_| "python3".into());
    eprintln!(
        "MongoDB stand-in: building a Python venv in {} (first run only)",
        dir.display()
    );
    run(Command::new(&base_python).args(["-m", "venv"]).arg(dir)).map_err(|e| {
        format!("`{base_python} -m venv` failed (is Python 3 with venv installed?): {e}")
    })?;
    let python = dir.join("bin").join("python");
    run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "--quiet",
            "--timeout",
            "60",
            "-r",
        ])
        .arg(reqs))
    .map_err(|e| format!("pip install of the stand-in's requirements failed: {e}"))?;
    run(Command::new(&python).args(["-c", "import mongomock, bson, pymongo"]))
        .map_err(|e| format!("the stand-in's venv cannot import its modules: {e}"))?;
    fs::write(dir.join(".ready"), b"ok\n").map_err(|e| e.to_string())?;
    Ok(())
}

/// Runs a command to completion, returning its output on failure.
fn run(cmd: &mut Command) -> Result<(), String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("PYTHONPATH")
        .env_remove("PYTHONHOME")
        .env("PIP_NO_INPUT", "1")
        .spawn()
        .map_err(|e| e.to_string())?;
    // Drain both pipes on threads so a chatty command cannot block.
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + VENV_TIMEOUT;
    let status = loop {
        match child.try_wait().map_err(|e| e.to_string())? {
            Some(status) => break status,
            None if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("timed out after {VENV_TIMEOUT:?}"));
            }
            None => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    let out = t_out.join().unwrap_or_default();
    let err = t_err.join().unwrap_or_default();
    if status.success() {
        Ok(())
    } else {
        Err(format!("{status}\n{out}{err}"))
    }
}
