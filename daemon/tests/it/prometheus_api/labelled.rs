//! Labelled series through the Prometheus-compatible API: node-exporter
//! shaped `node_cpu_seconds_total{cpu, mode}` from three sources, read with
//! `promtool` and over HTTP: `sum by (mode)` answered from the group
//! rollup and equal to the fan-out, matchers on labels with every op,
//! `without`, and series / labels / label-values discovery; again after a
//! restart, from the store.

use std::collections::BTreeMap;

use serde_json::Value;
use tally_proto::v1 as pb;
use tally_testkit::client::{get_text, http_client, now_ms, within};
use tally_testkit::settle::wait_settled;
use tally_testkit::Daemon;

use super::fixture::{assert_same, labels, parse_matrix, Labels, Matrix};
use super::promtool::promtool;
use crate::tallyd;

const METRIC: &str = "node_cpu_seconds_total";
const SOURCES: [&str; 3] = ["n1", "n2", "n3"];
const CPUS: [&str; 2] = ["0", "1"];
const MODES: [&str; 3] = ["idle", "system", "user"];
const MINUTES: i64 = 5;

/// Seconds each series counts per minute: distinct per series.
fn per_minute(s: usize, c: usize, m: usize) -> f64 {
    ((s + 1) * 100 + (c + 1) * 10 + m + 1) as f64
}

fn fleet(t0_ms: i64) -> pb::PushRequest {
    let sources = SOURCES
        .iter()
        .enumerate()
        .map(|(si, source)| pb::SourceBatch {
            source: (*source).into(),
            groups: Vec::new(),
            series: CPUS
                .iter()
                .enumerate()
                .flat_map(|(ci, cpu)| {
                    MODES
                        .iter()
                        .enumerate()
                        .map(move |(mi, mode)| pb::SeriesSamples {
                            labels: vec![
                                pb::Label {
                                    name: "cpu".into(),
                                    value: (*cpu).into(),
                                },
                                pb::Label {
                                    name: "mode".into(),
                                    value: (*mode).into(),
                                },
                            ],
                            metric: METRIC.into(),
                            kind: pb::SampleKind::DeltaCounter as i32,
                            timestamps_ms: (0..MINUTES)
                                .map(|k| t0_ms + k * 60_000 + 30_000)
                                .collect(),
                            values: vec![per_minute(si, ci, mi); MINUTES as usize],
                            start_times_ms: Vec::new(),
                        })
                })
                .collect(),
        })
        .collect();
    pb::PushRequest { sources }
}

struct Prom<'a> {
    d: &'a Daemon,
    t0: i64,
}

impl Prom<'_> {
    fn base(&self) -> String {
        format!("{}/prometheus", self.d.http_url())
    }

    /// A range query over the minutes with data, and the rollup header.
    async fn range(&self, q: &str) -> (Matrix, Option<String>) {
        let url = format!("{}/api/v1/query_range", self.base());
        let params = [
            ("query", q.to_string()),
            ("start", (self.t0 + 60).to_string()),
            ("end", (self.t0 + MINUTES * 60).to_string()),
            ("step", "60".to_string()),
        ];
        let resp = within(&url, http_client().get(&url).query(&params).send())
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        let rollup = resp
            .headers()
            .get("x-tally-rollup")
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        let body: Value = within(&url, resp.json()).await.expect("JSON");
        assert_eq!(body["status"], "success", "{q}: {body}");
        (parse_matrix(&body["data"]["result"], "values"), rollup)
    }

    async fn data(&self, path: &str, params: &[(&str, &str)]) -> Value {
        let (status, text) = get_text(&format!("{}/api/v1/{path}", self.base()), params).await;
        assert_eq!(status, 200, "{path}: {text}");
        let body: Value = serde_json::from_str(&text).expect("JSON");
        body["data"].clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_are_real_labels_in_promql() {
    let mut d = Daemon::start_async(tallyd().flush_interval("200ms")).await;
    let now = now_ms();
    let t0_ms = now - now.rem_euclid(60_000) - 8 * 60_000;
    let mut ingest = d.ingest_client().await;
    let resp = within("Push", ingest.push(fleet(t0_ms)))
        .await
        .unwrap_or_else(|s| panic!("{s:?}"))
        .into_inner();
    assert_eq!(resp.rejected, 0, "{resp:?}");
    wait_settled(&d.http_url()).await;

    let t0 = t0_ms / 1000;
    check_queries(&Prom { d: &d, t0 }).await;
    check_discovery(&Prom { d: &d, t0 }).await;
    check_promtool(&Prom { d: &d, t0 }).await;
    // From the store alone: nothing is in memory after the restart, and
    // the rollup's label sets come from the catalog.
    d.restart();
    check_queries(&Prom { d: &d, t0 }).await;
}

/// Per mode, the fleet's rate at every step: what each of `sum by (mode)`
/// and its variants must give.
fn by_mode(extra: &[(&str, &str)]) -> BTreeMap<Labels, f64> {
    MODES
        .iter()
        .enumerate()
        .map(|(mi, mode)| {
            let total: f64 = (0..SOURCES.len())
                .flat_map(|s| (0..CPUS.len()).map(move |c| per_minute(s, c, mi)))
                .sum();
            let mut l: Vec<(&str, &str)> = vec![("mode", mode)];
            l.extend_from_slice(extra);
            (labels(&l), total / 60.0)
        })
        .collect()
}

fn assert_values(q: &str, got: &Matrix, want: &BTreeMap<Labels, f64>) {
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "{q}: {got:?}"
    );
    for (l, pts) in got {
        assert_eq!(pts.len() as i64, MINUTES, "{q} {l:?}: {pts:?}");
        for (_, v) in pts {
            assert!((v - want[l]).abs() < 1e-9, "{q} {l:?}: {v} vs {}", want[l]);
        }
    }
}

