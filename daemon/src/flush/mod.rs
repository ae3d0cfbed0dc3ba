//! The flush pipeline: every `flush.interval` it drains the aggregator into a
//! numbered batch of per-series minute slots and applies it to the store,
//! retrying with backoff until the store takes it.
//!
//! Backpressure: at most `queue_depth` batches are in flight (drained but not
//! yet applied). When the store falls behind, ticks stop draining, samples
//! keep merging into the aggregator's existing slots, and once the aggregator
//! reaches its memory bound ingest answers `RESOURCE_EXHAUSTED`. Nothing
//! grows without limit.
//!
//! Fresh reads: batches stay registered as in flight until the store has
//! applied them, so the query engine can merge them in; [`Inflight`] holds
//! them and is all of the pipeline the engine sees.

mod apply;
mod catalog;
mod config;
#[cfg(test)]
mod faulty;
mod inflight;
mod letters;
mod pace;
mod upkeep;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::aggregator::Aggregator;
use crate::catalog::CatalogWriter;
use crate::deadletter::{DeadLetters, Refusing};
use crate::fleet::SourceRates;
use crate::ingest::IngestGate;
use crate::model::FlushId;
use crate::rollup::Rollups;
use crate::store::Store;
use crate::wal::{Baseline, Wal};

pub(crate) use apply::Mode;
pub use catalog::CATALOG_WRITE_ENTRIES;
pub use config::FlushConfig;
pub(crate) use inflight::Unflushed;
use inflight::{Cut, Logs};
pub use inflight::{Inflight, InflightBatch};
pub use letters::LettersReplayed;
use pace::Pace;

/// A flush's marker carries the cumulative counters' baselines that moved
/// once this long or this many cuts after the last that did (the others
/// carry none, see `crate::aggregator::BaselineLog`): every 10 s at the
/// default interval, and at the cut where the store is about to take a
/// checkpoint ([`Store::checkpoint_due`]). Replay folds at most that much
/// of the log again to bring them forward to where it resumes (nothing
/// from an embedded store's checkpoint), and the log keeps a segment that
/// much longer.
const BASELINES_EVERY: Duration = Duration::from_secs(10);
const BASELINES_EVERY_CUTS: u32 = 10;

pub struct Pipeline {
    agg: Arc<Aggregator>,
    store: Arc<dyn Store>,
    inflight: Arc<Inflight>,
    cfg: FlushConfig,
    rollups: Arc<Rollups>,
    catalog: Option<Arc<CatalogWriter>>,
    /// Told the samples of every cut batch, for the fleet view.
    source_rates: Option<Arc<SourceRates>>,
    /// Batches cut and not yet finished by the applier: applied (or given
    /// up) and recorded in the catalog. A batch leaves `inflight` as soon as
    /// the store has it, for reads; this also covers its catalog write, so
    /// `tally_flush_inflight_batches` at zero means the store has it all.
    unfinished: AtomicUsize,
    /// The write-ahead log and the gate its markers are cut under; set
    /// once replay at start is done.
    wal: OnceLock<(Arc<Wal>, Arc<IngestGate>)>,
    /// Spaces flushes under the store's statement budget.
    pace: Pace,
    /// Wakes the store's upkeep after a flush landed (`upkeep.rs`).
    upkeep_kick: Notify,
    /// Wakes a tick the full queue deferred once the applier finished a
    /// batch (see `Pipeline::run`).
    applied: Notify,
    /// Where refused documents are set aside (`apply.rs`); None only for
    /// pipelines without a data directory (unit tests).
    dead_letters: Option<DeadLetters>,
    /// When a marker last carried the baselines that moved, and the cuts
    /// since (see [`BASELINES_EVERY`]).
    baselines_logged: parking_lot::Mutex<Option<(Instant, u32)>>,
    /// Set while the store refuses whole flushes; ingest and readiness
    /// read it.
    refusing: Arc<Refusing>,
    /// Refusal messages already logged (bounded, see `apply.rs`).
    refusal_errors: parking_lot::Mutex<std::collections::HashSet<String>>,
}

