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
//! first time, PyPI: the `venv` module builds the virtualenv it runs in.
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

mod standin;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

pub use standin::Standin;

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

    /// The URI for a daemon under test. On the stand-in, server selection
    /// gives up after `selection_timeout_ms`, so that each attempt while a
    /// test holds the stand-in down fails (and is retried) sooner; a real
    /// server's URI is left as given.
    pub fn uri_selecting_within(&self, selection_timeout_ms: u64) -> String {
        match &self.standin {
            Some(standin) => standin.uri_with(selection_timeout_ms),
            None => self.uri.clone(),
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
