//! Graphite plaintext's answers to bad input, over real TCP connections:
//! a bad line is refused alone (counted, logged) and never closes a
//! connection that also carries good lines; an over-long line and a
//! never-ending one are cut at `graphite.max_line_bytes` and skipped; the
//! daemon closes its side only after admitting what it read, and bounds
//! connections and idle time.

use std::time::Duration;

use tally_testkit::client::{get_ok, now_ms};
use tally_testkit::metrics::{metric, metrics_text};
use tally_testkit::settle::eventually;
use tally_testkit::{Daemon, DaemonOpts};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::tallyd;

fn with_graphite(opts: DaemonOpts) -> DaemonOpts {
    opts.env("TALLYD_GRAPHITE_LISTEN", "127.0.0.1:0")
        .env("TALLYD_GRAPHITE_MAX_LINE_BYTES", "1024")
}

async fn connect(d: &Daemon) -> TcpStream {
    let addr = d.graphite_addr().expect("the Graphite listener's address");
    TcpStream::connect(addr).await.unwrap()
}

/// Half-closes the connection and waits (bounded) for the daemon to close
/// its side, which it does once it has admitted every line it read.
async fn close_and_wait(mut s: TcpStream) {
    s.shutdown().await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut rest))
        .await
        .expect("the daemon closes its side")
        .unwrap();
    assert!(rest.is_empty(), "Graphite answers nothing");
}

/// `(n, sum)` of every minute of `source`/`metric` with samples since
/// `from_s`.
async fn minutes(d: &Daemon, source: &str, metric: &str, from_s: i64) -> Vec<(u64, f64)> {
    let from = from_s.to_string();
    let body = get_ok(
        d,
        "/api/v1/range",
        &[
            ("source", source),
            ("metric", metric),
            ("from", &from),
            ("step", "1m"),
        ],
    )
    .await;
    body["series"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["points"].as_array().unwrap().clone())
        .filter_map(|p| {
            let n = p["n"].as_u64().filter(|n| *n > 0)?;
            Some((n, p["sum"].as_f64().unwrap()))
        })
        .collect()
}

