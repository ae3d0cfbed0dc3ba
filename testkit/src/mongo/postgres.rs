//! A PostgreSQL 15 cluster of the test process's own, the backend of the
//! FerretDB-on-PostgreSQL target: `initdb` in a temporary directory, then
//! `postgres` on a free loopback port as a child process. Nothing of the
//! machine's own PostgreSQL service is used.
//!
//! One cluster serves every target of a test process ([`Postgres::shared`],
//! started on first use): each target gets a PostgreSQL database of its own
//! ([`Postgres::create_database`]) and a FerretDB process of its own, as on
//! SQLite, so a test that stops its FerretDB stops no other test's. `initdb`
//! once instead of once per target saves seconds per test.
//!
//! A shared cluster outlives every handle (statics are never dropped), so it
//! is stopped from outside: `postgres` runs under a small `sh` watchdog whose
//! stdin is a pipe the test process holds. When that process ends, however
//! it ends, the pipe closes and the watchdog stops `postgres` by its PID
//! (SIGINT, a "fast" shutdown that does not wait for FerretDB's idle
//! connections) and removes the cluster's directory.
//!
//! PostgreSQL refuses to run as root; as root (CI) the cluster's files
//! belong to the `postgres` user the Debian package creates, and the
//! watchdog and `postgres` run as that user through `setpriv`.
//!
//! `TALLY_POSTGRES=off` skips the target; `TALLY_POSTGRES=<dir>` takes
//! `initdb`, `postgres`, `createdb` and `dropdb` from that directory.
//! `TALLY_FERRETDB_VERBOSE=1` echoes the server's log too.

use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::log::{self, Log};
use crate::process::wait_for;

/// Where Debian's `postgresql-15` puts the server's programs.
const BIN_DIR: &str = "/usr/lib/postgresql/15/bin";
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a fast shutdown may take.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// Tries at a free port: another process may take it between the probe
/// and `postgres` binding it.
const PORT_TRIES: usize = 3;
/// The connections one FerretDB may open. Its `update` holds one per
/// statement that matched a document until the command ends, and waits
/// for the pool when it is empty, so a pool smaller than the statements in
/// flight waits forever (tests/ferretdb/README.md): room for two daemons'
/// commands, or one store's with ten statements each.
const POOL_MAX_CONNS: u32 = 100;
/// The server's connections: ten FerretDBs at once (one per test thread)
/// at their full pools, and the superuser's reserve. Backends start only
/// as FerretDB asks for them; a slot costs little shared memory.
const MAX_CONNECTIONS: u32 = 10 * POOL_MAX_CONNS + 10;
/// The superuser `initdb` makes; trusted on loopback, no password.
const SUPERUSER: &str = "tally";
/// What `postgres` logs once it takes connections.
const READY: &str = "database system is ready to accept connections";

/// The watchdog: `$1` is the directory to remove at the end, the rest is
/// `postgres` and its arguments. It exits with `postgres`' status, so the
/// test process sees a server that failed to start as an exited child.
const WATCHDOG: &str = r#"dir=$1; shift
"$@" &
pid=$!
exec 3<&0
( read -r _ <&3; kill -INT "$pid" 2>/dev/null ) &
reader=$!
wait "$pid"; status=$?
kill "$reader" 2>/dev/null
rm -rf "$dir"
exit "$status"
"#;

