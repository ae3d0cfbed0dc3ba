//! Samples per second per source, counted from the flush pipeline's
//! batches rather than per sample: each drained (series, minute) slot
//! already carries its sample count `n`, so one map update per source per
//! flush (off the ingest path, outside every lock ingest takes) tells how
//! much each source sent.
//!
//! Counts are kept per wall-clock minute of arrival, the current one and
//! the one before; the rate is their sum over the time they cover. A
//! source silent for two minutes is forgotten.

use std::sync::Arc;

use hashbrown::HashMap;
use parking_lot::Mutex;

use crate::model::SeriesMinutes;
use crate::rollup::GROUP_PREFIX;

const MINUTE_MS: i64 = 60_000;

/// Samples that arrived from one source, by minute of arrival.
#[derive(Debug, Clone, Copy)]
struct Arrivals {
    /// The minute (`now_ms / 60 000`) `this` counts.
    minute: i64,
    this: u64,
    /// The minute before `minute`.
    prev: u64,
    /// When the source was first counted, so a new source's rate is not
    /// spread over time it was not sending.
    since_ms: i64,
}

/// Arrivals per source, fed with every drained batch.
#[derive(Default)]
pub struct SourceRates {
    by_source: Mutex<HashMap<Arc<str>, Arrivals>>,
    /// The minute of the last sweep of silent sources.
    swept: Mutex<i64>,
}

impl SourceRates {
    /// Counts the samples of a drained batch as arrived at `now_ms`.
    /// Rollup series (their source starts with `@`) are not sources.
    pub fn observe(&self, batch: &[SeriesMinutes], now_ms: i64) {
        let minute = now_ms.div_euclid(MINUTE_MS);
        // Summed per copy of a source's name first: the series of a source
        // share one copy, so the names are hashed and compared once per
        // source and flush rather than once per series (a fleet sends tens
        // of series per source).
        // Each series' name sits in memory of its own, which a large fleet
        // has out of cache: the addresses of a chunk's names are read first,
        // with nothing between the loads, so that their misses overlap
        // instead of each waiting behind the map's work for the one before
        // (most of this visit's time at 100,000 series).
        const CHUNK: usize = 32;
        let mut per_copy: HashMap<*const u8, (&Arc<str>, u64)> = HashMap::new();
        let mut copies = [std::ptr::null::<u8>(); CHUNK];
        for chunk in batch.chunks(CHUNK) {
            for (copy, s) in copies.iter_mut().zip(chunk) {
                *copy = Arc::as_ptr(&s.series.source) as *const u8;
            }
            for (&copy, s) in copies.iter().zip(chunk) {
                let n: u64 = s.minutes.iter().map(|(_, slot)| slot.n).sum();
                per_copy.entry(copy).or_insert((&s.series.source, 0)).1 += n;
            }
        }
        let mut map = self.by_source.lock();
        for (source, n) in per_copy.into_values() {
            if source.starts_with(GROUP_PREFIX) {
                continue;
            }
            match map.get_mut(&**source) {
                Some(a) => a.add(minute, n),
                None => {
                    map.insert(
                        source.clone(),
                        Arrivals {
                            minute,
                            this: n,
                            prev: 0,
                            since_ms: now_ms,
                        },
                    );
                }
            }
        }
        drop(map);
        self.sweep(minute);
    }

    /// Samples per second `source` sent over the last one to two minutes,
    /// as of `now_ms`; 0 for a source not heard from in that time.
    pub fn rate(&self, source: &str, now_ms: i64) -> f64 {
        self.by_source
            .lock()
            .get(source)
            .map_or(0.0, |a| a.rate(now_ms))
    }

    /// The rates of many sources under one lock.
    pub fn rates<'a>(&self, sources: impl Iterator<Item = &'a str>, now_ms: i64) -> Vec<f64> {
        let map = self.by_source.lock();
        sources
            .map(|s| map.get(s).map_or(0.0, |a| a.rate(now_ms)))
            .collect()
    }

    /// Sources counted.
    pub fn len(&self) -> usize {
        self.by_source.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Once a minute: forgets sources with nothing in the last two minutes,
    /// so the map holds only sources that are sending.
    fn sweep(&self, minute: i64) {
        {
            let mut swept = self.swept.lock();
            if *swept == minute {
                return;
            }
            *swept = minute;
        }
        self.by_source.lock().retain(|_, a| a.minute >= minute - 1);
    }
}

