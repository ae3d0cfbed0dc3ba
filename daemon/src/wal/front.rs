//! The log's front: the bounded queue between appenders and the writer
//! thread, and the compact encoder, behind one lock.
//!
//! A request is encoded on its appender's own thread, from the view
//! admission already read, and queued in the same critical section: the
//! order records are encoded in (which the segment's dictionary depends
//! on) is the order they are queued and written in. Encoding on the writer
//! instead made every request cross threads as `tally.v1` bytes, written
//! by front doors that read other protocols and read back by the writer:
//! an encode and a decode per sample for nothing.
//!
//! Who writes a queued record: with `wal.sync = "os"` usually its own
//! appender, right after queuing it (see `writer::Writer::lead`); the
//! writer thread is woken only for what an appender does not take (markers,
//! a segment's roll, a failing disk, fsync's groups) or when another
//! appender is writing at that moment. Handing every request to the thread
//! cost two thread wake-ups per request, about a tenth of the daemon's CPU
//! with agents sending small requests in real time.
//!
//! Whatever would make queued records disagree with the file is settled
//! under the same lock: before a segment rolls, the writer takes every
//! record encoded against its dictionary into that segment's last group
//! (and the next record starts the dictionaries again); when a group's
//! write fails and is taken back, the requests queued behind it, which
//! may refer to definitions in it, are refused with it.

use std::collections::VecDeque;
use std::time::Duration;

use parking_lot::{Condvar, Mutex, MutexGuard};
use tokio::sync::oneshot;

use super::compact::Encoder;
use super::record;
use super::segment;
use super::WalError;
use crate::ingest::view::PushView;

/// Hears whether a command's record was written.
pub(super) type Done = oneshot::Sender<Result<(), WalError>>;

/// What the writer is asked to do, in log order.
pub(super) enum Cmd {
    /// A request's record, encoded and framed; `done` hears when it is
    /// written (and synced).
    Append { frame: Vec<u8>, done: Done },
    /// A flush was cut: its marker, written in order with the appends,
    /// with the baselines that moved since the last marker that carried
    /// them, or none; `done` hears when it is written, which may be in a
    /// later group than its own if that one fails.
    Marker {
        flush_id: u64,
        baselines: Option<Vec<record::Baseline>>,
        done: Done,
    },
    /// The store holds every flush up to this id durably.
    Durable(u64),
    /// Write a final checkpoint, sync and stop.
    Close { done: oneshot::Sender<()> },
}

/// Why a command was not queued.
pub(super) enum Refused {
    /// The queue is at its bound: wait and try again.
    Full,
    /// The writer has stopped.
    Closed,
}

struct State {
    cmds: VecDeque<Cmd>,
    cap: usize,
    encoder: Encoder,
    /// Set when the writer stops: nothing more is queued.
    closed: bool,
}

/// The queue and the encoder, shared by appenders and the writer.
pub(super) struct Front {
    state: Mutex<State>,
    /// Wakes the writer when a command is queued.
    queued: Condvar,
}

impl Front {
    pub fn new(cap: usize) -> Front {
        Front {
            state: Mutex::new(State {
                cmds: VecDeque::with_capacity(cap.min(1024)),
                cap,
                encoder: Encoder::default(),
                closed: false,
            }),
            queued: Condvar::new(),
        }
    }

    /// Encodes `req`'s record and queues it; the receiver hears when it is
    /// written. Nobody is woken: the caller writes it itself or calls
    /// [`Front::wake`].
    pub fn append(
        &self,
        now_ms: i64,
        refused_sources: &[u32],
        req: &PushView<'_>,
    ) -> Result<oneshot::Receiver<Result<(), WalError>>, Refused> {
        let mut s = self.state.lock();
        s.admits()?;
        // A frame's header, then the record; the header is filled in once
        // the record's length is known.
        let mut frame = Vec::with_capacity(64 + 12 * req.samples());
        frame.resize(segment::HEADER, 0);
        frame.push(record::COMPACT);
        s.encoder.encode(now_ms, refused_sources, req, &mut frame);
        segment::seal_frame(&mut frame);
        let (done, wait) = oneshot::channel();
        s.cmds.push_back(Cmd::Append { frame, done });
        Ok(wait)
    }

    /// Wakes the writer thread to take what is queued.
    pub fn wake(&self) {
        self.queued.notify_one();
    }

    /// Wakes the writer thread if anything is queued.
    pub fn wake_if_queued(&self) {
        if !self.state.lock().cmds.is_empty() {
            self.queued.notify_one();
        }
    }

