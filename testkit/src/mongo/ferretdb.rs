//! FerretDB as a MongoDB test target: a real, independently written
//! MongoDB-compatible server (v1.24), one process per target on a free
//! loopback port, telemetry off, with its data in a temporary directory
//! (SQLite backend) or in a PostgreSQL database of its own
//! ([`super::postgres`]; PostgreSQL backend).
//!
//! The binary comes from `tests/ferretdb/install` (run once per test
//! process; it returns at once when the binary is up to date), which needs
//! Go. Without Go the target is skipped, with the installer's reason.
//! `TALLY_FERRETDB=off` skips it too; `TALLY_FERRETDB=<path>` uses that
//! binary instead.
//!
//! The process is stopped by its PID: [`FerretDb::stop`] (SIGTERM, then
//! SIGKILL after a bounded wait) and [`FerretDb::start_again`] on the same
//! port and data make a real outage; dropping the handle kills it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::log::{self, Log};
use super::postgres::Postgres;
use crate::process::wait_for;

/// How long FerretDB may take to listen.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long it may take to exit on SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Server-selection timeout put in the URI.
const SERVER_SELECTION_TIMEOUT_MS: u64 = 5_000;

pub(crate) use crate::gotool::Availability;

/// The FerretDB binary, installed on first use; `Err` when installing
/// failed although Go is there (a test failure, not a skip).
pub(crate) fn availability() -> Result<Availability, String> {
    static FOUND: OnceLock<Result<Availability, String>> = OnceLock::new();
    FOUND.get_or_init(find).clone()
}

fn find() -> Result<Availability, String> {
    match std::env::var("TALLY_FERRETDB").as_deref().map(str::trim) {
        Ok("off" | "0") => Ok(Availability::Skipped("TALLY_FERRETDB=off".into())),
        Ok(path) if !path.is_empty() => {
            let path = PathBuf::from(path);
            if path.is_file() {
                Ok(Availability::Ready(path))
            } else {
                Err(format!("TALLY_FERRETDB={} is not a file", path.display()))
            }
        }
        _ => install(),
    }
}

/// Runs the installer into `<target dir>/tools`.
fn install() -> Result<Availability, String> {
    crate::gotool::install("tests/ferretdb/install", "ferretdb")
}

/// A running FerretDB. Dropping it kills the process.
pub struct FerretDb {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    child: Mutex<Option<Child>>,
    log: Log,
    /// The URL of its PostgreSQL database, a database of its own in the
    /// test process's cluster; `None` on SQLite.
    postgres_url: Option<String>,
}

impl FerretDb {
    /// Starts FerretDB on a free loopback port with its PostgreSQL handler,
    /// on a new database in the test process's cluster ([`Postgres::shared`]).
    pub(crate) fn start_on_postgres(bin: &Path) -> Result<FerretDb, String> {
        let pg = Postgres::shared()?;
        let url = pg.create_database()?;
        FerretDb::start_with(bin, Some(url.clone())).inspect_err(|_| pg.drop_database(&url))
    }

    /// Starts FerretDB on a free loopback port with a fresh SQLite directory.
    pub(crate) fn start(bin: &Path) -> Result<FerretDb, String> {
        FerretDb::start_with(bin, None)
    }

    fn start_with(bin: &Path, postgres_url: Option<String>) -> Result<FerretDb, String> {
        let dir = tempfile::Builder::new()
            .prefix("tally-ferretdb-")
            .tempdir()
            .map_err(|e| format!("creating FerretDB's directory: {e}"))?;
        std::fs::create_dir_all(dir.path().join("data")).map_err(|e| e.to_string())?;
        let log = Log::default();
        let (child, port) = spawn(bin, dir.path(), 0, postgres_url.as_deref(), &log)?;
        Ok(FerretDb {
            bin: bin.to_path_buf(),
            dir,
            port,
            child: Mutex::new(Some(child)),
            log,
            postgres_url,
        })
    }

    /// A driver URI: a direct connection with a short server-selection
    /// timeout.
    pub fn uri(&self) -> String {
        self.uri_with(SERVER_SELECTION_TIMEOUT_MS)
    }

    /// [`FerretDb::uri`] with server selection giving up after
    /// `selection_timeout_ms`.
    pub fn uri_with(&self, selection_timeout_ms: u64) -> String {
        format!(
            "mongodb://127.0.0.1:{}/?directConnection=true&serverSelectionTimeoutMS={selection_timeout_ms}&connectTimeoutMS=5000",
            self.port
        )
    }

    /// The current process's id, `None` while stopped.
    pub fn pid(&self) -> Option<u32> {
        self.child().as_ref().map(Child::id)
    }

