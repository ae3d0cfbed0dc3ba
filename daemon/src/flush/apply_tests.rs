//! Refusals through the pipeline: a store that refuses some series (or
//! all of them) in front of a real embedded store.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::*;
use crate::aggregator::{Aggregator, AggregatorConfig, SeriesBatch};
use crate::deadletter::DeadLetters;
use crate::flush::faulty::Faulty;
use crate::flush::{FlushConfig, Pipeline};
use crate::ingest::IngestConfig;
use crate::model::{Resolution, SampleKind, SeriesId, Tier};
use crate::store::embedded::EmbeddedStore;
use crate::store::{ReadQuery, Store};

struct Setup {
    dir: tempfile::TempDir,
    /// The pipeline's dead letters (clones share the byte count).
    dead: DeadLetters,
    store: Arc<Faulty>,
    agg: Arc<Aggregator>,
    pipeline: Arc<Pipeline>,
}

fn setup() -> Setup {
    setup_with(|d| d)
}

/// [`setup`] with the dead letters as `dead` makes them.
fn setup_with(dead: impl FnOnce(DeadLetters) -> DeadLetters) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Faulty::new(
        EmbeddedStore::open(&dir.path().join("store")).unwrap(),
    ));
    store.refuse_bad.store(true, Ordering::SeqCst);
    let agg = Arc::new(Aggregator::new(
        &AggregatorConfig::default(),
        &IngestConfig::default(),
    ));
    let cfg = FlushConfig {
        retry_initial_backoff: Duration::from_millis(1),
        retry_max_backoff: Duration::from_millis(20),
        ..FlushConfig::default()
    };
    let dead_letters = dead(DeadLetters::new(dir.path(), "faulty"));
    let pipeline = Arc::new(
        Pipeline::new(agg.clone(), store.clone(), cfg, 0).with_dead_letters(dead_letters.clone()),
    );
    Setup {
        dir,
        dead: dead_letters,
        store,
        agg,
        pipeline,
    }
}

fn ingest(agg: &Aggregator, metric: &str, ts_ms: i64, v: f64) {
    agg.ingest(
        &[SeriesBatch {
            labels: "",
            source: "s",
            metric,
            kind: Some(SampleKind::Gauge),
            timestamps_ms: &[ts_ms],
            values: &[v],
            start_times_ms: &[],
            source_index: 0,
            series_index: 0,
        }],
        ts_ms,
    );
}

/// The stored slot of `metric`'s minute at `ts_ms`, if any.
async fn stored(store: &dyn Store, metric: &str, ts_ms: i64) -> Option<(u64, f64)> {
    let minute = ts_ms.div_euclid(60_000);
    let start = Tier::Hour.period_start(minute);
    let docs = store
        .read(&ReadQuery {
            series: SeriesId::new("s", metric),
            tier: Tier::Hour,
            resolution: Resolution::Minute,
            from: start,
            to: start + 3_600,
        })
        .await
        .unwrap();
    docs.iter()
        .flat_map(|d| d.slots.iter())
        .find(|(t, s)| *t == minute * 60 && s.n > 0)
        .map(|(_, s)| (s.n, s.sum))
}

#[tokio::test]
async fn a_refused_series_becomes_a_dead_letter_and_the_rest_lands() {
    let s = setup();
    let now = chrono::Utc::now().timestamp_millis();
    ingest(&s.agg, "good", now, 1.0);
    ingest(&s.agg, "bad", now, 2.5);
    let batch = s.pipeline.cut_batch().unwrap();
    assert!(s.pipeline.apply(&batch, &CancellationToken::new()).await);
    assert_eq!(s.pipeline.inflight_batches(), 0, "retired");
    assert!(s.pipeline.refusing().why().is_none());
    assert_eq!(stored(&*s.store, "good", now).await, Some((1, 1.0)));
    assert_eq!(stored(&*s.store, "bad", now).await, None);

    let dead = DeadLetters::new(s.dir.path(), "faulty");
    let files = dead.list().unwrap();
    assert_eq!(files.len(), 1);
    let f = &files[0].1;
    assert_eq!(f.flush_id, batch.id.0);
    assert_eq!(f.letters.len(), 1);
    assert_eq!(f.letters[0].series, "s|bad");
    assert_eq!(f.letters[0].samples(), 1);
    assert!(f.letters[0].error.contains("cannot apply bad"));

    // The cause fixed: the replay applies it once, and a second replay
    // finds nothing.
    s.store.refuse_bad.store(false, Ordering::SeqCst);
    let r = s.pipeline.replay_dead_letters().await.unwrap();
    assert_eq!((r.letters, r.samples, r.still_refused), (1, 1, 0));
    assert!(r.first_flush_id > batch.id.0);
    assert_eq!(r.parts, 1);
    assert_eq!(stored(&*s.store, "bad", now).await, Some((1, 2.5)));
    assert!(dead.list().unwrap().is_empty());
    let again = s.pipeline.replay_dead_letters().await.unwrap();
    assert_eq!(again, crate::flush::LettersReplayed::default());
    assert_eq!(stored(&*s.store, "bad", now).await, Some((1, 2.5)));
}

