//! The log's single writer: a thread that takes appends from a bounded
//! queue, writes every append waiting at that moment with one `write`
//! (group commit), syncs them when `wal.sync = "fsync"`, and only then
//! answers each appender. It also rolls segments (each new one opens with a
//! checkpoint of the baselines) and deletes segments once the store holds
//! everything in them. Requests are encoded compact here, in log order,
//! against the open segment's dictionary (`compact`): one thread owns it,
//! so a series is defined before any record that refers to it, each
//! segment starts its own, and a failed write that takes records back
//! makes the next record start it again.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::oneshot;
use tracing::{error, info, warn};

use crate::ingest::view::PushView;

use super::compact::Encoder;
use super::record::{self, Baseline};
use super::segment::{self, Open};
use super::Baselines;
use super::{SyncMode, WalConfig, WalError};

/// What the writer is asked to do.
pub(super) enum Cmd {
    /// A request, as `tally.v1` bytes (as they came, shared with the
    /// request rather than copied, or written from its view), with the
    /// clock and refused sources of its record; `done` hears when it is
    /// written (and synced).
    Append {
        now_ms: i64,
        refused_sources: Vec<u32>,
        request: Bytes,
        done: oneshot::Sender<Result<(), WalError>>,
    },
    /// A flush was cut: its marker, written in order with the appends;
    /// `done` hears when it is written, which may be in a later group than
    /// its own if that one fails.
    Marker {
        flush_id: u64,
        baselines: Vec<Baseline>,
        done: oneshot::Sender<Result<(), WalError>>,
    },
    /// The store holds every flush up to this id durably.
    Durable(u64),
    /// Write a final checkpoint, sync and stop.
    Close { done: oneshot::Sender<()> },
}

/// Most bytes written in one group.
const MAX_GROUP: usize = 8 << 20;

/// While writes fail (a full disk), how often the writer tries again by
/// itself when no command comes: the markers of failed groups, or else a
/// probe, so that readiness returns with the space even if no agent sends.
const RETRY: Duration = Duration::from_millis(200);

/// Bytes a probe writes (and takes back) to see whether the disk has room.
const PROBE_BYTES: usize = 64 * 1024;

type Done = oneshot::Sender<Result<(), WalError>>;

/// Markers not yet written because their group failed (a full disk). A
/// flush's marker must reach the log before the store may hold the flush,
/// so they are written first in the next group: the requests of the failed
/// group were refused, so nothing taken comes between.
#[derive(Default)]
struct Carry {
    frames: Vec<u8>,
    done: Vec<Done>,
}

pub(super) struct Writer {
    pub dir: PathBuf,
    pub cfg: WalConfig,
    pub open: Open,
    /// Older segments still needed, oldest first.
    pub kept: VecDeque<(u64, PathBuf)>,
    /// Each marker's flush id and the segment it is in, oldest first.
    pub markers: VecDeque<(u64, u64)>,
    /// Every baseline as of the last marker written.
    pub baselines: Baselines,
    /// Baselines whose series has not been pushed for this long are
    /// dropped at each segment roll (`IngestConfig::baseline_keep`): the
    /// aggregator forgets such idle counters too.
    pub max_baseline_age: Duration,
    /// Set once a failed write could not be undone: the log cannot be
    /// trusted past it, so every later append fails too until the daemon
    /// restarts.
    pub broken: Option<String>,
    /// Why the last write failed, until one succeeds: readiness shows it.
    pub failing: Arc<Mutex<Option<String>>>,
    /// The open segment's dictionary and predictions.
    pub encoder: Encoder,
    /// A record being encoded, before it is framed.
    pub scratch: Vec<u8>,
}

