//! Applying one batch to the store, and what each failure does to it.
//!
//! - A retryable failure (the store unreachable, an ambiguous reply): the
//!   whole batch again with backoff; its documents' watermarks skip what
//!   had landed.
//! - A refusal of part of the batch: the store applied the rest. The
//!   refused part is retried alone a few times ([`REFUSAL_ROUNDS`]: a
//!   refusal may pass on a second try; a round while the store fails its
//!   health check does not count, since a server shutting down may refuse
//!   what it would take once it is back), then set aside as dead letters
//!   (`crate::deadletter`), durable before the batch is released, so the
//!   write-ahead log keeps it until then. One bad document costs one
//!   document, never the batch.
//! - A refusal of the whole of a batch of several series: the store refuses
//!   everything it is sent (an incompatible server, lost permissions). The
//!   batch is held and retried with backoff, and until the store takes it
//!   the daemon is unready with the store's error and ingest answers with
//!   its protocol's retry signal: nothing is acknowledged that could not be
//!   kept, and the held batch lands on its own once the cause is fixed.
//! - Dead letters that would take their directory past
//!   `flush.dead_letters_max_bytes`: held the same way, unready and
//!   refusing samples, with a reason naming the setting, and retried; the
//!   flush lands once there is room (the bound raised, letters replayed
//!   or dropped).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::{InflightBatch, Pipeline};
use crate::deadletter::{DeadLetterError, DeadLetters};
use crate::model::{hour_slot, FlushBatch, SeriesMinutes};
use crate::store::{ApplyStats, Refusal, StoreError};

/// Attempts at a refused part before it is set aside: the first, and two
/// more of the refused part alone.
pub(super) const REFUSAL_ROUNDS: u32 = 3;

/// Distinct refusal messages logged at error level; later ones are counted
/// only, so a store refusing a million different documents does not flood
/// the log or grow this set without bound.
const LOGGED_ERRORS: usize = 100;

/// How a batch is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A flush of the running daemon: a whole refusal holds it.
    Live,
    /// Dead letters applied again (`tallyd dead-letters replay`): nothing
    /// waits for the store to change its mind; what it still refuses is
    /// set aside again.
    Replay,
}

/// What the store did with one attempt.
enum Attempt {
    Landed,
    Retry(StoreError),
    Refused { refused: Vec<Refusal>, whole: bool },
}

impl Pipeline {
    /// Applies one batch until it lands or is set aside, or `give_up`
    /// fires (then false). Returns whether the store has all of it, or the
    /// dead letters what it refused.
    pub async fn apply(&self, batch: &InflightBatch, give_up: &CancellationToken) -> bool {
        let landed = self.apply_flush(&batch.flush, give_up, Mode::Live).await;
        if landed {
            self.inflight.retire(batch.id);
            self.note_durable(batch.id.0);
        } else {
            error!(
                flush_id = batch.id.0,
                slots = batch.slot_count(),
                "shutdown deadline reached with a flush unapplied; the write-ahead log keeps it for the next start"
            );
        }
        landed
    }

