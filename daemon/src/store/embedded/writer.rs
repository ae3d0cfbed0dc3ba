//! The embedded store's writer: one thread of its own that runs every
//! operation that writes (applies with their folds and syncs,
//! pre-allocation, catalog upserts, the retention sweep, the last sync),
//! one at a time, in the order they were asked for.
//!
//! Why not the runtime's blocking pool, as reads use: redb runs one write
//! transaction at a time, so the pool gave writes no parallelism, only a
//! different thread each time. The allocator keeps memory per thread, and
//! a flush's short-lived memory (the transaction's copied B-tree pages,
//! the flush log's chunks) then came from whichever pool thread ran it,
//! and stayed resident in each one's heap in turn. On one thread, each
//! flush reuses what the one before it freed (BENCHMARKS.md, Soak).

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

use tokio::sync::{mpsc, oneshot};

use super::StoreError;

/// One operation, already bound to its answer's channel.
type Job = Box<dyn FnOnce() + Send>;

/// Operations waiting for the writer. Each caller waits for its answer, so
/// the queue holds at most one operation per concurrent caller (the flush,
/// upkeep, the catalog writer, shutdown); the bound is a backstop.
const QUEUE: usize = 64;

/// The handle to the writer thread. The thread ends once every handle is
/// gone and the operations already queued have run. It holds no database
/// of its own: each operation brings one and drops it before answering,
/// so a caller that has its answer can close and reopen the file.
pub(super) struct Writer {
    jobs: mpsc::Sender<Job>,
}

impl Writer {
    pub(super) fn start() -> Result<Writer, StoreError> {
        let (jobs, mut queue) = mpsc::channel::<Job>(QUEUE);
        std::thread::Builder::new()
            .name("tally-store".into())
            .spawn(move || {
                while let Some(job) = queue.blocking_recv() {
                    job();
                }
            })
            .map_err(|e| {
                StoreError::Io(format!("starting the embedded store's writer thread: {e}"))
            })?;
        Ok(Writer { jobs })
    }

    /// Runs `f` on the writer thread and waits for its answer. Like a
    /// blocking task, it runs to the end even if the caller stops waiting.
    /// A panic in it is answered as an error ([`panicked`]); the thread
    /// goes on with the next operation.
    pub(super) async fn run<T, F>(&self, what: &'static str, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, StoreError> + Send + 'static,
    {
        let (answer, answered) = oneshot::channel();
        let job: Job = Box::new(move || {
            let r = catch_unwind(AssertUnwindSafe(f))
                .unwrap_or_else(|payload| Err(panicked(what, panic_message(payload.as_ref()))));
            // The caller may have stopped waiting; the work is done anyway.
            let _ = answer.send(r);
        });
        self.jobs.send(job).await.map_err(|_| gone(what))?;
        answered.await.map_err(|_| gone(what))?
    }
}

/// A store operation that panicked. `Db::note` latches it ("task failed"):
/// the storage engine panics on some kinds of damage to the file.
pub(super) fn panicked(what: &str, message: impl std::fmt::Display) -> StoreError {
    StoreError::Io(format!(
        "{what} task failed: {message}. A panic inside the storage engine usually means a \
         damaged store file: stop tallyd, move {} aside or restore it from a backup",
        super::layout::FILE_NAME
    ))
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

/// Only if the thread itself is gone, which a panic cannot do (it is
/// caught): the process is running out of threads or ending.
fn gone(what: &str) -> StoreError {
    StoreError::Io(format!(
        "{what}: the embedded store's writer thread has stopped"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_in_order_on_one_thread_and_survives_a_panic() {
        let w = Writer::start().unwrap();
        let a = w
            .run("t", || Ok(std::thread::current().id()))
            .await
            .unwrap();
        let e = w
            .run::<(), _>("apply", || panic!("damaged page"))
            .await
            .unwrap_err();
        let StoreError::Io(msg) = e else {
            panic!("want an I/O error, got {e:?}")
        };
        assert!(msg.starts_with("apply task failed: damaged page."), "{msg}");
        let b = w
            .run("t", || Ok(std::thread::current().id()))
            .await
            .unwrap();
        assert_eq!(a, b);
        assert_ne!(a, std::thread::current().id());
        // Queued from many tasks at once, each answered with its own result.
        let w = std::sync::Arc::new(w);
        let tasks: Vec<_> = (0..200)
            .map(|i| {
                let w = w.clone();
                tokio::spawn(async move { w.run("t", move || Ok(i)).await })
            })
            .collect();
        for (i, t) in tasks.into_iter().enumerate() {
            assert_eq!(t.await.unwrap().unwrap(), i);
        }
    }
}
