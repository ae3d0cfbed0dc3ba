//! The one-time move of cumulative counters' `first_seen` off their
//! baseline minute, in a catalog written before a counter's first sample
//! was taken as a baseline only: run in the background after the store is
//! configured, over pages of entries, from the hour documents or, where
//! those are gone, the day documents; marked done so that it never runs
//! again.

use std::collections::BTreeMap;
use std::time::Duration;

use tally::store::mongodb::FirstSeenPass;
use tally::store::{CatalogEntry, CatalogQuery};

use super::*;

per_mongo_target!(
    counters_first_seen_moves_off_its_baseline_once,
    a_stopped_pass_goes_on_from_its_last_finished_page,
);

/// Gauges between the counters' keys: more than a page of entries.
const FILLER: usize = 1_000;
/// How long a pass may take on the slowest target.
const PASS_LIMIT: Duration = Duration::from_secs(300);
const MARKER: &str = "~first_seen_baselines/tally_series";

/// A counter's first sample at `t`: its value only, nothing counted.
fn baseline(t: i64) -> Slot {
    let mut s = Slot::EMPTY;
    s.see(t * 1000, 100.0);
    s
}

/// A counter's increase of 5, seen at `t`.
fn increase(t: i64) -> Slot {
    let mut s = Slot::EMPTY;
    s.add_value(5.0);
    s.see(t * 1000, 105.0);
    s
}

fn stored(source: &str, kind: SampleKind, minutes: &[(i64, Slot)]) -> SeriesMinutes {
    SeriesMinutes {
        catalog: tally::model::CatalogDue::Unknown,
        series: Arc::new(SeriesId::new(source, "m")),
        kind,
        minutes: minutes.iter().map(|&(t, s)| (t / MINUTE_S, s)).collect(),
    }
}

fn entry(source: &str, kind: SampleKind, first_seen: i64) -> CatalogEntry {
    CatalogEntry {
        series: Arc::new(SeriesId::new(source, "m")),
        kind,
        first_seen,
        last_seen: first_seen + 600,
    }
}

/// Every entry's `first_seen`, by source.
async fn first_seen(store: &MongoStore) -> BTreeMap<String, i64> {
    store
        .catalog_list(&CatalogQuery::everything(FILLER + 100))
        .await
        .unwrap()
        .iter()
        .map(|e| (e.series.source.to_string(), e.first_seen))
        .collect()
}

async fn pass(store: &MongoStore) -> FirstSeenPass {
    tokio::time::timeout(PASS_LIMIT, store.start_first_seen_pass())
        .await
        .expect("the pass ends in time")
        .unwrap()
        .expect("the store is still there")
}

/// Series `c` (a counter whose increase follows its baseline by two
/// minutes), `d` (the same, its hour document gone: read from the day
/// document), `flat` (a baseline and nothing after it), `k` (a counter
/// whose first minute counts) and `g` (a gauge of a last value only), all
/// in the catalog from the baseline minute as before the fix, and
/// [`FILLER`] gauges `e-NNNN` between them.
async fn old_catalog(target: &MongoTarget) {
    let store = connect_direct(target).await;
    let (h, counter) = (at(0), SampleKind::CumulativeCounter);
    let two = [(h, baseline(h)), (h + 120, increase(h + 120))];
    let series = [
        stored("c", counter, &two),
        stored("d", counter, &two),
        stored("flat", counter, &[(h, baseline(h))]),
        stored("g", SampleKind::Gauge, &[(h, baseline(h))]),
        stored("k", counter, &[(h, increase(h))]),
    ];
    store.apply(&batch(1, &series)).await.unwrap();
    let mut entries: Vec<CatalogEntry> = ["c", "d", "flat", "k"]
        .iter()
        .map(|s| entry(s, counter, h))
        .collect();
    entries.push(entry("g", SampleKind::Gauge, h));
    entries.extend((0..FILLER).map(|i| entry(&format!("e-{i:04}"), SampleKind::Gauge, h)));
    store.catalog_upsert(&entries).await.unwrap();
    // Seals the day documents.
    store.close().await.unwrap();
    let hour_id = format!("d|m|{}", hour_key(h));
    let gone = target
        .db()
        .await
        .collection::<Document>(HOURS)
        .delete_one(doc! { "_id": hour_id })
        .await
        .unwrap();
    assert_eq!(gone.deleted_count, 1);
}

/// The hour document key of the hour starting at `t` (UTC).
fn hour_key(t: i64) -> String {
    chrono::DateTime::from_timestamp(t, 0)
        .unwrap()
        .format("%Y%m%d%H")
        .to_string()
}

async fn counters_first_seen_moves_off_its_baseline_once(target: MongoTarget) {
    let h = at(0);
    old_catalog(&target).await;

    let store = connect_direct(&target).await;
    let done = pass(&store).await;
    assert_eq!(
        done,
        FirstSeenPass {
            ran: true,
            entries: FILLER as u64 + 5,
            counters: 4,
            moved: 2,
            kept: 1,
            raced: 0,
        }
    );
    let seen = first_seen(&store).await;
    assert_eq!(seen["c"], h + 120, "moved to its first increase");
    assert_eq!(seen["d"], h + 120, "moved, from the day document");
    assert_eq!(seen["flat"], h, "no later minute with a sample: kept");
    assert_eq!(seen["k"], h, "its first minute counts");
    assert_eq!(seen["g"], h, "not a counter");
    assert_eq!(seen["e-0999"], h);
    let marker = raw_doc(&target, "tally_writers", MARKER).await.unwrap();
    assert!(marker.contains_key("done"), "{marker}");

    // Written the old way again: the next start does not look.
    target
        .db()
        .await
        .collection::<Document>(SERIES)
        .update_one(
            doc! { "_id": "c|m" },
            doc! { "$set": { "first_seen": mongodb::bson::DateTime::from_millis(h * 1000) } },
        )
        .await
        .unwrap();
    let again = connect_direct(&target).await;
    assert_eq!(pass(&again).await, FirstSeenPass::default(), "marked done");
    assert_eq!(first_seen(&again).await["c"], h);
    target.cleanup().await;
}

/// A pass stopped after its page ending at `c|m` (its marker says so):
/// the next one starts after it, and `c` is left to that page.
async fn a_stopped_pass_goes_on_from_its_last_finished_page(target: MongoTarget) {
    let h = at(0);
    old_catalog(&target).await;
    target
        .db()
        .await
        .collection::<Document>("tally_writers")
        .insert_one(doc! { "_id": MARKER, "after": "c|m" })
        .await
        .unwrap();

    let store = connect_direct(&target).await;
    let done = pass(&store).await;
    assert_eq!(
        done,
        FirstSeenPass {
            ran: true,
            entries: FILLER as u64 + 4,
            counters: 3,
            moved: 1,
            kept: 1,
            raced: 0,
        }
    );
    let seen = first_seen(&store).await;
    assert_eq!((seen["c"], seen["d"]), (h, h + 120));
    let marker = raw_doc(&target, "tally_writers", MARKER).await.unwrap();
    assert!(marker.contains_key("done"), "{marker}");
    target.cleanup().await;
}
