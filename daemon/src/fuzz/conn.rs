//! Connection-level behaviours against the real connection path in
//! process: random scripts of partial request heads, partial and chunked
//! bodies, partial and wrong HTTP/2 prefaces and frames, TLS handshakes
//! cut short or left hanging, pauses of up to minutes between them, and a
//! client that then goes silent or closes. Each script runs on an
//! in-memory stream against the HTTP or the gRPC server, in plain text or
//! TLS, admitted and served as an accepted socket is (`listen::Harness`),
//! on a paused clock, so minutes of deadlines cost no time.
//!
//! A script fails the harness when a connection task panics, when the
//! daemon holds the connection past [`BOUND`] after the client went
//! silent (every state has a deadline), when it leaves a slot taken, or
//! when it answers an HTTP request with a 5xx other than 503.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};

use crate::grpc::GrpcConfig;
use crate::http::HttpConfig;
use crate::listen::{Harness, Limits, Names, Serve};
use crate::tls::{Protocol, ServerTls, TlsConfig};

/// How long after a script ends the daemon may still hold its connection:
/// beyond every deadline a silent client meets (the longest, gRPC's idle
/// timeout and its grace, is under six minutes).
const BOUND: Duration = Duration::from_secs(15 * 60);

/// The thread the harness runs on, to tell its panics from others'.
const THREAD: &str = "tally-fuzz-conn";

/// Panics on [`THREAD`] since the harness began.
static PANICS: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug, Clone)]
enum Step {
    Send(Vec<u8>),
    Pause(Duration),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Http,
    Grpc,
}

#[derive(Debug, Clone)]
enum Tls {
    Off,
    /// Over a TLS listener: the first `n` bytes of a real ClientHello,
    /// then the script's bytes as they are.
    Partial(usize),
    /// A whole handshake, then the script inside TLS.
    Full,
}

#[derive(Debug, Clone)]
struct Script {
    target: Target,
    tls: Tls,
    steps: Vec<Step>,
    /// Whether the client closes its side at the end, or goes silent.
    close: bool,
}

const HTTP_PIECES: &[&str] = &[
    "GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n",
    "GET /readyz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    "GET /api/v1/series?source=*&metric=* HTTP/1.1\r\nhost: x\r\n\r\n",
    "GET /prometheus/api/v1/label/%ff/values HTTP/1.1\r\nhost: x\r\n\r\n",
    "POST /api/v1/write HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-protobuf\r\ncontent-encoding: snappy\r\ncontent-length: 40\r\n\r\n",
    "POST /api/v1/write HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-protobuf;proto=io.prometheus.write.v2.Request\r\ncontent-encoding: snappy\r\ncontent-length: 3\r\n\r\nabc",
    "POST /v1/metrics HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n",
    "POST /v1/metrics HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-protobuf\r\ncontent-length: 99999999\r\n\r\n",
    "POST /prometheus/api/v1/query HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: 12\r\n\r\n",
    "query=1+1&x=",
    "5\r\nhello\r\n",
    "0\r\n\r\n",
    "{}",
    "GET /api",
    "host: x\r\n",
    "x-pad: aaaaaaaaaaaaaaaa\r\n",
    "expect: 100-continue\r\n",
    "connection: close\r\n",
    "\r\n",
    "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
];

/// The HTTP/2 connection preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// An HTTP/2 frame.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// HPACK literal fields, not indexed, not Huffman-coded (names and values
/// under 127 bytes).
fn hpack(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (n, v) in fields {
        out.push(0);
        out.push(n.len() as u8);
        out.extend_from_slice(n.as_bytes());
        out.push(v.len() as u8);
        out.extend_from_slice(v.as_bytes());
    }
    out
}

