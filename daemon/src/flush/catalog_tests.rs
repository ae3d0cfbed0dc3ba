//! The catalog through the pipeline, with the aggregator keeping each
//! series' catalog mark (as the daemon runs): what reaches the store's
//! catalog, flush after flush, and what a refused write leaves due.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::*;
use crate::aggregator::{Aggregator, AggregatorConfig, SeriesBatch};
use crate::catalog::CatalogWriter;
use crate::flush::faulty::Faulty;
use crate::flush::FlushConfig;
use crate::ingest::IngestConfig;
use crate::model::SampleKind;
use crate::store::embedded::EmbeddedStore;
use crate::store::{CatalogQuery, Store};

fn push(agg: &Aggregator, sources: &[String], ts_ms: i64) {
    let batches: Vec<SeriesBatch<'_>> = sources
        .iter()
        .map(|s| SeriesBatch {
            labels: "",
            source: s,
            metric: "m",
            kind: Some(SampleKind::Gauge),
            timestamps_ms: std::slice::from_ref(&ts_ms),
            values: &[1.0],
            start_times_ms: &[],
            source_index: 0,
            series_index: 0,
        })
        .collect();
    assert_eq!(agg.ingest(&batches, ts_ms).accepted, sources.len() as u64);
}

#[tokio::test]
async fn marked_series_are_written_once_then_at_their_refresh_and_a_refusal_goes_next_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Faulty::new(EmbeddedStore::open(dir.path()).unwrap()));
    let refresh = Duration::from_secs(120);
    let agg = Arc::new(
        Aggregator::new(&AggregatorConfig::default(), &IngestConfig::default())
            .with_catalog(refresh),
    );
    let catalog = Arc::new(CatalogWriter::new(refresh));
    let p = Pipeline::new(agg.clone(), store.clone(), FlushConfig::default(), 0)
        .with_catalog(catalog.clone());
    let flush = || async {
        let batch = p.cut_batch().expect("a batch");
        assert!(p.apply(&batch, &CancellationToken::new()).await);
        p.record_catalog(&batch).await;
    };
    let written = || store.catalog_entries.load(Ordering::SeqCst);
    let minute = |m: i64| (chrono::Utc::now().timestamp() / 60 - 5 + m) * 60_000;
    let sources: Vec<String> = (0..50).map(|i| format!("src-{i:03}")).collect();

    push(&agg, &sources, minute(0));
    flush().await;
    assert_eq!(written(), 50, "every new series once");
    // Tracked by the aggregator's marks, not by the writer's own record.
    assert_eq!(catalog.len(), 0);

    push(&agg, &sources, minute(0) + 1_000);
    flush().await;
    push(&agg, &sources, minute(1));
    flush().await;
    assert_eq!(written(), 50, "nothing again within the refresh");

    // Two minutes on from the recorded last_seen: written again, with the
    // store's refusal keeping them for the next write.
    store.refuse_catalog.store(true, Ordering::SeqCst);
    push(&agg, &sources[..10], minute(2));
    flush().await;
    store.refuse_catalog.store(false, Ordering::SeqCst);
    assert_eq!(written(), 50);
    // A flush that makes nothing due of its own still carries them.
    push(&agg, &sources[10..11], minute(1) + 1_000);
    flush().await;
    assert_eq!(written(), 50 + 10, "the refused ten go with the next write");
    let listed = store
        .catalog_list(&CatalogQuery::everything(100))
        .await
        .unwrap();
    assert_eq!(listed.len(), 50);
    let first = listed
        .iter()
        .find(|e| &*e.series.source == "src-000")
        .unwrap();
    assert_eq!(first.first_seen, minute(0) / 1000);
    assert_eq!(first.last_seen, minute(2) / 1000);
}

/// A batch that makes more series due than one catalog write takes is
/// written in parts, and every series lands.
#[tokio::test]
async fn catalog_entries_beyond_one_write_are_all_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let agg = Arc::new(Aggregator::new(
        &AggregatorConfig::default(),
        &IngestConfig::default(),
    ));
    let catalog = Arc::new(CatalogWriter::new(Duration::from_secs(600)));
    let p = Pipeline::new(agg.clone(), store.clone(), FlushConfig::default(), 0)
        .with_catalog(catalog.clone());
    let n = CATALOG_WRITE_ENTRIES + 7;
    let now = chrono::Utc::now().timestamp_millis();
    let sources: Vec<String> = (0..n).map(|i| format!("src-{i:06}")).collect();
    push(&agg, &sources, now);
    let batch = p.cut_batch().unwrap();
    assert!(p.apply(&batch, &CancellationToken::new()).await);
    p.record_catalog(&batch).await;
    assert_eq!(catalog.len(), n);
    let listed = store
        .catalog_list(&CatalogQuery::everything(n + 1))
        .await
        .unwrap();
    assert_eq!(listed.len(), n);
    assert_eq!(&*listed[n - 1].series.source, sources[n - 1].as_str());
}
