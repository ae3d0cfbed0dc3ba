//! When seals run: after each flush's hour documents land (a share of the
//! due passes), on idle ticks, and on close (everything, open hours too);
//! and the writer's record in `tally_writers` (`sealed`) that tells a
//! restarted daemon, or any daemon's reads, which hours may be unsealed.

use std::sync::atomic::Ordering;
use std::time::Duration;

use bson::doc;
use futures::TryStreamExt;
use parking_lot::Mutex;
use tracing::{debug, warn};

use super::queue::{Items, Seals, Share};
use super::write::Sealed;
use super::Sealer;
use crate::model::FlushBatch;
use crate::store::mongodb::errors::{as_i64, classify};
use crate::store::mongodb::stats::Op;
use crate::store::StoreError;

/// How often the oldest unsealed hour of all writers is read again, for
/// [`crate::store::Store::day_tier_lag`].
const LAG_REFRESH_US: u64 = 30_000_000;

/// Late shares (of up to 4,096 series each) sealed per flush or idle tick.
const LATE_SHARES_PER_CALL: usize = 4;

/// Pages (of up to 10,000 ids each) of a pass loaded per flush or idle tick.
const LOAD_PAGES_PER_CALL: usize = 4;

/// The lag assumed until the writers' records are read: an hour, its grace
/// and a pass, with room.
pub(super) const DEFAULT_LAG: Duration = Duration::from_secs(3 * 3600);

pub(super) fn wall_us() -> u64 {
    u64::try_from(chrono::Utc::now().timestamp_micros()).unwrap_or(0)
}

/// A share out of the queue while it is sealed. Dropped unfinished, by an
/// error or by the caller giving up on the call (the upkeep's step is
/// cancelled at shutdown, a close's seal is timed), it goes back to the
/// front of the queue: otherwise its series would be sealed by no one
/// before the next start, and a clean stop would leave day documents short.
struct Taken<'a> {
    seals: &'a Mutex<Seals>,
    share: Share,
    finished: bool,
}

impl Taken<'_> {
    /// The share is through: `f` tells the queue how.
    fn finish(mut self, f: impl FnOnce(&mut Seals, &Share)) {
        f(&mut self.seals.lock(), &self.share);
        self.finished = true;
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let placeholder = Share {
            hour: self.share.hour,
            items: Items::Load,
            late_since: self.share.late_since,
        };
        let share = std::mem::replace(&mut self.share, placeholder);
        self.seals.lock().failed(share);
    }
}

impl Sealer {
    /// Before the first flush of this process is written, or its first idle
    /// tick: where sealing starts. From the writer's record if it has one;
    /// else from the batch's oldest hour, recorded before anything of the
    /// batch is (without a batch, there is nothing to seal yet).
    pub(super) async fn start_seals(&self, batch: Option<&FlushBatch>) -> Result<(), StoreError> {
        if self.seals.lock().started() {
            return Ok(());
        }
        let record = self.conn.writer_doc().await?;
        match record.and_then(|d| d.get("sealed").and_then(as_i64)) {
            Some(sealed) => {
                // The hours themselves are read page by page when their
                // passes come, not here on the flush's path.
                let clock = batch.map_or(0, |b| b.id.0).max(wall_us());
                let now_s = i64::try_from(clock / 1_000_000).unwrap_or(i64::MAX);
                let oldest_s = self.oldest_hour_kept(clock);
                debug!(sealed, "sealing again from this writer's record");
                self.seals.lock().start_from_record(sealed, now_s, oldest_s);
            }
            None => {
                let Some(from) = batch.and_then(Seals::fresh_start) else {
                    self.seals.lock().found_no_record();
                    return Ok(());
                };
                // Recorded before the horizon is set, and so before any of
                // the batch is written: a crash after it leaves the hours
                // from there on to the next start.
                self.record_sealed(from).await?;
                self.seals.lock().start_at(from);
            }
        }
        Ok(())
    }

    /// Runs due seals at clock `now_us`: late passes, then a share of the
    /// oldest pass (everything, when `all`). Returns whether anything was
    /// sealed or recorded.
    pub(super) async fn run_seals(&self, now_us: u64, all: bool) -> Result<bool, StoreError> {
        let spread = u64::try_from(self.seal_spread.as_micros()).unwrap_or(u64::MAX);
        let now_s = i64::try_from(now_us / 1_000_000).unwrap_or(i64::MAX);
        self.seals.lock().close_hours(now_s, all);
        let mut did = false;
        let mut late_shares = 0;
        let mut pages = 0;
        loop {
            let Some(share) = self.seals.lock().next_share(now_us, spread, all) else {
                break;
            };
            let (hour, normal) = (share.hour, share.late_since.is_none());
            let taken = Taken {
                seals: &self.seals,
                share,
                finished: false,
            };
            late_shares += usize::from(!normal);
            match self.seal_share(&taken.share).await {
                Ok(Sealed::Page {
                    ids,
                    restarted,
                    done,
                }) => {
                    debug!(
                        hour,
                        documents = ids.len(),
                        done,
                        "hour documents to seal loaded"
                    );
                    taken.finish(|seals, share| seals.loaded(share, ids, restarted, done));
                    pages += 1;
                    if pages >= LOAD_PAGES_PER_CALL && !all {
                        break;
                    }
                    continue;
                }
                Ok(Sealed::Done) => taken.finish(Seals::done),
                // Dropped, it waits again at the front.
                Err(e) => return Err(e),
            }
            did = true;
            // Late minutes first, but a replay's worth of them over several
            // calls: a share of the hour's pass, or a few late shares.
            if !all && (normal || late_shares >= LATE_SHARES_PER_CALL) {
                break;
            }
        }
        let waiting = self.seals.lock().waiting();
        metrics::gauge!("tally_mongodb_unsealed_series").set(waiting as f64);
        let due = self.seals.lock().record_due();
        if let Some(from) = due {
            self.record_sealed(from).await?;
            self.seals.lock().recorded(from);
            did = true;
        }
        Ok(did)
    }

