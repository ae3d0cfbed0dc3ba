//! One stand-in process (`tests/mongo-standin/standin.py`): starting it on
//! an ephemeral loopback port, its control pipe for fault injection, and
//! its log. Separate from the choice of target (the parent module) and from
//! building the Python environment it runs in ([`crate::venv`]).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Mutex;
use std::time::Duration;

use crate::bins::workspace_root;
use crate::venv::PythonEnv;

/// The stand-in's Python environment.
const STANDIN_ENV: PythonEnv = PythonEnv {
    name: "mongo-standin",
    requirements: "tests/mongo-standin/requirements.txt",
    imports: "mongomock, bson, pymongo",
};
use super::log::{self, Log};

/// How long the stand-in may take to print `LISTENING <port>`.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a control command may take to be acknowledged.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(30);
/// Server-selection timeout put in the stand-in's URI.
const SERVER_SELECTION_TIMEOUT_MS: u64 = 5_000;

/// A running stand-in process. Dropping it kills the process.
pub struct Standin {
    child: Mutex<Child>,
    stdin: Mutex<Option<ChildStdin>>,
    lines: Mutex<Receiver<String>>,
    log: Log,
    port: u16,
}

/// The Python of the stand-in's venv, built on first use: for programs
/// that start a stand-in of their own (`scripts/soak`).
pub fn standin_python() -> Result<std::path::PathBuf, String> {
    STANDIN_ENV.python()
}

impl Standin {
    /// Builds the venv if needed and starts a stand-in on an ephemeral port.
    pub(crate) fn start() -> Result<Standin, String> {
        let python = STANDIN_ENV.python()?;
        let verbose = std::env::var("TALLY_STANDIN_VERBOSE").unwrap_or_default();
        let mut cmd = Command::new(&python);
        cmd.arg(workspace_root().join("tests/mongo-standin/standin.py"))
            .args(["--port", "0"]);
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
        let lines = read_lines(child.stdout.take().expect("piped stdout"))?;
        let echo = !matches!(verbose.as_str(), "" | "0");
        let log = Log::default();
        log::keep(
            "standin-stderr",
            child.stderr.take().expect("piped stderr"),
            &log,
            echo,
            |_| {},
        )?;
        let mut standin = Standin {
            child: Mutex::new(child),
            stdin: Mutex::new(Some(stdin)),
            lines: Mutex::new(lines),
            log,
            port: 0,
        };
        standin.port = standin.listening_port()?;
        Ok(standin)
    }

    /// The port of the stand-in's first line, `LISTENING <port>`.
    fn listening_port(&self) -> Result<u16, String> {
        match self.next_line(STARTUP_TIMEOUT) {
            Ok(line) => match line
                .strip_prefix("LISTENING ")
                .map(|p| p.trim().parse::<u16>())
            {
                Some(Ok(port)) => Ok(port),
                _ => Err(format!(
                    "unexpected first line {line:?} from the stand-in; its log:\n{}",
                    self.log()
                )),
            },
            Err(e) => {
                // Give stderr a moment so the log explains the failure.
                std::thread::sleep(Duration::from_millis(200));
                Err(format!("{e}; its log:\n{}", self.log()))
            }
        }
    }

    /// A driver URI for this stand-in: a direct connection to one standalone
    /// server, with a short server-selection timeout.
    pub(crate) fn uri(&self) -> String {
        self.uri_with(SERVER_SELECTION_TIMEOUT_MS)
    }

    /// [`Standin::uri`] with server selection giving up after
    /// `selection_timeout_ms`.
    pub(crate) fn uri_with(&self, selection_timeout_ms: u64) -> String {
        format!(
            "mongodb://127.0.0.1:{}/?directConnection=true&serverSelectionTimeoutMS={selection_timeout_ms}&connectTimeoutMS=5000",
            self.port
        )
    }

    /// What the stand-in has written to stderr (the last 32–64 KiB).
    pub(crate) fn log(&self) -> String {
        log::text(&self.log)
    }

    /// `true`: close every connection and refuse new ones (MongoDB down).
    /// `false`: accept connections again. Takes effect before this returns.
    pub fn set_down(&self, down: bool) {
        self.control(if down { "down" } else { "up" });
    }

    /// Refuses update statements with a write error (code 2), as a server
    /// that cannot apply some statements does: `"off"`, `"match ID_PART"`
    /// (`$inc` updates of documents whose `_id` contains `ID_PART`),
    /// `"all"` (every update statement), `"random PERCENT"` (each update
    /// statement with that probability).
    pub fn refuse_updates(&self, mode: &str) {
        self.control(&format!("refuseUpdates {mode}"));
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

    /// `Some(code)`: every `insert` command fails with error `code`,
    /// unapplied, while updates work: pre-allocation fails, flushes don't.
    /// `None`: inserts work again. A state-change code (91, 10107) makes
    /// the driver clear its whole pool, failing concurrent updates too;
    /// 50 (MaxTimeMSExpired) fails the inserts alone, as a busy server does.
    pub fn fail_inserts(&self, code: Option<i32>) {
        let line = match code {
            Some(c) => format!("failInserts on {c}"),
            None => "failInserts off".to_string(),
        };
        self.control(&line);
    }

    /// `Some(code)`: the store's feature probes are answered with error
    /// `code`; `None`: answered normally again.
    pub fn probe_code(&self, code: Option<i32>) {
        let line = match code {
            Some(c) => format!("probeCode {c}"),
            None => "probeCode off".to_string(),
        };
        self.control(&line);
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

/// The stand-in's stdout, line by line, on a channel: its first line
/// and its answers to control lines.
fn read_lines(stdout: ChildStdout) -> Result<Receiver<String>, String> {
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
    Ok(rx)
}
