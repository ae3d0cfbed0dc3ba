//! Live watch: subscribers receive, every second, the minute slots of their
//! series that changed, after a first snapshot of the recent window.
//!
//! One hub task serves every subscriber. Each tick it reads the live window
//! (the previous and the current minute) of the union of watched series
//! once, through the query engine, so values are the same merged view
//! (store, in-flight flushes, aggregator) a range read gives. Each
//! subscriber is then sent what differs from what it was last sent.
//!
//! Slow subscribers never hold anything up: every subscriber has a small
//! bounded queue and the hub only ever `try_send`s. When the queue is full
//! the tick is skipped for that subscriber; because updates carry whole
//! slot values and the diff is against what was last *delivered*, the next
//! message that fits catches it up (skip ahead). A subscriber that stays
//! full for `max_lag` is dropped, and told so.

mod config;

pub use config::WatchConfig;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::aggregator::RecentWanted;
use crate::model::{SampleKind, SeriesId, Slot, MINUTE_S};
use crate::query::{
    Buckets, Point, QueryEngine, QueryError, Selection, SeriesBuckets, SeriesRange, Step, StepSpec,
    Window,
};

/// One message to a subscriber.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct WatchEvent {
    /// Server time, Unix milliseconds.
    pub t_ms: i64,
    /// The first message: each series' recent window. Later ones carry only
    /// changed minutes, with their whole value so far (replace, not add).
    pub snapshot: bool,
    /// Ticks merged into this message because the subscriber was behind.
    pub skipped: u64,
    pub series: Vec<SeriesRange>,
}

/// The receiving end of a subscription. Dropping it unsubscribes.
pub struct Subscription {
    pub events: mpsc::Receiver<WatchEvent>,
    dropped: Arc<AtomicBool>,
}

impl Subscription {
    /// After `events` ends: whether the hub dropped the subscriber for
    /// falling behind (rather than the daemon shutting down).
    pub fn was_dropped_for_lag(&self) -> bool {
        self.dropped.load(Ordering::Relaxed)
    }
}

struct Subscriber {
    id: u64,
    /// Held for the subscription's life: `watch.max_subscribers` permits.
    _slot: tokio::sync::OwnedSemaphorePermit,
    selection: Selection,
    /// Whether `series` is a catalog lookup worth repeating (globs).
    dynamic: bool,
    series: Vec<SeriesId>,
    /// What was last delivered per series: (minute start, slot).
    sent: HashMap<SeriesId, Vec<(i64, Slot)>>,
    kinds: HashMap<SeriesId, SampleKind>,
    tx: mpsc::Sender<WatchEvent>,
    skipped: u64,
    behind_since: Option<Instant>,
    dropped: Arc<AtomicBool>,
}

/// A new subscription's first event, and what it delivered per series.
struct Snapshot {
    series: Vec<SeriesRange>,
    sent: HashMap<SeriesId, Vec<(i64, Slot)>>,
    kinds: HashMap<SeriesId, SampleKind>,
}

impl Snapshot {
    /// The snapshot of `buckets`; the minutes from the one before
    /// `current` on count as delivered.
    fn of(buckets: Vec<SeriesBuckets>, current: i64) -> Snapshot {
        let mut sent = HashMap::new();
        let mut kinds = HashMap::new();
        let mut snapshot = Vec::with_capacity(buckets.len());
        for b in buckets {
            let counter = b.is_counter();
            snapshot.push(SeriesRange {
                source: b.series.source.to_string(),
                metric: b.series.metric.to_string(),
                labels: b.series.labels.to_map(),
                kind: b.kind,
                points: b
                    .buckets
                    .iter()
                    .map(|(t, s)| Point::of(*t, s, MINUTE_S, counter, &[]))
                    .collect(),
            });
            if let Some(k) = b.kind {
                kinds.insert(b.series.clone(), k);
            }
            let live: Vec<(i64, Slot)> = b
                .buckets
                .into_iter()
                .filter(|(t, _)| *t >= current - MINUTE_S)
                .collect();
            sent.insert(b.series, live);
        }
        Snapshot {
            series: snapshot,
            sent,
            kinds,
        }
    }
}

/// The live window of every watched series: kind and minute slots.
type Live = HashMap<SeriesId, (Option<SampleKind>, Buckets)>;

/// One series' changed minutes for a subscriber.
type Change<'a> = (&'a SeriesId, Option<SampleKind>, Vec<(i64, Slot)>);

