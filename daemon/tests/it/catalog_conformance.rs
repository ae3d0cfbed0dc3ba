//! The series catalog contract every store must meet (the doc comments of
//! `Store::catalog_upsert`, `Store::catalog_list` and `CatalogQuery`),
//! shared by `catalog_embedded` and `mongo_store`.
//!
//! Also a reference listing (`naive_list`) for property tests: filter
//! everything, sort by key, cut at the cursor and the limit, with none of
//! the range planning the stores do.

use std::collections::BTreeMap;
use std::sync::Arc;

use tally::model::{SampleKind, SeriesId, MINUTE_S};
use tally::selector::{all_match, MatchOp, NameMatcher};
use tally::store::{CatalogEntry, CatalogQuery, Store, StoreError};

/// 2026-11-02 10:00 UTC: catalog times are minute starts around it.
pub const T0: i64 = 1_793_613_600;

pub fn entry(source: &str, metric: &str, kind: SampleKind, first: i64, last: i64) -> CatalogEntry {
    CatalogEntry {
        series: SeriesId::new(source, metric).into(),
        kind,
        first_seen: T0 + first * MINUTE_S,
        last_seen: T0 + last * MINUTE_S,
    }
}

pub fn query() -> CatalogQuery {
    CatalogQuery::everything(10_000)
}

pub fn exact(name: &str) -> NameMatcher {
    NameMatcher::exact(name)
}

pub fn re(op: MatchOp, pattern: &str) -> NameMatcher {
    NameMatcher::new(op, pattern).unwrap()
}

pub fn glob(list: &str) -> NameMatcher {
    NameMatcher::parse_list(list).unwrap()
}

pub fn keys(entries: &[CatalogEntry]) -> Vec<String> {
    entries.iter().map(|e| e.series.key()).collect()
}

/// What a listing must return, computed the slow, obvious way.
pub fn naive_list(all: &BTreeMap<String, CatalogEntry>, q: &CatalogQuery) -> Vec<CatalogEntry> {
    let after = q.after.as_ref().map(SeriesId::key);
    all.iter()
        .filter(|(k, _)| after.as_ref().is_none_or(|a| k.as_str() > a.as_str()))
        .map(|(_, e)| e)
        .filter(|e| {
            all_match(&q.source, &e.series.source)
                && all_match(&q.metric, &e.series.metric)
                && q.kind.is_none_or(|k| k == e.kind)
                && q.seen_since.is_none_or(|s| e.last_seen >= s)
        })
        .take(q.limit)
        .cloned()
        .collect()
}

/// Lists everything `q` matches, page by page with `after`, and checks that
/// no page is longer than the limit and that keys only ever go up (so no
/// series comes twice).
pub async fn list_all_pages(store: &dyn Store, q: &CatalogQuery) -> Vec<CatalogEntry> {
    let mut q = q.clone();
    let mut out: Vec<CatalogEntry> = Vec::new();
    loop {
        let page = store.catalog_list(&q).await.unwrap();
        assert!(
            page.len() <= q.limit,
            "{} entries for limit {}",
            page.len(),
            q.limit
        );
        let mut previous = q.after.as_ref().map(SeriesId::key);
        for e in &page {
            let key = e.series.key();
            assert!(
                previous.as_ref().is_none_or(|p| p.as_str() < key.as_str()),
                "{key} after {previous:?}"
            );
            previous = Some(key);
        }
        let Some(last) = page.last() else {
            return out;
        };
        q.after = Some((*last.series).clone());
        out.extend(page);
    }
}

/// The fixture: sources chosen so that key order differs from tuple order
/// (`a-b|m` < `a.b|m` < `a|m`), prefixes of each other (`db-01`, `db-010`),
/// and one source with many metrics so that listings skip over long runs.
pub fn fixture() -> Vec<CatalogEntry> {
    use SampleKind::*;
    let mut v = vec![
        entry("a", "m", Gauge, 0, 10),
        entry("a", "n", DeltaCounter, 0, 20),
        entry("a-b", "m", Gauge, 5, 30),
        entry("a.b", "m", CumulativeCounter, 1, 2),
        entry("db-01", "cpu", Gauge, 0, 100),
        entry("db-01", "mem", Gauge, 0, 100),
        entry("db-01", "disk/used", Gauge, 0, 50),
        entry("db-010", "cpu", Gauge, 0, 100),
        entry("db-02", "cpu", DeltaCounter, 0, 5),
        entry("db-02", "disk/free", Gauge, 3, 4),
        entry("web-1", "cpu", Gauge, 0, 60),
        entry("web-10", "cpu", Gauge, 0, 60),
        entry("web-2", "cpu", CumulativeCounter, 0, 61),
    ];
    for i in 0..40 {
        let kind = if i % 2 == 0 { Gauge } else { DeltaCounter };
        v.push(entry("big", &format!("m{i:02}"), kind, 0, i));
        v.push(entry("big", &format!("x{i:02}"), kind, 0, i));
    }
    v
}

