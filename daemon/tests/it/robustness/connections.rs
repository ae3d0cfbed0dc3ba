//! The HTTP listener under idle, slow and oversized clients: a thousand
//! idle connections, a client reading its response a byte at a time and
//! one sending its headers a byte at a time do not keep a normal client
//! waiting; the header deadline closes the idle and the trickling; a full
//! listener of working connections refuses a new one naming the cap, and
//! takes it once they stall; the head and body limits answer with their
//! setting; beyond the cap the reserve answers health and metrics; caps
//! above the open-file limit are warned about at start.

use std::time::{Duration, Instant};

use tally_testkit::client::{get_json, http_client, within};
use tally_testkit::metrics::{metric, metrics_text};
use tally_testkit::Daemon;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_util::sync::CancellationToken;

use super::PROMPT;
use crate::tallyd;

const IDLE: usize = 1_000;

async fn connect(d: &Daemon) -> TcpStream {
    let addr = d.http_url().trim_start_matches("http://").to_string();
    within("connect", TcpStream::connect(addr)).await.unwrap()
}

/// Reads until the server closes the connection; what it said.
async fn read_to_close(mut s: TcpStream) -> String {
    let mut out = Vec::new();
    within("reading until the server closes", s.read_to_end(&mut out))
        .await
        .unwrap_or_default();
    String::from_utf8_lossy(&out).into_owned()
}