/// The directory of `initdb` and `postgres`, or why the target is skipped.
pub(crate) fn bin_dir() -> Result<PathBuf, String> {
    let dir = match std::env::var("TALLY_POSTGRES").as_deref().map(str::trim) {
        Ok("off" | "0") => return Err("TALLY_POSTGRES=off".into()),
        Ok(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(BIN_DIR),
    };
    let has = |p: &str| dir.join(p).is_file();
    if has("initdb") && has("postgres") && has("createdb") && has("dropdb") {
        Ok(dir)
    } else {
        Err(format!(
            "PostgreSQL 15 is not installed (no initdb, postgres, createdb and dropdb in {}); scripts/setup-test-deps installs it",
            dir.display()
        ))
    }
}

/// The test process's cluster, running until the process ends.
pub struct Postgres {
    bin: PathBuf,
    /// The cluster's directory, removed by the watchdog at the end.
    dir: PathBuf,
    port: u16,
    /// The watchdog; its stdin, held open here, keeps the server up.
    watchdog: Mutex<Child>,
    log: Log,
}

impl Postgres {
    /// The cluster of this test process, started on first use. `Err` when
    /// PostgreSQL is installed but would not start (a test failure).
    pub(crate) fn shared() -> Result<&'static Postgres, String> {
        static SHARED: OnceLock<Result<Postgres, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| bin_dir().and_then(|bin| Postgres::start(&bin)))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// `initdb` in a new temporary directory, then the server on a free port.
    fn start(bin: &Path) -> Result<Postgres, String> {
        let mut tries = 0;
        loop {
            tries += 1;
            match Postgres::try_start(bin) {
                // The watchdog removed the directory with the server's exit,
                // so a new try starts from `initdb`.
                Err(e) if e.contains("could not bind") && tries < PORT_TRIES => {}
                started => return started,
            }
        }
    }

    fn try_start(bin: &Path) -> Result<Postgres, String> {
        let dir = tempfile::Builder::new()
            .prefix("tally-postgres-")
            .tempdir()
            .map_err(|e| format!("creating PostgreSQL's directory: {e}"))?
            // The watchdog removes it, after the server has stopped.
            .keep();
        let data = dir.join("data");
        if let Err(e) = init(bin, &dir, &data) {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
        let port = free_port()?;
        let log = Log::default();
        let mut watchdog = spawn(bin, &dir, &data, port, &log)?;
        wait_ready(&mut watchdog, &log)?;
        Ok(Postgres {
            bin: bin.to_path_buf(),
            dir,
            port,
            watchdog: Mutex::new(watchdog),
            log,
        })
    }

    /// A new, empty database; returns the URL FerretDB's PostgreSQL handler
    /// connects to it with, with a pool of [`POOL_MAX_CONNS`].
    pub(crate) fn create_database(&self) -> Result<String, String> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let name = format!("ferretdb_{}", COUNTER.fetch_add(1, Ordering::Relaxed));
        let out = self.client("createdb").arg(&name).output();
        check("createdb", out)?;
        Ok(format!(
            "postgres://{SUPERUSER}@127.0.0.1:{}/{name}?pool_max_conns={POOL_MAX_CONNS}",
            self.port
        ))
    }

    /// Drops the database of `url` (made by [`Postgres::create_database`]),
    /// ending any session still on it. Best effort: the cluster goes with
    /// the test process anyway.
    pub(crate) fn drop_database(&self, url: &str) {
        let Some(name) = url.rsplit('/').next().and_then(|s| s.split('?').next()) else {
            return;
        };
        let _ = self
            .client("dropdb")
            .args(["--force", "--if-exists", name])
            .output();
    }

    /// What the server logged (the last 32–64 KiB).
    pub fn log(&self) -> String {
        log::text(&self.log)
    }

    /// A client program of the cluster, as its superuser over loopback.
    fn client(&self, program: &str) -> Command {
        let mut c = Command::new(self.bin.join(program));
        c.args([
            "-h",
            "127.0.0.1",
            "-p",
            &self.port.to_string(),
            "-U",
            SUPERUSER,
        ])
        .stdin(Stdio::null());
        c
    }
}

/// Dropping a cluster stops it as the end of the test process would: the
/// watchdog's stdin closes. The shared cluster, a static, is never dropped.
impl Drop for Postgres {
    fn drop(&mut self) {
        let watchdog = self.watchdog.get_mut().unwrap_or_else(|p| p.into_inner());
        drop(watchdog.stdin.take());
        if wait_for(watchdog, STOP_TIMEOUT).is_none() {
            eprintln!(
                "PostgreSQL in {} did not stop within {STOP_TIMEOUT:?}; its watchdog was killed",
                self.dir.display()
            );
        }
    }
}