async fn list(store: &dyn Store, q: &CatalogQuery) -> Vec<String> {
    keys(&store.catalog_list(q).await.unwrap())
}

/// Runs the whole contract against `store`, which must be empty.
pub async fn check(store: Arc<dyn Store>) {
    let store = &*store;

    // Empty catalog, empty upsert.
    assert!(store.catalog_list(&query()).await.unwrap().is_empty());
    store.catalog_upsert(&[]).await.unwrap();

    let merged = check_upserts_merge(store).await;
    check_invalid_entries_are_refused(store, &merged).await;
    let all = upsert_fixture(store, merged).await;
    check_key_order_pages_and_limit(store, &all).await;
    check_exact_source_and_cursors(store).await;
    check_glob_lists(store).await;
    check_anchored_regexes(store).await;
    check_negations_and_several_matchers(store).await;
    check_kind_and_seen_since(store).await;
    check_filtered_pages_against_reference(store, &all).await;
    check_no_match(store).await;
}

/// Upserts one series over and over: first_seen only goes down, last_seen
/// only up, the last kind given wins, and a repeat changes nothing.
/// Returns the one entry the catalog then holds.
async fn check_upserts_merge(store: &dyn Store) -> CatalogEntry {
    use SampleKind::*;
    store
        .catalog_upsert(&[entry("s", "m", Gauge, 10, 20)])
        .await
        .unwrap();
    // Earlier first_seen, earlier last_seen, another kind.
    store
        .catalog_upsert(&[entry("s", "m", DeltaCounter, 5, 15)])
        .await
        .unwrap();
    assert_eq!(
        store.catalog_list(&query()).await.unwrap(),
        vec![entry("s", "m", DeltaCounter, 5, 20)]
    );
    // Later both.
    store
        .catalog_upsert(&[entry("s", "m", CumulativeCounter, 8, 30)])
        .await
        .unwrap();
    assert_eq!(
        store.catalog_list(&query()).await.unwrap(),
        vec![entry("s", "m", CumulativeCounter, 5, 30)]
    );
    // The same series twice in one call: merged, the last kind given wins.
    let twice = [
        entry("s", "m", Gauge, 1, 31),
        entry("s", "m", DeltaCounter, 3, 40),
    ];
    store.catalog_upsert(&twice).await.unwrap();
    let want = vec![entry("s", "m", DeltaCounter, 1, 40)];
    assert_eq!(store.catalog_list(&query()).await.unwrap(), want);
    // Idempotent.
    store.catalog_upsert(&twice).await.unwrap();
    assert_eq!(store.catalog_list(&query()).await.unwrap(), want);
    want[0].clone()
}

/// Refused before anything is written: names that would make the key
/// ambiguous or are otherwise invalid, times no store can hold. The catalog
/// still holds only `merged` afterwards.
async fn check_invalid_entries_are_refused(store: &dyn Store, merged: &CatalogEntry) {
    use SampleKind::*;
    for bad in [
        entry("x|y", "m", Gauge, 0, 1),
        entry("x", "m|n", Gauge, 0, 1),
        entry("", "m", Gauge, 0, 1),
        CatalogEntry {
            last_seen: i64::MAX,
            ..entry("x", "m", Gauge, 0, 1)
        },
    ] {
        let err = store
            .catalog_upsert(&[entry("fine", "m", Gauge, 0, 1), bad.clone()])
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Invalid(_)), "{bad:?}: {err:?}");
    }
    assert_eq!(
        store.catalog_list(&query()).await.unwrap(),
        vec![merged.clone()]
    );
}

