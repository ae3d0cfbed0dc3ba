//! The daemon under test with the fleet pushed and flushed, its API's
//! calls, and the matrices its answers are compared as.

use std::collections::BTreeMap;

use serde_json::Value;
use tally_testkit::client::now_ms;
use tally_testkit::settle::wait_settled;
use tally_testkit::{Daemon, DaemonOpts};

use super::{close, fleet, push_request, within, Series, MINUTES, MINUTE_MS, RPC_TIMEOUT};

pub(super) struct Fixture {
    pub(super) d: Daemon,
    pub(super) http: reqwest::Client,
    pub(super) fleet: Vec<Series>,
    pub(super) t0: i64,
}

/// `{label: value}` of a result series.
pub(super) type Labels = BTreeMap<String, String>;

/// A matrix: labels to (t seconds, value) points.
pub(super) type Matrix = BTreeMap<Labels, Vec<(f64, f64)>>;

impl Fixture {
    pub(super) async fn start(opts: DaemonOpts) -> Fixture {
        let d = Daemon::start_async(opts).await;
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(RPC_TIMEOUT)
            .build()
            .expect("an HTTP client");
        // Nine minutes back: every minute with data is over by the checks.
        let now = now_ms();
        let t0 = now - now.rem_euclid(MINUTE_MS) - 9 * MINUTE_MS;
        let fleet = fleet(t0);
        let mut ingest = d.ingest_client().await;
        let resp = within("Push", ingest.push(push_request(&fleet)))
            .await
            .unwrap_or_else(|s| panic!("Push failed: {s:?}"))
            .into_inner();
        let sent: usize = fleet.iter().map(|s| s.sent.len()).sum();
        assert_eq!(resp.accepted as usize, sent, "{resp:?}");
        let fx = Fixture {
            d,
            http,
            fleet,
            t0: t0 / 1000,
        };
        fx.wait_flushed().await;
        fx
    }

    pub(super) fn url(&self, path: &str) -> String {
        format!("{}/prometheus/api/v1/{path}", self.d.http_url())
    }

    /// Waits until a flush has applied everything: the catalog and the
    /// rollups are written by flushes.
    pub(super) async fn wait_flushed(&self) {
        wait_settled(&self.d.http_url()).await;
    }

    /// GET (or form POST) an API path: (status, body, rollup header).
    pub(super) async fn call(
        &self,
        path: &str,
        params: &[(&str, String)],
        post: bool,
    ) -> (u16, Value, Option<String>) {
        let url = self.url(path);
        let req = if post {
            self.http.post(&url).form(params)
        } else {
            self.http.get(&url).query(params)
        };
        let resp = within(&url, req.send())
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        let status = resp.status().as_u16();
        let rollup = resp
            .headers()
            .get("x-tally-rollup")
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        let text = within(&url, resp.text()).await.expect("a body");
        let body: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{url} {params:?}: not JSON ({e}): {text}"));
        (status, body, rollup)
    }

    pub(super) async fn ok(&self, path: &str, params: &[(&str, String)]) -> Value {
        let (status, body, _) = self.call(path, params, false).await;
        assert_eq!(status, 200, "{path} {params:?}: {body}");
        assert_eq!(body["status"], "success", "{body}");
        body["data"].clone()
    }

    /// query_range (POSTed, as Grafana does): the matrix and the rollup
    /// header.
    pub(super) async fn range(
        &self,
        q: &str,
        start: i64,
        end: i64,
        step: &str,
    ) -> (Matrix, Option<String>) {
        let params = [
            ("query", q.to_string()),
            ("start", start.to_string()),
            ("end", end.to_string()),
            ("step", step.to_string()),
        ];
        let (status, body, rollup) = self.call("query_range", &params, true).await;
        assert_eq!(status, 200, "{q}: {body}");
        assert_eq!(body["data"]["resultType"], "matrix", "{q}: {body}");
        (parse_matrix(&body["data"]["result"], "values"), rollup)
    }

    /// An instant query's vector.
    pub(super) async fn instant(&self, q: &str, t: i64) -> Matrix {
        let data = self
            .ok(
                "query",
                &[("query", q.to_string()), ("time", t.to_string())],
            )
            .await;
        assert_eq!(data["resultType"], "vector", "{q}: {data}");
        parse_matrix(&data["result"], "value")
    }