impl Pipeline {
    /// `last_applied` is the store's highest flush id for this writer; new
    /// ids continue above it and above the wall clock in microseconds, so
    /// they stay increasing across restarts even if the store was wiped.
    pub fn new(
        agg: Arc<Aggregator>,
        store: Arc<dyn Store>,
        cfg: FlushConfig,
        last_applied: u64,
    ) -> Pipeline {
        Pipeline {
            pace: Pace::new(store.max_statements_per_s()),
            inflight: Arc::new(Inflight::new(agg.clone(), last_applied)),
            agg,
            store,
            cfg,
            rollups: Arc::new(Rollups::disabled()),
            catalog: None,
            source_rates: None,
            unfinished: AtomicUsize::new(0),
            wal: OnceLock::new(),
            upkeep_kick: Notify::new(),
            applied: Notify::new(),
            dead_letters: None,
            baselines_logged: parking_lot::Mutex::new(None),
            refusing: Refusing::shared(),
            refusal_errors: Default::default(),
        }
    }

    /// Sets refused documents aside in `dead_letters` instead of dropping
    /// them.
    pub fn with_dead_letters(mut self, dead_letters: DeadLetters) -> Pipeline {
        self.dead_letters = Some(dead_letters);
        self
    }

    /// Set while the store refuses whole flushes: ingest refuses samples
    /// meanwhile (`Ingestor::watch_refusals`).
    pub fn refusing(&self) -> &Arc<Refusing> {
        &self.refusing
    }

    /// Logs a marker for every batch cut from now on, under `gate`, and
    /// tells the log what the store holds durably. Called once, after
    /// replay.
    pub fn log_to(&self, wal: Arc<Wal>, gate: Arc<IngestGate>) {
        let _ = self.wal.set((wal, gate));
    }

    /// Adds group rollup series to every batch as it is drained.
    pub fn with_rollups(mut self, rollups: Arc<Rollups>) -> Pipeline {
        self.rollups = rollups;
        self
    }

    /// Records the series of applied batches in the store's catalog.
    pub fn with_catalog(mut self, catalog: Arc<CatalogWriter>) -> Pipeline {
        self.catalog = Some(catalog);
        self
    }

    /// Counts the samples of every cut batch per source.
    pub fn with_source_rates(mut self, rates: Arc<SourceRates>) -> Pipeline {
        self.source_rates = Some(rates);
        self
    }

    /// The batches cut and not yet in the store, for the query engine.
    pub fn inflight(&self) -> &Arc<Inflight> {
        &self.inflight
    }

    pub fn inflight_batches(&self) -> usize {
        self.inflight.len()
    }

    /// Sets the pipeline's gauges from its live state. Only a scrape of
    /// `/metrics` reads them, so the scrape calls this and they are exactly
    /// as fresh as it is; nothing else keeps them up to date.
    pub fn publish_gauges(&self) {
        metrics::gauge!("tally_pending_slots").set(self.agg.pending_slots() as f64);
        metrics::gauge!("tally_series").set(self.agg.series_count() as f64);
        metrics::gauge!("tally_sources").set(self.agg.source_count() as f64);
        metrics::gauge!("tally_flush_inflight_batches")
            .set(self.unfinished.load(Ordering::SeqCst) as f64);
        metrics::gauge!("tally_store_lag_seconds").set(self.inflight.oldest_wait().as_secs_f64());
        if let Some(dead) = &self.dead_letters {
            // A short directory listing, once per scrape.
            if let Ok(files) = dead.count_files() {
                metrics::gauge!("tally_dead_letter_files").set(files as f64);
            }
            // A running count: no listing.
            if let Ok(bytes) = dead.bytes() {
                metrics::gauge!("tally_dead_letter_bytes").set(bytes as f64);
            }
        }
    }

    /// Drains the aggregator into a new in-flight batch, unless the queue is
    /// full (backpressure) or there is nothing to flush.
    pub fn cut_batch(&self) -> Option<Arc<InflightBatch>> {
        let (batch, ()) = self.cut_with(Cut::default(), |_, _| {})?;
        self.observe(&batch);
        Some(batch)
    }

    fn cut_with<R>(
        &self,
        cut: Cut,
        drained: impl FnOnce(FlushId, Option<Vec<Baseline>>) -> R,
    ) -> Option<(Arc<InflightBatch>, R)> {
        // Rollups join the batch under the in-flight lock, so a reader never
        // sees a member's slots without its group's or the reverse.
        let started = Instant::now();
        let cut = self.inflight.cut(
            self.cfg.queue_depth,
            |series| self.rollups.expand(series),
            self.rollups.known_series(),
            cut,
            drained,
        )?;
        metrics::histogram!("tally_flush_cut_seconds").record(started.elapsed());
        self.unfinished.fetch_add(1, Ordering::SeqCst);
        Some(cut)
    }

