use super::*;
use crate::ingest::IngestConfig;
use crate::model::{minute_of_ms, SeriesId, Tier, HOUR_S};

const NOW: i64 = 1_780_000_000_000; // 2026-05-28T…, minute-aligned enough for tests

fn agg() -> Aggregator {
    Aggregator::new(&AggregatorConfig { shards: 4 }, &IngestConfig::default())
}

/// A sweep's clock at which series last pushed at [`NOW`] have been idle
/// (by the default two hours) since `minutes` minutes before it.
fn sweep(minutes: i64) -> i64 {
    NOW + 2 * 3_600_000 + minutes * 60_000
}

pub(super) fn batch<'a>(
    source: &'a str,
    metric: &'a str,
    kind: SampleKind,
    ts: &'a [i64],
    vs: &'a [f64],
) -> SeriesBatch<'a> {
    SeriesBatch {
        labels: "",
        source,
        metric,
        kind: Some(kind),
        timestamps_ms: ts,
        values: vs,
        start_times_ms: &[],
        source_index: 0,
        series_index: 0,
    }
}

fn slot_sum(agg: &Aggregator) -> (u64, f64) {
    agg.drain(None)
        .iter()
        .flat_map(|s| s.minutes.iter())
        .fold((0, 0.0), |(n, sum), (_, s)| (n + s.n, sum + s.sum))
}

#[test]
fn gauges_fold_per_minute() {
    let a = agg();
    let ts = [NOW, NOW + 1000, NOW + 60_000];
    let out = a.ingest(
        &[batch("s", "m", SampleKind::Gauge, &ts, &[1.0, 3.0, 5.0])],
        NOW,
    );
    assert_eq!((out.accepted, out.rejected), (3, 0));
    assert_eq!(a.pending_slots(), 2);
    let d = a.drain(None);
    assert_eq!(d.len(), 1);
    let m0 = minute_of_ms(NOW);
    assert_eq!(
        d[0].minutes.to_vec(),
        vec![
            (
                m0,
                Slot {
                    n: 2,
                    sum: 4.0,
                    min: 1.0,
                    max: 3.0,
                    last: 3.0,
                    last_ms: NOW + 1000,
                }
            ),
            (m0 + 1, Slot::at(NOW + 60_000, 5.0))
        ]
    );
    assert_eq!(a.pending_slots(), 0);
    assert!(a.drain(None).is_empty());
}

#[test]
fn cumulative_counter_deltas_and_reset() {
    let a = agg();
    let ts = [NOW, NOW + 1000, NOW + 2000, NOW + 3000];
    // 100 is the baseline; +10; reset to 4 (counts 4); +6.
    let out = a.ingest(
        &[batch(
            "s",
            "c",
            SampleKind::CumulativeCounter,
            &ts,
            &[100.0, 110.0, 4.0, 10.0],
        )],
        NOW,
    );
    assert_eq!(out.accepted, 4);
    assert_eq!(out.counter_resets, 1);
    let d = a.drain(None);
    assert_eq!(
        d[0].minutes[0].1,
        Slot {
            n: 3,
            sum: 20.0,
            min: 4.0,
            max: 10.0,
            // The raw count, not the increase.
            last: 10.0,
            last_ms: NOW + 3000,
        }
    );
    // The baseline survives the drain.
    let out = a.ingest(
        &[batch(
            "s",
            "c",
            SampleKind::CumulativeCounter,
            &[NOW + 4000],
            &[15.0],
        )],
        NOW,
    );
    assert_eq!(out.accepted, 1);
    let mut want = Slot::of(5.0);
    want.see(NOW + 4000, 15.0);
    assert_eq!(a.drain(None)[0].minutes[0].1, want);
    // Going back in time is refused.
    let out = a.ingest(
        &[batch(
            "s",
            "c",
            SampleKind::CumulativeCounter,
            &[NOW],
            &[20.0],
        )],
        NOW,
    );
    assert_eq!(out.rejections[0].reason, RejectReason::OutOfOrder);
}

