//! The audit's connection findings, through the real binary under a
//! lowered open-file limit: 1,100 clients that send the head of a
//! remote-write POST and then nothing, and 20,000 connections to the gRPC
//! port that never send the HTTP/2 preface (in plain text; and over TLS,
//! before any handshake and, for a thousand more, after a finished one).
//!
//! Meanwhile `/healthz` answers and a normal push and read succeed
//! promptly on new connections, and the daemon never runs out of file
//! descriptors. After the deadlines (lowered here) every silent connection
//! is closed, and each one is counted: evicted for a newer one, refused at
//! the cap, or closed by its deadline.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::{CertificateDer, ServerName};
use tally_proto::v1 as pb;
use tally_testkit::client::{now_ms, series, within};
use tally_testkit::metrics::{metric, metrics_text_at};
use tally_testkit::{Daemon, DaemonOpts};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tonic::transport::{Channel, Endpoint};

use super::batch;
use crate::tallyd;

/// The daemon's open-file limit: the caps below and the baseline fit in
/// it, 20,000 connections would not.
const OPEN_FILES: u64 = 1024;
/// Connections at once on each listener.
const CAP: usize = 300;
/// Every deadline a silent client meets here.
const DEADLINE: &str = "4s";
/// How long the counts may take to add up once the clients stop.
const SETTLE: Duration = Duration::from_secs(60);
/// How long the 20,000 connections may take to open, on a loaded machine.
const FLOOD: Duration = Duration::from_secs(300);
/// The bound on the normal requests made beside the silent ones: far above
/// their usual milliseconds, far below the deadlines the silent ones get.
const PROMPT: Duration = Duration::from_secs(2);

const SILENT_BODIES: usize = 1_100;
const SILENT_GRPC: usize = 20_000;
const SILENT_AFTER_HANDSHAKE: usize = 1_000;

/// The daemon with the lowered limit, caps and deadlines.
fn daemon() -> DaemonOpts {
    tallyd()
        .open_files(OPEN_FILES)
        .env("TALLYD_HTTP_MAX_CONNECTIONS", CAP.to_string())
        .env("TALLYD_HTTP_RESERVED_CONNECTIONS", "8")
        .env("TALLYD_GRPC_MAX_CONNECTIONS", CAP.to_string())
        .env("TALLYD_HTTP_BODY_READ_TIMEOUT", DEADLINE)
        .env("TALLYD_HTTP_HEADER_READ_TIMEOUT", DEADLINE)
        .env("TALLYD_GRPC_PREFACE_TIMEOUT", DEADLINE)
        .env("TALLYD_TLS_HANDSHAKE_TIMEOUT", DEADLINE)
        .env("TALLYD_TLS_MAX_HANDSHAKES", "64")
}

/// Lets this test process hold thousands of sockets itself; how many it
/// may hold.
fn own_limit() -> u64 {
    tally::listen::fds::raise_to(64_000).now.unwrap_or(64_000)
}

/// The daemon's log must show neither a shortage of descriptors nor the
/// warning that its caps do not fit its limit.
fn assert_no_fd_trouble(d: &Daemon) {
    let logs = d.logs();
    assert!(!logs.contains("accepting a connection failed"), "{logs}");
    assert!(
        !logs.contains("open-file limit (RLIMIT_NOFILE) is below"),
        "{logs}"
    );
}

/// Opens `n` connections to `addr`, `send`ing on each, at most 200 being
/// made at once; keeps at most `window` of them (dropping the oldest, by
/// then closed by the daemon). Returns how many connected.
async fn flood(addr: SocketAddr, n: usize, window: usize, send: &'static [u8]) -> usize {
    let mut held = std::collections::VecDeque::new();
    let mut connecting = JoinSet::new();
    let mut connected = 0;
    let mut started = 0;
    while started < n || !connecting.is_empty() {
        while started < n && connecting.len() < 200 {
            started += 1;
            connecting.spawn(async move {
                let mut s = tokio::time::timeout(Duration::from_secs(20), TcpStream::connect(addr))
                    .await
                    .ok()?
                    .ok()?;
                if !send.is_empty() {
                    s.write_all(send).await.ok()?;
                }
                Some(s)
            });
        }
        if let Some(Ok(Some(s))) = connecting.join_next().await {
            connected += 1;
            held.push_back(s);
            if held.len() > window {
                held.pop_front();
            }
        }
    }
    // The newest stay open until the daemon closes them.
    for mut s in held {
        tokio::spawn(async move {
            let mut buf = [0u8; 512];
            let _ = tokio::time::timeout(SETTLE, async {
                while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
            })
            .await;
        });
    }
    connected
}