    /// What every flush and idle tick also does, each rate-limited: keep
    /// the read lag current, and take a step of a stopped writer's
    /// takeover (a failure is retried with the next step).
    pub(super) async fn upkeep(&self, now_us: u64) {
        self.refresh_lag(now_us).await;
        if let Err(e) = self.take_over_step(now_us).await {
            self.conn.wire.count_error(Op::Update, &e);
            warn!(error = %e, "sealing a stopped writer's hours failed; retried later");
        }
    }

    async fn record_sealed(&self, from: i64) -> Result<(), StoreError> {
        // `$set`, not `$max`: the writer's own account is the truth while
        // it lives, even over a takeover that moved it on meanwhile.
        let update = doc! { "$set": { "sealed": from }, "$currentDate": { "updated": true } };
        self.conn.update_writer(Op::Complete, update).await?;
        self.lag_from.fetch_min(from.max(1), Ordering::AcqRel);
        Ok(())
    }

    /// Reads, at most every 30 s, the oldest hour any writer may not have
    /// sealed: writers that wrote within the hour documents' retention.
    pub(super) async fn refresh_lag(&self, now_us: u64) {
        let last = self.lag_read_at.load(Ordering::Acquire);
        if last != 0 && now_us.saturating_sub(last) < LAG_REFRESH_US {
            return;
        }
        self.lag_read_at.store(now_us, Ordering::Release);
        let retention_us = self.conn.contact.retention.0.saturating_mul(1_000_000);
        let since = i64::try_from(now_us.saturating_sub(retention_us)).unwrap_or(0);
        let filter = doc! { "sealed": { "$exists": true }, "next": { "$gte": since } };
        let me = self.conn.writer.id.clone();
        let read = async {
            let mut cursor = self
                .conn
                .wire
                .writers
                .find(filter)
                .projection(doc! { "sealed": 1 })
                .await?;
            let (mut oldest, mut mine): (Option<i64>, Option<i64>) = (None, None);
            while let Some(d) = cursor.try_next().await? {
                if let Some(s) = d.get("sealed").and_then(as_i64) {
                    oldest = Some(oldest.map_or(s, |o| o.min(s)));
                    if d.get_str("_id").is_ok_and(|id| id == me) {
                        mine = Some(s);
                    }
                }
            }
            Ok::<_, mongodb::error::Error>((oldest, mine))
        };
        let read = async { read.await.map_err(|e| classify(&e, false)) };
        match self
            .conn
            .wire
            .timed(
                Op::Read,
                64,
                self.conn.wire.timeout,
                "writers' seals: ",
                read,
            )
            .await
        {
            Ok((oldest, mine)) => {
                if let Some(oldest) = oldest {
                    self.lag_from.store(oldest.max(1), Ordering::Release);
                }
                if let Some(mine) = mine {
                    // A takeover may have moved this writer's record past
                    // what it still has to seal: the next record puts it back.
                    self.seals.lock().server_record(mine);
                }
            }
            Err(e) => debug!(error = %e, "cannot read the writers' seal records"),
        }
    }

    /// The start of the oldest hour whose documents retention still keeps
    /// at clock `now_us`: older hours have nothing left to seal from.
    pub(super) fn oldest_hour_kept(&self, now_us: u64) -> i64 {
        let now_s = i64::try_from(now_us / 1_000_000).unwrap_or(i64::MAX);
        let retention = i64::try_from(self.conn.contact.retention.0).unwrap_or(i64::MAX);
        now_s.saturating_sub(retention)
    }

    /// How far back the day documents may lack what the hour documents
    /// hold, for any writer.
    pub(super) fn seal_lag(&self) -> Duration {
        let from = self.lag_from.load(Ordering::Acquire);
        if from == i64::MAX {
            return DEFAULT_LAG;
        }
        let now = chrono::Utc::now().timestamp();
        Duration::from_secs(u64::try_from(now.saturating_sub(from)).unwrap_or(0))
    }
}