#[test]
fn bad_samples_do_not_spoil_the_batch() {
    let a = agg();
    let ts = [NOW, NOW - 2 * 3_600_000, NOW + 3_600_000, NOW];
    let vs = [1.0, 2.0, 3.0, f64::NAN];
    let good_ts = [NOW];
    let out = a.ingest(
        &[
            batch("s", "m", SampleKind::Gauge, &ts, &vs),
            batch("bad source", "m", SampleKind::Gauge, &good_ts, &[1.0]),
            batch("s", "m2", SampleKind::Gauge, &ts[..2], &vs[..1]),
            batch("s", "d", SampleKind::DeltaCounter, &good_ts, &[-1.0]),
        ],
        NOW,
    );
    // NaN is data: the minute's last sample, in no aggregate.
    assert_eq!(out.accepted, 2);
    // Rejections come grouped by shard, so compare them as a set.
    let reasons: std::collections::HashSet<_> = out
        .rejections
        .iter()
        .map(|r| (r.reason, r.sample_index))
        .collect();
    let expected: std::collections::HashSet<_> = [
        (RejectReason::TooOld, Some(1)),
        (RejectReason::TooFarAhead, Some(2)),
        (RejectReason::InvalidSource, None),
        (RejectReason::LengthMismatch, None),
        (RejectReason::NegativeDelta, Some(0)),
    ]
    .into_iter()
    .collect();
    assert_eq!(reasons, expected);
    assert_eq!(out.rejections.len(), 5);
    assert_eq!(out.rejected, 2 + 1 + 2 + 1);
    let bad_source = out
        .rejections
        .iter()
        .find(|r| r.reason == RejectReason::InvalidSource);
    assert!(bad_source.is_some_and(|r| r.detail.contains("' '")));
    assert_eq!(slot_sum(&a), (1, 1.0));
}

#[test]
fn kind_conflict_and_series_limit() {
    let a = Aggregator::new(
        &AggregatorConfig::default(),
        &IngestConfig {
            max_series: 1,
            ..IngestConfig::default()
        },
    );
    let t = [NOW];
    let out = a.ingest(&[batch("s", "m", SampleKind::Gauge, &t, &[1.0])], NOW);
    assert_eq!(out.accepted, 1);
    let out = a.ingest(
        &[batch("s", "m", SampleKind::DeltaCounter, &t, &[1.0])],
        NOW,
    );
    assert_eq!(out.rejections[0].reason, RejectReason::KindConflict);
    let out = a.ingest(&[batch("s", "other", SampleKind::Gauge, &t, &[1.0])], NOW);
    assert_eq!(out.rejections[0].reason, RejectReason::SeriesLimit);
}

#[test]
fn rejection_list_is_capped() {
    let a = Aggregator::new(
        &AggregatorConfig::default(),
        &IngestConfig {
            max_rejections_reported: 2,
            ..IngestConfig::default()
        },
    );
    let t = [NOW; 5];
    let out = a.ingest(
        &[batch("s", "m", SampleKind::Gauge, &t, &[f64::INFINITY; 5])],
        NOW,
    );
    assert_eq!(out.rejected, 5);
    assert_eq!(out.rejections.len(), 2);
    assert!(out.rejections_truncated);
}

#[test]
fn a_fresh_baseline_is_not_idle() {
    let a = agg();
    let (t0, t1) = ([NOW], [NOW + 1_000]);
    let c = SampleKind::CumulativeCounter;
    a.ingest(&[batch("s", "c", c, &t0, &[10.0])], NOW);
    // A sweep between the baseline and the next sample keeps the series...
    assert_eq!(a.evict_idle(sweep(0)), 0);
    a.ingest(&[batch("s", "c", c, &t1, &[30.0])], NOW);
    let (_, mins) = a.pending_for(SeriesRef::new("s", "c"));
    let mut want = Slot::of(20.0);
    want.see(NOW + 1_000, 30.0);
    assert_eq!(mins, vec![(minute_of_ms(NOW), want)]);
    // ... and a baseline that went silent goes.
    let b = agg();
    b.ingest(&[batch("s", "c", c, &t0, &[1.0])], NOW);
    b.drain(None);
    assert_eq!(b.evict_idle(sweep(1)), 1);
}