/// Upserts the fixture in two calls, in an order unlike key order, and
/// returns everything the catalog should now hold, by key.
async fn upsert_fixture(store: &dyn Store, merged: CatalogEntry) -> BTreeMap<String, CatalogEntry> {
    let mut all: BTreeMap<String, CatalogEntry> = BTreeMap::new();
    all.insert("s|m".into(), merged);
    let fixture = fixture();
    let (one, two) = fixture.split_at(7);
    store.catalog_upsert(two).await.unwrap();
    store.catalog_upsert(one).await.unwrap();
    for e in &fixture {
        all.insert(e.series.key(), e.clone());
    }
    all
}

/// Key order is byte order of `source|metric`; pagination returns every
/// entry exactly once whatever the page size; the limit cuts.
async fn check_key_order_pages_and_limit(store: &dyn Store, all: &BTreeMap<String, CatalogEntry>) {
    let everything = store.catalog_list(&query()).await.unwrap();
    assert_eq!(everything, all.values().cloned().collect::<Vec<_>>());
    assert_eq!(
        keys(&everything[..6]),
        ["a-b|m", "a.b|m", "a|m", "a|n", "big|m00", "big|m01"],
        "`a-b|m` and `a.b|m` sort before `a|m`"
    );

    for limit in [1, 2, 3, 7, 100] {
        let mut q = query();
        q.limit = limit;
        assert_eq!(list_all_pages(store, &q).await, everything, "limit {limit}");
    }

    let mut q = query();
    q.limit = 2;
    assert_eq!(list(store, &q).await, ["a-b|m", "a.b|m"]);
    q.limit = 0;
    assert!(list(store, &q).await.is_empty());
}

/// Exact source: nothing of `db-010` or of `db-01` prefixed sources; with
/// metrics, and with a cursor below the source's range, inside it and past
/// it.
async fn check_exact_source_and_cursors(store: &dyn Store) {
    let mut q = query();
    q.source = vec![exact("db-01")];
    assert_eq!(
        list(store, &q).await,
        ["db-01|cpu", "db-01|disk/used", "db-01|mem"]
    );
    q.metric = vec![exact("mem")];
    assert_eq!(list(store, &q).await, ["db-01|mem"]);
    q.metric = vec![glob("disk/*")];
    assert_eq!(list(store, &q).await, ["db-01|disk/used"]);
    q.metric = Vec::new();
    q.after = Some(SeriesId::new("a", "m"));
    assert_eq!(list(store, &q).await.len(), 3);
    q.after = Some(SeriesId::new("db-01", "cpu"));
    assert_eq!(list(store, &q).await, ["db-01|disk/used", "db-01|mem"]);
    q.after = Some(SeriesId::new("db-01", "mem"));
    assert!(list(store, &q).await.is_empty());
    q.after = Some(SeriesId::new("zzz", "m"));
    assert!(list(store, &q).await.is_empty());
}

async fn check_glob_lists(store: &dyn Store) {
    let mut q = query();
    q.source = vec![glob("web-1*,db-02")];
    assert_eq!(
        list(store, &q).await,
        ["db-02|cpu", "db-02|disk/free", "web-10|cpu", "web-1|cpu"]
    );
    q.source = vec![glob("a*")];
    q.metric = vec![glob("m")];
    assert_eq!(list(store, &q).await, ["a-b|m", "a.b|m", "a|m"]);
    // `.` in a glob is literal.
    q.source = vec![glob("a.*")];
    q.metric = Vec::new();
    assert_eq!(list(store, &q).await, ["a.b|m"]);
}

/// Regexes are anchored at both ends; a metric regex alone works over a
/// source with many metrics.
async fn check_anchored_regexes(store: &dyn Store) {
    let mut q = query();
    q.source = vec![re(MatchOp::Regex, "web-[0-9]")];
    assert_eq!(list(store, &q).await, ["web-1|cpu", "web-2|cpu"]);
    q.source = vec![re(MatchOp::Regex, "db-0[12]")];
    q.metric = vec![re(MatchOp::Regex, "cpu|disk/.*")];
    assert_eq!(
        list(store, &q).await,
        [
            "db-01|cpu",
            "db-01|disk/used",
            "db-02|cpu",
            "db-02|disk/free"
        ]
    );
    let mut q = query();
    q.metric = vec![re(MatchOp::Regex, "x1[05]")];
    assert_eq!(list(store, &q).await, ["big|x10", "big|x15"]);
    q.metric = vec![glob("m3*")];
    assert_eq!(
        list(store, &q).await,
        (30..40).map(|i| format!("big|m{i}")).collect::<Vec<_>>()
    );
}

