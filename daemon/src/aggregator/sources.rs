//! What the aggregator can tell about each source without reading the
//! store: how many of its series are in memory and when its newest sample
//! was taken. The fleet view (`crate::fleet`) asks for it, at most once a
//! second, instead of keeping anything per sample on the ingest path.

use std::sync::Arc;

use hashbrown::HashMap;

use super::Aggregator;

/// One source's series in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceActivity {
    pub source: Arc<str>,
    /// Its series in memory: those with a sample within
    /// `ingest.series_idle_timeout`.
    pub series: usize,
    /// Timestamp (Unix ms) of its newest sample, as the agent stamped it
    /// (a counter's baseline restored from the log counts: it is the last
    /// sample before a restart); None before any.
    pub last_ms: Option<i64>,
}

impl Aggregator {
    /// Every source with a series in memory, by name. Visits every series,
    /// one shard lock at a time, so it costs O(series): for a view that
    /// caches it, not for the ingest path.
    pub fn source_activity(&self) -> Vec<SourceActivity> {
        // Series of one source share one copy of its name, so its address
        // is a cheap key; a name that somehow has two copies is merged by
        // content below.
        let mut at: HashMap<usize, usize> = HashMap::new();
        let mut out: Vec<SourceActivity> = Vec::new();
        for cell in self.shards.iter() {
            let shard = cell.shard.lock();
            for s in shard.series.iter() {
                let source = &s.id.source;
                let last = s.last_sample.get().map(|(ts, _)| ts);
                let key = Arc::as_ptr(source) as *const u8 as usize;
                let i = *at.entry(key).or_insert_with(|| {
                    out.push(SourceActivity {
                        source: source.clone(),
                        series: 0,
                        last_ms: None,
                    });
                    out.len() - 1
                });
                let a = &mut out[i];
                a.series += 1;
                a.last_ms = a.last_ms.max(last);
            }
        }
        out.sort_unstable_by(|a, b| a.source.cmp(&b.source));
        out.dedup_by(|later, kept| {
            if later.source != kept.source {
                return false;
            }
            kept.series += later.series;
            kept.last_ms = kept.last_ms.max(later.last_ms);
            true
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::{AggregatorConfig, SeriesBatch};
    use super::*;
    use crate::ingest::IngestConfig;
    use crate::model::SampleKind;

    fn gauge<'a>(
        source: &'a str,
        metric: &'a str,
        ts: &'a [i64],
        vs: &'a [f64],
    ) -> SeriesBatch<'a> {
        SeriesBatch {
            labels: "",
            source,
            metric,
            kind: Some(SampleKind::Gauge),
            timestamps_ms: ts,
            values: vs,
            start_times_ms: &[],
            source_index: 0,
            series_index: 0,
        }
    }

    #[test]
    fn counts_series_and_the_newest_sample_per_source() {
        let agg = Aggregator::new(&AggregatorConfig { shards: 4 }, &IngestConfig::default());
        let now = chrono::Utc::now().timestamp_millis();
        let (t1, t2) = ([now - 5_000], [now - 1_000]);
        let out = agg.ingest(
            &[
                gauge("b", "m1", &t1, &[1.0]),
                gauge("b", "m2", &t2, &[1.0]),
                gauge("a", "m1", &t1, &[1.0]),
            ],
            now,
        );
        assert_eq!(out.accepted, 3);
        let got = agg.source_activity();
        assert_eq!(
            got,
            vec![
                SourceActivity {
                    source: "a".into(),
                    series: 1,
                    last_ms: Some(now - 5_000)
                },
                SourceActivity {
                    source: "b".into(),
                    series: 2,
                    last_ms: Some(now - 1_000)
                },
            ]
        );
        // Draining the slots keeps the series and their last samples.
        agg.drain(None);
        assert_eq!(agg.source_activity(), got);
        // A counter's baseline restored after a restart is its last sample.
        agg.seed_baseline(
            &crate::wal::Baseline::new(
                Arc::new(crate::model::SeriesId::new("c", "total")),
                now - 9_000,
                5.0,
                crate::wal::UNKNOWN_ARRIVAL,
            ),
            now,
        );
        assert_eq!(agg.source_activity()[2].last_ms, Some(now - 9_000));
    }
}
