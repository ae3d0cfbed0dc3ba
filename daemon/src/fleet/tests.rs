use super::*;
use crate::aggregator::{AggregatorConfig, SeriesBatch};
use crate::ingest::IngestConfig;
use crate::model::SampleKind;

fn fleet_of(sources: &[(&str, usize, i64)]) -> Fleet {
    let agg = Arc::new(Aggregator::new(
        &AggregatorConfig { shards: 2 },
        &IngestConfig::default(),
    ));
    let now = chrono::Utc::now().timestamp_millis();
    let metrics: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    for (source, series, age_ms) in sources {
        let ts = [now - age_ms];
        let batches: Vec<SeriesBatch<'_>> = metrics[..*series]
            .iter()
            .map(|m| SeriesBatch {
                labels: "",
                source,
                metric: m,
                kind: Some(SampleKind::Gauge),
                timestamps_ms: &ts,
                values: &[1.0],
                start_times_ms: &[],
                source_index: 0,
                series_index: 0,
            })
            .collect();
        assert_eq!(agg.ingest(&batches, now).accepted, *series as u64);
    }
    let rates = Arc::new(SourceRates::default());
    rates.observe(&agg.drain(None), now);
    Fleet::new(agg, rates)
}

fn query() -> FleetQuery {
    FleetQuery {
        source: Vec::new(),
        sort: SortBy::Source,
        descending: false,
        stale_only: false,
        stale_after: Duration::from_secs(60),
        offset: 0,
        limit: 100,
    }
}

fn names(p: &FleetPage) -> Vec<&str> {
    p.rows.iter().map(|r| &*r.source).collect()
}

#[tokio::test]
async fn pages_sort_filter_and_flag_stale_sources() {
    let f = fleet_of(&[
        ("web-1", 3, 1_000),
        ("web-2", 1, 120_000),
        ("db-1", 2, 5_000),
    ]);
    let all = f.page(&query()).await;
    assert_eq!(names(&all), ["db-1", "web-1", "web-2"]);
    assert_eq!(
        (all.sources, all.matched, all.stale, all.series),
        (3, 3, 1, 6)
    );
    assert!(all.rows[2].stale && !all.rows[0].stale);
    assert!(all.rows[1].age_s.unwrap() >= 1.0);
    // Every drained sample counts: 3 for web-1 in under a second's window.
    assert!(all.rows[1].samples_per_s > 0.0);

    let by_age = f
        .page(&FleetQuery {
            sort: SortBy::Age,
            descending: true,
            ..query()
        })
        .await;
    assert_eq!(names(&by_age), ["web-2", "db-1", "web-1"]);

    let web = f
        .page(&FleetQuery {
            source: vec![NameMatcher::parse_list_within("web-*", &Default::default()).unwrap()],
            sort: SortBy::Series,
            descending: true,
            offset: 1,
            limit: 1,
            ..query()
        })
        .await;
    assert_eq!((web.matched, names(&web)), (2, vec!["web-2"]));

    let stale = f
        .page(&FleetQuery {
            stale_only: true,
            stale_after: Duration::from_secs(2),
            ..query()
        })
        .await;
    assert_eq!(names(&stale), ["db-1", "web-2"]);
    assert_eq!(stale.stale_after_s, 2.0);
}
