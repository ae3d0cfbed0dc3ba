//! A listener's connection slots: a cap on open connections and, at the
//! cap, the choice of which open connection makes room for a new one.
//!
//! A connection that keeps the daemon waiting on its client is the one to
//! close, so that silent, trickling or stalled clients cannot keep others
//! out. At the cap a new connection takes the place of, in order:
//!
//! 1. one that has sent nothing since it opened (oldest first);
//! 2. one that has sent part of its first request (or TLS handshake, or
//!    HTTP/2 preface) but not all of it (least recently heard first);
//! 3. one with no request being worked on (idle between requests, or
//!    reading a request body, or writing a response) that has neither sent
//!    nor taken a byte for [`STALLED`] (least recently heard first).
//!
//! A connection with a request being worked on is never chosen. When no
//! connection qualifies the new one is refused. The evicted connection is
//! closed by its own task at once; until it is, it is not counted, so the
//! open sockets can pass the cap by at most [`MAX_EVICTING`].

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
// The runtime's clock, so that a paused test clock moves it too.
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Closed;

/// How long a connection that has been served must have been silent both
/// ways before it can be closed for a new one: a client sending or reading
/// at any pace faster than this keeps its connection.
pub const STALLED: Duration = Duration::from_secs(1);

/// Evicted connections not yet closed; beyond it new connections are
/// refused instead of evicting more. Part of the file descriptor budget.
pub const MAX_EVICTING: usize = 64;

/// One open connection's state, shared by its task, its I/O and the pools
/// it counts in. Times are milliseconds since the pool's epoch.
#[derive(Debug)]
pub struct Member {
    epoch: Instant,
    /// When a byte last went either way (or the connection opened).
    last_progress_ms: AtomicU64,
    bytes_in: AtomicU64,
    /// Requests (HTTP) or calls (gRPC) in progress.
    active: AtomicU32,
    /// Of those, how many are waiting on the client (reading a body).
    waiting: AtomicU32,
    /// Whether any request has begun.
    served: AtomicBool,
    /// When the last request ended, or the connection opened.
    idle_since_ms: AtomicU64,
    /// Why the connection is closing, when a deadline decided it.
    reason: AtomicU8,
    evict: CancellationToken,
}

impl Member {
    pub fn new(epoch: Instant) -> Member {
        let now = ms_since(epoch);
        Member {
            epoch,
            last_progress_ms: AtomicU64::new(now),
            bytes_in: AtomicU64::new(0),
            active: AtomicU32::new(0),
            waiting: AtomicU32::new(0),
            served: AtomicBool::new(false),
            idle_since_ms: AtomicU64::new(now),
            reason: AtomicU8::new(0),
            evict: CancellationToken::new(),
        }
    }

    fn now_ms(&self) -> u64 {
        ms_since(self.epoch)
    }

    /// `n` bytes came from the client.
    pub fn read(&self, n: usize) {
        self.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
        self.progress();
    }

    /// Bytes went to the client.
    pub fn progress(&self) {
        self.last_progress_ms
            .store(self.now_ms(), Ordering::Relaxed);
    }

    /// A request (or call) begins; it ends when the guard drops.
    pub fn begin(self: &Arc<Self>) -> Active {
        self.served.store(true, Ordering::Relaxed);
        self.active.fetch_add(1, Ordering::Relaxed);
        Active(self.clone())
    }

    /// The request in progress waits on the client (its body) until the
    /// guard drops.
    pub fn waiting(self: &Arc<Self>) -> Waiting {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        Waiting(self.clone())
    }

    /// Requests or calls in progress.
    pub fn active(&self) -> u32 {
        self.active.load(Ordering::Relaxed)
    }

    /// How long the connection has had no request in progress; zero while
    /// one is.
    pub fn idle_for(&self) -> Duration {
        if self.active() > 0 {
            return Duration::ZERO;
        }
        let since = self.idle_since_ms.load(Ordering::Relaxed);
        Duration::from_millis(self.now_ms().saturating_sub(since))
    }