/// A normal request's latency.
async fn normal_request(d: &Daemon) -> Duration {
    let started = Instant::now();
    let (status, body) = get_json(d, "/api/v1/series", &[("source", "*"), ("metric", "*")]).await;
    assert_eq!(status, 200, "{body}");
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slow_clients_do_not_starve_a_normal_one() {
    let d = Daemon::start_async(tallyd().env("TALLYD_HTTP_HEADER_READ_TIMEOUT", "3s")).await;
    let usual = normal_request(&d).await;
    let mut idle = Vec::with_capacity(IDLE);
    for _ in 0..IDLE {
        idle.push(connect(&d).await);
    }
    // A reader that takes its response in 64-byte sips, with a small
    // receive buffer so the daemon's writes back up.
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let addr = d.http_url().trim_start_matches("http://").parse().unwrap();
    let mut slow = within("connect", socket.connect(addr)).await.unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let sipping = tokio::spawn(async move {
        let mut buf = [0u8; 64];
        for _ in 0..50 {
            if slow.read(&mut buf).await.unwrap_or(0) == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    // A client that trickles its request head.
    let mut trickle = connect(&d).await;
    let trickling = tokio::spawn(async move {
        for b in b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-pad: "
            .iter()
            .cycle()
        {
            if trickle.write_all(&[*b]).await.is_err() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    });
    for _ in 0..5 {
        let took = normal_request(&d).await;
        assert!(
            took < PROMPT,
            "a normal request took {took:?} (usual {usual:?}) beside {IDLE} idle connections"
        );
    }
    // The header deadline ends the idle and the trickling connections.
    let started = Instant::now();
    for s in idle.drain(..).take(20) {
        read_to_close(s).await;
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        within("trickling client", trickling).await.unwrap(),
        "the trickling client was cut off"
    );
    within("slow reader", sipping).await.unwrap();
    normal_request(&d).await;
}

/// A client sending a request head that declares a 900-byte body, then
/// the body a byte every 200 ms until `trickling` is cancelled (busy: never
/// silent for a second), then nothing, its connection open until `done`.
fn trickle_body(d: &Daemon, trickling: CancellationToken, done: CancellationToken) {
    let addr = d.http_url().trim_start_matches("http://").to_string();
    tokio::spawn(async move {
        let Ok(mut s) = TcpStream::connect(addr).await else {
            return;
        };
        let head = "POST /prometheus/api/v1/query HTTP/1.1\r\nhost: x\r\n\
                    content-type: application/x-www-form-urlencoded\r\n\
                    content-length: 900\r\n\r\nquery=";
        if s.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        while !trickling.is_cancelled() {
            if s.write_all(b"1").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        done.cancelled().await;
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_cap_and_size_limits_name_their_setting() {
    let d = Daemon::start_async(
        tallyd()
            .env("TALLYD_HTTP_MAX_CONNECTIONS", "8")
            .env("TALLYD_HTTP_RESERVED_CONNECTIONS", "0")
            .env("TALLYD_HTTP_MAX_BODY_BYTES", "1000"),
    )
    .await;
    // Eight connections sending their bodies, slowly but steadily: each
    // has a request in progress that is not stalled, so none makes room.
    let (trickling, done) = (CancellationToken::new(), CancellationToken::new());
    for _ in 0..8 {
        trickle_body(&d, trickling.clone(), done.clone());
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let refused = loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let answer = read_to_close(connect(&d).await).await;
        if answer.starts_with("HTTP/1.1 503") || Instant::now() > deadline {
            break answer;
        }
    };
    assert!(
        refused.starts_with("HTTP/1.1 503") && refused.contains("http.max_connections"),
        "{refused}"
    );
    // Once they go silent, a second later a new connection takes the place
    // of one of them.
    trickling.cancel();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let url = format!("{}/prometheus/api/v1/query", d.http_url());
    let big = format!("query={}", "1".repeat(2000));
    let resp = within(
        "POST",
        http_client()
            .post(&url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(big)
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), 413);
    let text = resp.text().await.unwrap();
    assert!(text.contains("http.max_body_bytes"), "{text}");
    let resp = http_client()
        .get(format!("{}/healthz", d.http_url()))
        .header("x-big", "a".repeat(70_000))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 431);
    normal_request(&d).await;
    let text = metrics_text(&d).await;
    assert!(
        metric(&text, "tally_http_connections_refused_total", &[]).unwrap_or(0.0) >= 1.0,
        "{text}"
    );
    assert!(
        metric(
            &text,
            "tally_http_connections_closed_total",
            &[("reason", "evicted")]
        )
        .unwrap_or(0.0)
            >= 1.0,
        "{text}"
    );
    done.cancel();
}

/// With every connection of the cap working, a new one is served from the
/// reserve: health and metrics answer, anything else is a 503 naming the
/// cap, and the connection ends after its one request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reserve_serves_health_beyond_the_cap() {
    let d = Daemon::start_async(
        tallyd()
            .env("TALLYD_HTTP_MAX_CONNECTIONS", "4")
            .env("TALLYD_HTTP_RESERVED_CONNECTIONS", "2"),
    )
    .await;
    let (trickling, done) = (CancellationToken::new(), CancellationToken::new());
    for _ in 0..4 {
        trickle_body(&d, trickling.clone(), done.clone());
    }
    // Once the four are in, a new connection lands in the reserve.
    let deadline = Instant::now() + Duration::from_secs(20);
    let over = loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut s = connect(&d).await;
        s.write_all(b"GET /api/v1/sources HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let answer = read_to_close(s).await;
        if answer.starts_with("HTTP/1.1 503") || Instant::now() > deadline {
            break answer;
        }
    };
    assert!(
        over.starts_with("HTTP/1.1 503") && over.contains("http.max_connections"),
        "{over}"
    );
    for path in ["/healthz", "/readyz", "/metrics"] {
        let mut s = connect(&d).await;
        s.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        // One request, then the reserve closes the connection.
        let answer = read_to_close(s).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{path}: {answer}");
    }
    trickling.cancel();
    done.cancel();
}

/// Caps that do not fit the open-file limit are warned about at start,
/// naming the settings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caps_above_the_open_file_limit_are_warned_about() {
    let d = Daemon::start_async(tallyd().open_files(512)).await;
    let logs = d.logs();
    assert!(
        logs.contains("open-file limit (RLIMIT_NOFILE) is below")
            && logs.contains("grpc.max_connections + http.max_connections"),
        "{logs}"
    );
    normal_request(&d).await;
}