    pub(crate) async fn apply_flush(
        &self,
        batch: &Arc<FlushBatch>,
        give_up: &CancellationToken,
        mode: Mode,
    ) -> bool {
        let mut current = batch.clone();
        let mut backoff = self.cfg.retry_initial_backoff;
        let mut rounds = 0;
        loop {
            let wait = match self.attempt(&current, rounds == 0).await {
                Attempt::Landed => {
                    self.store_takes_flushes();
                    return true;
                }
                Attempt::Retry(e) => {
                    warn!(flush_id = batch.id.0, error = %e, retry_in = ?backoff, "flush failed; retrying");
                    backoff
                }
                Attempt::Refused { refused, whole } => {
                    self.note_refusals(&refused);
                    let everything = whole && rounds == 0 && refused.len() >= 2;
                    if everything && mode == Mode::Live {
                        self.store_refuses_everything(batch.id.0, &refused, backoff);
                        backoff
                    } else {
                        self.store_takes_flushes();
                        // A refusal from a store that cannot be reached now
                        // may be its shutdown talking: not trusted until
                        // it answers again.
                        if self.store.health().await.is_ok() {
                            rounds += 1;
                        }
                        if rounds >= REFUSAL_ROUNDS {
                            return self.set_aside(&current, &refused, give_up).await;
                        }
                        current = Arc::new(refused_part(&current, &refused));
                        backoff
                    }
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = give_up.cancelled() => return false,
            }
            backoff = (backoff * 2).min(self.cfg.retry_max_backoff);
        }
    }

    /// One call to the store, with its metrics. `whole_batch` says whether
    /// `batch` is the flush as cut (not a refused part of it).
    async fn attempt(&self, batch: &Arc<FlushBatch>, whole_batch: bool) -> Attempt {
        let store = self.store.name();
        let started = Instant::now();
        let result = self.store.apply_shared(batch).await;
        let elapsed = started.elapsed().as_secs_f64();
        metrics::histogram!("tally_flush_duration_seconds", "store" => store).record(elapsed);
        crate::telemetry::store_operation(store, "apply", elapsed);
        match result {
            Ok(stats) => {
                self.pace.flushed(started, stats.statements);
                self.count_applied(batch, &stats, elapsed, whole_batch);
                if stats.refused.is_empty() {
                    return Attempt::Landed;
                }
                let whole = stats.documents_written == 0 && stats.documents_skipped == 0;
                Attempt::Refused {
                    refused: stats.refused,
                    whole,
                }
            }
            Err(e) => {
                metrics::counter!("tally_store_errors_total", "store" => store, "op" => "apply", "kind" => e.kind())
                    .increment(1);
                if e.is_retryable() {
                    return Attempt::Retry(e);
                }
                // The store could not tell which part it refuses: all of
                // it, series by series.
                let error = e.to_string();
                let refused = (0..batch.series.len())
                    .map(|series| Refusal {
                        series,
                        hour_start: None,
                        error: error.clone(),
                    })
                    .collect();
                Attempt::Refused {
                    refused,
                    whole: true,
                }
            }
        }
    }

    fn count_applied(&self, batch: &FlushBatch, stats: &ApplyStats, elapsed: f64, whole: bool) {
        let store = self.store.name();
        if whole {
            metrics::counter!("tally_flushes_total", "store" => store).increment(1);
            metrics::histogram!("tally_flush_series", "store" => store)
                .record(batch.series.len() as f64);
        }
        metrics::counter!("tally_flush_documents_total", "store" => store)
            .increment(stats.documents_written as u64);
        metrics::counter!("tally_flush_documents_skipped_total", "store" => store)
            .increment(stats.documents_skipped as u64);
        debug!(
            flush_id = batch.id.0,
            series = batch.series.len(),
            documents = stats.documents_written,
            skipped = stats.documents_skipped,
            refused = stats.refused.len(),
            seconds = elapsed,
            "flush applied"
        );
    }

    /// Counts refused documents and logs each distinct error once.
    fn note_refusals(&self, refused: &[Refusal]) {
        let store = self.store.name();
        metrics::counter!("tally_store_refused_documents_total", "store" => store)
            .increment(refused.len() as u64);
        let mut seen = self.refusal_errors.lock();
        for r in refused {
            if seen.len() >= LOGGED_ERRORS || seen.contains(&r.error) {
                continue;
            }
            seen.insert(r.error.clone());
            error!(
                store,
                error = %r.error,
                "the store refused a document; it is retried, then kept as a dead letter in the data directory: fix the cause (the server's version or configuration, or the document), then run `tallyd dead-letters replay`"
            );
        }
    }

    fn store_refuses_everything(&self, flush_id: u64, refused: &[Refusal], retry_in: Duration) {
        let why = refused.first().map_or("", |r| r.error.as_str());
        if self.refusing.why().is_none() {
            error!(
                flush_id,
                documents = refused.len(),
                error = %why,
                "the store refuses every document of the flush: holding it and refusing new samples (unready) until the store takes it"
            );
        } else {
            debug!(flush_id, retry_in = ?retry_in, "the store still refuses the whole flush");
        }
        metrics::gauge!("tally_store_refusing").set(1.0);
        self.refusing.set(format!(
            "the {} store refuses every document it is sent: {why}",
            self.store.name()
        ));
    }

    fn store_takes_flushes(&self) {
        if self.refusing.clear() {
            metrics::gauge!("tally_store_refusing").set(0.0);
            info!("the store takes flushes again: ready, and taking samples");
        }
    }

    /// Makes the refused part of a flush durable as dead letters, retrying
    /// a failed write (the write-ahead log keeps the flush meanwhile).
    async fn set_aside(
        &self,
        part: &FlushBatch,
        refused: &[Refusal],
        give_up: &CancellationToken,
    ) -> bool {
        let letters = DeadLetters::letters(part, refused);
        let (documents, samples) = (
            letters.len() as u64,
            letters.iter().map(|l| l.samples()).sum::<u64>(),
        );
        let Some(dead) = &self.dead_letters else {
            // Only pipelines built without a data directory (unit tests).
            error!(
                flush_id = part.id.0,
                documents, samples, "refused documents dropped: no dead-letter directory"
            );
            return true;
        };
        let mut backoff = self.cfg.retry_initial_backoff;
        loop {
            let written = {
                let dead = dead.clone();
                let id = part.id.0;
                let letters = letters.clone();
                tokio::task::spawn_blocking(move || dead.write(id, letters)).await
            };
            match written {
                Ok(Ok(())) => break,
                Ok(Err(e @ DeadLetterError::Full { .. })) => self.dead_letters_full(&e),
                Ok(Err(e)) => {
                    error!(error = %e, retry_in = ?backoff, "writing dead letters failed; the flush is held until they are written")
                }
                Err(e) => error!(error = %e, "the dead-letter write task failed; retrying"),
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = give_up.cancelled() => return false,
            }
            backoff = (backoff * 2).min(self.cfg.retry_max_backoff);
        }
        if self.refusing.clear() {
            info!("dead letters written: ready, and taking samples");
        }
        let store = self.store.name();
        metrics::counter!("tally_dead_letters_total", "store" => store).increment(documents);
        metrics::counter!("tally_dead_letter_samples_total", "store" => store).increment(samples);
        warn!(
            flush_id = part.id.0,
            documents,
            samples,
            dir = %dead.dir().display(),
            "refused documents kept as dead letters"
        );
        true
    }
}

impl Pipeline {
    /// The dead-letter directory is at its bound: held as when the store
    /// refuses everything (unready, ingest refused), since nothing may be
    /// dropped and the write-ahead log keeps the flush meanwhile.
    fn dead_letters_full(&self, e: &DeadLetterError) {
        if self.refusing.why().is_none() {
            error!(error = %e, "the dead-letter directory is full: holding the flush and refusing new samples (unready) until there is room");
        }
        self.refusing.set(e.to_string());
    }
}

/// The part of `batch` that `refused` names, as a batch of its own with the
/// same id: the store applied none of it, so the watermarks let it in.
fn refused_part(batch: &FlushBatch, refused: &[Refusal]) -> FlushBatch {
    let mut series: Vec<SeriesMinutes> = Vec::new();
    let mut last: Option<usize> = None;
    let mut sorted: Vec<&Refusal> = refused.iter().collect();
    sorted.sort_by_key(|r| (r.series, r.hour_start));
    for r in sorted {
        let Some(sm) = batch.series.get(r.series) else {
            continue;
        };
        let in_part = |m: i64| r.hour_start.is_none_or(|h| hour_slot(m).hour_start == h);
        let minutes = sm.minutes.iter().copied().filter(|&(m, _)| in_part(m));
        if last == Some(r.series) {
            if let Some(s) = series.last_mut() {
                s.minutes.extend(minutes);
            }
        } else {
            series.push(SeriesMinutes {
                catalog: crate::model::CatalogDue::Unknown,
                series: sm.series.clone(),
                kind: sm.kind,
                minutes: minutes.collect(),
            });
            last = Some(r.series);
        }
    }
    FlushBatch {
        hashes: Vec::new(),
        resumable: batch.resumable,
        id: batch.id,
        series,
    }
}

#[cfg(test)]
#[path = "apply_tests.rs"]
mod tests;