/// Negations, and several matchers on one name (all must accept).
async fn check_negations_and_several_matchers(store: &dyn Store) {
    let mut q = query();
    q.source = vec![re(MatchOp::NotEqual, "big")];
    q.metric = vec![re(MatchOp::NotRegex, "cpu|m|mem")];
    assert_eq!(
        list(store, &q).await,
        ["a|n", "db-01|disk/used", "db-02|disk/free"]
    );
    q.source = vec![re(MatchOp::Regex, "db-.*"), re(MatchOp::NotEqual, "db-01")];
    q.metric = Vec::new();
    assert_eq!(
        list(store, &q).await,
        ["db-010|cpu", "db-02|cpu", "db-02|disk/free"]
    );
    q.source = vec![
        re(MatchOp::NotRegex, "[a-z]+-.*"),
        re(MatchOp::NotEqual, "s"),
    ];
    q.metric = vec![re(MatchOp::NotRegex, "[mx][0-9]+")];
    assert_eq!(list(store, &q).await, ["a.b|m", "a|m", "a|n"]);
}

async fn check_kind_and_seen_since(store: &dyn Store) {
    use SampleKind::*;
    let mut q = query();
    q.kind = Some(CumulativeCounter);
    assert_eq!(list(store, &q).await, ["a.b|m", "web-2|cpu"]);
    q.kind = None;
    q.seen_since = Some(T0 + 60 * MINUTE_S);
    assert_eq!(
        list(store, &q).await,
        [
            "db-010|cpu",
            "db-01|cpu",
            "db-01|mem",
            "web-10|cpu",
            "web-1|cpu",
            "web-2|cpu"
        ]
    );
    q.seen_since = Some(T0 + 61 * MINUTE_S);
    q.kind = Some(Gauge);
    q.source = vec![glob("db-*")];
    assert_eq!(
        list(store, &q).await,
        ["db-010|cpu", "db-01|cpu", "db-01|mem"]
    );
    q.limit = 1;
    assert_eq!(list_all_pages(store, &q).await.len(), 3);
}

/// Filtered pagination against the reference, with a small page.
async fn check_filtered_pages_against_reference(
    store: &dyn Store,
    all: &BTreeMap<String, CatalogEntry>,
) {
    let cases: Vec<CatalogQuery> = vec![
        CatalogQuery {
            source: vec![glob("big")],
            metric: vec![glob("x*")],
            labels: Vec::new(),
            limit: 3,
            ..query()
        },
        CatalogQuery {
            metric: vec![re(MatchOp::Regex, "(m|x)0[0-9]")],
            labels: Vec::new(),
            kind: Some(SampleKind::DeltaCounter),
            limit: 2,
            ..query()
        },
        CatalogQuery {
            source: vec![re(MatchOp::NotEqual, "big")],
            seen_since: Some(T0 + 20 * MINUTE_S),
            limit: 1,
            ..query()
        },
    ];
    for q in &cases {
        let mut everything = q.clone();
        everything.limit = usize::MAX;
        assert_eq!(
            list_all_pages(store, q).await,
            naive_list(all, &everything),
            "{q:?}"
        );
    }
}

async fn check_no_match(store: &dyn Store) {
    for q in [
        CatalogQuery {
            source: vec![exact("nope")],
            ..query()
        },
        CatalogQuery {
            source: vec![glob("zz*")],
            ..query()
        },
        CatalogQuery {
            source: vec![exact("db-01")],
            metric: vec![exact("nope")],
            labels: Vec::new(),
            ..query()
        },
        CatalogQuery {
            source: vec![exact("db-01"), exact("db-02")],
            ..query()
        },
        CatalogQuery {
            metric: vec![re(MatchOp::Regex, "nope.*")],
            labels: Vec::new(),
            ..query()
        },
        CatalogQuery {
            seen_since: Some(T0 + 1000 * MINUTE_S),
            ..query()
        },
    ] {
        assert!(list(store, &q).await.is_empty(), "{q:?}");
    }
}