#[test]
fn pending_is_visible_and_idle_series_are_evicted() {
    let a = agg();
    let t = [NOW];
    a.ingest(&[batch("s", "m", SampleKind::Gauge, &t, &[2.0])], NOW);
    let key = SeriesRef::new("s", "m");
    let (kind, mins) = a.pending_for(key);
    assert_eq!(kind, Some(SampleKind::Gauge));
    assert_eq!(mins, vec![(minute_of_ms(NOW), Slot::at(NOW, 2.0))]);
    assert_eq!(a.evict_idle(sweep(10)), 0, "pending series stay");
    // An older sample does not replace the newest as the latest value.
    a.ingest(
        &[batch("s", "m", SampleKind::Gauge, &[NOW - 5], &[7.0])],
        NOW,
    );
    assert_eq!(a.last_sample(key), Some((SampleKind::Gauge, NOW, 2.0)));
    a.drain(None);
    assert_eq!(a.pending_for(key).1, vec![]);
    assert_eq!(a.last_sample(key), Some((SampleKind::Gauge, NOW, 2.0)));
    assert_eq!(a.evict_idle(sweep(0)), 0);
    assert_eq!(a.evict_idle(sweep(1)), 1);
    assert_eq!(a.series_count(), 0);
}

#[test]
fn preallocation_is_spread_and_once() {
    let a = agg();
    // 100 series active at 10:30 of some hour.
    let hour = (NOW / 1000).div_euclid(HOUR_S) * HOUR_S;
    let t = [(hour + 30 * 60) * 1000];
    let names: Vec<String> = (0..100).map(|i| format!("s{i}")).collect();
    let batches: Vec<_> = names
        .iter()
        .map(|n| batch(n, "m", SampleKind::Gauge, &t, &[1.0]))
        .collect();
    a.ingest(&batches, t[0]);
    // Before the window: nothing.
    assert!(a
        .due_preallocations(hour + 40 * 60, 600, 600, 1000)
        .is_empty());
    // Halfway through the window: some but not all.
    let half = a.due_preallocations(hour + 55 * 60, 600, 1, 1000);
    assert!(half.len() > 10 && half.len() < 90, "{}", half.len());
    assert!(half
        .iter()
        .all(|d| d.tier == Tier::Hour && d.period_start == hour + HOUR_S));
    // At the end of the window: the rest, each once.
    let rest = a.due_preallocations(hour + HOUR_S - 1, 600, 1, 1000);
    assert_eq!(half.len() + rest.len(), 100);
    assert!(a
        .due_preallocations(hour + HOUR_S - 1, 600, 1, 1000)
        .is_empty());
}

#[test]
fn effective_shards() {
    assert_eq!(AggregatorConfig { shards: 3 }.effective_shards(), 3);
    let auto = AggregatorConfig { shards: 0 }.effective_shards();
    assert!((1..=config::MAX_SHARDS).contains(&auto));
}