impl Writer {
    pub fn run(mut self, rx: Receiver<Cmd>) {
        let mut buf = Vec::with_capacity(1 << 20);
        let mut waiting: Vec<Done> = Vec::new();
        let mut carry = Carry::default();
        loop {
            let first = if carry.frames.is_empty() && self.failing.lock().is_none() {
                match rx.recv() {
                    Ok(c) => Some(c),
                    Err(_) => break,
                }
            } else {
                match rx.recv_timeout(RETRY) {
                    Ok(c) => Some(c),
                    Err(RecvTimeoutError::Timeout) if carry.frames.is_empty() => {
                        self.probe();
                        continue;
                    }
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            };
            buf.extend_from_slice(&carry.frames);
            let mut markers = std::mem::take(&mut carry);
            let closing = self.gather(&rx, first, &mut buf, &mut waiting, &mut markers);
            let result = self.write_group(&buf);
            buf.clear();
            for w in waiting.drain(..) {
                let _ = w.send(result.clone());
            }
            if result.is_ok() || closing.is_some() {
                for w in markers.done.drain(..) {
                    let _ = w.send(result.clone());
                }
            } else {
                carry = markers;
            }
            if let Some(done) = closing {
                self.close();
                let _ = done.send(());
                return;
            }
        }
    }

    /// Takes what is queued (and, with fsync, what arrives within the
    /// window) into one group, so one write and one sync serve them all.
    /// Returns the close request if one came.
    fn gather(
        &mut self,
        rx: &Receiver<Cmd>,
        first: Option<Cmd>,
        buf: &mut Vec<u8>,
        waiting: &mut Vec<Done>,
        markers: &mut Carry,
    ) -> Option<oneshot::Sender<()>> {
        let deadline = Instant::now() + self.group_window();
        let mut next = first;
        while let Some(cmd) = next.take() {
            match cmd {
                Cmd::Append {
                    now_ms,
                    refused_sources,
                    request,
                    done,
                } => {
                    self.encode_request(now_ms, &refused_sources, &request);
                    segment::frame(buf, &self.scratch);
                    waiting.push(done);
                }
                Cmd::Marker {
                    flush_id,
                    baselines,
                    done,
                } => {
                    let at = buf.len();
                    segment::frame(buf, &record::encode_marker(flush_id, &baselines));
                    markers.frames.extend_from_slice(&buf[at..]);
                    markers.done.push(done);
                    self.markers.push_back((flush_id, self.open.number));
                    self.baselines.extend(baselines);
                }
                Cmd::Durable(id) => self.release(id),
                Cmd::Close { done } => return Some(done),
            }
            if buf.len() >= MAX_GROUP {
                break;
            }
            next = match rx.try_recv() {
                Ok(c) => Some(c),
                Err(_) if self.cfg.sync == SyncMode::Fsync => rx
                    .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                    .ok(),
                Err(_) => None,
            };
        }
        None
    }

    /// Encodes a request's record into `scratch`: compact, or as its
    /// `tally.v1` bytes if they do not read as a view (admission read
    /// them, so this is not expected; the request is kept either way).
    fn encode_request(&mut self, now_ms: i64, refused_sources: &[u32], request: &[u8]) {
        self.scratch.clear();
        match PushView::decode(request, usize::MAX) {
            Ok(view) => {
                self.scratch.push(record::COMPACT);
                self.encoder
                    .encode(now_ms, refused_sources, &view, &mut self.scratch);
            }
            Err(e) => {
                warn!(error = %e, "write-ahead log: a request logged in full, not compact");
                self.scratch
                    .extend_from_slice(&record::request_head(now_ms, refused_sources, 0));
                self.scratch.extend_from_slice(request);
            }
        }
    }

    fn group_window(&self) -> Duration {
        match self.cfg.sync {
            SyncMode::Fsync => self.cfg.fsync_interval,
            SyncMode::Os => Duration::ZERO,
        }
    }

    fn write_group(&mut self, buf: &[u8]) -> Result<(), WalError> {
        if let Some(why) = &self.broken {
            return Err(WalError::Broken(why.clone()));
        }
        if buf.is_empty() {
            return Ok(());
        }
        let before = self.open.len;
        let written = self.open.write(buf).and_then(|()| match self.cfg.sync {
            SyncMode::Fsync => self.open.file.sync_data(),
            SyncMode::Os => Ok(()),
        });
        if let Err(e) = written {
            metrics::counter!("tally_wal_errors_total").increment(1);
            let why = format!("writing {}: {e}", segment::name(self.open.number));
            *self.failing.lock() = Some(why.clone());
            // Cut off whatever part of the group reached the file, so the
            // log ends on a whole record and the next group (once the disk
            // has room again) can follow it. If even that fails, the log
            // cannot be trusted any more.
            self.open.len = before;
            // The records taken back may have defined series later ones
            // would refer to.
            self.encoder.lost();
            if let Err(cut) = self.open.file.set_len(before) {
                error!(error = %why, truncate_error = %cut, "write-ahead log write failed and could not be undone; ingest stops acknowledging until restart");
                self.broken = Some(why.clone());
                return Err(WalError::Broken(why));
            }
            warn!(error = %why, "write-ahead log write failed; the requests of this group were not taken");
            return Err(WalError::Io {
                dir: self.dir.display().to_string(),
                reason: why,
            });
        }
        self.recovered();
        metrics::counter!("tally_wal_bytes_total").increment(buf.len() as u64);
        metrics::counter!("tally_wal_groups_total").increment(1);
        if self.open.len >= self.cfg.segment_bytes {
            self.roll();
        }
        Ok(())
    }

    /// Writes and takes back a block of zeros at the end of the segment: if
    /// that works, the disk has room again.
    fn probe(&mut self) {
        if self.broken.is_some() {
            return;
        }
        let before = self.open.len;
        let wrote = self.open.write(&vec![0; PROBE_BYTES]);
        self.open.len = before;
        match self.open.file.set_len(before) {
            Err(cut) => {
                error!(truncate_error = %cut, "write-ahead log probe could not be undone; ingest stops acknowledging until restart");
                self.broken = Some(format!("undoing a probe write: {cut}"));
            }
            Ok(()) if wrote.is_ok() => self.recovered(),
            Ok(()) => {}
        }
    }

    fn recovered(&self) {
        let mut failing = self.failing.lock();
        if failing.take().is_some() {
            info!("write-ahead log writable again");
        }
    }

    /// Starts the next segment, opening it with a checkpoint.
    fn roll(&mut self) {
        let oldest = chrono::Utc::now().timestamp_millis()
            - self.max_baseline_age.as_millis().min(i64::MAX as u128) as i64;
        self.baselines.retain(|b| b.arrived_ms >= oldest);
        let next = self.open.number + 1;
        match Open::create(&self.dir, next) {
            Ok(mut open) => {
                let mut buf = Vec::new();
                segment::frame(&mut buf, &record::encode_checkpoint(self.baselines.iter()));
                if let Err(e) = open.write(&buf).and_then(|()| open.file.sync_data()) {
                    warn!(error = %e, "write-ahead log: could not start a new segment; staying on the current one");
                    return;
                }
                // The old segment's data must be on disk before a later
                // segment can be trusted to follow it.
                if let Err(e) = self.open.file.sync_data() {
                    warn!(error = %e, "write-ahead log: syncing the finished segment failed");
                }
                let old = std::mem::replace(&mut self.open, open);
                self.encoder.new_segment();
                self.kept
                    .push_back((old.number, self.dir.join(segment::name(old.number))));
                metrics::gauge!("tally_wal_segments").set((self.kept.len() + 1) as f64);
            }
            Err(e) => warn!(error = %e, "write-ahead log: could not create a new segment"),
        }
    }

    /// Deletes the segments every record of which is durable in the store:
    /// those before the segment holding the newest marker at or below
    /// `durable` (that segment's checkpoint and markers carry the baselines
    /// forward).
    fn release(&mut self, durable: u64) {
        let Some(&(_, seg)) = self.markers.iter().rev().find(|(id, _)| *id <= durable) else {
            return;
        };
        while let Some((number, path)) = self.kept.front().cloned() {
            if number >= seg {
                break;
            }
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    warn!(error = %e, segment = %path.display(), "write-ahead log: could not delete a segment");
                    return;
                }
            }
            self.kept.pop_front();
            while self.markers.front().is_some_and(|(_, s)| *s <= number) {
                self.markers.pop_front();
            }
        }
        metrics::gauge!("tally_wal_segments").set((self.kept.len() + 1) as f64);
    }

    /// At shutdown: a checkpoint of every baseline, so they survive the
    /// restart, then a sync.
    fn close(&mut self) {
        let mut buf = Vec::new();
        segment::frame(&mut buf, &record::encode_checkpoint(self.baselines.iter()));
        let done = self
            .open
            .write(&buf)
            .and_then(|()| self.open.file.sync_data());
        match done {
            Ok(()) => info!(segments = self.kept.len() + 1, "write-ahead log closed"),
            Err(e) => warn!(error = %e, "write-ahead log: the closing checkpoint failed"),
        }
    }
}