    /// Counts a cut batch's samples into the sources' arrival rates. Kept
    /// out of the cut: under the log's barrier every request waits, and
    /// this visit of every series took about a sixth of that wait.
    fn observe(&self, batch: &InflightBatch) {
        if let Some(rates) = &self.source_rates {
            rates.observe(&batch.flush.series, chrono::Utc::now().timestamp_millis());
        }
    }

    /// Cuts a batch and, with the log on, logs its marker while no request
    /// is between its log append and its fold. Ingest waits only for the
    /// drain and the marker's queueing: the rollups and the batch's index
    /// are built after the barrier is lifted (readers still wait for them,
    /// on the in-flight lock), since under it they were most of the wait,
    /// the p99.9 of ingest's acknowledgements.
    /// With `last`, its marker carries the baselines whatever the time:
    /// shutdown's, so that the log's closing checkpoint has them all.
    async fn cut_logged(&self, last: bool) -> Option<Arc<InflightBatch>> {
        let Some((wal, gate)) = self.wal.get() else {
            return self.cut_batch();
        };
        // From the barrier's request on: new requests queue behind it
        // while it waits for those in progress.
        let started = Instant::now();
        let barrier = gate.barrier().await;
        // And where the store is about to take a checkpoint, which replay
        // then begins at without folding the log before it again.
        let due = last
            || self.store.checkpoint_due()
            || self.baselines_logged.lock().is_none_or(|(at, cuts)| {
                at.elapsed() >= BASELINES_EVERY || cuts + 1 >= BASELINES_EVERY_CUTS
            });
        let cut = Cut {
            baselines: if due { Logs::Baselines } else { Logs::Later },
            id: None,
        };
        let (batch, receipt) = self.cut_with(cut, |id, baselines| {
            {
                let mut logged = self.baselines_logged.lock();
                *logged = match baselines {
                    Some(_) => Some((Instant::now(), 0)),
                    None => logged.map(|(at, cuts)| (at, cuts + 1)),
                };
            }
            let receipt = wal.marker(id.0, baselines);
            drop(barrier);
            metrics::histogram!("tally_ingest_held_seconds").record(started.elapsed());
            receipt
        })?;
        self.observe(&batch);
        // Waited for outside the barrier: while the disk is full the
        // marker's write waits for room, and ingest must meanwhile answer,
        // not hang.
        if let Err(e) = async { receipt?.written().await }.await {
            // The log is closed or broken: ingest already answers errors.
            warn!(error = %e, "write-ahead log marker not written");
        }
        Some(batch)
    }

    /// Replaying the log: cuts the flush that was cut at this point before
    /// the crash, with its id, applies it and records its catalog entries.
    pub async fn replay_flush(&self, id: u64, give_up: &CancellationToken) -> bool {
        let cut = Cut {
            baselines: Logs::Later,
            id: Some(FlushId(id)),
        };
        let Some((batch, ())) = self.cut_with(cut, |_, _| {}) else {
            return true;
        };
        self.observe(&batch);
        let landed = self.apply(&batch, give_up).await;
        if landed {
            self.record_catalog(&batch).await;
        }
        self.unfinished.fetch_sub(1, Ordering::SeqCst);
        landed
    }

    /// Why the write-ahead log cannot take appends now, if it cannot.
    pub fn log_failure(&self) -> Option<String> {
        self.wal.get().and_then(|(wal, _)| wal.failing())
    }

    /// Whether the daemon can keep what it is sent: the log writable and
    /// the store healthy. Readiness (`/readyz`, gRPC health) follows it.
    pub async fn ready(&self) -> Result<(), String> {
        if let Some(why) = self.log_failure() {
            return Err(format!("write-ahead log not writable: {why}"));
        }
        if let Some(why) = self.refusing.why() {
            return Err(why);
        }
        self.store
            .health()
            .await
            .map_err(|e| format!("{} store not ready: {e}", self.store.name()))
    }

    /// Tells the log how far the store is durable, so it can drop what it
    /// no longer needs; `applied` is the newest flush the store took.
    pub(crate) fn note_durable(&self, applied: u64) {
        if let Some((wal, _)) = self.wal.get() {
            wal.durable(self.store.durable_through(applied));
        }
    }

