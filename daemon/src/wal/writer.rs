//! The log's writer: it takes appends from the bounded queue of `front`
//! (where appenders encoded them), writes every append waiting at that
//! moment with one `write` (group commit), syncs them when
//! `wal.sync = "fsync"`, and only then answers each appender. It also rolls
//! segments (each new one opens with a checkpoint of the baselines) and
//! deletes segments once the store holds everything in them.
//!
//! It sits behind a lock, and two parties hold it. Its thread does all of
//! the above. With `wal.sync = "os"` an appender that finds it free takes
//! it for the common case instead (`lead`): it writes the requests at the
//! head of the queue (its own and any queued beside it) on its own thread
//! and answers them, with no thread woken. A write to the page cache takes
//! microseconds; where the kernel throttles writes, the appender waits as
//! the writer thread would have, and its acknowledgement with it.
//! Commands leave the queue only under the lock, so records reach the file
//! in the order they were encoded, whoever writes them.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::oneshot;
use tracing::{error, info, warn};

use super::front::{Cmd, Done, Front};
use super::record;
use super::segment::{self, Open};
use super::Baselines;
use super::{SyncMode, WalConfig, WalError};

/// Most bytes written in one group.
const MAX_GROUP: usize = 8 << 20;

/// While writes fail (a full disk), how often the writer tries again by
/// itself when no command comes: the markers of failed groups, or else a
/// probe, so that readiness returns with the space even if no agent sends.
const RETRY: Duration = Duration::from_millis(200);

/// Bytes a probe writes (and takes back) to see whether the disk has room.
const PROBE_BYTES: usize = 64 * 1024;

/// Markers not yet written because their group failed (a full disk). A
/// flush's marker must reach the log before the store may hold the flush,
/// so they are written first in the next group: the requests of the failed
/// group were refused, so nothing taken comes between.
#[derive(Default)]
pub(super) struct Carry {
    frames: Vec<u8>,
    done: Vec<Done>,
}

pub(super) struct Writer {
    pub dir: PathBuf,
    pub cfg: WalConfig,
    pub open: Open,
    /// Older segments still needed, oldest first.
    pub kept: VecDeque<(u64, PathBuf)>,
    /// Each marker's with baselines flush id and the segment it is in,
    /// oldest first.
    pub markers: VecDeque<(u64, u64)>,
    /// Every baseline as of the last marker with baselines written.
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
    /// The queue, and the encoder whose records it holds.
    pub front: Arc<Front>,
    /// The group being written was cut from the queue to end the segment:
    /// the segment rolls once it is written, and only then, since records
    /// queued later start the dictionaries again.
    pub ends_segment: bool,
    /// Markers of failed groups, written first in the next group.
    pub carry: Carry,
    /// The group being written, and who waits for it (kept for their
    /// memory).
    pub buf: Vec<u8>,
    pub waiting: Vec<Done>,
    /// The closing checkpoint is written: nothing more is.
    pub closed: bool,
    /// The log's own counters, registered once (see [`Written`]).
    pub written: Written,
}

/// `tally_wal_bytes_total` and `tally_wal_groups_total`, registered once: a
/// group is written per request when agents send small ones, and the
/// macro's lookup of its key was a cost of each.
pub(super) struct Written {
    bytes: metrics::Counter,
    groups: metrics::Counter,
}

impl Written {
    pub(super) fn registered() -> Written {
        Written {
            bytes: metrics::counter!("tally_wal_bytes_total"),
            groups: metrics::counter!("tally_wal_groups_total"),
        }
    }

    fn group(&self, bytes: usize) {
        self.bytes.increment(bytes as u64);
        self.groups.increment(1);
    }
}

/// Tells appenders the writer is gone, however it stops.
struct Closing(Arc<Front>);

impl Drop for Closing {
    fn drop(&mut self) {
        self.0.close();
    }
}

impl Writer {
    /// The writer thread: waits for commands and writes them, until the
    /// log is closed.
    pub fn run(pen: Arc<Mutex<Writer>>) {
        let front = pen.lock().front.clone();
        let _closing = Closing(front.clone());
        loop {
            let quiet = pen.lock().quiet();
            front.wait((!quiet).then_some(RETRY));
            if pen.lock().round() {
                return;
            }
        }
    }

    /// Nothing to retry: no failed markers waiting, no failing disk.
    fn quiet(&self) -> bool {
        self.carry.frames.is_empty() && self.failing.lock().is_none()
    }

    /// One group from the queue, or a probe of a failing disk when nothing
    /// is queued. Returns whether the log was closed.
    fn round(&mut self) -> bool {
        let quiet = self.quiet();
        let first = self.front.try_next();
        if first.is_none() && self.carry.frames.is_empty() {
            if !quiet {
                self.probe();
            }
            return false;
        }
        let mut buf = std::mem::take(&mut self.buf);
        let mut waiting = std::mem::take(&mut self.waiting);
        let mut markers = std::mem::take(&mut self.carry);
        buf.extend_from_slice(&markers.frames);
        let closing = self.gather(first, &mut buf, &mut waiting, &mut markers);
        let result = self.write_and_answer(&mut buf, &mut waiting);
        if result.is_ok() || closing.is_some() {
            for w in markers.done.drain(..) {
                let _ = w.send(result.clone());
            }
            markers.frames.clear();
        }
        self.carry = markers;
        self.buf = buf;
        self.waiting = waiting;
        let Some(done) = closing else {
            return false;
        };
        self.close();
        self.closed = true;
        self.front.close();
        let _ = done.send(());
        true
    }

