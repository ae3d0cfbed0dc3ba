//! The write-ahead log: every admitted request is appended here, and
//! written (or synced) before it is acknowledged, so that a crash loses no
//! acknowledged sample. See `record` for what it holds (requests in the
//! compact form of `compact`, against the segment's dictionaries,
//! `crate::ingest::dict`),
//! `front` for where requests are encoded and queued, `segment` for the
//! files, `writer` for the group commit (by the appender itself, or by the
//! writer thread); replaying it at start is
//! [`crate::recovery`]'s.
//!
//! Exactly once: a flush's marker sits in the log between the requests
//! folded into it and those folded later (ingest appends under the ingest
//! gate's shared side, the flush cuts and appends its marker under its
//! exclusive side). After a crash the store's durable flush id says which
//! marker the store has everything up to; replay folds the requests after
//! it, cuts each later flush again with its original id at its marker, and
//! the documents' watermarks skip what the store already has.

mod baselines;
mod compact;
mod config;
mod decode;
mod front;
mod read;
mod record;
mod segment;
mod writer;

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tracing::info;

pub use baselines::Baselines;
/// The compact request encoding, for the benchmark that weighs it.
pub use compact::{Decoder as CompactDecoder, Encoder as CompactEncoder};
pub use config::WalConfig;
use front::{Cmd, Front, Refused};
pub use read::{recover, Entry, RecoveredSegment, SegmentRecords};
pub use record::{Baseline, Record, UNKNOWN_ARRIVAL};
use segment::Open;
use writer::Writer;

use crate::ingest::view::PushView;

/// When an append counts as written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncMode {
    /// Handed to the operating system: a crash of the process loses
    /// nothing acknowledged; a power cut may lose the last moments.
    #[default]
    Os,
    /// Also synced to the disk (`fdatasync`), a group per
    /// `wal.fsync_interval`: a power cut loses nothing acknowledged.
    Fsync,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum WalError {
    #[error("write-ahead log in {dir}: {reason}")]
    Io { dir: String, reason: String },
    #[error("the write-ahead log cannot be written ({0}); restart tallyd once the cause is fixed")]
    Broken(String),
    #[error("the write-ahead log is closed")]
    Closed,
}

/// Hears when a marker is written; see [`Wal::marker`].
pub struct MarkerReceipt(oneshot::Receiver<Result<(), WalError>>);

impl MarkerReceipt {
    /// Waits until the marker is written.
    pub async fn written(self) -> Result<(), WalError> {
        self.0.await.map_err(|_| WalError::Closed)?
    }
}

/// The running log: appends are queued in `front` and written under
/// `pen`, by their appender or by the writer thread.
pub struct Wal {
    front: Arc<Front>,
    pen: Arc<parking_lot::Mutex<Writer>>,
    failing: Arc<parking_lot::Mutex<Option<String>>>,
}

impl Wal {
    /// Starts writing a new segment after `recovered`, opened with a
    /// checkpoint of `baselines`; `recovered`'s segments are deleted as the
    /// store makes their flushes durable. Baselines whose series has not
    /// been pushed for `max_baseline_age` are dropped as segments roll; one
    /// whose arrival an older log did not record counts as arriving now.
    pub fn start(
        dir: &Path,
        cfg: WalConfig,
        recovered: &[RecoveredSegment],
        mut baselines: Baselines,
        max_baseline_age: Duration,
    ) -> Result<Wal, WalError> {
        let now = chrono::Utc::now().timestamp_millis();
        baselines.set_unknown_arrivals(now);
        let io = |e: std::io::Error| WalError::Io {
            dir: dir.display().to_string(),
            reason: e.to_string(),
        };
        let number = recovered.last().map_or(1, |s| s.number + 1);
        let mut open = Open::create(dir, number).map_err(io)?;
        let mut first = Vec::new();
        segment::frame(&mut first, &record::encode_checkpoint(baselines.iter()));
        open.write(&first)
            .and_then(|()| open.file.sync_data())
            .map_err(io)?;
        let markers: VecDeque<(u64, u64)> = recovered
            .iter()
            .flat_map(|s| s.baseline_markers().map(move |id| (id, s.number)))
            .collect();
        let kept = recovered
            .iter()
            .map(|s| (s.number, s.path.clone()))
            .collect();
        let front = Arc::new(Front::new(cfg.queue));
        let writer = Writer {
            dir: dir.to_path_buf(),
            cfg,
            open,
            kept,
            markers,
            baselines,
            max_baseline_age,
            broken: None,
            failing: Arc::default(),
            front: front.clone(),
            ends_segment: false,
            carry: Default::default(),
            buf: Vec::with_capacity(1 << 20),
            waiting: Vec::new(),
            closed: false,
            written: writer::Written::registered(),
        };
        let failing = writer.failing.clone();
        let pen = Arc::new(parking_lot::Mutex::new(writer));
        let thread_pen = pen.clone();
        std::thread::Builder::new()
            .name("tally-wal".into())
            .spawn(move || Writer::run(thread_pen))
            .map_err(io)?;
        info!(dir = %dir.display(), segment = number, "write-ahead log open");
        Ok(Wal {
            front,
            pen,
            failing,
        })
    }