    /// Runs the pipeline until `stop` is cancelled, then flushes everything
    /// left. Cancelling `give_up` abandons retries (the shutdown deadline).
    pub async fn run(self: Arc<Self>, stop: CancellationToken, give_up: CancellationToken) {
        let (tx, mut rx) = mpsc::channel::<Arc<InflightBatch>>(self.cfg.queue_depth.max(1));
        let upkeep_stop = CancellationToken::new();
        let upkeep = {
            let this = self.clone();
            let stop = upkeep_stop.clone();
            tokio::spawn(async move { this.upkeep_loop(stop).await })
        };
        let applier = {
            let this = self.clone();
            let give_up = give_up.clone();
            tokio::spawn(async move {
                while let Some(batch) = rx.recv().await {
                    if this.apply(&batch, &give_up).await {
                        this.upkeep_kick.notify_one();
                        this.record_catalog(&batch).await;
                    }
                    this.inflight.recycle(batch);
                    this.unfinished.fetch_sub(1, Ordering::SeqCst);
                    this.applied.notify_one();
                }
            })
        };
        // On the wall clock's beat (see `pace::until_beat`); a tick missed
        // while the loop waited is skipped, which keeps the beat.
        let mut tick = tokio::time::interval_at(
            tokio::time::Instant::now() + pace::until_beat(self.cfg.interval, SystemTime::now()),
            self.cfg.interval,
        );
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        // A tick the full queue deferred is taken again as soon as the
        // applier finishes a batch, not a whole interval later: the store
        // never waits for the beat while samples are waiting for it, so no
        // batch has to be cut ahead of time to keep it busy, and the default
        // queue holds one (at a million series a batch is about 70 MB).
        let mut deferred = false;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = self.applied.notified(), if deferred => {}
                _ = stop.cancelled() => break,
            }
            if self.pace.holds(Instant::now()) {
                metrics::counter!("tally_flush_paced_total").increment(1);
                continue;
            }
            let sent = self.send_batch(&tx, false).await;
            deferred = !sent && self.inflight.len() >= self.cfg.queue_depth;
            if !sent && self.unfinished.load(Ordering::SeqCst) == 0 {
                self.idle().await;
            }
        }
        // Final drain: ingest has stopped, so the aggregator only shrinks.
        info!(
            pending_slots = self.agg.pending_slots(),
            "flushing before exit"
        );
        while self.agg.pending_slots() > 0 && !give_up.is_cancelled() {
            if !self.send_batch(&tx, true).await {
                // Queue full: wait for the applier to make room.
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(5)) => {}
                    _ = give_up.cancelled() => break,
                }
            }
        }
        drop(tx);
        if let Err(e) = applier.await {
            error!(error = %e, "flush applier task failed");
        }
        // The store's close finishes what the upkeep leaves.
        upkeep_stop.cancel();
        if let Err(e) = upkeep.await {
            error!(error = %e, "store upkeep task failed");
        }
        let left = self.unflushed_slots();
        if left > 0 {
            error!(slots = left, "exiting with unflushed slots");
        }
    }

    /// Slots not yet confirmed by the store: in the aggregator or in flight.
    pub fn unflushed_slots(&self) -> usize {
        self.inflight.unflushed_slots()
    }

    /// Nothing to flush: lets the store make its last flushes durable (the
    /// embedded store's commits are not all synced), so the durable point
    /// never trails the last flush for long, and tells the log.
    async fn idle(&self) {
        match self.store.sync_idle().await {
            Ok(Some(durable)) => self.note_durable(durable),
            Ok(None) => {}
            Err(e) => warn!(error = %e, "making the store's last flushes durable failed"),
        }
    }

    async fn send_batch(&self, tx: &mpsc::Sender<Arc<InflightBatch>>, last: bool) -> bool {
        let Some(batch) = self.cut_logged(last).await else {
            return false;
        };
        if tx.send(batch).await.is_ok() {
            return true;
        }
        // The applier is gone (it only ends after `tx` is dropped, so this
        // is a failed task); the batch will never be finished.
        self.unfinished.fetch_sub(1, Ordering::SeqCst);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregator::{AggregatorConfig, RecentWanted, SeriesBatch};
    use crate::ingest::IngestConfig;
    use crate::model::{SampleKind, SeriesRef, Slot};
    use crate::store::embedded::EmbeddedStore;

    fn ingest(agg: &Aggregator, ts_ms: i64, v: f64) {
        ingest_one(agg, "m", SampleKind::Gauge, ts_ms, v);
    }

    fn ingest_one(
        agg: &Aggregator,
        metric: &str,
        kind: SampleKind,
        ts_ms: i64,
        v: f64,
    ) -> crate::aggregator::IngestOutcome {
        agg.ingest(
            &[SeriesBatch {
                labels: "",
                source: "s",
                metric,
                kind: Some(kind),
                timestamps_ms: &[ts_ms],
                values: &[v],
                start_times_ms: &[],
                source_index: 0,
                series_index: 0,
            }],
            ts_ms,
        )
    }

    /// An embedded store in a fresh directory (kept while the test runs)
    /// and an aggregator with default settings.
    fn embedded_and_aggregator() -> (tempfile::TempDir, Arc<dyn Store>, Arc<Aggregator>) {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
        let agg = Arc::new(Aggregator::new(
            &AggregatorConfig::default(),
            &IngestConfig::default(),
        ));
        (dir, store, agg)
    }

    /// A counter's baseline moved by a sample that was then refused (its
    /// increase out of range) leaves no slot: the cut that drains it has
    /// nothing to flush, and the next cut's marker must still log it.
    #[test]
    fn a_baseline_drained_without_a_slot_goes_in_the_next_marker() {
        let (_dir, _store, agg) = embedded_and_aggregator();
        let inflight = Inflight::new(agg.clone(), 0);
        let counter =
            |ts_ms: i64, v: f64| ingest_one(&agg, "c", SampleKind::CumulativeCounter, ts_ms, v);
        let cut = || {
            let how = Cut {
                baselines: Logs::Baselines,
                id: None,
            };
            inflight
                .cut(8, |s| s, 0, how, |_, b| b)
                .map(|(_, b)| b.unwrap_or_default())
        };
        let now = chrono::Utc::now().timestamp_millis();
        counter(now, 0.0);
        let first = cut().expect("the first sample's minute");
        assert_eq!(first.len(), 1);
        // Twice: the newest is carried, once.
        for (ts, v) in [(now + 1, 2e300), (now + 2, 5e300)] {
            let refused = counter(ts, v);
            assert_eq!((refused.accepted, refused.rejected), (0, 1));
            assert!(cut().is_none(), "no slot to flush");
        }
        ingest(&agg, now + 3, 1.0);
        let next = cut().expect("the gauge's minute");
        let logged: Vec<(&str, f64)> = next.iter().map(|b| (&*b.series.metric, b.value)).collect();
        assert_eq!(logged, [("c", 5e300)]);
    }

    #[tokio::test]
    async fn queue_depth_bounds_inflight_and_unflushed_sees_everything_once() {
        let (_dir, store, agg) = embedded_and_aggregator();
        let p = Pipeline::new(
            agg.clone(),
            store,
            FlushConfig {
                queue_depth: 1,
                ..FlushConfig::default()
            },
            0,
        );
        let now = chrono::Utc::now().timestamp_millis();
        ingest(&agg, now, 1.0);
        let b1 = p.cut_batch().unwrap();
        ingest(&agg, now, 2.0);
        assert!(p.cut_batch().is_none(), "queue full: nothing drained");
        let key = SeriesRef::new("s", "m");
        let u = p.inflight().unflushed(key, RecentWanted::No);
        assert_eq!(u.inflight.len(), 1);
        assert_eq!(u.inflight[0].1[0].1, Slot::at(now, 1.0));
        // At the same time, the greater value is the last sample.
        assert_eq!(u.pending[0].1, Slot::at(now, 2.0));
        let give_up = CancellationToken::new();
        assert!(p.apply(&b1, &give_up).await);
        assert_eq!(p.inflight_batches(), 0);
        let b2 = p.cut_batch().unwrap();
        assert!(b2.id > b1.id);
    }

    /// A cut indexes its drained series by the aggregator's hashes and the
    /// rollups it adds by their own: a read finds each of them in flight.
    #[tokio::test]
    async fn a_cut_batch_finds_every_series_it_drained_and_every_rollup_it_added() {
        let (_dir, store, agg) = embedded_and_aggregator();
        let rollups = Rollups::new(crate::rollup::RollupConfig::default()).unwrap();
        let p = Pipeline::new(agg.clone(), store, FlushConfig::default(), 0)
            .with_rollups(Arc::new(rollups));
        let now = chrono::Utc::now().timestamp_millis();
        let names: Vec<(String, String)> = (0..300)
            .map(|i| (format!("host-{}", i % 37), format!("m{}", i / 37)))
            .collect();
        for (source, metric) in &names {
            agg.ingest(
                &[SeriesBatch {
                    labels: "",
                    source,
                    metric,
                    kind: Some(SampleKind::Gauge),
                    timestamps_ms: &[now],
                    values: &[1.0],
                    start_times_ms: &[],
                    source_index: 0,
                    series_index: 0,
                }],
                now,
            );
        }
        let batch = p.cut_batch().unwrap();
        let metrics = 300usize.div_ceil(37);
        assert_eq!(batch.flush.series.len(), names.len() + metrics);
        for (source, metric) in &names {
            let u = p
                .inflight()
                .unflushed(SeriesRef::new(source, metric), RecentWanted::No);
            assert_eq!(u.inflight.len(), 1, "{source} {metric}");
        }
        for m in 0..metrics {
            let metric = format!("m{m}");
            let u = p
                .inflight()
                .unflushed(SeriesRef::new("@all", &metric), RecentWanted::No);
            assert_eq!(u.inflight.len(), 1, "@all {metric}");
        }
    }

    /// An applied batch's series list is filled again by the next cut
    /// rather than freed, unless something still holds the batch.
    #[tokio::test]
    async fn an_applied_batch_is_reused_by_the_next_cut() {
        let (dir, _, agg) = embedded_and_aggregator();
        // Every commit durable, as for a batch over the store's redo bound
        // (about 30,000 series and up): a smaller one is held for a redo
        // until the next durable commit, and then freed.
        let config = crate::store::embedded::EmbeddedConfig {
            durable_every_flushes: 1,
            ..Default::default()
        };
        let store: Arc<dyn Store> =
            Arc::new(EmbeddedStore::open_with(&dir.path().join("d"), config).unwrap());
        let p = Pipeline::new(agg.clone(), store, FlushConfig::default(), 0);
        let give_up = CancellationToken::new();
        let now = chrono::Utc::now().timestamp_millis();
        ingest(&agg, now, 1.0);
        let b1 = p.cut_batch().unwrap();
        let buffer = b1.flush.series.as_ptr();
        assert!(p.apply(&b1, &give_up).await);
        p.inflight().recycle(b1);
        ingest(&agg, now, 2.0);
        let b2 = p.cut_batch().unwrap();
        assert_eq!(b2.flush.series.as_ptr(), buffer, "the same buffer");
        assert_eq!(b2.flush.series[0].minutes[0].1, Slot::at(now, 2.0));

        // Held elsewhere (a reader's snapshot): not reused, and not lost.
        let held = b2.clone();
        assert!(p.apply(&b2, &give_up).await);
        p.inflight().recycle(b2);
        ingest(&agg, now, 3.0);
        let b3 = p.cut_batch().unwrap();
        assert_ne!(b3.flush.series.as_ptr(), held.flush.series.as_ptr());
        assert_eq!(held.flush.series[0].minutes[0].1, Slot::at(now, 2.0));
    }

    /// What the query engine relies on to count pending slots once: after a
    /// snapshot, the flush that takes its pending slots leaves a watermark
    /// above the snapshot's `cut_through`, and none before it does.
    #[tokio::test]
    async fn a_flush_after_a_snapshot_leaves_a_watermark_above_cut_through() {
        use crate::model::{Resolution, SeriesId, Tier};
        use crate::store::ReadQuery;
        let (_dir, store, agg) = embedded_and_aggregator();
        let p = Pipeline::new(agg.clone(), store.clone(), FlushConfig::default(), 0);
        let now = chrono::Utc::now().timestamp_millis();
        let key = SeriesRef::new("s", "m");
        let give_up = CancellationToken::new();
        ingest(&agg, now, 1.0);
        let b1 = p.cut_batch().unwrap();
        assert!(p.apply(&b1, &give_up).await);
        ingest(&agg, now, 2.0);
        let snapshot = p.inflight().unflushed(key, RecentWanted::No);
        assert_eq!(snapshot.cut_through, b1.id.0);
        assert_eq!(snapshot.pending.len(), 1);
        let read = || async {
            let minute = now.div_euclid(60_000);
            store
                .read(&ReadQuery {
                    series: SeriesId::new("s", "m"),
                    tier: Tier::Hour,
                    resolution: Resolution::Minute,
                    from: Tier::Hour.period_start(minute),
                    to: Tier::Hour.period_start(minute) + 3_600,
                })
                .await
                .unwrap()[0]
                .watermark
        };
        assert!(
            read().await <= snapshot.cut_through,
            "pending not yet stored"
        );
        let b2 = p.cut_batch().unwrap();
        assert!(p.apply(&b2, &give_up).await);
        assert!(read().await > snapshot.cut_through, "pending now stored");
    }
}
