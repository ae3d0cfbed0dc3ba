//! InfluxDB line protocol from two clients that are not ours: InfluxData's
//! official Python client `influxdb-client` (the v2 API,
//! `tests/influx-agent/agent.py`, in a venv the tests build) and `curl`
//! (the v1 API, plain and gzip). Every minute slot is read back and
//! compared exactly with a reference computed from what was sent. Then
//! tokens as InfluxDB clients send them, and bad input: each refused line
//! named, the good lines of the same body kept, oversized bodies refused,
//! and the daemon unaffected.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use tally_testkit::bins::workspace_root;
use tally_testkit::client::{get_ok, http_client, now_ms};
use tally_testkit::metrics::{metric, metrics_text};
use tally_testkit::process;
use tally_testkit::venv::PythonEnv;
use tally_testkit::Daemon;

use super::reference::{check_metric, Kind, Reference};
use crate::tallyd;

const CLIENT: PythonEnv = PythonEnv {
    name: "influx-agent",
    requirements: "tests/influx-agent/requirements.txt",
    imports: "influxdb_client",
};

/// Every metric of `r`, read back from `source` and compared.
async fn check_all(d: &Daemon, source: &str, r: &Reference, from_s: i64) {
    let metrics: std::collections::BTreeSet<&str> =
        r.series.keys().map(|(m, _)| m.as_str()).collect();
    let from = from_s.to_string();
    for m in metrics {
        let body = get_ok(
            d,
            "/api/v1/range",
            &[
                ("source", source),
                ("metric", m),
                ("from", &from),
                ("step", "1m"),
            ],
        )
        .await;
        check_metric(r, m, &body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn influxdb_python_client_writes_over_the_v2_api_exactly() {
    let d = Daemon::start_async(tallyd().flush_interval("200ms")).await;
    let start_ms = (now_ms() / 60_000 - 5) * 60_000 + 1_234;
    let url = d.http_url();
    let out = tokio::task::spawn_blocking(move || {
        let python = CLIENT
            .python()
            .unwrap_or_else(|e| panic!("the influxdb-client venv: {e}"));
        let script = workspace_root().join("tests/influx-agent/agent.py");
        let start = start_ms.to_string();
        let args = [
            script.to_str().unwrap(),
            &url,
            "no-token-needed",
            "py-host",
            &start,
        ];
        let run = process::run(&python, &args, Duration::from_secs(120));
        assert!(run.status.success(), "agent.py: {}", run.describe());
        serde_json::from_str::<Value>(&run.stdout)
            .unwrap_or_else(|e| panic!("agent output: {e}: {}", run.describe()))
    })
    .await
    .unwrap();
    let mut r = Reference::default();
    for w in out["written"].as_array().unwrap() {
        let labels: BTreeMap<String, String> = w["labels"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
            .collect();
        let key = (w["metric"].as_str().unwrap().to_owned(), labels);
        let ts = w["ts_ms"].as_i64().unwrap();
        r.sample(key, Kind::Gauge, ts, w["value"].as_f64().unwrap());
    }
    let r = r.finish();
    assert_eq!(r.series.len(), 8, "{:?}", r.series.keys());
    check_all(&d, "py-host", &r, start_ms / 1000 - 60).await;
    // The string field was skipped, not refused.
    let text = metrics_text(&d).await;
    assert_eq!(
        metric(&text, "tally_influx_string_fields_total", &[]),
        Some(30.0)
    );
    assert_eq!(
        metric(
            &text,
            "tally_ingest_requests_total",
            &[
                ("protocol", "influx"),
                ("rpc", "write_v2"),
                ("outcome", "ok")
            ]
        ),
        Some(3.0)
    );
}

/// `curl --data-binary @file` to `url`, with `headers`; the status and body.
fn curl(url: &str, headers: &[&str], body: &Path, user: Option<&str>) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--max-time", "60", "-o", "-", "-w", "\n%{http_code}"])
        .args(["-X", "POST", "--data-binary"])
        .arg(format!("@{}", body.display()));
    for h in headers {
        cmd.args(["-H", h]);
    }
    if let Some(u) = user {
        cmd.args(["-u", u]);
    }
    let out = cmd
        .arg(url)
        .output()
        .unwrap_or_else(|e| panic!("running curl: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", ""));
    let code = code.trim().parse().unwrap_or_else(|_| {
        panic!(
            "curl {url}: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (code, body.to_owned())
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

fn have_curl() -> bool {
    Command::new("curl").arg("--version").output().is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_writes_over_the_v1_api_exactly() {
    if !have_curl() {
        eprintln!("skipped: curl is not installed (scripts/setup-test-deps installs it)");
        return;
    }
    let d = Daemon::start_async(tallyd().flush_interval("200ms")).await;
    let dir = tempfile::tempdir().unwrap();
    let start_s = now_ms() / 60_000 * 60 - 240;
    let mut r = Reference::default();
    let mut plain = String::new();
    let mut zipped = String::new();
    for i in 0..40i64 {
        let ts = start_s + i * 5;
        let (cpu, v) = (format!("cpu{}", i % 2), (i * 7 % 13) as f64 * 1.5);
        let line = format!(
            "cpu,host=curl-host,cpu={cpu} usage_idle={v},procs={}i {ts}\n",
            i % 4
        );
        let labels: BTreeMap<String, String> = [("cpu".to_owned(), cpu)].into();
        r.sample(
            ("cpu_usage_idle".into(), labels.clone()),
            Kind::Gauge,
            ts * 1000,
            v,
        );
        r.sample(
            ("cpu_procs".into(), labels),
            Kind::Gauge,
            ts * 1000,
            (i % 4) as f64,
        );
        if i % 2 == 0 {
            plain.push_str(&line);
        } else {
            zipped.push_str(&line);
        }
    }
    let r = r.finish();
    let plain_path = dir.path().join("plain.lp");
    std::fs::write(&plain_path, &plain).unwrap();
    let zipped_path = dir.path().join("zipped.lp.gz");
    std::fs::write(&zipped_path, gzip(zipped.as_bytes())).unwrap();
    let url = format!("{}/write?db=telegraf&precision=s", d.http_url());
    let (status, body) = curl(&url, &[], &plain_path, None);
    assert_eq!(status, 204, "{body}");
    let (status, body) = curl(&url, &["Content-Encoding: gzip"], &zipped_path, None);
    assert_eq!(status, 204, "{body}");
    check_all(&d, "curl-host", &r, start_s - 60).await;
}

/// A tokens file: an ingest token for sources `web-*`.
const TOKEN: &str = "it-influx-token-0123456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_come_as_influxdb_clients_send_them() {
    if !have_curl() {
        eprintln!("skipped: curl is not installed (scripts/setup-test-deps installs it)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(
        &tokens,
        format!("[[token]]\nname = \"telegraf\"\nrole = \"ingest\"\nsources = [\"web-*\"]\ntoken = \"{TOKEN}\"\n"),
    )
    .unwrap();
    let owner_only = std::os::unix::fs::PermissionsExt::from_mode(0o600);
    std::fs::set_permissions(&tokens, owner_only).unwrap();
    let d = Daemon::start_async(tallyd().env("TALLYD_AUTH_TOKENS_FILE", tokens.to_str().unwrap()))
        .await;
    let body = dir.path().join("line.lp");
    std::fs::write(&body, "m,host=web-1 v=1\n").unwrap();
    let http = d.http_url();
    let token_header = format!("Authorization: Token {TOKEN}");
    let basic = format!("telegraf:{TOKEN}");
    for (url, headers, user) in [
        (
            format!("{http}/write?db=x&u=telegraf&p={TOKEN}"),
            vec![],
            None,
        ),
        (format!("{http}/write?db=x"), vec![], Some(basic.as_str())),
        (
            format!("{http}/write?db=x"),
            vec![token_header.as_str()],
            None,
        ),
        (
            format!("{http}/api/v2/write?org=o&bucket=b"),
            vec![token_header.as_str()],
            None,
        ),
    ] {
        let (status, text) = curl(&url, &headers, &body, user);
        assert_eq!(status, 204, "{url}: {text}");
    }
    let (status, _) = curl(&format!("{http}/api/v2/write?bucket=b"), &[], &body, None);
    assert_eq!(status, 401);
    let (status, _) = curl(
        &format!("{http}/api/v2/write?bucket=b"),
        &["Authorization: Token not-the-token-0123456789"],
        &body,
        None,
    );
    assert_eq!(status, 401);
    std::fs::write(&body, "m,host=db-1 v=1\n").unwrap();
    let (status, text) = curl(
        &format!("{http}/api/v2/write?bucket=b"),
        &[token_header.as_str()],
        &body,
        None,
    );
    assert_eq!(status, 403, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["code"], "forbidden", "{text}");
}

async fn post(d: &Daemon, path: &str, body: Vec<u8>, gzip: bool) -> (u16, Value, Option<String>) {
    let mut req = http_client()
        .post(format!("{}{path}", d.http_url()))
        .body(body);
    if gzip {
        req = req.header("content-encoding", "gzip");
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let text = resp.text().await.unwrap();
    let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, v, retry)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_lines_are_named_and_the_good_ones_kept() {
    let d = Daemon::start_async(tallyd().flush_interval("200ms")).await;
    let ts = (now_ms() / 60_000 - 2) * 60_000;
    let long = format!("bad,host=h v=1,s=\"{}\" {ts}", "x".repeat(70_000));
    let body = [
        format!("good,host=h v=1 {ts}"),
        format!("bad,host=h v=1,v=2 {ts}"),
        format!("bad,host=h v=NaN {ts}"),
        format!("bad,host=h v= {ts}"),
        long,
        format!("good,host=h v=2 {}", ts + 1_000),
        format!("good,host=h v=3 {}", ts + 2_000),
        "bad,host=h,room=a\\".to_owned(),
    ]
    .join("\n");
    for (path, gzip_it) in [
        ("/write?precision=ms", false),
        ("/api/v2/write?precision=ms", true),
    ] {
        let bytes = if gzip_it {
            gzip(body.as_bytes())
        } else {
            body.clone().into_bytes()
        };
        let (status, v, _) = post(&d, path, bytes, gzip_it).await;
        assert_eq!(status, 400, "{path}: {v}");
        let msg = if path.starts_with("/write") {
            v["error"].as_str().unwrap().to_owned()
        } else {
            assert_eq!(v["code"], "invalid", "{v}");
            assert_eq!(v["line"], 2, "{v}");
            v["message"].as_str().unwrap().to_owned()
        };
        assert!(msg.contains("5 of 8 lines refused"), "{msg}");
        assert!(msg.contains("line 2: unable to parse"), "{msg}");
        assert!(msg.contains("field \"v\" is given twice"), "{msg}");
        assert!(msg.contains("line 3:") && msg.contains("NaN"), "{msg}");
    }
    // Both bodies' good lines were kept: the same three samples, twice.
    let from = (ts / 1000 - 60).to_string();
    let got = get_ok(
        &d,
        "/api/v1/range",
        &[
            ("source", "h"),
            ("metric", "good_v"),
            ("from", &from),
            ("step", "1m"),
        ],
    )
    .await;
    let points: Vec<&Value> = got["series"][0]["points"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["n"].as_u64().unwrap_or(0) > 0)
        .collect();
    assert_eq!(points.len(), 1, "{got}");
    assert_eq!(points[0]["n"], 6, "{got}");
    assert_eq!(points[0]["sum"], 12.0, "{got}");
    let bad = get_ok(
        &d,
        "/api/v1/series",
        &[("source", "h"), ("metric", "bad_v")],
    )
    .await;
    assert_eq!(bad["series"].as_array().unwrap().len(), 0, "{bad}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_and_oversized_bodies_are_refused_and_the_daemon_unaffected() {
    let d = Daemon::start_async(tallyd()).await;
    let ts = (now_ms() / 60_000 - 2) * 60_000;
    // A bad precision; an unknown encoding.
    let (status, v, _) = post(
        &d,
        "/api/v2/write?precision=h",
        b"m,host=h v=1".to_vec(),
        false,
    )
    .await;
    assert_eq!(status, 400, "{v}");
    assert!(v["message"].as_str().unwrap().contains("precision"), "{v}");
    let resp = http_client()
        .post(format!("{}/write", d.http_url()))
        .header("content-encoding", "br")
        .body("m,host=h v=1")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 415);

    // 100 MB: declared, and streamed without a length; and a small gzip
    // body that inflates past the limit.
    let declared = declared_100mb(&d).await;
    assert!(declared.starts_with("HTTP/1.1 413"), "{declared}");
    assert!(chunked_100mb(&d).await.starts_with("HTTP/1.1 413"));
    let bomb = gzip(&vec![b'\n'; 40 * 1024 * 1024]);
    let (status, v, _) = post(&d, "/api/v2/write", bomb, true).await;
    assert_eq!(status, 413, "{v}");

    // The daemon is unaffected.
    let (status, v, _) = post(
        &d,
        "/write?precision=ms",
        format!("after,host=h v=1 {ts}").into_bytes(),
        false,
    )
    .await;
    assert_eq!(status, 204, "{v}");
    let health = http_client()
        .get(format!("{}/healthz", d.http_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);
}

/// Sends a request declaring a 100 MB body to the v1 API and returns the
/// status line of the answer. The daemon answers before reading the body
/// and closes the connection, so the body is sent while the answer is
/// read: a client that only reads once it has sent everything (as hyper's
/// does) can find the connection reset first.
async fn declared_100mb(d: &Daemon) -> String {
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
    let addr = d.http_url().trim_start_matches("http://").to_owned();
    let s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (read, mut write) = s.into_split();
    let len = 100 * 1024 * 1024;
    let head = format!("POST /write HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {len}\r\n\r\n");
    let sender = tokio::spawn(async move {
        write.write_all(head.as_bytes()).await?;
        let chunk = vec![b'a'; 1024 * 1024];
        for _ in 0..100 {
            write.write_all(&chunk).await?;
        }
        Ok::<_, std::io::Error>(())
    });
    let mut line = String::new();
    let mut lines = tokio::io::BufReader::new(read);
    let _ = tokio::time::timeout(Duration::from_secs(30), lines.read_line(&mut line)).await;
    sender.abort();
    line
}

/// Streams a 100 MB chunked body (no declared length) to the v2 API and
/// returns the status line of the answer: the daemon stops reading at the
/// limit, so the sending may fail before the whole body is out.
async fn chunked_100mb(d: &Daemon) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let addr = d.http_url().trim_start_matches("http://").to_owned();
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /api/v2/write HTTP/1.1\r\nhost: {addr}\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let chunk = vec![b'a'; 1024 * 1024];
    for _ in 0..100 {
        let sent = async {
            s.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                .await?;
            s.write_all(&chunk).await?;
            s.write_all(b"\r\n").await
        };
        match tokio::time::timeout(Duration::from_secs(10), sent).await {
            Ok(Ok(())) => {}
            _ => break,
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(10), s.write_all(b"0\r\n\r\n")).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned()
}
