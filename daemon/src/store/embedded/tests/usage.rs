//! `tallyd store-usage`: where the file's bytes go, counted from a file
//! the tests wrote, and refused while the store is open.

use super::*;
use crate::store::embedded::file_usage;
use crate::store::embedded::layout::{DAY_MINUTES_LEN, DAY_SUMMARY_LEN, HOUR_DOC_LEN};

#[tokio::test]
async fn usage_counts_each_table_and_the_documents() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_direct(&dir);
    store.apply(&sample_batch(1)).await.unwrap();
    store.close().await.unwrap();
    drop(store);

    let usage = file_usage(dir.path()).unwrap();
    let table = |name: &str| usage.tables.iter().find(|t| t.name == name).unwrap();
    // Two hours (10:00 and 11:00) of one series, in one day.
    let (hours, summaries, blocks) = (
        table("hours_by_period"),
        table("day_summaries_by_period"),
        table("day_minutes_by_period"),
    );
    assert_eq!(
        (hours.entries, summaries.entries, blocks.entries),
        (2, 1, 2)
    );
    let values = (2 * HOUR_DOC_LEN + DAY_SUMMARY_LEN + 2 * DAY_MINUTES_LEN) as u64;
    assert_eq!(usage.document_value_bytes(), values);
    // Packed: the sample batch's minutes are few.
    assert!(usage.document_bytes() < values / 2);
    for t in &usage.tables {
        assert!(t.page_bytes() <= usage.file_bytes, "{t:?}");
    }
    assert!(usage.free_bytes() < usage.file_bytes);
    assert!(usage.disk_bytes <= usage.file_bytes);
    assert!(usage.free_disk_bytes() <= usage.free_bytes());
    let shown = usage.to_string();
    assert!(shown.contains("hours_by_period"), "{shown}");
    assert!(shown.contains("times their bytes on disk"), "{shown}");
}

#[tokio::test]
async fn usage_needs_the_file_and_the_store_closed() {
    let dir = tempfile::tempdir().unwrap();
    let err = file_usage(dir.path()).unwrap_err().to_string();
    assert!(err.contains("no store file"), "{err}");

    let store = open(&dir);
    store.apply(&sample_batch(1)).await.unwrap();
    let err = file_usage(dir.path()).unwrap_err().to_string();
    assert!(err.contains("already open"), "{err}");
    store.close().await.unwrap();
}