impl Subscriber {
    /// Sends what changed since the last delivery; false when the
    /// subscriber is gone or has been dropped for lagging.
    fn deliver(&mut self, live: &Live, t_ms: i64, max_lag: Duration) -> bool {
        if self.tx.is_closed() {
            return false;
        }
        if self.tx.capacity() == 0 {
            return self.fell_behind(max_lag);
        }
        let changed = self.changes(live);
        if changed.is_empty() {
            self.behind_since = None;
            return true;
        }
        let event = WatchEvent {
            t_ms,
            snapshot: false,
            skipped: self.skipped,
            series: changed.iter().map(update_range).collect(),
        };
        match self.tx.try_send(event) {
            Ok(()) => {
                for (id, kind, _) in &changed {
                    if let Some((_, slots)) = live.get(*id) {
                        self.sent.insert((*id).clone(), slots.clone());
                    }
                    if let Some(k) = kind {
                        self.kinds.insert((*id).clone(), *k);
                    }
                }
                self.skipped = 0;
                self.behind_since = None;
                true
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
            Err(mpsc::error::TrySendError::Full(_)) => self.fell_behind(max_lag),
        }
    }

    /// The minutes of this subscriber's series that differ from what it
    /// was last sent.
    fn changes<'a>(&self, live: &'a Live) -> Vec<Change<'a>> {
        let mut changed = Vec::new();
        for id in &self.series {
            let Some((id, (kind, now_slots))) = live.get_key_value(id) else {
                continue;
            };
            let before = self.sent.get(id).map(Vec::as_slice).unwrap_or(&[]);
            let diff: Vec<(i64, Slot)> = now_slots
                .iter()
                .filter(|(t, s)| !before.iter().any(|(bt, bs)| bt == t && bs == s))
                .copied()
                .collect();
            if !diff.is_empty() {
                changed.push((id, kind.or(self.kinds.get(id).copied()), diff));
            }
        }
        changed
    }

    /// Keeps a subscriber that could not take this tick, or drops it once
    /// it has not read for `max_lag`.
    fn fell_behind(&mut self, max_lag: Duration) -> bool {
        self.skipped += 1;
        metrics::counter!("tally_watch_skipped_total").increment(1);
        let since = *self.behind_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= max_lag {
            self.dropped.store(true, Ordering::Relaxed);
            metrics::counter!("tally_watch_dropped_total").increment(1);
            warn!(lag = ?since.elapsed(), "watch subscriber dropped: it stopped reading");
            return false;
        }
        true
    }
}

/// An update's points for one series: whole slot values so far.
fn update_range((id, kind, diff): &Change<'_>) -> SeriesRange {
    let counter = kind.is_some_and(SampleKind::is_counter);
    SeriesRange {
        source: id.source.to_string(),
        metric: id.metric.to_string(),
        labels: id.labels.to_map(),
        kind: *kind,
        points: diff
            .iter()
            .map(|(t, s)| Point::of(*t, s, MINUTE_S, counter, &[]))
            .collect(),
    }
}

pub struct WatchHub {
    engine: Arc<QueryEngine>,
    cfg: WatchConfig,
    subscribers: Mutex<Vec<Subscriber>>,
    /// Set under the `subscribers` lock, so no subscriber joins after the
    /// list is cleared at shutdown.
    closed: AtomicBool,
    /// Taken before a subscription does any work, so concurrent subscribes
    /// cannot overshoot `watch.max_subscribers`.
    slots: Arc<tokio::sync::Semaphore>,
    next_id: std::sync::atomic::AtomicU64,
}

/// Ticks between catalog lookups of glob subscriptions (new series join).
const RESOLVE_EVERY_TICKS: u64 = 10;

impl WatchHub {
    pub fn new(engine: Arc<QueryEngine>, cfg: WatchConfig) -> WatchHub {
        WatchHub {
            engine,
            slots: Arc::new(tokio::sync::Semaphore::new(cfg.max_subscribers)),
            cfg,
            subscribers: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
            next_id: std::sync::atomic::AtomicU64::new(0),
        }
    }

    pub fn subscriber_count(&self) -> usize {
        self.subscribers.lock().len()
    }

    /// A subscription's window in seconds: `window_minutes`, or
    /// `watch.window` for 0; a minute at least.
    fn window_s(&self, window_minutes: u32) -> i64 {
        match window_minutes {
            0 => self.cfg.window.as_secs() as i64,
            m => i64::from(m) * MINUTE_S,
        }
        .max(MINUTE_S)
    }