/// Waits for the server's "ready" line; `Err` with its log when the
/// watchdog exits first (the server did) or the line does not come.
fn wait_ready(watchdog: &mut Child, log: &Log) -> Result<(), String> {
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    while Instant::now() < deadline {
        if log::text(log).contains(READY) {
            return Ok(());
        }
        if let Ok(Some(status)) = watchdog.try_wait() {
            // Its last lines may still be on their way through the pipe.
            std::thread::sleep(Duration::from_millis(100));
            return Err(format!(
                "postgres exited ({status}); its log:\n{}",
                log::text(log)
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Dropping the stdin pipe makes the watchdog stop the server.
    let _ = watchdog.stdin.take();
    Err(format!(
        "postgres did not accept connections within {STARTUP_TIMEOUT:?}; its log:\n{}",
        log::text(log)
    ))
}

/// `initdb` of a cluster in `data`, inside `dir`, owned by the user the
/// server runs as.
fn init(bin: &Path, dir: &Path, data: &Path) -> Result<(), String> {
    if as_root() {
        let chown = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(dir)
            .output();
        check("chown", chown)?;
    }
    let initdb = as_server_user(&bin.join("initdb"))
        .arg("-D")
        .arg(data)
        .args(["-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--no-sync"])
        .stdin(Stdio::null())
        .output();
    check("initdb", initdb)
}

/// Whether this process runs as root, where PostgreSQL will not.
fn as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// `program`, run as `postgres` when this process is root.
fn as_server_user(program: &Path) -> Command {
    if as_root() {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            "--",
        ])
        .arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// `Ok` when `what` ran and exited 0; else `Err` with its output.
fn check(what: &str, out: std::io::Result<Output>) -> Result<(), String> {
    let out = out.map_err(|e| format!("cannot run {what}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

/// Starts the watchdog, and through it `postgres` on `127.0.0.1:<port>`
/// over `data`; removes `dir` once the server has stopped.
fn spawn(bin: &Path, dir: &Path, data: &Path, port: u16, log: &Log) -> Result<Child, String> {
    let mut child = as_server_user(Path::new("sh"))
        .args(["-c", WATCHDOG, "watchdog"])
        .arg(dir)
        .arg(bin.join("postgres"))
        .arg("-D")
        .arg(data)
        .args(["-p", &port.to_string()])
        .args(["-c", "listen_addresses=127.0.0.1"])
        // Loopback TCP only: no socket file for other clients to find.
        .args(["-c", "unix_socket_directories="])
        // A test cluster: a crash of the machine loses nothing a test needs,
        // and syncing to a shared disk only slows the suite.
        .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
        .args(["-c", "full_page_writes=off", "-c"])
        .arg(format!("max_connections={MAX_CONNECTIONS}"))
        .args(["-c", "shared_buffers=128MB"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run postgres: {e}"))?;
    let echo = std::env::var("TALLY_FERRETDB_VERBOSE").is_ok_and(|v| !v.is_empty() && v != "0");
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    log::keep("postgres-stdout", stdout, log, echo, |_| {})?;
    log::keep("postgres-stderr", stderr, log, echo, |_| {})?;
    Ok(child)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cluster takes a database, and once its holder lets go (the test
    /// process's end, here a drop) the server stops and its files go.
    #[test]
    fn a_cluster_serves_databases_and_goes_with_its_holder() {
        let bin = match bin_dir() {
            Ok(bin) => bin,
            Err(why) => {
                println!("note: skipped: {why}");
                return;
            }
        };
        let pg = Postgres::start(&bin).unwrap();
        let url = pg.create_database().unwrap();
        assert!(url.starts_with("postgres://tally@127.0.0.1:"), "{url}");
        pg.drop_database(&url);
        let dir = pg.dir.clone();
        assert!(dir.join("data/postmaster.pid").is_file());
        drop(pg);
        assert!(!dir.exists(), "{} is still there", dir.display());
    }
}
