//! The minute's last sample on a MongoDB server: `$max` of `{t, v}` keeps
//! the newest whatever order flushes bring samples in, a replayed flush
//! changes nothing, NaN is kept, the staleness marker is kept as itself
//! (above a NaN at the same time), and the seal copies it into the day
//! document, whose hour and day slots carry their newest minute's.

use super::*;

per_mongo_target!(last_samples_survive_late_flushes_replays_and_seals);

/// Slots of one sample each, at Unix second `t`: `(t, value)`.
fn sampled(samples: &[(i64, f64)]) -> SeriesMinutes {
    let mut minutes: std::collections::BTreeMap<i64, Slot> = Default::default();
    for &(t, v) in samples {
        let slot = minutes.entry(t.div_euclid(MINUTE_S)).or_default();
        if v.is_nan() {
            slot.see(t * 1000, v);
        } else {
            slot.add(t * 1000, v);
        }
    }
    SeriesMinutes {
        catalog: tally::model::CatalogDue::Unknown,
        series: Arc::new(SeriesId::new("db-01", "m")),
        kind: SampleKind::Gauge,
        minutes: minutes.into_iter().collect(),
    }
}

/// `(last_ms, value bits)`, so NaN compares equal to itself.
fn last_of(s: &Slot) -> Option<(i64, u64)> {
    s.last_sample().map(|(t, v)| (t, v.to_bits()))
}

async fn last_samples_survive_late_flushes_replays_and_seals(target: MongoTarget) {
    let store = connect_direct(&target).await;
    let m0 = at(0);
    let f1 = batch(1, &[sampled(&[(m0 + 30, 3.0), (m0 + 70, 5.0)])]);
    // A late sample of the first minute, older than its last.
    let f2 = batch(2, &[sampled(&[(m0 + 10, 100.0)])]);
    // A NaN, the newest of the second minute.
    let f3 = batch(3, &[sampled(&[(m0 + 90, f64::NAN)])]);
    // A sample and then the series' end in the third minute, and a NaN at
    // the end's time that comes after it.
    let marker = f64::from_bits(0x7ff0_0000_0000_0002);
    let f4 = batch(4, &[sampled(&[(m0 + 130, 7.0), (m0 + 140, marker)])]);
    let f5 = batch(5, &[sampled(&[(m0 + 140, f64::NAN)])]);
    for b in [&f1, &f2, &f1, &f3, &f2, &f4, &f5, &f4] {
        store.apply(b).await.unwrap();
    }
    let minutes = points(&store, "db-01", Tier::Hour, Resolution::Minute).await;
    assert_eq!(minutes.len(), 3, "{minutes:?}");
    let (first, second, third) = (minutes[0].1, minutes[1].1, minutes[2].1);
    assert_eq!((third.n, third.sum), (1, 7.0), "the end is in no aggregate");
    assert_eq!(last_of(&third), Some(((m0 + 140) * 1000, marker.to_bits())));
    assert_eq!((first.n, first.sum), (2, 103.0), "replays count once");
    assert_eq!(last_of(&first), Some(((m0 + 30) * 1000, 3.0_f64.to_bits())));
    assert_eq!((second.n, second.sum), (1, 5.0), "NaN is in no aggregate");
    assert_eq!(
        last_of(&second),
        Some(((m0 + 90) * 1000, f64::NAN.to_bits()))
    );
    // The hour's running slot has the newest minute's last sample.
    let hours = points(&store, "db-01", Tier::Hour, Resolution::Hour).await;
    assert_eq!(last_of(&hours[0].1), last_of(&third));

    // Sealed into the day document: the same minutes, and its hour and
    // day slots carry the newest.
    store.close().await.unwrap();
    let day_minutes = points(&store, "db-01", Tier::Day, Resolution::Minute).await;
    assert_eq!(
        day_minutes
            .iter()
            .map(|(t, s)| (*t, last_of(s)))
            .collect::<Vec<_>>(),
        minutes
            .iter()
            .map(|(t, s)| (*t, last_of(s)))
            .collect::<Vec<_>>()
    );
    for res in [Resolution::Hour, Resolution::Day] {
        let slots = points(&store, "db-01", Tier::Day, res).await;
        assert_eq!(last_of(&slots[0].1), last_of(&third), "{res:?}");
    }
    target.cleanup().await;
}