/// Pieces of gRPC conversations: the preface, settings, pings, a health
/// check's headers and message, resets, window updates.
fn grpc_pieces() -> Vec<Vec<u8>> {
    let headers = hpack(&[
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/grpc.health.v1.Health/Check"),
        (":authority", "x"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]);
    vec![
        PREFACE.to_vec(),
        PREFACE[..10].to_vec(),
        frame(4, 0, 0, &[]),
        frame(4, 1, 0, &[]),
        frame(6, 0, 0, &[7; 8]),
        frame(1, 4, 1, &headers),
        frame(1, 4, 3, &headers),
        frame(0, 1, 1, &[0, 0, 0, 0, 0]),
        frame(0, 0, 3, &[0, 0, 0, 0, 9, 1]),
        frame(3, 0, 1, &[0, 0, 0, 8]),
        frame(8, 0, 0, &[0, 0, 0x10, 0]),
        frame(7, 0, 0, &[0; 8]),
    ]
}

fn step(target: Target) -> impl Strategy<Value = Step> {
    let piece: BoxedStrategy<Vec<u8>> = match target {
        Target::Http => proptest::sample::select(HTTP_PIECES)
            .prop_map(|p| p.as_bytes().to_vec())
            .boxed(),
        Target::Grpc => proptest::sample::select(grpc_pieces()).boxed(),
    };
    let cut = (piece.clone(), any::<prop::sample::Index>())
        .prop_map(|(p, i)| p[..i.index(p.len() + 1)].to_vec());
    prop_oneof![
        6 => piece.prop_map(Step::Send),
        2 => cut.prop_map(Step::Send),
        1 => proptest::collection::vec(any::<u8>(), 0..64).prop_map(Step::Send),
        3 => (0u64..5_000).prop_map(|ms| Step::Pause(Duration::from_millis(ms))),
        1 => (5u64..400).prop_map(|s| Step::Pause(Duration::from_secs(s))),
    ]
}

fn script() -> impl Strategy<Value = Script> {
    let tls = prop_oneof![
        8 => Just(Tls::Off),
        3 => (0usize..600).prop_map(Tls::Partial),
        1 => Just(Tls::Full),
    ];
    (
        prop_oneof![Just(Target::Http), Just(Target::Grpc)],
        tls,
        any::<bool>(),
    )
        .prop_flat_map(|(target, tls, close)| {
            proptest::collection::vec(step(target), 0..12).prop_map(move |steps| Script {
                target,
                tls: tls.clone(),
                steps,
                close,
            })
        })
}

/// A certificate for `localhost` and a client configuration trusting it.
struct Pki {
    _dir: tempfile::TempDir,
    server: Arc<ServerTls>,
    client: Arc<rustls::ClientConfig>,
}

fn pki() -> Pki {
    let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("key: {e}"));
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .and_then(|p| p.self_signed(&key))
        .unwrap_or_else(|e| panic!("certificate: {e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let (cert_file, key_file) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let written = std::fs::write(&cert_file, cert.pem())
        .and_then(|()| std::fs::write(&key_file, key.serialize_pem()));
    written.unwrap_or_else(|e| panic!("writing certificates: {e}"));
    let server = ServerTls::load(&TlsConfig {
        cert_file,
        key_file,
        ..TlsConfig::default()
    });
    let Ok(Some(server)) = server else {
        panic!("TLS did not load: {:?}", server.err())
    };
    let mut roots = rustls::RootCertStore::empty();
    let der: CertificateDer<'static> = cert.der().clone();
    roots
        .add(der)
        .unwrap_or_else(|e| panic!("root certificate: {e}"));
    let client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap_or_else(|e| panic!("protocol versions: {e}"))
    .with_root_certificates(roots)
    .with_no_client_auth();
    Pki {
        _dir: dir,
        server,
        client: Arc::new(client),
    }
}

/// A real ClientHello's bytes, for handshakes cut short.
fn client_hello(client: &Arc<rustls::ClientConfig>) -> Vec<u8> {
    let name = ServerName::try_from("localhost").unwrap_or_else(|e| panic!("name: {e}"));
    let mut conn = rustls::ClientConnection::new(client.clone(), name)
        .unwrap_or_else(|e| panic!("client: {e}"));
    let mut out = Vec::new();
    while conn.wants_write() {
        if conn.write_tls(&mut out).is_err() {
            break;
        }
    }
    out
}

/// Serves one in-memory connection on a harness; the task serving it.
type ServeOne = Box<dyn Fn(&Harness, DuplexStream) -> Option<tokio::task::JoinHandle<()>>>;

/// The four listeners a script can meet (HTTP and gRPC, each in plain text
/// and TLS), without sockets, and their servers.
struct Listeners {
    http: (Harness, Harness),
    grpc: (Harness, Harness),
    http_serve: ServeOne,
    grpc_serve: ServeOne,
}

fn limits(names: Names, reserved: usize, write: Option<Duration>) -> Limits {
    Limits {
        names,
        max_connections: 64,
        reserved,
        write_timeout: write,
    }
}

fn boxed<T: Serve>(serve: T) -> ServeOne {
    Box::new(move |h: &Harness, s: DuplexStream| h.serve(&serve, s))
}

fn listeners(dir: &std::path::Path, tls: &Arc<ServerTls>) -> Listeners {
    let http_cfg = HttpConfig::default();
    let http_limits = || limits(Names::HTTP, 8, Some(http_cfg.write_timeout));
    let grpc_limits = || limits(Names::GRPC, 0, None);
    let (_, health) = tonic_health::server::health_reporter();
    let routes = tonic::service::Routes::new(health);
    Listeners {
        http: (
            Harness::new(http_limits(), None),
            Harness::new(http_limits(), Some((tls.clone(), Protocol::Http))),
        ),
        grpc: (
            Harness::new(grpc_limits(), None),
            Harness::new(grpc_limits(), Some((tls.clone(), Protocol::Grpc))),
        ),
        http_serve: boxed(crate::http::connection_server(
            super::http::state(dir),
            &http_cfg,
            false,
        )),
        grpc_serve: boxed(crate::grpc::connection_server(
            routes,
            GrpcConfig::default(),
        )),
    }
}

/// Reads everything the daemon sends until it closes (at most 1 MiB kept).
async fn drain(mut r: impl AsyncRead + Unpin) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    while let Ok(n) = r.read(&mut buf).await {
        if n == 0 {
            break;
        }
        if out.len() < 1 << 20 {
            out.extend_from_slice(&buf[..n]);
        }
    }
    out
}

/// Plays `steps` on `w`, then closes it or leaves it open and silent.
async fn play(mut w: impl AsyncWrite + Unpin, steps: &[Step], close: bool) {
    for s in steps {
        match s {
            Step::Send(bytes) => {
                if w.write_all(bytes).await.is_err() || w.flush().await.is_err() {
                    return;
                }
            }
            Step::Pause(d) => tokio::time::sleep(*d).await,
        }
    }
    if close {
        let _ = w.shutdown().await;
    } else {
        // Silent, the connection open, until the daemon closes it.
        std::future::pending::<()>().await;
    }
}

/// Plays `steps` on `io` while reading what comes back; ends once the
/// daemon has closed its side, with what it sent.
async fn converse(io: impl AsyncRead + AsyncWrite, steps: &[Step], close: bool) -> Vec<u8> {
    let (r, w) = tokio::io::split(io);
    let reading = drain(r);
    let writing = play(w, steps, close);
    tokio::pin!(reading, writing);
    let mut played = false;
    loop {
        tokio::select! {
            out = &mut reading => return out,
            () = &mut writing, if !played => played = true,
        }
    }
}

/// Runs one script; what the daemon sent back over plain text (nothing
/// for TLS).
async fn run(s: &Script, l: &Listeners, pki: &Pki, hello: &[u8]) -> Result<Vec<u8>, TestCaseError> {
    let (ours, theirs) = tokio::io::duplex(64 * 1024);
    let (harness, serve) = match (s.target, matches!(s.tls, Tls::Off)) {
        (Target::Http, true) => (&l.http.0, &l.http_serve),
        (Target::Http, false) => (&l.http.1, &l.http_serve),
        (Target::Grpc, true) => (&l.grpc.0, &l.grpc_serve),
        (Target::Grpc, false) => (&l.grpc.1, &l.grpc_serve),
    };
    let Some(served) = serve(harness, theirs) else {
        return Err(TestCaseError::fail("an idle harness refused a connection"));
    };
    let client = async {
        match &s.tls {
            Tls::Off => converse(ours, &s.steps, s.close).await,
            Tls::Partial(n) => {
                let mut steps = vec![Step::Send(hello[..(*n).min(hello.len())].to_vec())];
                steps.extend(s.steps.iter().cloned());
                converse(ours, &steps, s.close).await;
                Vec::new()
            }
            Tls::Full => {
                let mut config = (*pki.client).clone();
                config.alpn_protocols = vec![match s.target {
                    Target::Http => b"http/1.1".to_vec(),
                    Target::Grpc => b"h2".to_vec(),
                }];
                let name =
                    ServerName::try_from("localhost").unwrap_or_else(|e| panic!("name: {e}"));
                let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
                if let Ok(tls) = connector.connect(name, ours).await {
                    converse(tls, &s.steps, s.close).await;
                }
                Vec::new()
            }
        }
    };
    // The client side ends when the daemon closes; the daemon's task ends
    // with it, its slot given back.
    let out = tokio::time::timeout(BOUND, client)
        .await
        .map_err(|_| TestCaseError::fail("the daemon held the connection past every deadline"))?;
    tokio::time::timeout(BOUND, served)
        .await
        .map_err(|_| TestCaseError::fail("the connection's task outlived its socket"))?
        .map_err(|e| TestCaseError::fail(format!("the connection's task failed: {e}")))?;
    if harness.open() != 0 {
        return Err(TestCaseError::fail("a slot was not given back"));
    }
    Ok(out)
}

/// What the daemon said over plain text must be its protocol's and never a
/// server error other than 503.
fn check_answer(s: &Script, out: &[u8]) -> Result<(), TestCaseError> {
    if out.is_empty() || !matches!(s.tls, Tls::Off) {
        return Ok(());
    }
    match s.target {
        Target::Http => {
            let text = String::from_utf8_lossy(out);
            // An HTTP/1.0 request is answered in HTTP/1.0, as hyper does.
            let is_status = |t: &str| t.starts_with("HTTP/1.1 ") || t.starts_with("HTTP/1.0 ");
            prop_assert!(is_status(&text), "not HTTP: {text:?}");
            // 503 is a limit of the house; 505 the answer to an HTTP/2
            // preface on this HTTP/1.1 port.
            for status in text
                .match_indices("HTTP/1.")
                .filter(|(i, _)| text.get(*i..).is_some_and(is_status))
                .filter_map(|(i, _)| text.get(i + 9..i + 12))
                .filter(|status| status.starts_with('5'))
            {
                prop_assert!(matches!(status, "503" | "505"), "a {status}: {text}");
            }
        }
        // The server's first frame is its SETTINGS.
        Target::Grpc => prop_assert!(out.len() >= 9 && out[3] == 4, "{out:?}"),
    }
    Ok(())
}

/// A paused single-threaded runtime, the data directory, the certificates
/// and the four listeners a script meets.
fn setting() -> (tokio::runtime::Runtime, tempfile::TempDir, Pki, Listeners) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let pki = pki();
    let l = rt.block_on(async { listeners(dir.path(), &pki.server) });
    (rt, dir, pki, l)
}