    /// The writer thread's wait: until something is queued, or at most
    /// `wait` (forever when None). Nothing is taken: commands come out only
    /// under the writer's lock, so that they are written in queue order
    /// whoever writes them.
    pub fn wait(&self, wait: Option<Duration>) {
        self.wait_locked(&mut self.state.lock(), wait);
    }

    fn wait_locked(&self, s: &mut MutexGuard<'_, State>, wait: Option<Duration>) {
        if s.cmds.is_empty() {
            match wait {
                Some(w) => {
                    self.queued.wait_for(s, w);
                }
                None => self.queued.wait(s),
            }
        }
    }

    /// The first queued command if it is a request's record of at most
    /// `room` bytes.
    pub fn try_next_append(&self, room: usize) -> Option<(Vec<u8>, Done)> {
        let mut s = self.state.lock();
        match s.cmds.front() {
            Some(Cmd::Append { frame, .. }) if frame.len() <= room => {}
            _ => return None,
        }
        match s.cmds.pop_front() {
            Some(Cmd::Append { frame, done }) => Some((frame, done)),
            _ => None,
        }
    }

    /// Queues a command that is not a request.
    pub fn send(&self, cmd: Cmd) -> Result<(), (Cmd, Refused)> {
        let mut s = self.state.lock();
        if let Err(why) = s.admits() {
            return Err((cmd, why));
        }
        s.cmds.push_back(cmd);
        drop(s);
        self.queued.notify_one();
        Ok(())
    }

    /// The first queued command, waiting at most `wait` (forever when
    /// None) for one.
    pub fn next(&self, wait: Option<Duration>) -> Option<Cmd> {
        let mut s = self.state.lock();
        self.wait_locked(&mut s, wait);
        s.cmds.pop_front()
    }

    /// Queues a flush's marker even past the queue's cap (`wal.queue`),
    /// refusing it only once the log is closed. A marker is queued while
    /// every request waits on the flush's barrier, so it must not wait for
    /// room behind them. The queue stays bounded: each cut waits for its
    /// marker to be written before the next, so at most one marker is
    /// ever over the cap.
    pub fn send_marker(&self, cmd: Cmd) -> Result<(), Refused> {
        let mut s = self.state.lock();
        if s.closed {
            return Err(Refused::Closed);
        }
        s.cmds.push_back(cmd);
        drop(s);
        self.queued.notify_one();
        Ok(())
    }

    /// The next queued command, if there is one now.
    pub fn try_next(&self) -> Option<Cmd> {
        self.state.lock().cmds.pop_front()
    }

    /// The segment is about to roll: every command queued now comes out
    /// (their records belong to the segment ending), and the next record
    /// starts the dictionaries again.
    pub fn cut_segment(&self) -> VecDeque<Cmd> {
        let mut s = self.state.lock();
        s.encoder.lost();
        std::mem::take(&mut s.cmds)
    }

    /// A group's write failed and was taken back: the next record starts
    /// the dictionaries again, and the requests queued behind the group
    /// come out to be refused with it (their records may refer to series
    /// it defined). Markers and other commands stay queued, in order.
    pub fn take_back(&self) -> Vec<Done> {
        let mut s = self.state.lock();
        s.encoder.lost();
        let mut refused = Vec::new();
        let mut kept = VecDeque::with_capacity(s.cmds.len());
        for cmd in s.cmds.drain(..) {
            match cmd {
                Cmd::Append { done, .. } => refused.push(done),
                other => kept.push_back(other),
            }
        }
        s.cmds = kept;
        refused
    }

    /// The writer has stopped: later appends fail at once.
    pub fn close(&self) {
        self.state.lock().closed = true;
    }
}

impl State {
    fn admits(&self) -> Result<(), Refused> {
        if self.closed {
            Err(Refused::Closed)
        } else if self.cmds.len() >= self.cap {
            Err(Refused::Full)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marker(flush_id: u64) -> Cmd {
        Cmd::Marker {
            flush_id,
            baselines: None,
            done: oneshot::channel().0,
        }
    }

    #[test]
    fn a_marker_is_queued_past_a_full_queue_until_the_log_closes() {
        let front = Front::new(1);
        assert!(front.send(Cmd::Durable(1)).is_ok());
        assert!(matches!(
            front.send(Cmd::Durable(2)),
            Err((_, Refused::Full))
        ));
        assert!(front.send_marker(marker(7)).is_ok());
        assert!(matches!(front.try_next(), Some(Cmd::Durable(1))));
        assert!(matches!(
            front.try_next(),
            Some(Cmd::Marker { flush_id: 7, .. })
        ));
        front.close();
        assert!(matches!(front.send_marker(marker(8)), Err(Refused::Closed)));
        assert!(front.try_next().is_none());
    }
}