    /// The native API's points of one series: t to the point's fields.
    pub(super) async fn native(
        &self,
        source: &str,
        metric: &str,
        from: i64,
        to: i64,
        step: &str,
    ) -> BTreeMap<i64, Value> {
        let url = format!("{}/api/v1/range", self.d.http_url());
        let params = [
            ("source", source.to_string()),
            ("metric", metric.to_string()),
            ("from", from.to_string()),
            ("to", to.to_string()),
            ("step", step.to_string()),
        ];
        let resp = within(&url, self.http.get(&url).query(&params).send())
            .await
            .expect("native range");
        let body: Value = within(&url, resp.json()).await.expect("JSON");
        body["series"][0]["points"]
            .as_array()
            .unwrap_or(&Vec::new())
            .iter()
            .map(|p| (p["t"].as_i64().expect("t"), p.clone()))
            .collect()
    }

    pub(super) fn series(&self, source: &str, metric: &str) -> &Series {
        self.fleet
            .iter()
            .find(|s| s.source == source && s.metric == metric)
            .expect("a pushed series")
    }

    /// Evaluation times of the checks: the minute after the first one with
    /// data to the minute after the last, every minute.
    pub(super) fn span(&self) -> (i64, i64) {
        (self.t0 + 60, self.t0 + (MINUTES + 1) * 60)
    }
}

pub(super) fn parse_matrix(result: &Value, key: &str) -> Matrix {
    let mut out = Matrix::new();
    for s in result.as_array().expect("a result array") {
        let labels: Labels = s["metric"]
            .as_object()
            .expect("metric labels")
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().expect("a label value").to_string()))
            .collect();
        let points: Vec<&Value> = if key == "value" {
            vec![&s["value"]]
        } else {
            s["values"].as_array().expect("values").iter().collect()
        };
        let points = points
            .into_iter()
            .map(|p| {
                let t = p[0].as_f64().expect("a timestamp");
                let v: f64 = p[1]
                    .as_str()
                    .expect("a string value")
                    .parse()
                    .expect("a number");
                (t, v)
            })
            .collect();
        assert!(out.insert(labels, points).is_none(), "duplicate series");
    }
    out
}

/// A series' labels as the API shows them after a range function (no
/// metric name): its source as `instance`, and `tally_metric` where the
/// Prometheus name differs from the Tally metric.
pub(super) fn shown(source: &str, metric: &str) -> Labels {
    let mut l = labels(&[("instance", source)]);
    if let Some(extra) = tally_metric(metric) {
        l.insert("tally_metric".into(), extra.into());
    }
    l
}

/// The `tally_metric` label of a metric: itself, where its Prometheus name
/// differs.
pub(super) fn tally_metric(metric: &str) -> Option<&str> {
    super::METRICS
        .iter()
        .find(|m| m.0 == metric)
        .filter(|m| m.0 != m.1)
        .map(|m| m.0)
}

pub(super) fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Asserts `got` has exactly the series and points of `want` (None
/// values: no point).
pub(super) fn assert_matrix(
    q: &str,
    got: &Matrix,
    want: &BTreeMap<Labels, Vec<(i64, Option<f64>)>>,
) {
    let want: BTreeMap<&Labels, Vec<(i64, f64)>> = want
        .iter()
        .map(|(l, pts)| {
            (
                l,
                pts.iter()
                    .filter_map(|(t, v)| v.map(|v| (*t, v)))
                    .collect::<Vec<_>>(),
            )
        })
        .filter(|(_, pts)| !pts.is_empty())
        .collect();
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().copied().collect::<Vec<_>>(),
        "{q}: series differ; got {got:?}"
    );
    for (l, pts) in &want {
        let g = &got[*l];
        assert_eq!(g.len(), pts.len(), "{q} {l:?}: got {g:?}, want {pts:?}");
        for ((gt, gv), (wt, wv)) in g.iter().zip(pts) {
            assert_eq!(*gt, *wt as f64, "{q} {l:?}");
            assert!(close(*gv, *wv), "{q} {l:?} at {wt}: got {gv}, want {wv}");
        }
    }
}

/// Asserts two matrices have the same series and points, values equal up
/// to rounding (a rollup divides a sum where a fan-out sums quotients).
pub(super) fn assert_same(q: &str, a: &Matrix, b: &Matrix) {
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "{q}: {a:?} vs {b:?}"
    );
    for (l, pa) in a {
        let pb = &b[l];
        assert_eq!(pa.len(), pb.len(), "{q} {l:?}: {pa:?} vs {pb:?}");
        for (x, y) in pa.iter().zip(pb) {
            assert!(x.0 == y.0 && close(x.1, y.1), "{q} {l:?}: {pa:?} vs {pb:?}");
        }
    }
}
