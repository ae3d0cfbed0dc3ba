//! Damage on disk, through the binary: a crash leaves a torn frame (or a
//! record whose bytes were damaged) at the end of the write-ahead log, and
//! the next start cuts it off, says so, and replays everything before it;
//! an empty store file stops the daemon at start; damaged pages in the
//! store file stop it, or make it unready and refuse ingest.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use tally_proto::v1 as pb;
use tally_testkit::client::{now_ms, push_of, range_sum, series, within};
use tally_testkit::Daemon;

use crate::tallyd;

fn gauge(source: &str, t_ms: i64, v: f64) -> pb::PushRequest {
    push_of(
        source,
        vec![series("temp", pb::SampleKind::Gauge, &[(t_ms, v)])],
    )
}

/// The newest segment of the daemon's log.
fn last_segment(d: &Daemon) -> PathBuf {
    let mut segs: Vec<PathBuf> = std::fs::read_dir(d.data_dir().join("wal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    segs.sort();
    segs.pop().expect("a log segment")
}

/// The sum `source`'s `temp` holds over the last hour.
async fn sum(d: &Daemon, source: &str) -> f64 {
    range_sum(d, source, "temp", 3600).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_or_damaged_tail_is_cut_and_what_precedes_it_replayed() {
    // A flush interval longer than the test: everything stays in the log.
    let mut d = Daemon::start_async(tallyd().flush_interval("1h")).await;
    let t = now_ms();
    let mut ingest = d.ingest_client().await;
    for (i, v) in [1.0, 2.0, 4.0].iter().enumerate() {
        let r = within("Push", ingest.push(gauge("h1", t - i as i64, *v)))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.accepted, 1);
    }
    // A crash in the middle of writing the next record: half a frame.
    tokio::task::block_in_place(|| d.crash());
    let seg = last_segment(&d);
    let len = std::fs::metadata(&seg).unwrap().len();
    let mut f = std::fs::OpenOptions::new().append(true).open(&seg).unwrap();
    f.write_all(&[200, 0, 0, 0, 1, 2, 3]).unwrap();
    drop(f);
    tokio::task::block_in_place(|| d.restart());
    d.wait_for_log("torn or corrupt tail cut off", 1, Duration::from_secs(10))
        .await;
    assert_eq!(
        sum(&d, "h1").await,
        7.0,
        "every acknowledged sample replayed"
    );
    assert_eq!(
        std::fs::metadata(&seg).unwrap().len(),
        len,
        "cut back to the last whole record"
    );

    // Damage inside the newest record (a bit flipped on disk): that record
    // fails its checksum and is cut, the ones before it are replayed.
    let mut ingest = d.ingest_client().await;
    within("Push", ingest.push(gauge("h2", t, 10.0)))
        .await
        .unwrap();
    within("Push", ingest.push(gauge("h2", t - 1, 20.0)))
        .await
        .unwrap();
    tokio::task::block_in_place(|| d.crash());
    let seg = last_segment(&d);
    let mut bytes = std::fs::read(&seg).unwrap();
    let n = bytes.len();
    bytes[n - 3] ^= 0x40;
    std::fs::write(&seg, &bytes).unwrap();
    tokio::task::block_in_place(|| d.restart());
    d.wait_for_log("torn or corrupt tail cut off", 2, Duration::from_secs(10))
        .await;
    assert_eq!(sum(&d, "h1").await, 7.0);
    assert_eq!(
        sum(&d, "h2").await,
        10.0,
        "the damaged record alone is lost"
    );
}

/// An empty store file where data was is a truncation: tallyd refuses to
/// start on it, saying so, rather than silently starting a new store.
#[test]
fn an_empty_store_file_stops_the_daemon_at_start() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tally.redb"), b"").unwrap();
    let data_dir = dir.path().to_str().unwrap();
    let args = [
        "--data-dir",
        data_dir,
        "--grpc-listen",
        "127.0.0.1:0",
        "--http-listen",
        "127.0.0.1:0",
    ];
    let run = tally_testkit::process::run(
        std::path::Path::new(env!("CARGO_BIN_EXE_tallyd")),
        &args,
        Duration::from_secs(30),
    );
    assert!(!run.status.success(), "{}", run.describe());
    assert!(run.stderr.contains("empty (0 bytes)"), "{}", run.describe());
    assert_eq!(
        std::fs::metadata(dir.path().join("tally.redb"))
            .unwrap()
            .len(),
        0
    );
}

/// A value no other sample has, to find the pages holding its documents.
const MARK: f64 = 8_675_309.125;

/// Damaged pages in the store file, as a failing disk might leave them:
/// the pages holding one series' documents wherever they are, and every
/// page past the first 64 KiB. The storage engine panics on such damage rather than report it.
/// tallyd must refuse the file at start, naming it, or, where the damage
/// only shows once it reads those pages (the retention sweep at start
/// reads every document), turn unready and acknowledge nothing; never
/// report ready on it. (On this layout both are refused at start.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_store_pages_fail_loudly() {
    for broad in [false, true] {
        let mut d = damaged_store(broad).await;
        match tokio::task::block_in_place(|| d.try_restart()) {
            Err(out) => {
                assert!(
                    out.contains("corrupt") && out.contains("tally.redb"),
                    "refused, naming the file: {out}"
                );
            }
            Ok(()) => {
                d.wait_for_log("embedded store failed", 1, Duration::from_secs(20))
                    .await;
                let (status, body) = tally_testkit::client::http_get(&d, "/readyz").await;
                assert_eq!(status, 503, "{body}");
                let mut ingest = d.ingest_client().await;
                let refused = within("Push", ingest.push(gauge("pg-new", now_ms(), 1.0)))
                    .await
                    .unwrap_err();
                assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
            }
        }
    }
}

