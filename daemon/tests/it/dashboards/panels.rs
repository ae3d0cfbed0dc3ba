//! Every query of `tally-daemon.json` (each panel target and the
//! templating query) evaluated on data, by Tally's own Prometheus API: the
//! dashboard must show something when Tally, not Prometheus, holds the
//! daemons' metrics.
//!
//! The data are the two real scrapes of `load` (the embedded daemon, and
//! the MongoDB daemon taken through an outage and a refused flush),
//! replayed as a Prometheus scraping them every 15 s for the last 15
//! minutes would remote-write them: each scrape as two instances' series,
//! counters growing steadily up to the scraped value, gauges as scraped.
//! The same requests go to a real Prometheus' remote-write receiver, and
//! its answers must be non-empty too, so an empty answer from Tally is
//! Tally's, not the data's (skipped when Prometheus is not installed).
//!
//! `tally-fleet.json` is checked the same way, against data pushed by the
//! load generator, in `fleet_dashboard`.

use std::collections::BTreeMap;

use prost::Message as _;
use tally_proto::prometheus as rw;
use tally_testkit::client::{http_client, now_ms};
use tally_testkit::prometheus::{start_prometheus, which};
use tally_testkit::settle::wait_settled;
use tally_testkit::Daemon;

use super::load::scrapes;
use super::model::{queries, substitute, variable_names, INSTANCE_VALUE};
use super::scrape::Scrape;
use super::{load_dashboard, FAULT_ONLY};
use crate::tallyd;

/// Samples per replayed series, and their spacing.
const SAMPLES: i64 = 60;
const INTERVAL_MS: i64 = 15_000;
/// What `$__rate_interval` is in Grafana for a data source whose scrape
/// interval is one minute, as the README recommends for Tally: four of it.
const RATE_INTERVAL: &str = "4m";

/// One series of a scrape: name, labels (without the name), value.
type Sample = (String, Vec<(String, String)>, f64);

/// The samples of an exposition text, label values unescaped.
fn samples(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = line[..end].to_string();
        let mut rest = &line[end..];
        let mut labels = Vec::new();
        if let Some(body) = rest.strip_prefix('{') {
            let (parsed, after) = label_pairs(body);
            labels = parsed;
            rest = after;
        }
        if let Some(v) = rest.split_whitespace().next().and_then(|v| v.parse().ok()) {
            out.push((name, labels, v));
        }
    }
    out
}

/// `a="x",b="y\"z"} rest` into the pairs and `rest`.
fn label_pairs(s: &str) -> (Vec<(String, String)>, &str) {
    let mut out = Vec::new();
    let mut name = String::new();
    let mut it = s.char_indices();
    while let Some((i, c)) = it.next() {
        match c {
            '}' => return (out, &s[i + 1..]),
            '=' => {
                let mut value = String::new();
                let mut escaped = false;
                let _ = it.next(); // the opening quote
                for (_, c) in it.by_ref() {
                    match (escaped, c) {
                        (false, '\\') => escaped = true,
                        (false, '"') => break,
                        (true, 'n') => {
                            value.push('\n');
                            escaped = false;
                        }
                        (_, c) => {
                            value.push(c);
                            escaped = false;
                        }
                    }
                }
                out.push((std::mem::take(&mut name).trim().to_string(), value));
            }
            ',' => {}
            c => name.push(c),
        }
    }
    (out, "")
}

/// Whether `name` is a cumulative series of the text's `# TYPE` families:
/// a counter, or a histogram's or summary's `_bucket`, `_sum`, `_count`.
fn cumulative(types: &BTreeMap<String, String>, name: &str) -> bool {
    if types.get(name).is_some_and(|t| t == "counter") {
        return true;
    }
    ["_bucket", "_sum", "_count"].iter().any(|suffix| {
        name.strip_suffix(suffix).is_some_and(|family| {
            types
                .get(family)
                .is_some_and(|t| t == "histogram" || t == "summary")
        })
    })
}

/// A scrape replayed as `instance`'s series for the last 15 minutes.
fn replay(scrape: &Scrape, instance: &str, end_ms: i64) -> Vec<rw::TimeSeries> {
    let types: BTreeMap<String, String> = scrape
        .text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(n, t)| (n.to_string(), t.trim().to_string()))
        .collect();
    samples(&scrape.text)
        .into_iter()
        .filter(|(_, _, v)| v.is_finite())
        .map(|(name, labels, v)| {
            let grows = cumulative(&types, &name);
            let mut all: BTreeMap<String, String> = labels.into_iter().collect();
            all.insert("__name__".into(), name);
            all.insert("instance".into(), instance.into());
            all.insert("job".into(), "tally".into());
            rw::TimeSeries {
                labels: all
                    .into_iter()
                    .map(|(name, value)| rw::Label { name, value })
                    .collect(),
                samples: (0..SAMPLES)
                    .map(|k| rw::Sample {
                        timestamp: end_ms - (SAMPLES - 1 - k) * INTERVAL_MS,
                        value: if grows {
                            v * (k + 1) as f64 / SAMPLES as f64
                        } else {
                            v
                        },
                    })
                    .collect(),
            }
        })
        .collect()
}