async fn check_queries(p: &Prom<'_>) {
    let rolled = format!("sum by (mode) (rate({METRIC}[1m]))");
    let (r, header) = p.range(&rolled).await;
    assert_eq!(header.as_deref(), Some("all"), "{rolled} reads the rollup");
    assert_values(&rolled, &r, &by_mode(&[]));
    let fanned = format!("sum by (mode) (rate({METRIC}{{instance=~\".+\"}}[1m]))");
    let (f, header) = p.range(&fanned).await;
    assert_eq!(header, None, "{fanned} fans out");
    assert_same(&rolled, &r, &f);

    let q = format!("sum without (cpu, instance) (rate({METRIC}[1m]))");
    let (w, _) = p.range(&q).await;
    assert_values(&q, &w, &by_mode(&[]));

    // Matchers with every op on labels, and on the source.
    let q = format!("rate({METRIC}{{mode=\"idle\", cpu!=\"1\", instance=~\"n[12]\"}}[1m])");
    let (m, _) = p.range(&q).await;
    let want: Vec<Labels> = ["n1", "n2"]
        .iter()
        .map(|s| labels(&[("cpu", "0"), ("instance", s), ("mode", "idle")]))
        .collect();
    assert_eq!(m.keys().cloned().collect::<Vec<_>>(), want, "{q}");
    let q = format!("sum(rate({METRIC}{{mode!~\"idle|user\"}}[1m]))");
    let (s, header) = p.range(&q).await;
    assert_eq!(header.as_deref(), Some("all"), "{q} reads the rollup");
    let system = by_mode(&[])[&labels(&[("mode", "system")])];
    assert_values(&q, &s, &BTreeMap::from([(Labels::new(), system)]));
}

async fn check_discovery(p: &Prom<'_>) {
    let names = p.data("labels", &[]).await;
    for l in ["__name__", "cpu", "instance", "mode"] {
        assert!(
            names.as_array().unwrap().iter().any(|n| n == l),
            "{l}: {names}"
        );
    }
    let values = p.data("label/mode/values", &[]).await;
    assert_eq!(values, serde_json::json!(["idle", "system", "user"]));
    let sel = format!("{METRIC}{{cpu=\"0\",instance=\"n3\"}}");
    let series = p.data("series", &[("match[]", sel.as_str())]).await;
    let modes: Vec<&str> = series
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["idle", "system", "user"], "{series}");
    assert!(
        series[0]["rollup"].is_null(),
        "no rollup series listed: {series}"
    );
}

/// promtool's own client: the grouped range query and a series listing.
async fn check_promtool(p: &Prom<'_>) {
    let s = |x: &str| x.to_string();
    let out = promtool(&[
        s("query"),
        s("range"),
        s("-o"),
        s("json"),
        format!("--start={}", p.t0 + 60),
        format!("--end={}", p.t0 + MINUTES * 60),
        s("--step=1m"),
        p.base(),
        format!("sum by (mode) (rate({METRIC}{{cpu=~\"0|1\"}}[1m]))"),
    ])
    .await;
    let got = parse_matrix(
        &serde_json::from_str(&out).expect("promtool JSON"),
        "values",
    );
    assert_values("promtool sum by (mode)", &got, &by_mode(&[]));
    let out = promtool(&[
        s("query"),
        s("series"),
        format!("--match={METRIC}{{mode=\"user\"}}"),
        p.base(),
    ])
    .await;
    assert_eq!(out.lines().count(), SOURCES.len() * CPUS.len(), "{out}");
    assert!(out.contains("mode=\"user\""), "{out}");
}