#[tokio::test]
async fn a_replay_the_store_still_refuses_keeps_its_letters_under_its_own_flush() {
    let s = setup();
    let now = chrono::Utc::now().timestamp_millis();
    ingest(&s.agg, "good", now, 1.0);
    ingest(&s.agg, "bad", now, 2.0);
    let b1 = s.pipeline.cut_batch().unwrap();
    assert!(s.pipeline.apply(&b1, &CancellationToken::new()).await);
    ingest(&s.agg, "good", now, 1.0);
    ingest(&s.agg, "bad", now, 3.0);
    let b2 = s.pipeline.cut_batch().unwrap();
    assert!(s.pipeline.apply(&b2, &CancellationToken::new()).await);
    let dead = DeadLetters::new(s.dir.path(), "faulty");
    assert_eq!(dead.list().unwrap().len(), 2);

    // Still refused: the two files become one, under the replay's id,
    // with both samples merged into the minute.
    let r = s.pipeline.replay_dead_letters().await.unwrap();
    assert_eq!((r.files, r.letters, r.still_refused), (2, 2, 1));
    let files = dead.list().unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].1.flush_id, r.last_flush_id);
    assert_eq!(files[0].1.letters[0].minutes[0].n, 2);
    assert_eq!(files[0].1.letters[0].minutes[0].sum, 5.0);

    s.store.refuse_bad.store(false, Ordering::SeqCst);
    s.pipeline.replay_dead_letters().await.unwrap();
    assert_eq!(stored(&*s.store, "bad", now).await, Some((2, 5.0)));
    assert!(dead.list().unwrap().is_empty());
}

/// A replay goes part by part, each its own flush; a part a crash left
/// after the store took it is finished first, with its id, and counts
/// once.
#[tokio::test]
async fn a_replay_goes_in_parts_and_finishes_an_interrupted_one_once() {
    let s = setup_with(|d| d.with_part_bytes(1));
    let now = chrono::Utc::now().timestamp_millis();
    for v in [1.0, 2.0, 4.0] {
        ingest(&s.agg, "good", now, 1.0);
        ingest(&s.agg, "bad", now, v);
        let b = s.pipeline.cut_batch().unwrap();
        assert!(s.pipeline.apply(&b, &CancellationToken::new()).await);
    }
    let dead = DeadLetters::new(s.dir.path(), "faulty").with_part_bytes(1);
    assert_eq!(dead.count_files().unwrap(), 3);
    s.store.refuse_bad.store(false, Ordering::SeqCst);

    // The first part was in the store when the replay stopped.
    let mut queue = dead.replay_queue().unwrap();
    let first = dead
        .begin_part(s.pipeline.inflight.next_id().0, &mut queue)
        .unwrap()
        .unwrap();
    let part = FlushBatch {
        hashes: Vec::new(),
        resumable: true,
        id: crate::model::FlushId(first.flush_id),
        series: crate::deadletter::as_series(&dead.letters_of(&first).unwrap()).unwrap(),
    };
    s.store.apply(&part).await.unwrap();

    let r = s.pipeline.replay_dead_letters().await.unwrap();
    assert!(r.resumed);
    assert_eq!((r.parts, r.first_flush_id), (3, first.flush_id));
    assert!(r.last_flush_id > first.flush_id);
    assert_eq!(
        (r.files, r.letters, r.samples, r.still_refused),
        (3, 3, 3, 0)
    );
    assert_eq!(stored(&*s.store, "bad", now).await, Some((3, 7.0)));
    assert!(dead.list().unwrap().is_empty());
    assert!(dead.replay_marker().unwrap().is_none());
}

