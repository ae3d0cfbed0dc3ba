//! Connection threads: each accepted connection is served to its end on one
//! of a few single-threaded runtimes, one per two CPUs, instead of on the
//! daemon's shared work-stealing runtime; large requests are ingested on
//! the shared runtime.
//!
//! Why: a fleet's agents each send a small request every second, so the
//! daemon's cost there is per request, and on the shared runtime much of
//! it was workers waking one another. A request woke the worker that
//! polls the sockets; the task it spawned for the HTTP/2 stream woke a
//! second worker to steal it, which often found nothing and slept again.
//! On a thread of its own a connection's reads, its streams' tasks and its
//! answers stay on one core, and that thread sleeps only when none of its
//! connections has work. 100,000 series at 1 Hz over `tally.v1` took 0.91
//! times the daemon's CPU this way, in four alternated runs (BENCHMARKS.md,
//! "Disk in real time"); W1's large requests were level.
//!
//! There is one connection thread per two CPUs: on one thread the
//! connections' requests share its wakes, where two threads each woke for
//! their own (one thread took 0.92 times the CPU of two on the same load,
//! three alternated runs). What that costs is capacity: one thread's
//! small requests use one core, so a request larger than
//! [`LARGE_REQUEST`] is ingested on the shared runtime, which spreads
//! such requests over every core ([`on_shared_if_large`]). A new
//! connection goes to the thread serving the fewest. Work that is not a
//! connection's own stays on the shared runtime: reads are handed to it
//! ([`on_shared`]), so a long query never holds up the ingest of the
//! connections beside it, and the stores' blocking pools are the shared
//! runtime's.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tracing::{error, info};

/// Blocking threads a connection thread may start. Nothing a connection
/// runs itself blocks (reads are handed to the shared runtime); this only
/// bounds what a future change might.
const MAX_BLOCKING: usize = 4;

/// How long a connection thread's runtime waits, once stopped, for work it
/// started on its blocking threads.
const STOP_GRACE: Duration = Duration::from_secs(1);

/// A request body (as received, compressed or not) larger than this is
/// ingested on the shared runtime: about 250 samples of `tally.v1`, ten
/// times what an agent sends a second.
pub const LARGE_REQUEST: usize = 8 * 1024;

thread_local! {
    /// On a connection thread, the shared runtime reads are handed to.
    static SHARED: std::cell::RefCell<Option<Handle>> = const { std::cell::RefCell::new(None) };
}

/// The connection threads, each with its count of open connections.
pub struct ConnThreads {
    threads: Vec<(Handle, Arc<AtomicUsize>)>,
    stop: CancellationToken,
}

impl ConnThreads {
    /// Starts `n` threads (at least one), each running a single-threaded
    /// runtime until the set is dropped. Must be called on the shared
    /// runtime: work handed over from the threads goes to it.
    pub fn start(n: usize) -> io::Result<ConnThreads> {
        let shared = Handle::current();
        // Built first, so that a thread failing to start stops those
        // before it (on drop).
        let mut set = ConnThreads {
            threads: Vec::with_capacity(n.max(1)),
            stop: CancellationToken::new(),
        };
        for i in 0..n.max(1) {
            // The runtime is built on its own thread and only its handle
            // comes back: a runtime may not be dropped on this one, which
            // is async, as it would be if the thread failed to start.
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            let (shared, stop) = (shared.clone(), set.stop.clone());
            std::thread::Builder::new()
                .name(format!("tally-conn-{i}"))
                .spawn(move || {
                    // I/O and timers only: with the process driver on, each
                    // park also looked for orphaned children, which a
                    // connection thread never has.
                    let runtime = match tokio::runtime::Builder::new_current_thread()
                        .enable_io()
                        .enable_time()
                        .max_blocking_threads(MAX_BLOCKING)
                        .build()
                    {
                        Ok(runtime) => runtime,
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    };
                    if tx.send(Ok(runtime.handle().clone())).is_err() {
                        return;
                    }
                    SHARED.with(|s| *s.borrow_mut() = Some(shared));
                    runtime.block_on(stop.cancelled());
                    runtime.shutdown_timeout(STOP_GRACE);
                })?;
            let handle = rx
                .recv()
                .map_err(|_| io::Error::other("a connection thread ended at start"))??;
            set.threads.push((handle, Arc::new(AtomicUsize::new(0))));
        }
        info!(threads = set.threads.len(), "connection threads started");
        Ok(set)
    }

    /// One thread per two CPUs the process may use (at least one): the
    /// other half is the shared runtime's, which takes the flushes, the
    /// reads and the large requests ([`on_shared_if_large`]).
    pub fn per_cpu() -> io::Result<ConnThreads> {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        ConnThreads::start(cpus.div_ceil(2))
    }