fn rejected(text: &str, reason: &str) -> f64 {
    metric(
        text,
        "tally_samples_rejected_total",
        &[("protocol", "graphite"), ("reason", reason)],
    )
    .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_lines_are_refused_alone_and_good_ones_kept() {
    let d = Daemon::start_async(with_graphite(tallyd())).await;
    let ts = now_ms() / 60_000 * 60 - 120;
    let mut s = connect(&d).await;
    let mut send = Vec::new();
    send.extend(format!("gr.load;dc=eu 1 {ts}\n").as_bytes());
    send.extend(format!("gr.load;dc=eu inf {ts}\n").as_bytes());
    send.extend(b"gr.load\n");
    send.extend(format!("gr.load;dc=eu 1 {ts}x\n").as_bytes());
    send.extend(format!("gr 1 {ts}\n").as_bytes());
    // Not UTF-8: refused alone, the read's other lines still kept.
    send.extend(b"gr.load;dc=\xff 3 ");
    send.extend(format!("{ts}\n").as_bytes());
    send.extend(format!("gr.{} 1 {ts}\n", "x".repeat(2_000)).as_bytes());
    send.extend(format!("gr.load;dc=eu 2.5 {}\n", ts + 1).as_bytes());
    s.write_all(&send).await.unwrap();
    // A never-ending line: 20 MB without a newline, written while the
    // daemon skips it, then ended, then a good line on the same
    // connection.
    let chunk = vec![b'z'; 1024 * 1024];
    for _ in 0..20 {
        s.write_all(&chunk).await.unwrap();
    }
    s.write_all(format!("\ngr.load;dc=eu 4 {}\n", ts + 2).as_bytes())
        .await
        .unwrap();
    // A last line without a newline still counts once the client closes.
    s.write_all(format!("gr.load;dc=eu 8 {}", ts + 3).as_bytes())
        .await
        .unwrap();
    close_and_wait(s).await;

    assert_eq!(
        minutes(&d, "gr", "load", ts - 60).await,
        vec![(4, 15.5)],
        "the good lines of the connection"
    );
    // Catalogued with its tag, once a flush has recorded it.
    eventually("the series is listed", Duration::from_secs(30), || async {
        let series = get_ok(
            &d,
            "/api/v1/series",
            &[("source", "gr"), ("metric", "load")],
        )
        .await;
        match series["series"][0]["labels"]["dc"].as_str() {
            Some("eu") => Ok(()),
            _ => Err(series.to_string()),
        }
    })
    .await;
    let text = metrics_text(&d).await;
    // inf, one field, a bad timestamp, not UTF-8, the over-long and the
    // never-ending line.
    assert_eq!(rejected(&text, "invalid_point"), 6.0);
    // "gr" leaves no component for the metric.
    assert_eq!(rejected(&text, "missing_source"), 1.0);
    assert!(
        d.logs().contains("graphite: line refused"),
        "bad lines are logged"
    );

    // The daemon is unaffected: a new connection is served.
    let mut s = connect(&d).await;
    s.write_all(format!("gr.after 1 {ts}\n").as_bytes())
        .await
        .unwrap();
    close_and_wait(s).await;
    assert_eq!(minutes(&d, "gr", "after", ts - 60).await, vec![(1, 1.0)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_and_idle_time_are_bounded() {
    let d = Daemon::start_async(
        with_graphite(tallyd())
            .env("TALLYD_GRAPHITE_MAX_CONNECTIONS", "2")
            .env("TALLYD_GRAPHITE_IDLE_TIMEOUT", "2s"),
    )
    .await;
    let ts = now_ms() / 1000 - 30;
    let mut a = connect(&d).await;
    let mut b = connect(&d).await;
    a.write_all(format!("idle.a 1 {ts}\n").as_bytes())
        .await
        .unwrap();
    b.write_all(format!("idle.b 1 {ts}\n").as_bytes())
        .await
        .unwrap();
    // A third is closed at once.
    let mut c = connect(&d).await;
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(10), c.read(&mut buf))
        .await
        .expect("the third connection is closed at once");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    // The two that stay silent are closed after the idle timeout, with
    // their lines kept.
    for s in [&mut a, &mut b] {
        let n = tokio::time::timeout(Duration::from_secs(20), s.read(&mut buf))
            .await
            .expect("an idle connection is closed");
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    }
    for m in ["a", "b"] {
        assert_eq!(minutes(&d, "idle", m, ts - 60).await, vec![(1, 1.0)]);
    }
    let text = metrics_text(&d).await;
    assert_eq!(
        metric(&text, "tally_graphite_connections_refused_total", &[]),
        Some(1.0)
    );
}

/// Over one connection, batches are admitted while the next is read: with
/// ten lines a batch, a thousand lines written in many pieces are all kept
/// by the time the daemon closes its side, none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_batches_over_one_connection_are_all_kept() {
    let opts = with_graphite(tallyd()).env("TALLYD_GRAPHITE_BATCH_LINES", "10");
    all_lines_of_one_connection_kept(opts).await;
}

/// A batch whose bytes reach the request budget (four times
/// `ingest.max_message_bytes`) before its line count: the line it has no
/// room for waits for its admission and starts the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_past_a_batch_budget_start_the_next_batch() {
    let opts = with_graphite(tallyd()).env("TALLYD_INGEST_MAX_MESSAGE_BYTES", "1024");
    all_lines_of_one_connection_kept(opts).await;
}

/// Sends 1,000 lines in 50 writes over one connection: every one is kept.
async fn all_lines_of_one_connection_kept(opts: DaemonOpts) {
    let d = Daemon::start_async(opts).await;
    let ts = now_ms() / 60_000 * 60 - 120;
    let mut s = connect(&d).await;
    let mut want = 0.0;
    for piece in 0..50 {
        let mut send = String::new();
        for i in 0..20 {
            let v = f64::from(piece * 20 + i);
            want += v;
            send.push_str(&format!("pipe.m;line={i} {v} {}\n", ts + i64::from(i)));
        }
        s.write_all(send.as_bytes()).await.unwrap();
    }
    close_and_wait(s).await;
    let got = minutes(&d, "pipe", "m", ts - 60).await;
    let (n, sum) = got
        .iter()
        .fold((0, 0.0), |(n, sum), (pn, ps)| (n + pn, sum + ps));
    assert_eq!((n, sum), (1000, want), "{got:?}");
}

/// A daemon killed before it has kept what it read ends the connection in
/// a reset, never an orderly close: a client waiting for the close as its
/// confirmation must not count lines the daemon never logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_daemon_resets_its_connections() {
    let mut d = Daemon::start_async(with_graphite(tallyd())).await;
    let ts = now_ms() / 1000 - 30;
    let mut s = connect(&d).await;
    // A whole line, and the start of one the daemon holds unread.
    s.write_all(format!("kill.m 1 {ts}\nkill.m 2").as_bytes())
        .await
        .unwrap();
    // Read by the daemon, nothing left in the kernel's buffer: the whole
    // line is kept by now (its batch is due after 200 ms), the started
    // one is not, and the connection is not done.
    tokio::time::sleep(Duration::from_millis(300)).await;
    tokio::task::block_in_place(|| d.crash());
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
        .await
        .expect("the connection ends");
    assert!(
        matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "a reset, not an orderly close: {read:?}"
    );
}