/// Dead letters that would pass their bound hold the flush like a store
/// refusing everything (unready, naming the setting), and it lands once
/// there is room; nothing is dropped.
#[tokio::test]
async fn a_full_dead_letter_directory_holds_the_flush_until_there_is_room() {
    let s = setup_with(|d| d.with_max_bytes(600));
    let now = chrono::Utc::now().timestamp_millis();
    ingest(&s.agg, "good", now, 1.0);
    ingest(&s.agg, "bad", now, 1.0);
    let b1 = s.pipeline.cut_batch().unwrap();
    assert!(s.pipeline.apply(&b1, &CancellationToken::new()).await);
    let first = s.dead.bytes().unwrap();
    assert!(first > 0 && first <= 600, "{first}");

    ingest(&s.agg, "good", now, 1.0);
    ingest(&s.agg, "bad", now, 2.0);
    let b2 = s.pipeline.cut_batch().unwrap();
    let applying = {
        let p = s.pipeline.clone();
        tokio::spawn(async move { p.apply(&b2, &CancellationToken::new()).await })
    };
    let started = std::time::Instant::now();
    while s.pipeline.refusing().why().is_none() {
        assert!(started.elapsed() < Duration::from_secs(10), "never held");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let why = s.pipeline.ready().await.unwrap_err();
    assert!(why.contains("flush.dead_letters_max_bytes"), "{why}");
    assert!(why.contains("tallyd dead-letters replay"), "{why}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!applying.is_finished());
    assert_eq!(s.dead.count_files().unwrap(), 1);

    // Room again (what `drop` or a replay does): the held flush lands.
    assert_eq!(s.dead.drop_files(Some(&[b1.id.0])).unwrap(), 1);
    assert!(applying.await.unwrap());
    assert!(s.pipeline.ready().await.is_ok());
    let files = s.dead.list().unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].1.letters[0].minutes[0].sum, 2.0);
    assert_eq!(
        s.dead.bytes().unwrap(),
        std::fs::metadata(&files[0].0).unwrap().len()
    );
}

#[tokio::test]
async fn a_store_refusing_everything_holds_the_flush_and_turns_unready() {
    let s = setup();
    s.store.refuse_all.store(true, Ordering::SeqCst);
    let now = chrono::Utc::now().timestamp_millis();
    ingest(&s.agg, "a", now, 1.0);
    ingest(&s.agg, "b", now, 2.0);
    let batch = s.pipeline.cut_batch().unwrap();
    let applying = {
        let p = s.pipeline.clone();
        tokio::spawn(async move { p.apply(&batch, &CancellationToken::new()).await })
    };
    let started = std::time::Instant::now();
    while s.pipeline.refusing().why().is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never refusing"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let why = s.pipeline.ready().await.unwrap_err();
    assert!(why.contains("refuses every document"), "{why}");
    // Held, not set aside, however long it lasts.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!applying.is_finished());
    assert_eq!(s.pipeline.inflight_batches(), 1);

    s.store.refuse_all.store(false, Ordering::SeqCst);
    s.store.refuse_bad.store(false, Ordering::SeqCst);
    assert!(applying.await.unwrap());
    assert!(s.pipeline.refusing().why().is_none());
    assert!(s.pipeline.ready().await.is_ok());
    assert_eq!(stored(&*s.store, "a", now).await, Some((1, 1.0)));
    assert_eq!(stored(&*s.store, "b", now).await, Some((1, 2.0)));
    assert!(DeadLetters::new(s.dir.path(), "faulty")
        .list()
        .unwrap()
        .is_empty());
}

#[test]
fn the_refused_part_keeps_only_the_refused_hours() {
    use crate::model::{FlushId, Slot};
    let hour = 483_334 * 60i64; // a whole hour, in minutes
    let sm = SeriesMinutes {
        catalog: crate::model::CatalogDue::Unknown,
        series: Arc::new(SeriesId::new("s", "m")),
        kind: SampleKind::Gauge,
        minutes: [(hour - 1, Slot::of(1.0)), (hour, Slot::of(2.0))]
            .into_iter()
            .collect(),
    };
    let batch = FlushBatch {
        hashes: Vec::new(),
        resumable: true,
        id: FlushId(7),
        series: vec![sm.clone(), sm],
    };
    let part = refused_part(
        &batch,
        &[Refusal {
            series: 1,
            hour_start: Some(hour * 60),
            error: String::new(),
        }],
    );
    assert_eq!(part.id, FlushId(7));
    assert_eq!(part.series.len(), 1);
    assert_eq!(part.series[0].minutes.len(), 1);
    assert_eq!(part.series[0].minutes[0].0, hour);
}
