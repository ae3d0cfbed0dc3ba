//! The catalog by metric: listings of one metric across sources go through
//! it and equal the catalog's own order and pages, labelled series included,
//! and a file made before it existed gets it built when opened.

use redb::TableHandle;

use super::*;
use crate::labels::Labels;
use crate::model::{SampleKind, SeriesId};
use crate::selector::NameMatcher;
use crate::store::embedded::layout::{CATALOG_BY_METRIC, META, META_CATALOG_BY_METRIC};
use crate::store::embedded::EmbeddedStore;
use crate::store::{CatalogEntry, CatalogQuery, Store};

fn entries() -> Vec<CatalogEntry> {
    let t = ts(2026, 3, 14, 10, 0);
    let mut out = Vec::new();
    for s in 0..40 {
        for m in ["cpu", "mem", "cpu_seconds"] {
            out.push(CatalogEntry {
                series: SeriesId::new(&format!("web-{s:02}"), m).into(),
                kind: SampleKind::Gauge,
                first_seen: t,
                last_seen: t,
            });
        }
        let labels = Labels::from_pairs([("mode", "idle")], 16).unwrap();
        out.push(CatalogEntry {
            series: SeriesId::with_labels(&format!("web-{s:02}"), "cpu", labels).into(),
            kind: SampleKind::DeltaCounter,
            first_seen: t,
            last_seen: t,
        });
    }
    out
}

/// Every entry of `cpu` on sources `web-1*`, in pages of 7.
async fn cpu_pages(store: &EmbeddedStore) -> Vec<String> {
    let mut q = CatalogQuery::everything(7);
    q.source = vec![NameMatcher::parse_list("web-1*").unwrap()];
    q.metric = vec![NameMatcher::exact("cpu")];
    let mut keys = Vec::new();
    loop {
        let page = store.catalog_list(&q).await.unwrap();
        let Some(last) = page.last() else { break };
        q.after = Some((*last.series).clone());
        keys.extend(page.iter().map(|e| e.series.key()));
    }
    keys
}

fn expected() -> Vec<String> {
    let mut keys: Vec<String> = entries()
        .iter()
        .filter(|e| &*e.series.metric == "cpu" && e.series.source.starts_with("web-1"))
        .map(|e| e.series.key())
        .collect();
    keys.sort();
    keys
}

#[tokio::test]
async fn one_metric_across_sources_lists_in_catalog_order_and_pages() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    store.catalog_upsert(&entries()).await.unwrap();
    let keys = cpu_pages(&store).await;
    assert_eq!(keys.len(), 20, "10 sources, labelled and not");
    assert_eq!(keys, expected());
}

#[tokio::test]
async fn a_file_without_the_index_gets_it_built_when_opened() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    store.catalog_upsert(&entries()).await.unwrap();
    store.sync().unwrap();
    // As a file from before the index: no table, no mark.
    {
        let db = store.inner.database().unwrap();
        let txn = db.begin_write().unwrap();
        txn.delete_table(CATALOG_BY_METRIC).unwrap();
        txn.open_table(META)
            .unwrap()
            .remove(META_CATALOG_BY_METRIC)
            .unwrap();
        txn.commit().unwrap();
    }
    drop(store);
    let store = EmbeddedStore::open(dir.path()).unwrap();
    assert_eq!(cpu_pages(&store).await, expected());
    let db = store.inner.database().unwrap();
    let txn = redb::ReadableDatabase::begin_read(&*db).unwrap();
    let tables: Vec<String> = txn
        .list_tables()
        .unwrap()
        .map(|t| t.name().to_string())
        .collect();
    assert!(
        tables.iter().any(|t| t == "catalog_by_metric"),
        "{tables:?}"
    );
}