async fn remote_write(url: &str, series: &[rw::TimeSeries]) {
    for chunk in series.chunks(100) {
        let body = rw::WriteRequest {
            timeseries: chunk.to_vec(),
            metadata: Vec::new(),
        }
        .encode_to_vec();
        let body = snap::raw::Encoder::new().compress_vec(&body).unwrap();
        let resp = http_client()
            .post(url)
            .header("Content-Type", "application/x-protobuf")
            .header("Content-Encoding", "snappy")
            .header("X-Prometheus-Remote-Write-Version", "0.1.0")
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        assert!(status.is_success(), "{url}: {status} {text}");
    }
}

/// How many series `api` (up to `/api/v1`) answers for `q`, instant at
/// `at` and over the ten minutes before it; or its error.
async fn series_counts(api: &str, q: &str, at: i64) -> Result<(usize, usize), String> {
    let mut counts = [0; 2];
    for (i, (path, params)) in [
        (
            "query",
            vec![("query", q.to_string()), ("time", at.to_string())],
        ),
        (
            "query_range",
            vec![
                ("query", q.to_string()),
                ("start", (at - 600).to_string()),
                ("end", at.to_string()),
                ("step", "60".into()),
            ],
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let resp = http_client()
            .post(format!("{api}/{path}"))
            .form(&params)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let body: serde_json::Value = resp.json().await.map_err(|e| e.to_string())?;
        if body["status"] != "success" {
            return Err(format!("{path}: {}", body["error"]));
        }
        counts[i] = match &body["data"]["result"] {
            serde_json::Value::Array(a) => a.len(),
            _ => 1, // a scalar
        };
    }
    Ok((counts[0], counts[1]))
}

#[test]
fn every_daemon_dashboard_query_has_data_on_tally() {
    let s = scrapes();
    let dash = load_dashboard("tally-daemon.json");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let d = Daemon::start_async(tallyd()).await;
        let dir = tempfile::tempdir().unwrap();
        let prom = match which("prometheus") {
            Some(bin) => Some(
                start_prometheus(
                    "prometheus-receiver",
                    &bin,
                    dir.path(),
                    |_| "global:\n  scrape_interval: 15s\n".into(),
                    &["--web.enable-remote-write-receiver"],
                )
                .await,
            ),
            None => {
                eprintln!("note: prometheus is not installed; Tally's answers only");
                None
            }
        };
        let end_ms = now_ms() - 5_000;
        let instances = ["tallyd-embedded:8080", "tallyd-mongodb:8080"];
        let mut series = replay(&s.embedded, instances[0], end_ms);
        series.extend(replay(&s.mongodb, instances[1], end_ms));
        remote_write(&format!("{}/api/v1/write", d.http_url()), &series).await;
        if let Some(p) = &prom {
            remote_write(&format!("{}/api/v1/write", p.url()), &series).await;
        }
        wait_settled(&d.http_url()).await;

        let at = end_ms / 60_000 * 60;
        let variables = variable_names(&dash);
        let mut problems = Vec::new();
        for q in queries(&dash).unwrap() {
            let expr = substitute(&q.expr.replace("$__rate_interval", RATE_INTERVAL), &variables)
                .unwrap()
                .replace(INSTANCE_VALUE, &instances.join("|"));
            if !s.faults && FAULT_ONLY.iter().any(|m| expr.contains(m)) {
                continue;
            }
            if let Some(p) = &prom {
                match series_counts(&format!("{}/api/v1", p.url()), &expr, at).await {
                    Ok((i, r)) if i > 0 && r > 0 => {}
                    other => panic!(
                        "the replayed data do not answer {} on Prometheus either ({other:?}): {expr}",
                        q.place
                    ),
                }
            }
            let tally = format!("{}/prometheus/api/v1", d.http_url());
            match series_counts(&tally, &expr, at).await {
                Ok((i, r)) if i > 0 && r > 0 => {}
                Ok((i, r)) => problems.push(format!(
                    "{}: {i} series instant, {r} over ten minutes: {expr}",
                    q.place
                )),
                Err(e) => problems.push(format!("{}: {e}: {expr}", q.place)),
            }
        }
        assert!(
            problems.is_empty(),
            "{} of the dashboard's queries show nothing on Tally:\n{}",
            problems.len(),
            problems.join("\n")
        );
    });
}

#[test]
fn exposition_lines_are_read_whole() {
    let got = samples(
        "# TYPE a_total counter\na_total{x=\"1,2}\",y=\"q\\\"\\n\"} 3.5\nb 2\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 4\n",
    );
    assert_eq!(got.len(), 3);
    assert_eq!(got[0].0, "a_total");
    assert_eq!(
        got[0].1,
        vec![("x".into(), "1,2}".into()), ("y".into(), "q\"\n".into())]
    );
    assert_eq!(got[0].2, 3.5);
    assert_eq!(got[1], ("b".into(), vec![], 2.0));
    let types = BTreeMap::from([
        ("a_total".to_string(), "counter".to_string()),
        ("h".to_string(), "histogram".to_string()),
    ]);
    assert!(cumulative(&types, "a_total") && cumulative(&types, "h_bucket"));
    assert!(!cumulative(&types, "b") && !cumulative(&types, "h"));
}