    /// Subscribes to the selected series: the snapshot of the last
    /// `window_minutes` (0 = `watch.window`) is the first event.
    pub async fn subscribe(
        &self,
        selection: Selection,
        window_minutes: u32,
    ) -> Result<Subscription, QueryError> {
        if self.closed.load(Ordering::Relaxed) {
            return Err(QueryError::Busy("the daemon is shutting down".into()));
        }
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            return Err(QueryError::Busy(format!(
                "{} watch subscribers already (watch.max_subscribers); try again later",
                self.cfg.max_subscribers
            )));
        };
        let window_s = self.window_s(window_minutes);
        let series = self
            .engine
            .resolve(&selection, self.cfg.max_series, "watch.max_series")
            .await?;
        let now = chrono::Utc::now();
        let now_s = now.timestamp();
        let current = Step::MINUTE.floor(now_s);
        let w = self.engine.window(
            current + MINUTE_S - window_s,
            current + MINUTE_S,
            StepSpec::Fixed(Step::MINUTE),
        )?;
        self.engine.check_total(series.len(), &w)?;
        let _reserved = self
            .engine
            .reserve_points((series.len() as u64).saturating_mul(w.buckets().max(0) as u64))
            .await?;
        let buckets = self
            .engine
            .many_buckets(&series, &w, RecentWanted::No)
            .await?;
        let Snapshot {
            series: snapshot,
            sent,
            kinds,
        } = Snapshot::of(buckets, current);
        let (tx, rx) = mpsc::channel(self.cfg.buffer.max(1));
        // The queue is empty: the snapshot always fits.
        let _ = tx.try_send(WatchEvent {
            t_ms: now.timestamp_millis(),
            snapshot: true,
            skipped: 0,
            series: snapshot,
        });
        let dropped = Arc::new(AtomicBool::new(false));
        let dynamic = selection
            .source
            .iter()
            .chain(&selection.metric)
            .any(|m| m.names().is_none());
        let mut subs = self.subscribers.lock();
        if self.closed.load(Ordering::Relaxed) {
            return Err(QueryError::Busy("the daemon is shutting down".into()));
        }
        subs.push(Subscriber {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            _slot: slot,
            selection,
            dynamic,
            series,
            sent,
            kinds,
            tx,
            skipped: 0,
            behind_since: None,
            dropped: dropped.clone(),
        });
        metrics::gauge!("tally_watch_subscribers").set(subs.len() as f64);
        drop(subs);
        Ok(Subscription {
            events: rx,
            dropped,
        })
    }

    /// Ticks until `stop` is cancelled, then ends every subscription.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut tick = tokio::time::interval(self.cfg.tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut n: u64 = 0;
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            n += 1;
            if n.is_multiple_of(RESOLVE_EVERY_TICKS) {
                self.re_resolve().await;
            }
            let started = Instant::now();
            if let Err(e) = self.tick().await {
                warn!(error = %e, "watch tick failed; subscribers get the changes next tick");
            }
            metrics::histogram!("tally_watch_tick_duration_seconds")
                .record(started.elapsed().as_secs_f64());
        }
        let mut subs = self.subscribers.lock();
        self.closed.store(true, Ordering::Relaxed);
        // Dropping the senders ends every stream.
        subs.clear();
        drop(subs);
        metrics::gauge!("tally_watch_subscribers").set(0.0);
    }

    /// Picks up new series of glob subscriptions.
    async fn re_resolve(&self) {
        let dynamic: Vec<(u64, Selection)> = self
            .subscribers
            .lock()
            .iter()
            .filter(|s| s.dynamic)
            .map(|s| (s.id, s.selection.clone()))
            .collect();
        for (id, sel) in dynamic {
            match self
                .engine
                .resolve(&sel, self.cfg.max_series, "watch.max_series")
                .await
            {
                Ok(series) => {
                    let mut subs = self.subscribers.lock();
                    if let Some(s) = subs.iter_mut().find(|s| s.id == id) {
                        // Forget what was sent for series that left.
                        let keep: std::collections::HashSet<&SeriesId> = series.iter().collect();
                        s.sent.retain(|k, _| keep.contains(k));
                        s.kinds.retain(|k, _| keep.contains(k));
                        s.series = series;
                    }
                }
                Err(e) => debug!(error = %e, "watch: re-resolving a selector failed"),
            }
        }
    }

    async fn tick(&self) -> Result<(), QueryError> {
        let union = self.watched_now();
        if union.is_empty() {
            metrics::gauge!("tally_watch_subscribers").set(self.subscriber_count() as f64);
            return Ok(());
        }
        let now = chrono::Utc::now();
        let current = Step::MINUTE.floor(now.timestamp());
        let w = Window {
            from: current - MINUTE_S,
            to: current + MINUTE_S,
            step: Step::MINUTE,
        };
        let _reserved = self.engine.reserve_points(2 * union.len() as u64).await?;
        let live: Live = self
            .engine
            .many_buckets(&union, &w, RecentWanted::No)
            .await?
            .into_iter()
            .map(|b| (b.series, (b.kind, b.buckets)))
            .collect();
        let mut subs = self.subscribers.lock();
        let max_lag = self.cfg.max_lag;
        subs.retain_mut(|sub| sub.deliver(&live, now.timestamp_millis(), max_lag));
        // Forget delivered minutes that left the live window.
        for sub in subs.iter_mut() {
            for slots in sub.sent.values_mut() {
                slots.retain(|(t, _)| *t >= w.from);
            }
            sub.sent.retain(|_, slots| !slots.is_empty());
        }
        metrics::gauge!("tally_watch_subscribers").set(subs.len() as f64);
        Ok(())
    }

    /// The series of every subscriber that can take an update now. A
    /// subscriber whose queue is full cannot take this tick: its series are
    /// not read for it, so a stalled watcher costs nothing.
    fn watched_now(&self) -> Vec<SeriesId> {
        let mut subs = self.subscribers.lock();
        subs.retain(|s| !s.tx.is_closed());
        let mut all: Vec<SeriesId> = subs
            .iter()
            .filter(|s| s.tx.capacity() > 0)
            .flat_map(|s| s.series.iter().cloned())
            .collect();
        all.sort();
        all.dedup();
        all
    }
}
