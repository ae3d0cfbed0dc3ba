//! The MongoDB servers the integration tests talk to.
//!
//! Three targets ([`TargetKind`]):
//!
//! * **The stand-in**, `tests/mongo-standin/standin.py` (a small wire-protocol
//!   server over the PyPI engine `mongomock`; see the README next to it).
//!   Always available; the only one with fault injection
//!   ([`MongoTarget::standin`]). Needs Python 3 (`python3`, or
//!   `TALLY_PYTHON`) and, the first time, PyPI: [`crate::venv`] builds the
//!   virtualenv it runs in.
//! * **FerretDB** 1.24 on SQLite ([`FerretDb`]): a real MongoDB-compatible
//!   server, installed by `tests/ferretdb/install` when Go is present and
//!   skipped (with the reason) when not.
//! * **FerretDB 1.24 on PostgreSQL 15** ([`TargetKind::FerretDbPg`]): the
//!   same binary with its PostgreSQL handler, each target's FerretDB on a
//!   database of its own in one cluster per test process ([`Postgres`]:
//!   `initdb` in a temporary directory, `postgres` on a free loopback port,
//!   stopped by its PID when the test process ends); skipped, with the
//!   reason, where Go or PostgreSQL 15 is missing.
//! * **`MONGODB_URI`**, when that environment variable is set: a real
//!   server; nothing is started.
//!
//! [`mongo_target_of`] gives a test the target of one kind, or `None` after
//! printing why that kind is not available here; suites that run on every
//! target call it once per kind. [`mongo_target`] is the single target of
//! the tests that pin down one server's behaviour: `MONGODB_URI` when set,
//! else the stand-in.
//!
//! Each [`MongoTarget`] gets its own database (on `MONGODB_URI` named
//! `tally_test_<pid>_<nanos>_<n>`; call [`MongoTarget::cleanup`] at the end
//! of a test to drop it) and, for the stand-in and FerretDB, its own process
//! on an ephemeral loopback port, which dies with the handle (FerretDB on
//! PostgreSQL: its own FerretDB process and PostgreSQL database, in the
//! shared cluster).
//!
//! The stand-in's child stdin is a pipe held by the [`Standin`] handle: the
//! stand-in exits when that pipe closes, so it dies with the test process
//! even if the process is killed. Dropping the handle also kills and reaps it.
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
//! FerretDB can be stopped and started again on the same port and data
//! ([`FerretDb::stop`], [`FerretDb::start_again`]): a real outage.
//!
//! Set `TALLY_STANDIN_VERBOSE=1` to see the stand-in's log (every command
//! with `=2`) on stderr, `TALLY_FERRETDB_VERBOSE=1` for FerretDB's.

mod ferretdb;
mod log;
mod postgres;
mod standin;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use ferretdb::FerretDb;
pub use postgres::Postgres;
pub use standin::{standin_python, Standin};

use ferretdb::Availability;

/// The kinds of MongoDB server a suite can run against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    /// `tests/mongo-standin`, with fault injection.
    Standin,
    /// FerretDB 1.24 on SQLite, when Go is present.
    FerretDb,
    /// FerretDB 1.24 on PostgreSQL 15, when Go and PostgreSQL are present.
    FerretDbPg,
    /// The server in `MONGODB_URI`, when set.
    Uri,
}

impl TargetKind {
    pub const ALL: [TargetKind; 4] = [
        TargetKind::Standin,
        TargetKind::FerretDb,
        TargetKind::FerretDbPg,
        TargetKind::Uri,
    ];

    /// FerretDB, on either backend: the same gaps and the same slowness
    /// per day document.
    pub fn is_ferretdb(self) -> bool {
        matches!(self, TargetKind::FerretDb | TargetKind::FerretDbPg)
    }

    pub fn name(self) -> &'static str {
        match self {
            TargetKind::Standin => "the MongoDB stand-in",
            TargetKind::FerretDb => "FerretDB",
            TargetKind::FerretDbPg => "FerretDB on PostgreSQL",
            TargetKind::Uri => "MONGODB_URI",
        }
    }
}

enum Server {
    Standin(Standin),
    FerretDb(FerretDb),
    External,
}

/// One MongoDB server (and database) for one test.
pub struct MongoTarget {
    /// A connection string for `mongodb::Client::with_uri_str`.
    pub uri: String,
    /// The database this target's test should use.
    pub database: String,
    pub kind: TargetKind,
    server: Server,
}

impl MongoTarget {
    /// The stand-in behind this target, or `None` for a real server. Tests
    /// that need fault injection should skip (with a printed note) on `None`.
    pub fn standin(&self) -> Option<&Standin> {
        match &self.server {
            Server::Standin(s) => Some(s),
            _ => None,
        }
    }

    /// The FerretDB process behind this target, to stop and start it.
    pub fn ferretdb(&self) -> Option<&FerretDb> {
        match &self.server {
            Server::FerretDb(f) => Some(f),
            _ => None,
        }
    }

    /// True on a real server (FerretDB or `MONGODB_URI`), not the stand-in.
    pub fn is_real_server(&self) -> bool {
        !matches!(self.server, Server::Standin(_))
    }

    /// The URI for a daemon under test. On a server the harness started,
    /// server selection gives up after `selection_timeout_ms`, so that each
    /// attempt while the server is down fails (and is retried) sooner; the
    /// URI of `MONGODB_URI` is left as given.
    pub fn uri_selecting_within(&self, selection_timeout_ms: u64) -> String {
        match &self.server {
            Server::Standin(s) => s.uri_with(selection_timeout_ms),
            Server::FerretDb(f) => f.uri_with(selection_timeout_ms),
            Server::External => self.uri.clone(),
        }
    }

