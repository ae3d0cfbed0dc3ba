//! The sealing machinery: the component that makes day documents equal to
//! their hours once the hours close, keeps this writer's record of what
//! may be unsealed, reads every writer's records for the read lag, and
//! takes over the seals of a writer that stopped. It has its own state and
//! its own turn, so a flush never waits for it: the store's upkeep drives
//! it beside the flushes, which only tell it what they wrote
//! ([`Sealer::wrote`]).
//!
//! | file | what |
//! | --- | --- |
//! | `mod.rs` | [`Sealer`]: its state, a run of seals, the completion record |
//! | `queue.rs` | which hours are due to be sealed; late minutes; the record |
//! | `run.rs` | when seals run; the writers' records and the read lag |
//! | `write.rs` | a seal: reading hour and day documents, the `$set` statement |
//! | `takeover.rs` | sealing for a writer that stopped and did not come back |

mod queue;
mod run;
mod takeover;
mod write;

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use self::queue::Seals;
use super::stats::Op;
use super::Conn;
use crate::model::FlushBatch;
use crate::store::StoreError;

/// The sealing component of a [`super::MongoStore`].
pub(super) struct Sealer {
    conn: Arc<Conn>,
    /// Runs of seals, and the start from the writer's record, take turns.
    turn: tokio::sync::Mutex<()>,
    /// Hours to seal into the day documents.
    seals: Mutex<Seals>,
    /// The read of a recovered pass' ids, from one page to the next.
    load_cursor: tokio::sync::Mutex<Option<write::LoadCursor>>,
    seal_spread: Duration,
    /// The newest flush whose hour documents landed.
    applied_through: AtomicU64,
    /// A flush landed since the last run of seals: that run's clock is
    /// the flush's.
    flushed: AtomicBool,
    /// The oldest hour start any writer may not have sealed; `i64::MAX`
    /// until known.
    lag_from: AtomicI64,
    /// When `lag_from` was last read (wall-clock µs).
    lag_read_at: AtomicU64,
    /// A stopped writer whose seals this daemon is taking over.
    takeover: tokio::sync::Mutex<Option<takeover::Takeover>>,
    /// When the writers were last searched for a stopped one (µs).
    takeover_searched_at: AtomicU64,
}

impl Sealer {
    pub(super) fn new(conn: Arc<Conn>, seal_spread: Duration) -> Sealer {
        Sealer {
            conn,
            turn: tokio::sync::Mutex::new(()),
            seals: Mutex::new(Seals::default()),
            load_cursor: tokio::sync::Mutex::new(None),
            seal_spread,
            applied_through: AtomicU64::new(0),
            flushed: AtomicBool::new(false),
            lag_from: AtomicI64::new(i64::MAX),
            lag_read_at: AtomicU64::new(0),
            takeover: tokio::sync::Mutex::new(None),
            takeover_searched_at: AtomicU64::new(0),
        }
    }

    /// Before a flush's first statement: where sealing starts, once per
    /// process (a small read, and a write of the record on a first start).
    pub(super) async fn start(&self, batch: &FlushBatch) -> Result<(), StoreError> {
        if self.seals.lock().started() {
            return Ok(());
        }
        let _turn = self.turn.lock().await;
        self.start_seals(Some(batch)).await
    }

    /// Flush `batch` landed in the hour documents: its hours are sealed
    /// later, by the upkeep. Bookkeeping only, no I/O.
    pub(super) fn wrote(&self, batch: &FlushBatch) {
        self.seals.lock().wrote(batch, batch.id.0);
        self.applied_through.fetch_max(batch.id.0, Ordering::AcqRel);
        self.flushed.store(true, Ordering::Release);
    }

    /// Seals what is due by the clock (everything, when `all`), takes a
    /// step of a takeover, then records where the store is complete.
    /// Returns that point, or None when nothing was sealed.
    pub(super) async fn seal_now(&self, all: bool) -> Result<Option<u64>, StoreError> {
        let _turn = self.turn.lock().await;
        // The clock: the newest flush's after a flush (flush ids are the
        // flush's time in µs: hours close as the data says), else the wall's.
        let now = if self.flushed.swap(false, Ordering::AcqRel) {
            self.applied_through.load(Ordering::Acquire)
        } else {
            run::wall_us()
        };
        if self.seals.lock().should_read_record() {
            // A restarted daemon seals what it left even if no flush comes;
            // while the server is away, the next call tries again.
            let start = async {
                self.conn.ready().await?;
                self.start_seals(None).await
            };
            if let Err(e) = start.await {
                if e.is_retryable() && !all {
                    tracing::debug!(error = %e, "cannot read this writer's seal record yet");
                    return Ok(None);
                }
                return Err(e);
            }
        }
        // Recorded before the upkeep's reads: a shutdown that cancels the
        // step there must not cost the record (the next start would replay
        // more of the log than it needs).
        let recorded = match self.run_seals(now, all).await {
            Ok(true) => {
                let complete = self.durable_through(self.applied_through.load(Ordering::Acquire));
                self.note_complete(complete).await.map(|()| Some(complete))
            }
            Ok(false) => Ok(None),
            Err(e) => Err(e),
        };
        if !all {
            self.upkeep(run::wall_us()).await;
        }
        recorded
    }

    /// Records that every flush through `complete` is in both tiers.
    pub(super) async fn note_complete(&self, complete: u64) -> Result<(), StoreError> {
        if complete == 0 {
            return Ok(());
        }
        self.conn
            .record_complete(complete)
            .await
            .inspect_err(|e| self.conn.wire.count_error(Op::Complete, e))
    }

    /// The newest flush complete in both tiers, given `applied`.
    pub(super) fn durable_through(&self, applied: u64) -> u64 {
        self.seals.lock().complete(applied)
    }

    /// How far back the day documents may lack what the hour documents
    /// hold, for any writer.
    pub(super) fn lag(&self) -> Duration {
        self.seal_lag()
    }
}
