//! The wire: the client, its database and collections, the limits every
//! command is sent within, and what each round trip leaves behind (the
//! counters of `stats.rs`, the outage on record). Every command and every
//! driver call of the store goes out through here, so deadlines, counting
//! and the outage apply to all traffic alike; what the server lacks
//! ([`Features`]) rides along, since it decides how commands are sent.

use std::future::Future;
use std::time::{Duration, Instant};

use bson::raw::RawDocumentBuf;
use bson::Document;
use mongodb::{Client, Collection, Database};
use parking_lot::Mutex;

use super::config::{MongoDbConfig, MAX_WRITE_BATCH, WRITERS_COLLECTION};
use super::errors::Failure;
use super::features::Features;
use super::stats::{Counters, MongoStats, Op};
use crate::model::Tier;
use crate::store::StoreError;

/// The server as every part of the store reaches it.
pub(super) struct Wire {
    pub(super) client: Client,
    pub(super) db: Database,
    pub(super) hour: Collection<RawDocumentBuf>,
    pub(super) day: Collection<RawDocumentBuf>,
    pub(super) series: Collection<RawDocumentBuf>,
    pub(super) writers: Collection<Document>,
    pub(super) statements_per_batch: usize,
    /// `mongodb.max_statements_per_s`; 0 is no bound.
    pub(super) max_statements_per_s: u64,
    pub(super) max_concurrent: usize,
    pub(super) timeout: Duration,
    /// The client's write concern: `run_command` does not add it by itself.
    pub(super) write_concern: Option<RawDocumentBuf>,
    pub(super) features: Features,
    pub(super) counters: Counters,
    /// Why the last operation could not reach the server, until one does:
    /// see [`Store::outage`](crate::store::Store::outage).
    pub(super) outage: Mutex<Option<String>>,
}

impl Wire {
    pub(super) fn new(
        cfg: &MongoDbConfig,
        client: Client,
        write_concern: Option<RawDocumentBuf>,
    ) -> Wire {
        let db = client.database(&cfg.database);
        Wire {
            hour: db.collection(&cfg.hour_collection),
            day: db.collection(&cfg.day_collection),
            series: db.collection(&cfg.series_collection),
            writers: db.collection(WRITERS_COLLECTION),
            db,
            client,
            statements_per_batch: cfg.statements_per_batch.clamp(1, MAX_WRITE_BATCH),
            max_statements_per_s: cfg.max_statements_per_s,
            max_concurrent: cfg.max_concurrent_batches.max(1),
            timeout: cfg.timeout.max(Duration::from_millis(1)),
            write_concern,
            features: Features::default(),
            counters: Counters::default(),
            outage: Mutex::new(None),
        }
    }

    pub(super) fn collection(&self, tier: Tier) -> &Collection<RawDocumentBuf> {
        match tier {
            Tier::Hour => &self.hour,
            Tier::Day => &self.day,
        }
    }

    pub(super) fn doc_name(&self, tier: Tier, id: &str) -> String {
        format!("{}.{}/{id}", self.db.name(), self.collection(tier).name())
    }

    /// Runs a command with the store's deadline, counting and timing it.
    pub(super) async fn send(
        &self,
        op: Op,
        cmd: RawDocumentBuf,
        statements: usize,
    ) -> Result<Document, Failure> {
        let bytes = cmd.as_bytes().len();
        let started = Instant::now();
        let result = tokio::time::timeout(self.timeout, self.db.run_raw_command(cmd)).await;
        self.record(op, statements, bytes, started);
        match result {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(Failure::Driver(e)),
            Err(_) => Err(Failure::Timeout(self.timeout)),
        }
    }

    /// [`Self::send`] with the failure mapped; `write` says whether the
    /// command may change data (so a lost reply is ambiguous).
    pub(super) async fn command(
        &self,
        op: Op,
        cmd: RawDocumentBuf,
        statements: usize,
        write: bool,
    ) -> Result<Document, StoreError> {
        self.send(op, cmd, statements)
            .await
            .map_err(|f| f.into_store(write))
    }

    /// Runs a driver call that changes nothing (a `find`, a ping) within
    /// `limit`, counting and timing it as one round trip of `op` that sent
    /// about `bytes`. Running out of time is `Unavailable`, with the message
    /// `<what>no answer within <limit>`.
    pub(super) async fn timed<T>(
        &self,
        op: Op,
        bytes: usize,
        limit: Duration,
        what: &str,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let result = tokio::time::timeout(limit, call).await;
        self.record(op, 0, bytes, started);
        let result = result.unwrap_or_else(|_| {
            Err(StoreError::Unavailable(
                format!("{what}no answer within {limit:?}").into(),
            ))
        });
        self.note_reach(&result);
        result
    }

    /// Keeps [`Store::outage`](crate::store::Store::outage) current: set by
    /// an operation that could not reach the server, cleared by one that
    /// did.
    pub(super) fn note_reach<T>(&self, result: &Result<T, StoreError>) {
        let mut outage = self.outage.lock();
        match result {
            Err(StoreError::Unavailable(why)) => {
                if outage.is_none() {
                    tracing::warn!(error = %why, "MongoDB unreachable: reads answer from memory, flagged partial, until it answers again");
                }
                *outage = Some(why.to_string());
            }
            Err(_) => {}
            Ok(_) => {
                if outage.take().is_some() {
                    tracing::info!("MongoDB reachable again");
                }
            }
        }
    }
}

impl Wire {
    /// Counters of the work done so far.
    pub(super) fn stats(&self) -> MongoStats {
        self.counters.snapshot()
    }

    /// Counts and times one command. `statements` and `bytes` are what it
    /// carried.
    pub(super) fn record(&self, op: Op, statements: usize, bytes: usize, started: Instant) {
        self.counters.record(op, statements, bytes, started)
    }

    /// Errors of operations no caller counts (`apply` and `preallocate`
    /// are counted by the flush pipeline and maintenance).
    pub(super) fn count_error(&self, op: Op, e: &StoreError) {
        if matches!(e, StoreError::Unavailable(_)) {
            self.note_reach::<()>(&Err(e.clone()));
        }
        metrics::counter!("tally_store_errors_total", "store" => "mongodb", "op" => op.as_str(), "kind" => e.kind())
            .increment(1);
    }
}