fn count_panics() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() == Some(THREAD) {
                PANICS.fetch_add(1, Ordering::Relaxed);
            }
            previous(info);
        }));
    });
}

#[test]
fn fuzz_connection_behaviours() {
    count_panics();
    let harness = std::thread::Builder::new()
        .name(THREAD.into())
        .spawn(|| {
            let (rt, _dir, pki, l) = setting();
            let hello = client_hello(&pki.client);
            let mut runner = TestRunner::new(super::runner());
            let result = runner.run(&script(), |s| {
                let before = PANICS.load(Ordering::Relaxed);
                let out = rt.block_on(run(&s, &l, &pki, &hello))?;
                prop_assert_eq!(
                    PANICS.load(Ordering::Relaxed),
                    before,
                    "a connection task panicked"
                );
                check_answer(&s, &out)
            });
            if let Err(e) = result {
                panic!("{e}");
            }
        })
        .unwrap_or_else(|e| panic!("harness thread: {e}"));
    if let Err(e) = harness.join() {
        std::panic::resume_unwind(e);
    }
}

/// The case the fuzzer once found: an HTTP/1.0 request, answered in
/// HTTP/1.0, is an answer in the server's protocol.
#[test]
fn an_http_1_0_request_is_answered_in_kind() {
    let (rt, _dir, pki, l) = setting();
    let s = Script {
        target: Target::Http,
        tls: Tls::Off,
        steps: vec![
            Step::Send(b"POST /prometheus/api/v1/query HTTP/1.".to_vec()),
            Step::Send(b"0\r\n\r\n".to_vec()),
            Step::Send(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n".to_vec()),
        ],
        close: true,
    };
    let out = rt
        .block_on(run(&s, &l, &pki, &[]))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.starts_with(b"HTTP/1.0 400 "),
        "{}",
        String::from_utf8_lossy(&out)
    );
    check_answer(&s, &out).unwrap_or_else(|e| panic!("{e}"));
}
