/// The series of one shard keep every tag of its table: a shard
/// picked from the tag's bits left each table as few as two of 128,
/// and a lookup compared an entry for nearly every series in its group.
#[test]
fn a_shards_series_spread_over_all_the_tables_tags() {
    use crate::aggregator::{Aggregator, AggregatorConfig};
    use crate::ingest::IngestConfig;
    use crate::model::SeriesRef;
    let agg = Aggregator::new(&AggregatorConfig { shards: 64 }, &IngestConfig::default());
    let mut tags = std::collections::HashSet::new();
    for i in 0..100_000 {
        let source = format!("src-{i}");
        let hash = agg.hasher.hash_one(SeriesRef {
            source: &source,
            metric: "m",
            labels: "",
        });
        if agg.shard_of(hash) == 0 {
            // hashbrown's tag: the hash's top seven bits.
            tags.insert(hash >> 57);
        }
    }
    assert!(tags.len() >= 120, "{} of 128 tags in shard 0", tags.len());
}

#[test]
fn a_series_entry_takes_three_cache_lines() {
    assert_eq!(std::mem::size_of::<super::SeriesState>(), 192);
    // The table keeps entries as options; the id's pointer is the niche.
    assert_eq!(std::mem::size_of::<Option<super::SeriesState>>(), 192);
}