    /// Serves `stream` with `serve` on the thread with the fewest open
    /// connections. The socket moves to that thread's reactor, so it must
    /// not be in use elsewhere.
    pub fn spawn<F, Fut>(&self, stream: TcpStream, serve: F)
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let Some((handle, open)) = self
            .threads
            .iter()
            .min_by_key(|(_, open)| open.load(Ordering::Relaxed))
        else {
            return;
        };
        let std = match stream.into_std() {
            Ok(std) => std,
            Err(e) => {
                error!(error = %e, "handing a connection to its thread");
                return;
            }
        };
        let open = Counted::new(open.clone());
        handle.spawn(async move {
            let _open = open;
            match TcpStream::from_std(std) {
                Ok(stream) => serve(stream).await,
                Err(e) => error!(error = %e, "taking a connection on its thread"),
            }
        });
    }

    /// Open connections on each thread, for tests.
    #[cfg(test)]
    fn open(&self) -> Vec<usize> {
        self.threads
            .iter()
            .map(|(_, open)| open.load(Ordering::Relaxed))
            .collect()
    }
}

impl Drop for ConnThreads {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A connection counted on its thread while it lives.
struct Counted(Arc<AtomicUsize>);

impl Counted {
    fn new(open: Arc<AtomicUsize>) -> Counted {
        open.fetch_add(1, Ordering::Relaxed);
        Counted(open)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Runs `work` on the shared runtime when called on a connection thread
/// (inline elsewhere), and waits for it: a read's evaluation then never
/// holds the thread that serves other connections' ingest. Dropped (the
/// client went away), the work is cancelled with it. A panic in `work`
/// carries on in the caller, as it would have inline.
pub async fn on_shared<T: Send + 'static>(work: impl Future<Output = T> + Send + 'static) -> T {
    let Some(shared) = SHARED.with(|s| s.borrow().clone()) else {
        return work.await;
    };
    let task = AbortOnDropHandle::new(shared.spawn(work));
    match task.await {
        Ok(v) => v,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Only the handle's drop cancels it, and that cannot have run.
        Err(_) => std::future::pending().await,
    }
}

/// Runs `work`, which reads a request of `len` bytes, on the shared
/// runtime when the request is large (more than [`LARGE_REQUEST`] bytes)
/// and this is a connection thread; inline otherwise. An agent's request
/// of a second's samples costs less than the hand-over, and a thread
/// serves many of them at each wake; a batch of thousands of samples
/// (a backfill, a remote-write shard, W1) would hold the thread for
/// milliseconds, and on the shared runtime it uses every core.
pub async fn on_shared_if_large<T: Send + 'static>(
    len: usize,
    work: impl Future<Output = T> + Send + 'static,
) -> T {
    if len > LARGE_REQUEST {
        on_shared(work).await
    } else {
        work.await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connections_go_to_the_least_busy_thread_and_reads_and_large_requests_to_the_shared_runtime(
    ) {
        let threads = ConnThreads::start(2).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (seen_tx, mut seen_rx) = tokio::sync::mpsc::channel(4);
        let mut clients = Vec::new();
        for _ in 0..3 {
            clients.push(TcpStream::connect(addr).await.unwrap());
            let (stream, _) = listener.accept().await.unwrap();
            let seen = seen_tx.clone();
            threads.spawn(stream, move |mut stream| async move {
                let here = std::thread::current().name().map(str::to_owned);
                let name = || std::thread::current().name().map(str::to_owned);
                let there = on_shared(async move { name() }).await;
                let small = on_shared_if_large(LARGE_REQUEST, async move { name() }).await;
                let large = on_shared_if_large(LARGE_REQUEST + 1, async move { name() }).await;
                assert_eq!(small, here, "a small request stays on its thread");
                assert!(!large.is_some_and(|n| n.starts_with("tally-conn-")));
                let _ = seen.send((here, there)).await;
                // Held open until the client closes.
                let _ = tokio::io::AsyncReadExt::read(&mut stream, &mut [0u8; 1]).await;
            });
            let (here, there) = seen_rx.recv().await.unwrap();
            assert!(here.unwrap().starts_with("tally-conn-"));
            assert!(!there.unwrap_or_default().starts_with("tally-conn-"));
        }
        let mut open = threads.open();
        open.sort();
        assert_eq!(
            open,
            vec![1, 2],
            "three connections spread over two threads"
        );
        drop(clients);
        for _ in 0..100 {
            if threads.open() == vec![0, 0] {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("closed connections still counted: {:?}", threads.open());
    }

    #[tokio::test]
    async fn off_a_connection_thread_work_runs_inline() {
        let here = std::thread::current().id();
        assert_eq!(
            on_shared(async move { std::thread::current().id() }).await,
            here
        );
    }
}