/// Waits for [`flood`] to end (within [`FLOOD`]); how many connected.
async fn flood_done(flooding: tokio::task::JoinHandle<usize>) -> usize {
    let started = Instant::now();
    let connected = tokio::time::timeout(FLOOD, flooding)
        .await
        .expect("the flood takes too long")
        .unwrap();
    eprintln!(
        "flood: {connected} connections, the last {:?} after the checks",
        started.elapsed()
    );
    connected
}

/// Runs `check`, asserting it succeeds within [`PROMPT`]; returns its time.
async fn prompt<F: std::future::Future<Output = Result<(), String>>>(
    what: &str,
    check: F,
) -> Duration {
    let started = Instant::now();
    let r = within(what, check).await;
    let took = started.elapsed();
    assert!(r.is_ok(), "{what}: {r:?}");
    assert!(
        took < PROMPT,
        "{what} took {took:?} beside the silent clients"
    );
    eprintln!("{what}: {took:?}");
    took
}

/// Sums of the closed-connection counter by reason, and the refusals.
fn closed(text: &str, listener: &str, reasons: &[&str]) -> f64 {
    let name = format!("tally_{listener}_connections_closed_total");
    reasons
        .iter()
        .map(|r| metric(text, &name, &[("reason", r)]).unwrap_or(0.0))
        .sum()
}

/// The counts of one listener in a scrape.
struct Counts {
    accepted: f64,
    refused: f64,
    /// Closed, every reason.
    closed: f64,
    open: f64,
}

impl Counts {
    fn of(text: &str, listener: &str) -> Counts {
        let m = |suffix: &str| {
            metric(text, &format!("tally_{listener}_connections{suffix}"), &[]).unwrap_or(0.0)
        };
        Counts {
            accepted: m("_accepted_total"),
            refused: m("_refused_total"),
            closed: m("_closed_total"),
            open: m(""),
        }
    }

    /// Every connection taken is accounted for: refused, closed, or one of
    /// at most `spare` still open.
    fn settled(&self, spare: f64) -> bool {
        self.open <= spare && self.accepted == self.refused + self.closed + self.open
    }
}