    /// An appender's turn (`wal.sync = "os"`): writes the requests' records
    /// at the head of the queue as one group and answers them. Whatever it
    /// leaves (a marker, a record that would end the segment, anything
    /// while the disk is failing) is the thread's: returns false when the
    /// thread is needed.
    pub fn lead(&mut self) -> bool {
        if self.cfg.sync != SyncMode::Os || self.closed || self.broken.is_some() || !self.quiet() {
            return false;
        }
        // The segment rolls in the thread's group once it is full.
        let room = (MAX_GROUP as u64).min(self.cfg.segment_bytes.saturating_sub(self.open.len + 1))
            as usize;
        let mut buf = std::mem::take(&mut self.buf);
        let mut waiting = std::mem::take(&mut self.waiting);
        while let Some((frame, done)) = self.front.try_next_append(room - buf.len()) {
            buf.extend_from_slice(&frame);
            waiting.push(done);
        }
        let result = self.write_and_answer(&mut buf, &mut waiting);
        self.buf = buf;
        self.waiting = waiting;
        result.is_ok()
    }

    /// Writes the group in `buf` and answers every request in it; emptied
    /// for the next group.
    fn write_and_answer(
        &mut self,
        buf: &mut Vec<u8>,
        waiting: &mut Vec<Done>,
    ) -> Result<(), WalError> {
        let result = self.write_group(buf);
        buf.clear();
        if result.is_err() {
            // Requests queued behind the group may refer to series it
            // defined: they are refused with it.
            waiting.extend(self.front.take_back());
        }
        for w in waiting.drain(..) {
            let _ = w.send(result.clone());
        }
        result
    }

    /// Takes what is queued (and, with fsync, what arrives within the
    /// window) into one group, so one write and one sync serve them all.
    /// A group that fills the segment takes everything queued, and the
    /// segment rolls after it. Returns the close request if one came.
    fn gather(
        &mut self,
        first: Option<Cmd>,
        buf: &mut Vec<u8>,
        waiting: &mut Vec<Done>,
        markers: &mut Carry,
    ) -> Option<oneshot::Sender<()>> {
        let deadline = Instant::now() + self.group_window();
        let mut next = first;
        let mut cut: Option<VecDeque<Cmd>> = None;
        while let Some(cmd) = next.take() {
            match cmd {
                Cmd::Append { frame, done } => {
                    buf.extend_from_slice(&frame);
                    waiting.push(done);
                }
                Cmd::Marker {
                    flush_id,
                    baselines,
                    done,
                } => {
                    let at = buf.len();
                    match baselines {
                        Some(baselines) => {
                            segment::frame(buf, &record::encode_marker(flush_id, &baselines));
                            self.markers.push_back((flush_id, self.open.number));
                            self.baselines.extend(baselines);
                        }
                        None => segment::frame(buf, &record::encode_bare_marker(flush_id)),
                    }
                    markers.frames.extend_from_slice(&buf[at..]);
                    markers.done.push(done);
                }
                Cmd::Durable(id) => self.release(id),
                Cmd::Close { done } => return Some(done),
            }
            if let Some(rest) = &mut cut {
                next = rest.pop_front();
                continue;
            }
            if self.open.len + buf.len() as u64 >= self.cfg.segment_bytes {
                // Everything encoded against this segment's dictionary
                // goes into it.
                let mut rest = self.front.cut_segment();
                next = rest.pop_front();
                cut = Some(rest);
                self.ends_segment = true;
                continue;
            }
            if buf.len() >= MAX_GROUP {
                break;
            }
            next = self.front.try_next().or_else(|| {
                let left = deadline.saturating_duration_since(Instant::now());
                (self.cfg.sync == SyncMode::Fsync && !left.is_zero())
                    .then(|| self.front.next(Some(left)))
                    .flatten()
            });
        }
        None
    }

    fn group_window(&self) -> Duration {
        match self.cfg.sync {
            SyncMode::Fsync => self.cfg.fsync_interval,
            SyncMode::Os => Duration::ZERO,
        }
    }

    fn write_group(&mut self, buf: &[u8]) -> Result<(), WalError> {
        let ends_segment = std::mem::take(&mut self.ends_segment);
        if let Some(why) = &self.broken {
            return Err(WalError::Broken(why.clone()));
        }
        if buf.is_empty() {
            if ends_segment {
                self.roll();
            }
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
        self.written.group(buf.len());
        if ends_segment {
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
                self.kept
                    .push_back((old.number, self.dir.join(segment::name(old.number))));
                metrics::gauge!("tally_wal_segments").set((self.kept.len() + 1) as f64);
            }
            Err(e) => warn!(error = %e, "write-ahead log: could not create a new segment"),
        }
    }

    /// Deletes the segments every record of which is durable in the store
    /// and that replay cannot need: those before the segment holding the
    /// newest marker with baselines at or below `durable` (replay brings
    /// the baselines forward from it, `crate::recovery`).
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