#[test]
fn finite_input_never_sums_beyond_max_sum() {
    use crate::model::MAX_SUM;
    let a = agg();
    // A cumulative counter from -1.7e308 to 1.7e308: the increase is not a
    // finite number. The sample is refused and becomes the new baseline.
    let ts = [NOW, NOW + 1000, NOW + 2000];
    let out = a.ingest(
        &[batch(
            "s",
            "c",
            SampleKind::CumulativeCounter,
            &ts,
            &[-1.7e308, 1.7e308, 1.7e308 + 0.0],
        )],
        NOW,
    );
    assert_eq!((out.accepted, out.rejected), (2, 1));
    assert_eq!(out.rejections[0].reason, RejectReason::Overflow);
    assert_eq!(out.rejections[0].sample_index, Some(1));
    assert!(
        out.rejections[0].detail.contains("1e300"),
        "{:?}",
        out.rejections
    );
    // Ten 1e299 gauge samples fit in a minute; an eleventh does not.
    let vs = [1e299; 12];
    let ts: Vec<i64> = (0..12).map(|i| NOW + i).collect();
    let out = a.ingest(&[batch("s", "g", SampleKind::Gauge, &ts, &vs)], NOW);
    assert_eq!((out.accepted, out.rejected), (10, 2));
    assert_eq!(out.rejected_by_reason[RejectReason::Overflow as usize], 2);
    // So does a single sample beyond the bound, though finite.
    let out = a.ingest(&[batch("s", "h", SampleKind::Gauge, &[NOW], &[1e308])], NOW);
    assert_eq!(out.rejections[0].reason, RejectReason::Overflow);
    for s in a.drain(None) {
        for (_, slot) in &s.minutes {
            assert!(slot.sum.abs() <= MAX_SUM, "{s:?}");
        }
    }
}

