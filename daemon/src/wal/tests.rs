//! The running log end to end: appenders on several threads, segments
//! rolling under them, markers among the requests, then recovery.

use std::sync::Arc;

use tally_proto::v1 as pb;

use super::*;
use crate::ingest::view::PushView;

fn request(task: usize, i: usize) -> pb::PushRequest {
    let series = (0..3)
        .map(|m| pb::SeriesSamples {
            metric: format!("m{m}"),
            kind: pb::SampleKind::Gauge as i32,
            timestamps_ms: vec![1_000 * i as i64],
            values: vec![(i * 7 + m) as f64 / 4.0],
            ..Default::default()
        })
        .collect();
    pb::PushRequest {
        sources: vec![pb::SourceBatch {
            // Few sources, so that series recur and later records refer to
            // definitions earlier ones made.
            source: format!("host-{}", (task + i) % 5),
            series,
            ..Default::default()
        }],
    }
}

/// Every request appended by concurrent tasks, while tiny segments roll
/// and markers are cut, reads back from the recovered log, each task's in
/// its order: each record lands in the segment whose dictionary encoded it.
/// With `sync = "os"` appenders write their own records whenever the
/// writer is free, and the thread writes the markers and rolls.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_appends_across_rolls_read_back_exactly() {
    appends_across_rolls_read_back_exactly(SyncMode::Os).await;
}

/// With fsync the thread writes every group.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_synced_appends_across_rolls_read_back_exactly() {
    appends_across_rolls_read_back_exactly(SyncMode::Fsync).await;
}

async fn appends_across_rolls_read_back_exactly(sync: SyncMode) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = WalConfig {
        segment_bytes: 2048,
        queue: 8,
        sync,
        fsync_interval: Duration::ZERO,
        ..WalConfig::default()
    };
    let wal = Arc::new(
        Wal::start(
            dir.path(),
            cfg,
            &[],
            Baselines::default(),
            Duration::from_secs(3600),
        )
        .unwrap(),
    );
    const TASKS: usize = 4;
    const EACH: usize = 150;
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let wal = wal.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..EACH {
                let req = request(task, i);
                wal.append_request(task as i64, &[], &PushView::of(&req))
                    .await
                    .unwrap();
            }
        }));
    }
    for id in 1..=20 {
        wal.marker(id, Some(Vec::new()))
            .unwrap()
            .written()
            .await
            .unwrap();
        tokio::task::yield_now().await;
    }
    for t in tasks {
        t.await.unwrap();
    }
    wal.close().await;

    let segments = recover(dir.path()).unwrap();
    assert!(segments.len() > 10, "segments rolled: {}", segments.len());
    let mut next = [0usize; TASKS];
    let mut markers = Vec::new();
    for seg in &segments {
        for record in seg.records().unwrap() {
            match record.unwrap() {
                Record::Request {
                    now_ms, request: r, ..
                } => {
                    let task = now_ms as usize;
                    assert_eq!(r, request(task, next[task]), "task {task}");
                    next[task] += 1;
                }
                Record::Marker { flush_id, .. } => markers.push(flush_id),
                Record::Checkpoint { .. } => {}
            }
        }
    }
    assert_eq!(next, [EACH; TASKS]);
    assert_eq!(markers, (1..=20).collect::<Vec<_>>());
}

/// Appends after the writer stopped fail at once rather than wait.
#[tokio::test]
async fn appends_after_close_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let wal = Wal::start(
        dir.path(),
        WalConfig::default(),
        &[],
        Baselines::default(),
        Duration::from_secs(3600),
    )
    .unwrap();
    wal.close().await;
    let req = request(0, 0);
    let got = wal.append_request(0, &[], &PushView::of(&req)).await;
    assert!(matches!(got, Err(WalError::Closed)), "{got:?}");
}

/// An append queued while someone else holds the writer is not lost: the
/// writer thread takes it once the writer is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_behind_a_busy_writer_is_written_when_it_is_free() {
    let dir = tempfile::tempdir().unwrap();
    let wal = Arc::new(
        Wal::start(
            dir.path(),
            WalConfig::default(),
            &[],
            Baselines::default(),
            Duration::from_secs(3600),
        )
        .unwrap(),
    );
    let pen = wal.pen.clone();
    let busy = pen.lock();
    let appender = wal.clone();
    let task = tokio::spawn(async move {
        let req = request(0, 0);
        appender.append_request(7, &[], &PushView::of(&req)).await
    });
    // The task runs on the runtime's workers while this thread holds the
    // writer (blocking it, with no await while the lock is held).
    std::thread::sleep(Duration::from_millis(100));
    assert!(!task.is_finished(), "acknowledged before it was written");
    drop(busy);
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the writer thread takes the queued append")
        .unwrap()
        .unwrap();
    wal.close().await;
    let segments = recover(dir.path()).unwrap();
    let requests = segments
        .iter()
        .flat_map(|s| s.records().unwrap())
        .filter(|r| matches!(r, Ok(Record::Request { now_ms: 7, .. })))
        .count();
    assert_eq!(requests, 1);
}