/// A stopped daemon whose store file has been damaged (see above).
async fn damaged_store(broad: bool) -> Daemon {
    // Every series folded at each flush: the pages to damage are documents.
    let opts = tallyd()
        .flush_interval("100ms")
        .env("TALLYD_EMBEDDED_PENDING_MAX_BYTES", "0");
    let mut d = Daemon::start_async(opts).await;
    let mut ingest = d.ingest_client().await;
    let t = now_ms();
    for i in 0..300 {
        let v = if i == 150 { MARK } else { 1.0 };
        within("Push", ingest.push(gauge(&format!("pg-{i:03}"), t, v)))
            .await
            .unwrap();
    }
    // Flushed minutes reach their documents with the fold after their
    // flush: wait for that.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let text = tally_testkit::metrics::metrics_text(&d).await;
        let pending = tally_testkit::metrics::metric(&text, "tally_store_pending_series", &[]);
        if pending == Some(0.0) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still pending: {pending:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Stopped cleanly, so that the damage is all there is to find.
    d.sigterm();
    assert!(d.wait_async(Duration::from_secs(40)).await.success());
    let store = d.data_dir().join("tally.redb");
    let mut bytes = std::fs::read(&store).unwrap();
    assert!(bytes.len() > 256 * 1024, "a store of many pages");
    let mark = MARK.to_le_bytes();
    let mut damaged = 0;
    // Page 0 is the file's header. A page holding the mark may sit in the
    // first 64 KiB (freed pages there are reused first), and only one of
    // those pages is the live document: every one of them is damaged.
    for page in (4096..bytes.len()).step_by(4096) {
        let end = (page + 4096).min(bytes.len());
        let past_head = page >= 64 * 1024;
        if (broad && past_head) || bytes[page..end].windows(8).any(|w| w == mark) {
            bytes[page..page + 64].fill(0xA5);
            damaged += 1;
        }
    }
    assert!(damaged > 0, "pages to damage");
    std::fs::write(&store, &bytes).unwrap();
    d
}
