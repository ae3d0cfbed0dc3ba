//! Pre-allocations that failed, tried again with backoff until their
//! period begins: after the boundary a document that is still missing is
//! made by the flush's upsert (or the seal's), statement by statement, so
//! retrying it then would only compete with the flushes.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::model::{DocKey, Tier};

/// The first wait after a failure; doubled per failure in a row.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between two tries.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Documents waiting at most: beyond, the upsert fallback covers them.
pub(super) const RETRY_CAP: usize = 500_000;

/// Failed pre-allocations, oldest first.
#[derive(Debug)]
pub(super) struct Retries {
    pending: VecDeque<DocKey>,
    backoff: Duration,
    next_try: Option<Instant>,
}

impl Default for Retries {
    fn default() -> Self {
        Retries {
            pending: VecDeque::new(),
            backoff: FIRST_BACKOFF,
            next_try: None,
        }
    }
}

impl Retries {
    /// Up to `limit` documents to try again at `now` (wall clock `now_s`),
    /// if the backoff allows; those whose period has begun are dropped.
    pub(super) fn due(&mut self, now: Instant, now_s: i64, limit: usize) -> Vec<DocKey> {
        let before = self.pending.len();
        self.pending.retain(|k| k.period_start > now_s);
        let expired = before - self.pending.len();
        if expired > 0 {
            metrics::counter!("tally_prealloc_expired_total").increment(expired as u64);
        }
        if self.next_try.is_some_and(|t| now < t) {
            return Vec::new();
        }
        let n = self.pending.len().min(limit);
        self.pending.drain(..n).collect()
    }

    /// `docs` failed at `now`: they wait, and the next try waits longer.
    pub(super) fn failed(&mut self, now: Instant, docs: Vec<DocKey>) {
        let room = RETRY_CAP.saturating_sub(self.pending.len());
        let dropped = docs.len().saturating_sub(room);
        if dropped > 0 {
            metrics::counter!("tally_prealloc_expired_total").increment(dropped as u64);
        }
        self.pending.extend(docs.into_iter().take(room));
        self.next_try = Some(now + self.backoff);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    /// A try went through: the backoff starts over.
    pub(super) fn succeeded(&mut self) {
        self.backoff = FIRST_BACKOFF;
        self.next_try = None;
    }

    /// Documents waiting, by tier, for the gauge.
    pub(super) fn waiting(&self) -> (usize, usize) {
        let hours = self.pending.iter().filter(|k| k.tier == Tier::Hour).count();
        (hours, self.pending.len() - hours)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SeriesId;

    fn key(i: usize, start: i64) -> DocKey {
        DocKey {
            series: SeriesId::new(&format!("s{i}"), "m"),
            tier: Tier::Day,
            period_start: start,
        }
    }

    #[test]
    fn failed_documents_wait_with_backoff_and_go_at_the_boundary() {
        let mut r = Retries::default();
        let t0 = Instant::now();
        r.failed(t0, (0..5).map(|i| key(i, 1000)).collect());
        assert!(r.due(t0, 900, 10).is_empty(), "held by the backoff");
        let later = t0 + FIRST_BACKOFF;
        assert_eq!(r.due(later, 900, 3).len(), 3, "bounded per tick");
        assert_eq!(r.due(later, 900, 10).len(), 2);
        r.failed(later, vec![key(9, 1000)]);
        assert!(r.due(later + FIRST_BACKOFF, 900, 10).is_empty(), "doubled");
        assert_eq!(r.due(later + 2 * FIRST_BACKOFF, 900, 10).len(), 1);
        r.failed(later, vec![key(9, 1000)]);
        r.succeeded();
        assert_eq!(r.waiting(), (0, 1));
        assert!(r.due(later, 1000, 10).is_empty(), "its period began");
        assert_eq!(r.waiting(), (0, 0));
    }
}