    /// Stops the process: SIGTERM to its PID, SIGKILL when it has not
    /// exited within 10 s. Its data stays for [`FerretDb::start_again`].
    pub fn stop(&self) {
        let Some(mut child) = self.child().take() else {
            return;
        };
        let pid = child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        if wait_for(&mut child, STOP_TIMEOUT).is_none() {
            eprintln!("FerretDB (pid {pid}) ignored SIGTERM for {STOP_TIMEOUT:?}; killed it");
        }
        self.note("stopped");
    }

    /// Starts the process again on the same port and data, after
    /// [`FerretDb::stop`]. Panics (with the log) when it cannot.
    pub fn start_again(&self) {
        let mut slot = self.child();
        assert!(slot.is_none(), "FerretDB is still running");
        self.note("starting again");
        // The port was free a moment ago; only another process taking it
        // in between makes the bind fail, and that is worth a few tries.
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            let pg_url = self.postgres_url.as_deref();
            match spawn(&self.bin, self.dir.path(), self.port, pg_url, &self.log) {
                Ok((child, _)) => {
                    *slot = Some(child);
                    return;
                }
                Err(e) if Instant::now() < deadline => {
                    eprintln!("FerretDB did not start again ({e}); retrying");
                    std::thread::sleep(Duration::from_millis(500));
                }
                Err(e) => panic!("FerretDB did not start again: {e}"),
            }
        }
    }

    /// What FerretDB logged (the last 32–64 KiB), across restarts.
    pub fn log(&self) -> String {
        log::text(&self.log)
    }

    fn note(&self, what: &str) {
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        log.push_str(&format!("----- harness: FerretDB {what} -----\n"));
    }

    fn child(&self) -> std::sync::MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for FerretDb {
    fn drop(&mut self) {
        if let Some(mut child) = self.child().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("---- FerretDB log ----\n{}", self.log());
        }
        if let Some(url) = &self.postgres_url {
            if let Ok(pg) = Postgres::shared() {
                if std::thread::panicking() {
                    eprintln!("---- PostgreSQL log ----\n{}", pg.log());
                }
                pg.drop_database(url);
            }
        }
    }
}

/// Starts `bin` on `127.0.0.1:<port>` (0: any free port) with its state
/// under `dir` and its data there too (SQLite) or in the PostgreSQL
/// database of `postgres_url`; returns it once it listens, with its port.
fn spawn(
    bin: &Path,
    dir: &Path,
    port: u16,
    postgres_url: Option<&str>,
    log: &Log,
) -> Result<(Child, u16), String> {
    let mut cmd = Command::new(bin);
    match postgres_url {
        Some(url) => cmd
            .arg("--handler=postgresql")
            .arg(format!("--postgresql-url={url}")),
        None => cmd
            .arg("--handler=sqlite")
            .arg(format!("--sqlite-url=file:{}/", dir.join("data").display())),
    };
    let mut child = cmd
        .arg(format!("--state-dir={}", dir.display()))
        .arg(format!("--listen-addr=127.0.0.1:{port}"))
        // Its debug HTTP listener would take a fixed port.
        .arg("--debug-addr=-")
        .arg("--telemetry=disable")
        .args(["--log-level=info", "--log-format=text"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    let echo = std::env::var("TALLY_FERRETDB_VERBOSE").is_ok_and(|v| !v.is_empty() && v != "0");
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    for (name, stream, tx) in [
        (
            "ferretdb-stdout",
            Box::new(stdout) as Box<dyn std::io::Read + Send>,
            tx.clone(),
        ),
        ("ferretdb-stderr", Box::new(stderr), tx),
    ] {
        log::keep(name, stream, log, echo, move |line| {
            if let Some(port) = listening_port(line) {
                let _ = tx.send(port);
            }
        })?;
    }
    match rx.recv_timeout(STARTUP_TIMEOUT) {
        Ok(port) => Ok((child, port)),
        Err(e) => {
            let _ = child.kill();
            let status = child.wait().ok();
            std::thread::sleep(Duration::from_millis(100));
            let why = match e {
                RecvTimeoutError::Timeout => format!("did not listen within {STARTUP_TIMEOUT:?}"),
                RecvTimeoutError::Disconnected => format!("exited ({status:?})"),
            };
            Err(format!("FerretDB {why}; its log:\n{}", log::text(log)))
        }
    }
}

/// The port of FerretDB's `Listening on TCP 127.0.0.1:<port>...` line.
fn listening_port(line: &str) -> Option<u16> {
    let rest = &line[line.find("Listening on TCP ")? + "Listening on TCP ".len()..];
    let addr = rest.split("...").next()?;
    addr.rsplit(':').next()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_port_of_the_listening_line() {
        let line = r#"time=2026-11-23T21:49:05.205Z level=INFO source=clientconn/listener.go:107 msg="Listening on TCP 127.0.0.1:45919..." name=listener"#;
        assert_eq!(super::listening_port(line), Some(45919));
        assert_eq!(super::listening_port("Listening on Unix /tmp/x..."), None);
    }
}