impl Arrivals {
    fn add(&mut self, minute: i64, n: u64) {
        if minute > self.minute {
            self.prev = if minute == self.minute + 1 {
                self.this
            } else {
                0
            };
            self.this = 0;
            self.minute = minute;
        }
        // A clock stepping back adds to the newest minute.
        self.this += n;
    }

    fn rate(&self, now_ms: i64) -> f64 {
        let now_minute = now_ms.div_euclid(MINUTE_MS);
        let count = if self.minute == now_minute {
            self.this + self.prev
        } else if self.minute == now_minute - 1 {
            self.this
        } else {
            return 0.0;
        };
        let start = ((now_minute - 1) * MINUTE_MS).max(self.since_ms);
        let covered_s = ((now_ms - start) as f64 / 1000.0).max(1.0);
        count as f64 / covered_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{SampleKind, SeriesId, Slot};

    fn drained(source: &str, n: u64) -> SeriesMinutes {
        let mut slot = Slot::of(1.0);
        for _ in 1..n {
            slot.add_value(1.0);
        }
        SeriesMinutes {
            catalog: crate::model::CatalogDue::Unknown,
            series: Arc::new(SeriesId::new(source, "m")),
            kind: SampleKind::Gauge,
            minutes: [(0, slot)].into_iter().collect(),
        }
    }

    #[test]
    fn rate_covers_the_last_minute_and_this_one() {
        let r = SourceRates::default();
        let t0 = 1_800_000_000_000 - 1_800_000_000_000 % MINUTE_MS;
        // Sending for three minutes at 10 samples a second, a flush a second.
        for s in 0..180 {
            r.observe(&[drained("a", 10), drained("@all", 10)], t0 + s * 1000);
        }
        let now = t0 + 180 * 1000;
        assert!(
            (r.rate("a", now) - 10.0).abs() < 0.2,
            "{}",
            r.rate("a", now)
        );
        assert_eq!(r.rate("@all", now), 0.0, "rollups are not sources");
        assert_eq!(r.rate("b", now), 0.0);
        // A new source is not diluted over time before it was first seen.
        r.observe(&[drained("b", 50)], now);
        r.observe(&[drained("b", 50)], now + 5_000);
        let b = r.rate("b", now + 10_000);
        assert!((b - 10.0).abs() < 0.01, "{b}");
        // Silent for two minutes: rate 0, then forgotten.
        assert_eq!(r.rate("a", now + 2 * MINUTE_MS), 0.0);
        r.observe(&[], now + 3 * MINUTE_MS);
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn a_sources_series_count_together_whichever_copy_names_it() {
        let r = SourceRates::default();
        let t0 = 1_800_000_000_000 - 1_800_000_000_000 % MINUTE_MS;
        let shared: Arc<str> = Arc::from("a");
        let on_shared = |metric: &str| {
            let mut d = drained("x", 3);
            d.series = Arc::new(SeriesId {
                source: shared.clone(),
                metric: Arc::from(metric),
                labels: crate::labels::Labels::none(),
            });
            d
        };
        // Four series of "a" a second: two on one shared copy of its name,
        // two on copies of their own; and one of "b".
        for s in 0..120 {
            let batch = [
                on_shared("m1"),
                drained("a", 3),
                on_shared("m2"),
                drained("b", 2),
                drained("a", 3),
            ];
            r.observe(&batch, t0 + s * 1000);
        }
        let now = t0 + 120 * 1000;
        assert!(
            (r.rate("a", now) - 12.0).abs() < 0.2,
            "{}",
            r.rate("a", now)
        );
        assert!((r.rate("b", now) - 2.0).abs() < 0.1, "{}", r.rate("b", now));
        assert_eq!(r.len(), 2);
    }
}