    /// Runs `queue` until it takes its command, waiting while the queue is
    /// full (backpressure).
    async fn queued<T>(
        &self,
        mut queue: impl FnMut() -> Result<T, Refused>,
    ) -> Result<T, WalError> {
        let mut wait = Duration::from_micros(50);
        loop {
            match queue() {
                Ok(t) => return Ok(t),
                Err(Refused::Closed) => return Err(WalError::Closed),
                Err(Refused::Full) => {
                    metrics::counter!("tally_wal_queue_full_total").increment(1);
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_millis(5));
                }
            }
        }
    }

    /// Sends `cmd`, waiting while the queue is full.
    async fn send(&self, cmd: Cmd) -> Result<(), WalError> {
        let mut cmd = Some(cmd);
        self.queued(|| match cmd.take().map(|c| self.front.send(c)) {
            Some(Ok(())) => Ok(()),
            Some(Err((c, why))) => {
                cmd = Some(c);
                Err(why)
            }
            None => Err(Refused::Closed),
        })
        .await
    }

    /// Appends a request, read as `req`, and returns once it is written
    /// (or synced). It is encoded here, on the caller's thread, and written
    /// here too when the writer is free and `wal.sync = "os"`.
    pub async fn append_request(
        &self,
        now_ms: i64,
        refused_sources: &[u32],
        req: &PushView<'_>,
    ) -> Result<(), WalError> {
        let wait = self
            .queued(|| self.front.append(now_ms, refused_sources, req))
            .await?;
        // Busy means someone else is writing: the thread takes what is
        // queued once it holds the pen, and an appender that led wakes it
        // for anything left behind.
        let led = self.pen.try_lock().map(|mut w| w.lead());
        match led {
            Some(true) => self.front.wake_if_queued(),
            _ => self.front.wake(),
        }
        wait.await.map_err(|_| WalError::Closed)?
    }

    /// Records that flush `flush_id` was cut here, with the baselines that
    /// moved since the last marker that carried them, or none (see
    /// `crate::aggregator::BaselineLog`): queued at once, in order with the
    /// appends, without waiting for room (see `Front::send_marker`); the
    /// receipt says when it is written. The flush must not reach the store
    /// before that: replay finds flushes by their markers. Only the flush
    /// pipeline's cut calls it, one cut at a time, which is what bounds
    /// the markers over the queue's cap.
    pub(crate) fn marker(
        &self,
        flush_id: u64,
        baselines: Option<Vec<Baseline>>,
    ) -> Result<MarkerReceipt, WalError> {
        let (done, wait) = oneshot::channel();
        self.front
            .send_marker(Cmd::Marker {
                flush_id,
                baselines,
                done,
            })
            .map_err(|_| WalError::Closed)?;
        Ok(MarkerReceipt(wait))
    }

    /// The store holds every flush up to `flush_id` durably: segments only
    /// they need can go. Dropped when the queue is full (a later call
    /// covers it).
    pub fn durable(&self, flush_id: u64) {
        let _ = self.front.send(Cmd::Durable(flush_id));
    }

    /// Why appends fail now, if they do (a full disk); cleared by the
    /// next write that succeeds.
    pub fn failing(&self) -> Option<String> {
        self.failing.lock().clone()
    }

    /// Writes a closing checkpoint and stops the writer.
    pub async fn close(&self) {
        let (done, wait) = oneshot::channel();
        if self.send(Cmd::Close { done }).await.is_ok() {
            let _ = wait.await;
        }
    }
}

#[cfg(test)]
mod tests;