#[test]
fn label_sets_are_series_of_their_own_and_count_against_their_source() {
    let a = Aggregator::new(
        &AggregatorConfig { shards: 4 },
        &IngestConfig {
            max_series_per_source: 2,
            ..IngestConfig::default()
        },
    );
    let t = [NOW];
    let with = |labels: &'static str| SeriesBatch {
        labels,
        ..batch("s", "m", SampleKind::Gauge, &t, &[1.0])
    };
    let out = a.ingest(
        &[with(""), with(r#"mode="idle""#), with(r#"mode="user""#)],
        NOW,
    );
    assert_eq!((out.accepted, out.rejected), (2, 1));
    assert_eq!(out.rejections[0].reason, RejectReason::SourceSeriesLimit);
    // Another source has its own budget.
    let other = SeriesBatch {
        labels: r#"mode="user""#,
        ..batch("t", "m", SampleKind::Gauge, &t, &[1.0])
    };
    assert_eq!(a.ingest(&[other], NOW).accepted, 1);
    assert_eq!((a.series_count(), a.source_count()), (3, 2));
    let drained = a.drain(None);
    let mut keys: Vec<String> = drained.iter().map(|s| s.series.key()).collect();
    keys.sort();
    assert_eq!(keys, ["s|m", r#"s|m{mode="idle"}"#, r#"t|m{mode="user"}"#]);
    assert_eq!(
        a.pending_for(SeriesRef {
            source: "s",
            metric: "m",
            labels: r#"mode="idle""#
        })
        .0,
        Some(SampleKind::Gauge)
    );
    // Evicting idle series gives the source its budget back.
    assert_eq!(a.evict_idle(sweep(1)), 3);
    assert_eq!(a.source_count(), 0);
    assert_eq!(a.ingest(&[with(r#"mode="user""#)], NOW).accepted, 1);
}

#[test]
fn a_seeded_baseline_is_the_base_of_the_next_delta_and_drains_report_baselines() {
    let a = agg();
    let now = chrono::Utc::now().timestamp_millis();
    a.seed_baseline(
        &Baseline::new(
            Arc::new(SeriesId::new("s", "c")),
            now - 2_000,
            100.0,
            crate::wal::UNKNOWN_ARRIVAL,
        ),
        now,
    );
    // Not idle just for having had no sample since the restart: its arrival
    // unknown, it counts from now.
    assert_eq!(a.evict_idle(now + 3_600_000), 0);
    let out = a.ingest(
        &[batch(
            "s",
            "c",
            SampleKind::CumulativeCounter,
            &[now - 1_000],
            &[130.0],
        )],
        now,
    );
    assert_eq!(out.accepted, 1);
    let mut baselines = Vec::new();
    let drained = a.drain(Some(&mut baselines));
    assert_eq!(
        drained[0].minutes[0].1.sum, 30.0,
        "the seeded value was the base"
    );
    assert_eq!(baselines.len(), 1);
    assert_eq!(
        (baselines[0].ts_ms, baselines[0].value),
        (now - 1_000, 130.0)
    );

    // A counter's first sample only sets its baseline: it adds to no
    // aggregate, and its minute holds it as the last sample, which no read
    // shows (`Slot::shows`).
    a.ingest(
        &[batch(
            "s",
            "d",
            SampleKind::CumulativeCounter,
            &[now],
            &[5.0],
        )],
        now,
    );
    let mut baselines = Vec::new();
    let drained = a.drain(Some(&mut baselines));
    assert_eq!(drained.len(), 1);
    let slot = drained[0].minutes[0].1;
    assert!(!slot.has_values());
    assert_eq!(slot.last_sample(), Some((now, 5.0)));
    assert_eq!(baselines.len(), 1);
    assert_eq!(&*baselines[0].series.metric, "d");
}

#[test]
fn a_new_start_time_is_a_reset_even_when_the_value_did_not_go_down() {
    let a = agg();
    let ts = [NOW, NOW + 1000, NOW + 2000, NOW + 3000, NOW + 4000];
    // Baseline 10 (count began at 5); +5; the count began anew at 2500 and
    // is already 20: all 20 count, though 20 > 15; no start: +5; the same
    // start again: +1.
    let starts = [5, 5, 2500, 0, 2500];
    let b = SeriesBatch {
        start_times_ms: &starts,
        ..batch(
            "s",
            "c",
            SampleKind::CumulativeCounter,
            &ts,
            &[10.0, 15.0, 20.0, 25.0, 26.0],
        )
    };
    let out = a.ingest(&[b], NOW);
    assert_eq!((out.accepted, out.counter_resets), (5, 1));
    assert_eq!(slot_sum(&a), (4, 31.0));

    // Start times, when given, come one per value.
    let b = SeriesBatch {
        start_times_ms: &starts[..2],
        ..batch("s", "c", SampleKind::CumulativeCounter, &ts[..1], &[30.0])
    };
    let out = a.ingest(&[b], NOW);
    assert_eq!(out.rejected, 1);
    assert_eq!(out.rejections[0].reason, RejectReason::LengthMismatch);
}

#[test]
fn a_drained_batch_holds_no_unused_room() {
    // A batch stays in memory until the store applies it; at a million
    // active series, room for four minutes per series where one is used
    // cost 120 bytes each.
    let a = agg();
    let sources: Vec<String> = (0..500).map(|i| format!("src-{i}")).collect();
    let batches: Vec<SeriesBatch<'_>> = sources
        .iter()
        .map(|s| batch(s, "m", SampleKind::Gauge, &[NOW], &[1.0]))
        .collect();
    a.ingest(&batches, NOW);
    let two = [NOW, NOW + 60_000];
    a.ingest(
        &[batch("src-0", "n", SampleKind::Gauge, &two, &[1.0, 2.0])],
        NOW,
    );
    let d = a.drain(None);
    assert_eq!(d.len(), 501);
    assert_eq!(d.capacity(), d.len());
    for s in &d {
        assert_eq!(s.minutes.capacity(), s.minutes.len(), "{}", s.series.key());
    }
    assert!(d.iter().any(|s| s.minutes.len() == 2));
}

/// Backfill: a series pushed every few seconds with samples older than the
/// idle timeout is being pushed, so it is never idle, and a cumulative
/// counter's increases all count across sweeps.
#[test]
fn a_series_pushed_with_old_samples_is_not_idle() {
    let limits = IngestConfig {
        lateness_window: std::time::Duration::from_secs(3 * 3600),
        series_idle_timeout: std::time::Duration::from_secs(3600),
        ..IngestConfig::default()
    };
    let a = Aggregator::new(&AggregatorConfig { shards: 2 }, &limits);
    let behind = 150 * 60_000;
    let c = SampleKind::CumulativeCounter;
    let mut total = 0.0;
    for i in 0..10i64 {
        let now = NOW + i * 2_000;
        let out = a.ingest(
            &[batch("s", "c", c, &[now - behind], &[i as f64 * 10.0])],
            now,
        );
        assert_eq!(out.accepted, 1, "{out:?}");
        // A sweep after every push, as maintenance might run.
        assert_eq!(a.evict_idle(now + 1_000), 0, "push {i}");
        total += a
            .drain(None)
            .iter()
            .flat_map(|s| &s.minutes)
            .map(|(_, slot)| slot.sum)
            .sum::<f64>();
    }
    assert_eq!(total, 90.0);
}

/// A counter that stops being pushed keeps its baseline for the lateness
/// window when that is longer than the idle timeout (an agent buffering
/// through an outage); a gauge goes after the idle timeout.
#[test]
fn a_counter_baseline_is_kept_for_the_longer_of_idle_and_lateness() {
    let limits = IngestConfig {
        lateness_window: std::time::Duration::from_secs(3 * 3600),
        series_idle_timeout: std::time::Duration::from_secs(3600),
        ..IngestConfig::default()
    };
    let a = Aggregator::new(&AggregatorConfig { shards: 2 }, &limits);
    let c = SampleKind::CumulativeCounter;
    a.ingest(&[batch("s", "c", c, &[NOW], &[5.0])], NOW);
    a.ingest(&[batch("s", "g", SampleKind::Gauge, &[NOW], &[1.0])], NOW);
    a.drain(None);
    let hour = 3_600_000;
    assert_eq!(a.evict_idle(NOW + hour + 120_000), 1, "the gauge goes");
    assert_eq!(a.evict_idle(NOW + 2 * hour), 0, "the counter stays");
    // Back after two and a half hours with what it buffered: counted.
    let back = NOW + 5 * hour / 2;
    let out = a.ingest(&[batch("s", "c", c, &[NOW + 60_000], &[8.0])], back);
    assert_eq!(out.accepted, 1);
    let (_, mins) = a.pending_for(SeriesRef::new("s", "c"));
    let mut want = Slot::of(3.0);
    want.see(NOW + 60_000, 8.0);
    assert_eq!(mins, vec![(minute_of_ms(NOW + 60_000), want)]);
    a.drain(None);
    assert_eq!(a.evict_idle(back + 3 * hour + 120_000), 1);
}

#[test]
fn a_drain_reuses_a_spare_batch_unless_it_is_far_too_large() {
    let a = agg();
    let push = |n: usize| {
        for i in 0..n {
            a.ingest(
                &[batch(
                    "s",
                    &format!("m{i}"),
                    SampleKind::Gauge,
                    &[NOW],
                    &[1.0],
                )],
                NOW,
            );
        }
    };
    push(10);
    let mut first = a.drain(None);
    assert_eq!(first.len(), 10);
    first.clear();
    let (ptr, cap) = (first.as_ptr(), first.capacity());
    push(10);
    let second = a.drain_into(first, BaselineLog::Skip, 0, None);
    assert_eq!(second.len(), 10, "the spare is filled like a new batch");
    assert_eq!(
        (second.as_ptr(), second.capacity()),
        (ptr, cap),
        "and reused"
    );

    // A spare far larger than the drain needs is given back.
    let huge: Vec<SeriesMinutes> = Vec::with_capacity(2 * 10 + SPARE_SLACK + 1);
    push(10);
    let third = a.drain_into(huge, BaselineLog::Skip, 0, None);
    assert_eq!(third.len(), 10);
    assert!(third.capacity() < SPARE_SLACK, "{}", third.capacity());
}

#[test]
fn a_cumulative_counters_baseline_is_not_its_latest_sample() {
    let a = agg();
    let key = SeriesRef::new("s", "c");
    let push = |ts: i64, v: f64| {
        let out = a.ingest(
            &[batch("s", "c", SampleKind::CumulativeCounter, &[ts], &[v])],
            NOW,
        );
        assert_eq!(out.accepted, 1);
    };
    push(NOW - 60_000, 100.0);
    assert_eq!(a.last_sample(key), None, "only a baseline so far");
    push(NOW, 105.0);
    assert_eq!(
        a.last_sample(key),
        Some((SampleKind::CumulativeCounter, NOW, 105.0))
    );
    let drained = a.drain(None);
    let minutes: Vec<(i64, u64)> = drained[0].minutes.iter().map(|(m, s)| (*m, s.n)).collect();
    assert_eq!(
        minutes,
        vec![(minute_of_ms(NOW) - 1, 0), (minute_of_ms(NOW), 1)],
        "the baseline's minute is still written, and read as empty"
    );
}

#[test]
fn a_staleness_marker_is_the_last_sample_and_in_no_aggregate() {
    let a = agg();
    let marker = crate::model::stale_marker();
    let ts = [NOW - 2_000, NOW - 1_000, NOW];
    let key = SeriesRef::new("s", "m");
    a.ingest(
        &[batch("s", "m", SampleKind::Gauge, &ts, &[2.0, 4.0, marker])],
        NOW,
    );
    let (_, mins) = a.pending_for(key);
    let slot = mins[0].1;
    assert_eq!((slot.n, slot.sum, slot.min, slot.max), (2, 6.0, 2.0, 4.0));
    assert!(slot.ends(), "{slot:?}");
    assert_eq!(slot.last_ms, NOW);
    // The series ended: a latest-value read shows nothing.
    assert_eq!(a.last_sample(key), None);
    // A counter's baseline survives its marker: the next increase counts
    // from the last number.
    let c = SampleKind::CumulativeCounter;
    let key = SeriesRef::new("s", "c_total");
    a.ingest(&[batch("s", "c_total", c, &ts, &[10.0, marker, 15.0])], NOW);
    let slot = a.pending_for(key).1[0].1;
    assert_eq!((slot.n, slot.sum), (1, 5.0));
    assert_eq!(slot.last_sample(), Some((NOW, 15.0)));
}

#[test]
fn recent_samples_are_kept_once_a_read_asks_for_them() {
    let a = agg();
    let key = SeriesRef::new("s", "g");
    let push = |ts: &[i64], vs: &[f64]| {
        let out = a.ingest(&[batch("s", "g", SampleKind::Gauge, ts, vs)], NOW + 5_000);
        assert_eq!(out.accepted, ts.len() as u64);
    };
    let recent = || -> Vec<i64> {
        let (_, _, r) = a.pending_and_recent(key, RecentWanted::Yes);
        r.samples().iter().map(|s| s.ts).collect()
    };
    push(&[NOW, NOW + 1_000], &[1.0, 2.0]);
    // None before the first read, which starts keeping them.
    assert_eq!(recent(), Vec::<i64>::new());
    // A late sample older than what the series already had is not kept
    // (the samples kept would look complete from it on).
    push(&[NOW + 500], &[9.0]);
    push(&[NOW + 2_000, NOW + 3_000], &[3.0, 4.0]);
    assert_eq!(recent(), vec![NOW + 2_000, NOW + 3_000]);
    // Of a request in time order, its last eight.
    let ts: Vec<i64> = (4..=14).map(|k| NOW + k * 100 + 3_000).collect();
    push(&ts, &[5.0; 11]);
    assert_eq!(recent(), ts[3..].to_vec());
}

/// A read that does not ask for the newest samples (a range read, a
/// chart) does not start keeping them: a read of the whole fleet would
/// otherwise add a ring to every series.
#[test]
fn reads_that_do_not_ask_for_recent_samples_do_not_start_them() {
    let a = agg();
    let key = SeriesRef::new("s", "g");
    let push = |ts: i64, v: f64| {
        let out = a.ingest(
            &[batch("s", "g", SampleKind::Gauge, &[ts], &[v])],
            NOW + 5_000,
        );
        assert_eq!(out.accepted, 1);
    };
    push(NOW, 1.0);
    let (kind, minutes, r) = a.pending_and_recent(key, RecentWanted::No);
    assert_eq!(kind, Some(SampleKind::Gauge));
    assert_eq!(minutes.len(), 1);
    assert!(r.samples().is_empty());
    push(NOW + 1_000, 2.0);
    // Still not kept: the first read that asks has none.
    let (_, _, r) = a.pending_and_recent(key, RecentWanted::Yes);
    assert!(r.samples().is_empty());
    push(NOW + 2_000, 3.0);
    let (_, _, r) = a.pending_and_recent(key, RecentWanted::Yes);
    assert_eq!(r.samples().len(), 1);
    // Kept now, a read that does not ask still gets none.
    assert!(a
        .pending_and_recent(key, RecentWanted::No)
        .2
        .samples()
        .is_empty());
}

#[test]
fn recent_samples_no_read_asks_for_are_let_go() {
    let a = agg();
    let key = SeriesRef::new("s", "g");
    let idle = IngestConfig::default().series_idle_timeout.as_millis() as i64;
    let push = |at: i64| {
        let out = a.ingest(&[batch("s", "g", SampleKind::Gauge, &[at], &[1.0])], at);
        assert_eq!(out.accepted, 1);
        a.drain(None);
    };
    let recent = || {
        a.pending_and_recent(key, RecentWanted::Yes)
            .2
            .samples()
            .len()
    };
    push(NOW);
    assert_eq!(recent(), 0, "the first read starts keeping them");
    push(NOW + 1_000);
    assert_eq!(recent(), 1);
    // Pushed on, read again within the idle timeout: kept.
    push(NOW + idle);
    assert_eq!(a.evict_idle(NOW + idle), 0);
    assert_eq!(recent(), 2);
    // Pushed on past the idle timeout with no read: let go, though the
    // series stays, so the next read starts them afresh.
    push(NOW + 3 * idle);
    assert_eq!(a.evict_idle(NOW + 3 * idle), 0);
    assert_eq!(a.series_count(), 1);
    assert_eq!(recent(), 0);
    push(NOW + 3 * idle + 1_000);
    assert_eq!(recent(), 1);
}

#[test]
fn minute_steps_are_kept_from_the_minute_after_the_first_read() {
    let a = agg();
    let key = SeriesRef::new("s", "g");
    let m = NOW - NOW.rem_euclid(60_000);
    let push = |ts: &[i64], vs: &[f64]| {
        let out = a.ingest(&[batch("s", "g", SampleKind::Gauge, ts, vs)], ts[0]);
        assert_eq!(out.accepted, ts.len() as u64);
    };
    let steps = || {
        a.pending_and_recent(key, RecentWanted::Yes)
            .2
            .steps()
            .clone()
    };
    push(&[m + 1_000], &[1.0]);
    assert!(steps().minutes().is_empty(), "the first read starts them");
    // The rest of the first read's minute is not whole in them.
    push(&[m + 2_000], &[1.0]);
    // The next minute is: every sample of a request counts, not only the
    // ring's last four.
    let ts: Vec<i64> = (0..6).map(|k| m + 60_000 + k * 10_000 + 5_000).collect();
    push(&ts, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let s = steps();
    let starts: Vec<i64> = s.minutes().iter().map(|x| x.start_ms).collect();
    assert_eq!(starts, vec![m + 60_000]);
    let slot = a.pending_for(key).1.last().unwrap().1;
    assert_eq!(
        s.up_to(&slot, m + 60_000, m + 60_000 + 29_999, None),
        Some((3.0, 6.0))
    );
    assert_eq!(
        s.up_to(&slot, m + 60_000, m + 60_000 + 34_999, None),
        Some((3.5, 8.0))
    );
}