    /// The environment a `tallyd` on this target runs with beyond its
    /// defaults: FerretDB takes far longer per update of a day document
    /// than MongoDB (see `tests/ferretdb/README.md`), so there commands are
    /// small and their deadline long, and one finishes well within it. On
    /// PostgreSQL FerretDB holds a connection of its pool (100 here) per
    /// statement in flight, and a daemon's flushes and upkeep each send up
    /// to `max_concurrent_batches` commands: with 2, two daemons on one
    /// FerretDB need at most 2 × 2 × 2 × (10 + 1) = 88 connections.
    pub fn daemon_env(&self) -> &'static [(&'static str, &'static str)] {
        match self.kind {
            TargetKind::FerretDb => &[
                ("TALLYD_MONGODB_STATEMENTS_PER_BATCH", "10"),
                ("TALLYD_MONGODB_TIMEOUT", "60s"),
            ],
            TargetKind::FerretDbPg => &[
                ("TALLYD_MONGODB_STATEMENTS_PER_BATCH", "10"),
                ("TALLYD_MONGODB_MAX_CONCURRENT_BATCHES", "2"),
                ("TALLYD_MONGODB_TIMEOUT", "60s"),
            ],
            TargetKind::Standin | TargetKind::Uri => &[],
        }
    }

    /// How long a test waits for a daemon to flush a small workload here:
    /// the stand-in is Python, FerretDB slower still.
    pub fn flush_timeout(&self) -> Duration {
        if self.kind.is_ferretdb() {
            Duration::from_secs(120)
        } else {
            Duration::from_secs(30)
        }
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

    /// Drops the test database on `MONGODB_URI`; harmless elsewhere (the
    /// server vanishes with its process).
    pub async fn cleanup(&self) {
        if !matches!(self.server, Server::External) {
            return;
        }
        if let Ok(client) = mongodb::Client::with_uri_str(&self.uri).await {
            let _ = client.database(&self.database).drop().await;
        }
    }
}

/// `MONGODB_URI` when set, else the stand-in; see the module docs.
/// Starting a server blocks (on a blocking-pool thread), so this is
/// `async`. Panics with a clear message when the stand-in cannot be started.
pub async fn mongo_target() -> MongoTarget {
    tokio::task::spawn_blocking(mongo_target_blocking)
        .await
        .expect("mongo_target task panicked")
}

/// The blocking form of [`mongo_target`], for non-async callers.
pub fn mongo_target_blocking() -> MongoTarget {
    match external_uri() {
        Some(_) => target_of_blocking(TargetKind::Uri),
        None => target_of_blocking(TargetKind::Standin),
    }
    .expect("the stand-in is always available")
}

/// The target of `kind`, or `None` after printing why it is not available
/// here (FerretDB without Go, on PostgreSQL without PostgreSQL,
/// `MONGODB_URI` not set). Panics when it should
/// be available but cannot be started.
pub async fn mongo_target_of(kind: TargetKind) -> Option<MongoTarget> {
    tokio::task::spawn_blocking(move || target_of_blocking(kind))
        .await
        .expect("mongo_target_of task panicked")
}

/// The blocking form of [`mongo_target_of`].
pub fn target_of_blocking(kind: TargetKind) -> Option<MongoTarget> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let (uri, server) = match kind {
        TargetKind::Standin => {
            let standin = Standin::start().unwrap_or_else(|e| panic!("MongoDB stand-in: {e}"));
            (standin.uri(), Server::Standin(standin))
        }
        TargetKind::FerretDb | TargetKind::FerretDbPg => {
            let f = start_ferretdb(kind)?;
            (f.uri(), Server::FerretDb(f))
        }
        TargetKind::Uri => match external_uri() {
            Some(uri) => (uri, Server::External),
            None => {
                println!("note: MONGODB_URI is not set; this test's real-server target is skipped");
                return None;
            }
        },
    };
    let database = match server {
        Server::External => {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            format!("tally_test_{}_{}_{}", std::process::id(), nanos, n)
        }
        _ => format!("tally_test_{n}"),
    };
    Some(MongoTarget {
        uri,
        database,
        kind,
        server,
    })
}

/// FerretDB of `kind` (on SQLite or PostgreSQL), or `None` after printing
/// why it is skipped: no Go to build it with, or, for PostgreSQL, no
/// PostgreSQL installed. Panics when they are there but it cannot start.
fn start_ferretdb(kind: TargetKind) -> Option<FerretDb> {
    let bin = match ferretdb::availability() {
        Ok(Availability::Ready(bin)) => bin,
        Ok(Availability::Skipped(why)) => {
            println!("note: {} target skipped: {why}", kind.name());
            return None;
        }
        Err(e) => panic!("FerretDB could not be installed: {e}"),
    };
    let started = if kind == TargetKind::FerretDbPg {
        if let Err(why) = postgres::bin_dir() {
            println!("note: {} target skipped: {why}", kind.name());
            return None;
        }
        FerretDb::start_on_postgres(&bin)
    } else {
        FerretDb::start(&bin)
    };
    Some(started.unwrap_or_else(|e| panic!("{} did not start: {e}", kind.name())))
}

fn external_uri() -> Option<String> {
    std::env::var("MONGODB_URI")
        .ok()
        .map(|u| u.trim().to_string())
        .filter(|u| !u.is_empty())
}
