//! Reads while the store is unreachable. What the daemon holds in memory
//! (the aggregator and the flushes the store has not taken) is still worth
//! a graph, so reads answer from it at once instead of failing after the
//! store's timeout, and the response says it is partial: older data, and
//! what other daemons wrote, are missing.
//!
//! Whether a read fell back is carried to the response in a task-local
//! flag: the reads of one request (its series read concurrently, in the
//! same task) all set the same flag, whatever layer of the engine they
//! are in.

use std::cell::RefCell;
use std::future::Future;

tokio::task_local! {
    static PARTIAL: RefCell<Option<String>>;
}

/// Runs `read`, and returns with its output why it answered from memory
/// alone, if it did. Nested calls report to the enclosing one as well.
pub async fn tracking<F: Future>(read: F) -> (F::Output, Option<String>) {
    let (out, why) = PARTIAL
        .scope(RefCell::new(None), async {
            let out = read.await;
            (out, PARTIAL.with(|p| p.borrow_mut().take()))
        })
        .await;
    if let Some(why) = &why {
        note_reason(why.clone());
    }
    (out, why)
}

/// Records that a read skipped the store because it is unreachable
/// (`why`, the store's own words).
pub(crate) fn note(why: &str) {
    note_reason(format!(
        "partial: the store is unreachable ({why}); this answer holds only what this daemon \
         has in memory, not yet flushed"
    ));
}

fn note_reason(reason: String) {
    // Outside a tracking scope there is nobody to tell.
    let _ = PARTIAL.try_with(|p| {
        p.borrow_mut().get_or_insert(reason);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_note_anywhere_in_the_read_reaches_its_scope_and_the_enclosing_one() {
        let (((), inner), outer) = tracking(async {
            tracking(async {
                let reads = futures::future::join(async { note("no server") }, async {});
                reads.await;
            })
            .await
        })
        .await;
        assert!(inner.as_deref().is_some_and(|w| w.contains("no server")));
        assert_eq!(inner, outer);
        let ((), clean) = tracking(async {}).await;
        assert_eq!(clean, None);
        note("outside any scope: ignored");
    }
}
