//! A stand-in for the daemon's `/api/v1/range` answering the documented
//! JSON shape with labels (`"labels": {…}` on every series; exact source
//! and metric select every label set unless a `labels` condition narrows
//! them), so verification's reads are tested without a daemon. Equality
//! matchers only: that is all verification sends.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One stored series.
#[derive(Debug, Clone)]
pub struct Stored {
    pub source: String,
    pub metric: String,
    pub labels: BTreeMap<String, String>,
    pub kind: &'static str,
    /// `(t, n, sum, min, max)`.
    pub points: Vec<(i64, u64, f64, f64, f64)>,
}

/// The fake's store and how many reads it answered.
#[derive(Debug, Default)]
pub struct Fake {
    pub store: Mutex<Vec<Stored>>,
    pub reads: AtomicUsize,
    /// Reads still to answer `partial` (with the points it holds, as a
    /// daemon answering from memory would, here empty).
    pub partial_for: AtomicUsize,
    /// Connections still to close unanswered, as a daemon killed
    /// mid-read leaves them.
    pub drop_for: AtomicUsize,
    /// Reads still to answer 503, as a busy daemon does.
    pub busy_for: AtomicUsize,
    /// Answer every read 400.
    pub refuse: std::sync::atomic::AtomicBool,
}

/// Serves `fake` on a loopback port until the runtime ends; returns the
/// base URL.
pub async fn serve(fake: Arc<Fake>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            tokio::spawn(answer(conn, fake.clone()));
        }
    });
    base
}

async fn answer(mut conn: TcpStream, fake: Arc<Fake>) {
    let mut req = Vec::new();
    let mut buf = [0u8; 4096];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => req.extend_from_slice(&buf[..n]),
        }
    }
    let take = |n: &AtomicUsize| {
        n.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    };
    if take(&fake.drop_for) {
        return;
    }
    let text = String::from_utf8_lossy(&req);
    let path = text.split_whitespace().nth(1).unwrap_or("/");
    let url = reqwest::Url::parse(&format!("http://fake{path}")).unwrap();
    let q: BTreeMap<String, String> = url.query_pairs().into_owned().collect();
    fake.reads.fetch_add(1, Ordering::Relaxed);
    let not_now = || r#"{"error": "not now"}"#.to_owned();
    let (status, body) = if take(&fake.busy_for) {
        ("503 Service Unavailable", not_now())
    } else if fake.refuse.load(Ordering::Relaxed) {
        ("400 Bad Request", not_now())
    } else if take(&fake.partial_for) {
        let partial = json!({"step": "1m", "series": [], "partial": "the store is unreachable"});
        ("200 OK", partial.to_string())
    } else {
        ("200 OK", range(&fake.store.lock().unwrap(), &q).to_string())
    };
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = conn.write_all(head.as_bytes()).await;
    let _ = conn.write_all(body.as_bytes()).await;
    let _ = conn.shutdown().await;
}

/// `name="value",...` as exact matchers.
fn matchers(text: &str) -> Vec<(String, String)> {
    text.split(',')
        .filter(|m| !m.is_empty())
        .map(|m| {
            let (name, value) = m.split_once('=').unwrap();
            (name.to_string(), value.trim_matches('"').to_string())
        })
        .collect()
}

fn range(store: &[Stored], q: &BTreeMap<String, String>) -> Value {
    let want = matchers(q.get("labels").map_or("", String::as_str));
    let (from, to): (i64, i64) = (q["from"].parse().unwrap(), q["to"].parse().unwrap());
    let series: Vec<Value> = store
        .iter()
        .filter(|s| s.source == q["source"] && s.metric == q["metric"])
        .filter(|s| {
            want.iter()
                .all(|(n, v)| s.labels.get(n).map_or("", String::as_str) == v)
        })
        .map(|s| {
            let points: Vec<Value> = s
                .points
                .iter()
                .filter(|p| (from..to).contains(&p.0))
                .map(|&(t, n, sum, min, max)| json!({"t": t, "n": n, "sum": sum, "min": min, "max": max}))
                .collect();
            json!({"source": s.source, "metric": s.metric, "labels": s.labels, "kind": s.kind, "points": points})
        })
        .collect();
    json!({ "step": "1m", "series": series })
}
