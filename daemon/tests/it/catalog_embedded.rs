//! The series catalog on the embedded store: the shared contract
//! (`catalog_conformance`, also run on MongoDB in
//! `mongo_store`), a property test against a naive listing, retention
//! and persistence.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::catalog_conformance::{self as cc, entry, naive_list, query, T0};
use proptest::prelude::*;
use tally::model::{SampleKind, SeriesId, DAY_S, HOUR_S, MINUTE_S};
use tally::selector::{MatchOp, NameMatcher};
use tally::store::embedded::EmbeddedStore;
use tally::store::{CatalogEntry, CatalogQuery, Store};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn embedded_catalog_conformance() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    rt().block_on(cc::check(store));
}

#[test]
fn catalog_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let rt = rt();
    let want = {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        rt.block_on(async {
            store.catalog_upsert(&cc::fixture()).await.unwrap();
            let all = store.catalog_list(&query()).await.unwrap();
            store.close().await.unwrap();
            all
        })
    };
    assert_eq!(want.len(), cc::fixture().len());
    let store = EmbeddedStore::open(dir.path()).unwrap();
    assert_eq!(rt.block_on(store.catalog_list(&query())).unwrap(), want);
}

#[test]
fn retention_sweep_drops_catalog_entries_last_seen_before_the_day_retention() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let rt = rt();
    let now = T0 + 10 * DAY_S;
    let day_retention = 3 * DAY_S;
    let at = |t: i64| CatalogEntry {
        series: SeriesId::new("db-01", &format!("m{t}")).into(),
        kind: SampleKind::Gauge,
        first_seen: T0,
        last_seen: t,
    };
    let cutoff = now - day_retention;
    let entries = [
        at(T0),
        at(cutoff - MINUTE_S),
        at(cutoff),
        at(cutoff + MINUTE_S),
        at(now),
    ];
    rt.block_on(async {
        store.catalog_upsert(&entries).await.unwrap();
        let dyn_store: &dyn Store = &store;
        let gone = dyn_store.expire(now, HOUR_S, day_retention).await.unwrap();
        assert_eq!(gone, 0, "the count is of documents, and there are none");
        let left = store.catalog_list(&query()).await.unwrap();
        let mut want = vec![at(cutoff), at(cutoff + MINUTE_S), at(now)];
        want.sort_by_key(|e| e.series.key());
        assert_eq!(left, want);
        // The same through the catalog by metric (one metric, a source
        // pattern): the sweep dropped its entries too.
        let by_metric = |t: i64| {
            let mut q = query();
            q.source = vec![cc::glob("db-*")];
            q.metric = vec![cc::exact(&format!("m{t}"))];
            q
        };
        assert!(store.catalog_list(&by_metric(T0)).await.unwrap().is_empty());
        assert_eq!(
            store.catalog_list(&by_metric(now)).await.unwrap(),
            vec![at(now)]
        );
        // A refreshed entry is kept: the sweep looks at last_seen only.
        store.catalog_upsert(&[at(now + DAY_S)]).await.unwrap();
        dyn_store
            .expire(now + 3 * DAY_S + MINUTE_S, HOUR_S, day_retention)
            .await
            .unwrap();
        assert_eq!(
            store.catalog_list(&query()).await.unwrap(),
            vec![at(now + DAY_S)]
        );
    });
}

// ---------------------------------------------------------------------------
// Property: any listing equals the naive one.

// Few sources with many metrics each, so that listings skip long runs of
// keys (the store seeks past those).
const SOURCE_NAME: &str = "[ab][-.]?1?";
const METRIC_NAME: &str = "[mnx][0-9]{0,2}";

fn kind() -> impl Strategy<Value = SampleKind> {
    prop_oneof![
        Just(SampleKind::Gauge),
        Just(SampleKind::DeltaCounter),
        Just(SampleKind::CumulativeCounter),
    ]
}

fn catalog_entry() -> impl Strategy<Value = CatalogEntry> {
    (SOURCE_NAME, METRIC_NAME, kind(), 0i64..100, 0i64..100)
        .prop_map(|(source, metric, kind, a, b)| entry(&source, &metric, kind, a.min(b), a.max(b)))
}

fn pattern() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "a.*",
        "b[0-9]+",
        "(a|b)-.*",
        "a\\..*",
        "[mn][0-9]",
        "m1.*",
        "x1[0-5]",
        ".*1",
        "x.*|n",
    ])
}

/// Matchers of every kind, over names like the generated ones.
fn matcher(name: &'static str) -> impl Strategy<Value = NameMatcher> {
    let globs = prop::sample::select(vec!["a*", "b-*", "a.?", "m1*", "n*,x?", "b*,a-1", "*1"]);
    prop_oneof![
        name.prop_map(|n| NameMatcher::exact(&n)),
        name.prop_map(|n| NameMatcher::new(MatchOp::NotEqual, &n).unwrap()),
        globs.prop_map(|g| NameMatcher::parse_list(g).unwrap()),
        pattern().prop_map(|p| NameMatcher::new(MatchOp::Regex, p).unwrap()),
        pattern().prop_map(|p| NameMatcher::new(MatchOp::NotRegex, p).unwrap()),
    ]
}

fn catalog_query() -> impl Strategy<Value = CatalogQuery> {
    (
        prop::collection::vec(matcher(SOURCE_NAME), 0..3),
        prop::collection::vec(matcher(METRIC_NAME), 0..3),
        prop::option::of(kind()),
        prop::option::of(0i64..100),
        prop::option::of((SOURCE_NAME, METRIC_NAME)),
        1usize..40,
    )
        .prop_map(|(source, metric, kind, since, after, limit)| CatalogQuery {
            source,
            metric,
            labels: Vec::new(),
            kind,
            seen_since: since.map(|m| T0 + m * MINUTE_S),
            after: after.map(|(s, m)| SeriesId::new(&s, &m)),
            limit,
        })
}

proptest! {
    // Each case opens a store (one fsync), which dominates: 40 cases stay
    // within a few seconds.
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn listings_equal_the_naive_reference(
        calls in prop::collection::vec(prop::collection::vec(catalog_entry(), 0..120), 1..4),
        queries in prop::collection::vec(catalog_query(), 1..6),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let mut all: BTreeMap<String, CatalogEntry> = BTreeMap::new();
        for call in &calls {
            for e in call {
                all.entry(e.series.key())
                    .and_modify(|old| {
                        old.kind = e.kind;
                        old.first_seen = old.first_seen.min(e.first_seen);
                        old.last_seen = old.last_seen.max(e.last_seen);
                    })
                    .or_insert_with(|| e.clone());
            }
        }
        rt().block_on(async {
            for call in &calls {
                store.catalog_upsert(call).await.unwrap();
            }
            for q in &queries {
                let got = store.catalog_list(q).await.unwrap();
                assert_eq!(cc::keys(&got), cc::keys(&naive_list(&all, q)), "{q:?}");
                assert_eq!(got, naive_list(&all, q));
                let mut whole = q.clone();
                whole.after = None;
                let pages = cc::list_all_pages(&store, &whole).await;
                whole.limit = usize::MAX;
                assert_eq!(pages, naive_list(&all, &whole), "pages of {q:?}");
            }
        });
    }
}