    /// Records why the connection closes; the first reason given stays.
    pub fn close_for(&self, why: Closed) {
        let _ = self
            .reason
            .compare_exchange(0, why as u8, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// The reason a deadline gave, if any.
    pub fn reason(&self) -> Option<Closed> {
        Closed::from_u8(self.reason.load(Ordering::Relaxed))
    }

    /// Resolves when a pool has chosen this connection to make room.
    pub async fn evicted(&self) {
        self.evict.cancelled().await
    }

    /// Whether and how readily this connection may be closed for a new
    /// one: lower ranks go first; `None` when it may not.
    fn rank(&self, now_ms: u64) -> Option<(u8, u64)> {
        if self.evict.is_cancelled() {
            return None;
        }
        let last = self.last_progress_ms.load(Ordering::Relaxed);
        if !self.served.load(Ordering::Relaxed) {
            let class = u8::from(self.bytes_in.load(Ordering::Relaxed) > 0);
            return Some((class, last));
        }
        let (active, waiting) = (
            self.active.load(Ordering::Relaxed),
            self.waiting.load(Ordering::Relaxed),
        );
        let stalled = now_ms.saturating_sub(last) >= STALLED.as_millis() as u64;
        (active <= waiting && stalled).then_some((2, last))
    }
}

fn ms_since(epoch: Instant) -> u64 {
    epoch.elapsed().as_millis() as u64
}

/// A request in progress on its connection.
pub struct Active(Arc<Member>);

impl Drop for Active {
    fn drop(&mut self) {
        let m = &self.0;
        if m.active.fetch_sub(1, Ordering::Relaxed) == 1 {
            m.idle_since_ms.store(m.now_ms(), Ordering::Relaxed);
        }
        m.progress();
    }
}

/// A request reading its body from the client.
pub struct Waiting(Arc<Member>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

struct Entry {
    member: Arc<Member>,
    /// Still counted against the cap (false once evicted).
    counted: bool,
}

#[derive(Default)]
struct Inner {
    entries: Vec<Option<Entry>>,
    free: Vec<usize>,
    counted: usize,
    evicting: usize,
}

/// Slots for at most `cap` connections.
pub struct Pool {
    cap: usize,
    epoch: Instant,
    inner: Mutex<Inner>,
    emptied: Notify,
}

impl Pool {
    pub fn new(cap: usize, epoch: Instant) -> Arc<Pool> {
        Arc::new(Pool {
            cap,
            epoch,
            inner: Mutex::new(Inner::default()),
            emptied: Notify::new(),
        })
    }

    /// A slot for `member`, evicting another connection when at the cap
    /// (see the module doc); `None` when none can make room.
    pub fn admit(self: &Arc<Self>, member: &Arc<Member>) -> Option<Slot> {
        let mut inner = self.inner.lock();
        if inner.counted >= self.cap {
            if self.cap == 0 || inner.evicting >= MAX_EVICTING {
                return None;
            }
            let now = ms_since(self.epoch);
            let victim = inner
                .entries
                .iter()
                .enumerate()
                .filter_map(|(i, e)| {
                    let e = e.as_ref().filter(|e| e.counted)?;
                    Some((e.member.rank(now)?, i))
                })
                .min()?
                .1;
            if let Some(e) = inner.entries[victim].as_mut() {
                e.counted = false;
                e.member.close_for(Closed::Evicted);
                e.member.evict.cancel();
            }
            inner.counted -= 1;
            inner.evicting += 1;
        }
        let entry = Entry {
            member: member.clone(),
            counted: true,
        };
        let index = match inner.free.pop() {
            Some(i) => {
                inner.entries[i] = Some(entry);
                i
            }
            None => {
                inner.entries.push(Some(entry));
                inner.entries.len() - 1
            }
        };
        inner.counted += 1;
        Some(Slot {
            pool: self.clone(),
            index,
        })
    }

    /// Connections counted against the cap.
    pub fn counted(&self) -> usize {
        self.inner.lock().counted
    }

    /// Waits until every slot has been given back.
    pub async fn emptied(&self) {
        loop {
            let notified = self.emptied.notified();
            if self.inner.lock().entries.iter().all(Option::is_none) {
                return;
            }
            notified.await;
        }
    }
}

/// A connection's place in a pool, given back when dropped.
pub struct Slot {
    pool: Arc<Pool>,
    index: usize,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut inner = self.pool.inner.lock();
        if let Some(e) = inner.entries[self.index].take() {
            if e.counted {
                inner.counted -= 1;
            } else {
                inner.evicting -= 1;
            }
        }
        inner.free.push(self.index);
        let empty = inner.counted == 0 && inner.evicting == 0;
        drop(inner);
        if empty {
            self.pool.emptied.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(pool: &Pool) -> Arc<Member> {
        Arc::new(Member::new(pool.epoch))
    }

    #[test]
    fn at_the_cap_the_silent_go_first_then_the_partial_then_the_stalled() {
        let epoch = Instant::now() - Duration::from_secs(10);
        let pool = Pool::new(3, epoch);
        let (busy, idle, partial) = (member(&pool), member(&pool), member(&pool));
        let _slots: Vec<Slot> = [&busy, &idle, &partial]
            .iter()
            .map(|m| pool.admit(m).unwrap())
            .collect();
        let _working = busy.begin();
        drop(idle.begin());
        partial.read(3);
        // Nothing silent: the partial one makes room.
        let silent = member(&pool);
        let _s = pool.admit(&silent).unwrap();
        assert!(partial.evict.is_cancelled());
        assert_eq!(partial.reason(), Some(Closed::Evicted));
        // Then the silent newcomer, even though it came last.
        let _s2 = pool.admit(&member(&pool)).unwrap();
        assert!(silent.evict.is_cancelled());
        assert_eq!(pool.counted(), 3);
        // The idle one has just been heard from: not stalled, and the busy
        // one and the newest... the newest is silent.
        assert!(!idle.evict.is_cancelled() && !busy.evict.is_cancelled());
    }

    #[test]
    fn a_working_connection_is_never_evicted_and_a_full_pool_refuses() {
        let pool = Pool::new(1, Instant::now());
        let m = member(&pool);
        let _slot = pool.admit(&m).unwrap();
        let _working = m.begin();
        assert!(pool.admit(&member(&pool)).is_none());
        // Reading its body, it waits on its client, but it is not stalled.
        let _waiting = m.waiting();
        assert!(pool.admit(&member(&pool)).is_none());
    }

    #[test]
    fn a_stalled_body_is_evicted() {
        let pool = Pool::new(1, Instant::now() - Duration::from_secs(5));
        let m = Arc::new(Member::new(pool.epoch));
        // Heard from five seconds ago (the epoch), then silent.
        m.last_progress_ms.store(0, Ordering::Relaxed);
        let _slot = pool.admit(&m).unwrap();
        let working = m.begin();
        m.last_progress_ms.store(0, Ordering::Relaxed);
        let _waiting = m.waiting();
        assert!(pool.admit(&member(&pool)).is_some());
        assert!(m.evict.is_cancelled());
        drop(working);
    }

    #[tokio::test]
    async fn slots_come_back_and_emptied_wakes() {
        let pool = Pool::new(2, Instant::now());
        let a = pool.admit(&member(&pool)).unwrap();
        let b = pool.admit(&member(&pool)).unwrap();
        // Full of silent connections: a third evicts one, which stays out
        // of the count until its task drops its slot.
        let c = pool.admit(&member(&pool)).unwrap();
        assert_eq!(pool.counted(), 2);
        let waiter = {
            let pool = pool.clone();
            tokio::spawn(async move { pool.emptied().await })
        };
        drop((a, b));
        assert!(!waiter.is_finished());
        drop(c);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(pool.counted(), 0);
    }

    #[test]
    fn evictions_in_flight_are_bounded() {
        let pool = Pool::new(1, Instant::now());
        let mut slots = vec![pool.admit(&member(&pool)).unwrap()];
        for _ in 0..MAX_EVICTING {
            slots.push(pool.admit(&member(&pool)).unwrap());
        }
        assert!(pool.admit(&member(&pool)).is_none());
        slots.remove(0);
        assert!(pool.admit(&member(&pool)).is_some());
    }
}