/// Waits until the listener's counts settle (see [`Counts::settled`]) with
/// at least `want` connections taken, and returns the scrape. `scrape`
/// reads `/metrics`.
async fn settle<S, F>(scrape: S, listener: &str, want: usize, spare: f64) -> String
where
    S: Fn() -> F,
    F: std::future::Future<Output = String>,
{
    let deadline = Instant::now() + SETTLE;
    loop {
        let text = scrape().await;
        let c = Counts::of(&text, listener);
        if c.accepted >= want as f64 && c.settled(spare) {
            eprintln!(
                "{listener}: {} accepted, {} refused, {} closed, {} open",
                c.accepted, c.refused, c.closed, c.open
            );
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "after {SETTLE:?}: {} accepted of {want}, {} refused, {} closed, {} open\n{text}",
            c.accepted,
            c.refused,
            c.closed,
            c.open
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Connections the kernel completed but dropped from a full accept queue
/// never reach the daemon: allow for a few in a flood.
fn nearly(n: usize) -> usize {
    n - n / 100
}

/// A normal remote-write push on a new connection: (status, body).
async fn remote_write(d: &Daemon, source: &str) -> Result<(), String> {
    use prost::Message as _;
    use tally_proto::prometheus as rw;
    let req = rw::WriteRequest {
        timeseries: vec![rw::TimeSeries {
            labels: [("__name__", "up"), ("instance", source)]
                .iter()
                .map(|(n, v)| rw::Label {
                    name: (*n).into(),
                    value: (*v).into(),
                })
                .collect(),
            samples: vec![rw::Sample {
                value: 1.0,
                timestamp: now_ms(),
            }],
        }],
        metadata: vec![],
    };
    let body = snap::raw::Encoder::new()
        .compress_vec(&req.encode_to_vec())
        .map_err(|e| e.to_string())?;
    let resp = fresh_client()
        .post(format!("{}/api/v1/write", d.http_url()))
        .header("content-type", "application/x-protobuf")
        .header("content-encoding", "snappy")
        .body(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    match resp.status().as_u16() {
        204 => Ok(()),
        s => Err(format!("{s}: {}", resp.text().await.unwrap_or_default())),
    }
}

/// An HTTP client that opens a new connection for every request.
fn fresh_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap()
}

async fn http_ok(url: String) -> Result<(), String> {
    let resp = fresh_client()
        .get(&url)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    match resp.status().as_u16() {
        200 => Ok(()),
        s => Err(format!(
            "{url}: {s}: {}",
            resp.text().await.unwrap_or_default()
        )),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_http_bodies_are_timed_out_and_do_not_keep_others_out() {
    own_limit();
    let d = Daemon::start_async(daemon()).await;
    let addr: SocketAddr = d.http_url().trim_start_matches("http://").parse().unwrap();
    let head: &'static [u8] = b"POST /api/v1/write HTTP/1.1\r\nhost: x\r\n\
        content-type: application/x-protobuf\r\ncontent-encoding: snappy\r\n\
        content-length: 1000\r\n\r\n";
    let silent: Vec<TcpStream> = {
        let mut set = JoinSet::new();
        for _ in 0..SILENT_BODIES {
            set.spawn(async move {
                let mut s = TcpStream::connect(addr).await.ok()?;
                s.write_all(head).await.ok()?;
                Some(s)
            });
        }
        let mut all = Vec::new();
        while let Some(r) = set.join_next().await {
            all.extend(r.unwrap());
        }
        all
    };
    assert_eq!(silent.len(), SILENT_BODIES);
    // The oldest bodies have now been stalled for a second: new clients
    // take their places.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    prompt("/healthz", http_ok(format!("{}/healthz", d.http_url()))).await;
    prompt("a remote-write push", remote_write(&d, "normal")).await;
    prompt(
        "a read",
        http_ok(format!("{}/api/v1/series?source=*&metric=*", d.http_url())),
    )
    .await;

    // Every silent client is answered 408 at its deadline, or 503 from
    // the reserve, or closed to make room; none is left open.
    let mut answers = std::collections::BTreeMap::<String, usize>::new();
    for mut s in silent {
        let mut out = Vec::new();
        let _ = within("a silent body's end", s.read_to_end(&mut out)).await;
        let text = String::from_utf8_lossy(&out);
        let kind = text.split("\r\n").next().unwrap_or("").to_string();
        assert!(
            kind.is_empty() || kind.starts_with("HTTP/1.1 408") || kind.starts_with("HTTP/1.1 503"),
            "{text}"
        );
        *answers.entry(kind).or_default() += 1;
    }
    eprintln!("silent bodies: {answers:?}");
    assert!(
        answers.keys().any(|k| k.starts_with("HTTP/1.1 408")),
        "{answers:?}"
    );

    let base = d.http_url();
    let text = settle(|| metrics_text_at(&base), "http", SILENT_BODIES, 2.0).await;
    eprintln!(
        "http closed: evicted {}, body_timeout {}, closed {}; refused {:?}",
        closed(&text, "http", &["evicted"]),
        closed(&text, "http", &["body_timeout"]),
        closed(&text, "http", &["closed"]),
        metric(&text, "tally_http_connections_refused_total", &[])
    );
    assert!(closed(&text, "http", &["body_timeout"]) >= 1.0, "{text}");
    assert!(closed(&text, "http", &["evicted"]) >= 1.0, "{text}");
    // The normal push was kept.
    let body = tally_testkit::client::get_ok(
        &d,
        "/api/v1/latest",
        &[("source", "normal"), ("metric", "up")],
    )
    .await;
    assert_eq!(body["series"].as_array().map(Vec::len), Some(1), "{body}");
    assert_no_fd_trouble(&d);
}

/// A normal push and a read over gRPC on `channel`.
async fn grpc_push_and_read(channel: Channel, source: &str) -> Result<(), String> {
    let mut ingest = pb::ingest_client::IngestClient::new(channel.clone());
    let resp = ingest
        .push(pb::PushRequest {
            sources: vec![batch(
                source,
                series("cpu", pb::SampleKind::Gauge, &[(now_ms(), 1.0)]),
            )],
        })
        .await
        .map_err(|s| format!("Push: {s:?}"))?
        .into_inner();
    if resp.accepted != 1 {
        return Err(format!("{resp:?}"));
    }
    let mut query = pb::query_client::QueryClient::new(channel);
    query
        .latest(pb::LatestRequest {
            source: source.into(),
            metric: "cpu".into(),
            ..Default::default()
        })
        .await
        .map_err(|s| format!("Latest: {s:?}"))?;
    Ok(())
}

/// Runs the normal clients once the flood is under way: `healthz`, then a
/// gRPC push and read on a connection made by `connect`. In a flood of
/// new connections a new one can be turned away (or made room for before
/// its first bytes are read): like any client, this one tries again, and
/// it must be through within [`PROMPT`].
async fn beside_the_flood<H, C, F>(healthz: H, connect: C, source: &'static str)
where
    H: std::future::Future<Output = Result<(), String>>,
    C: Fn() -> F,
    F: std::future::Future<Output = Result<Channel, String>>,
{
    prompt("/healthz", healthz).await;
    let started = Instant::now();
    let mut tries = 0;
    loop {
        tries += 1;
        let attempt = async {
            let channel = connect().await?;
            grpc_push_and_read(channel, source).await
        };
        match tokio::time::timeout(PROMPT, attempt).await {
            Ok(Ok(())) => break,
            Ok(Err(e)) if started.elapsed() < PROMPT => {
                eprintln!("try {tries}: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("no gRPC push and read within {PROMPT:?} ({tries} tries): {other:?}"),
        }
    }
    let took = started.elapsed();
    eprintln!("a gRPC push and read on a new connection: {took:?} ({tries} tries)");
    assert!(took < PROMPT, "a gRPC push and read took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_grpc_connections_are_closed_and_do_not_exhaust_descriptors() {
    let window = (own_limit().saturating_sub(2_000) as usize).clamp(1_000, 5_000);
    let d = Daemon::start_async(daemon()).await;
    let addr: SocketAddr = d.grpc_url().trim_start_matches("http://").parse().unwrap();
    let started = Instant::now();
    let flooding = tokio::spawn(flood(addr, SILENT_GRPC, window, b""));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let url = d.grpc_url();
    beside_the_flood(
        http_ok(format!("{}/healthz", d.http_url())),
        || async {
            Endpoint::from_shared(url.clone())
                .map_err(|e| e.to_string())?
                .connect()
                .await
                .map_err(|e| e.to_string())
        },
        "plain",
    )
    .await;
    let connected = flood_done(flooding).await;
    eprintln!("{connected} connections in {:?}", started.elapsed());
    assert_eq!(connected, SILENT_GRPC);
    let base = d.http_url();
    let text = settle(|| metrics_text_at(&base), "grpc", nearly(SILENT_GRPC), 1.0).await;
    eprintln!(
        "grpc closed: evicted {}, preface_timeout {}; refused {:?}",
        closed(&text, "grpc", &["evicted"]),
        closed(&text, "grpc", &["preface_timeout"]),
        metric(&text, "tally_grpc_connections_refused_total", &[])
    );
    assert!(closed(&text, "grpc", &["preface_timeout"]) >= 1.0, "{text}");
    assert_no_fd_trouble(&d);
}

/// A CA and a server certificate for 127.0.0.1 and localhost it issued, as
/// files in `dir`: (CA PEM, certificate path, key path).
fn issue(dir: &std::path::Path) -> (String, std::path::PathBuf, std::path::PathBuf) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (ca.pem(), cert_path, key_path)
}

/// A client configuration trusting `ca`, offering `alpn`.
fn client_tls(ca: &str, alpn: &[u8]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::pem::PemObject::pem_slice_iter(ca.as_bytes()) {
        let c: CertificateDer<'static> = c.unwrap();
        roots.add(c).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    Arc::new(config)
}

async fn tls_connect(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost").map_err(std::io::Error::other)?;
    tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
}

/// `GET path` over HTTPS/1.1 on a new connection; Ok on a 200.
async fn https_ok(addr: SocketAddr, ca: String, path: &str) -> Result<(), String> {
    let mut tls = tls_connect(addr, client_tls(&ca, b"http/1.1"))
        .await
        .map_err(|e| e.to_string())?;
    let req = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
    tls.write_all(req.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out);
    if text.starts_with("HTTP/1.1 200") {
        Ok(())
    } else {
        Err(text.into_owned())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_tls_connections_before_and_after_the_handshake_are_closed() {
    let window = (own_limit().saturating_sub(2_000) as usize).clamp(1_000, 5_000);
    let certs = tempfile::tempdir().unwrap();
    let (ca, cert, key) = issue(certs.path());
    let d = Daemon::start_async(
        daemon()
            .env("TALLYD_TLS_CERT_FILE", cert.display().to_string())
            .env("TALLYD_TLS_KEY_FILE", key.display().to_string()),
    )
    .await;
    let grpc: SocketAddr = d.grpc_url().trim_start_matches("http://").parse().unwrap();
    let http: SocketAddr = d.http_url().trim_start_matches("http://").parse().unwrap();
    let flooding = tokio::spawn(flood(grpc, SILENT_GRPC, window, b""));
    // A thousand more finish their handshake, then say nothing.
    let grpc_tls = client_tls(&ca, b"h2");
    let handshaken = {
        let config = grpc_tls.clone();
        tokio::spawn(async move {
            let mut set = JoinSet::new();
            let mut done = Vec::new();
            for _ in 0..SILENT_AFTER_HANDSHAKE {
                let config = config.clone();
                set.spawn(async move { tls_connect(grpc, config).await.ok() });
                if set.len() >= 50 {
                    if let Some(Ok(Some(s))) = set.join_next().await {
                        done.push(s);
                    }
                }
            }
            while let Some(r) = set.join_next().await {
                done.extend(r.unwrap());
            }
            done
        })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let config = grpc_tls.clone();
    beside_the_flood(
        https_ok(http, ca.clone(), "/healthz"),
        || async {
            let config = config.clone();
            let connector = tower::service_fn(move |_: tonic::codegen::http::Uri| {
                let config = config.clone();
                async move {
                    tls_connect(grpc, config)
                        .await
                        .map(hyper_util::rt::TokioIo::new)
                }
            });
            Endpoint::from_static("http://localhost")
                .connect_with_connector(connector)
                .await
                .map_err(|e| e.to_string())
        },
        "over-tls",
    )
    .await;
    let connected = flood_done(flooding).await;
    let handshaken = tokio::time::timeout(FLOOD, handshaken)
        .await
        .expect("the handshakes take too long")
        .unwrap();
    eprintln!("{connected} silent, {} after a handshake", handshaken.len());
    assert_eq!(connected, SILENT_GRPC);
    let want = connected + handshaken.len();
    // The HTTP listener speaks TLS too: read the counts through it.
    let reasons = [
        "evicted",
        "preface_timeout",
        "handshake_timeout",
        "handshake_failed",
    ];
    let text = settle(
        || https_text(http, &ca, "/metrics"),
        "grpc",
        nearly(want),
        1.0,
    )
    .await;
    for r in reasons {
        eprintln!("grpc closed {r}: {}", closed(&text, "grpc", &[r]));
    }
    assert!(
        closed(&text, "grpc", &["handshake_timeout", "evicted"]) >= 1.0,
        "{text}"
    );
    drop(handshaken);
    assert_no_fd_trouble(&d);
}

/// The body of `GET path` over HTTPS/1.1.
async fn https_text(addr: SocketAddr, ca: &str, path: &str) -> String {
    let mut tls = within(
        "TLS connect",
        tls_connect(addr, client_tls(ca, b"http/1.1")),
    )
    .await
    .unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
    tls.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = within("reading", tls.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    text.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or(text)
}
