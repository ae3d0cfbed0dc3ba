//! `dashboards/tally-fleet.json` against a real `tallyd` fed by the real
//! load generator: every target expression of the dashboard, with its
//! variables set as Grafana would set them, must evaluate through
//! `/prometheus/api/v1/query_range` to a non-empty result whose values
//! equal what this module computes from the native `/api/v1/range` minute
//! buckets of the same series (a bare selector's value, the minute's last
//! sample, lies within its minute's minimum and maximum).
//!
//! `tally-loadgen` is another package's binary, which Cargo does not build
//! for this package's tests: it is expected next to `tallyd`
//! (`<target dir>/<profile>/tally-loadgen`) and built with `cargo build -p
//! tally-loadgen` first when it is missing or older than its sources (see
//! `tally_testkit::bins`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use tally_testkit::bins::Bin;
use tally_testkit::settle::wait_settled;
use tally_testkit::{process, Daemon};

use crate::tallyd;

const HTTP_TIMEOUT: Duration = Duration::from_secs(20);
const LOADGEN_TIMEOUT: Duration = Duration::from_secs(180);
const SOURCES: usize = 20;
const METRICS: usize = 5;
const SECONDS: i64 = 300;
/// What the test substitutes for Grafana's interval variables: the panels'
/// minimum interval is one minute.
const INTERVAL_S: i64 = 60;
const RATE_INTERVAL_S: i64 = 300;

// ---------------------------------------------------------------------------
// The load generator.

/// Runs the load generator against `d` to completion (bounded): a `--max`
/// fleet over the last `SECONDS` seconds.
fn run_loadgen(d: &Daemon) {
    let (grpc, http) = (d.grpc_url(), d.http_url());
    let (sources, metrics, seconds) = (
        SOURCES.to_string(),
        METRICS.to_string(),
        SECONDS.to_string(),
    );
    let loadgen = Bin::Loadgen.beside(env!("CARGO_BIN_EXE_tallyd"));
    let run = process::run(
        loadgen,
        &[
            "--target",
            &grpc,
            "--http",
            &http,
            "--max",
            "--quiet",
            "--json",
            "--sources",
            &sources,
            "--metrics",
            &metrics,
            "--seconds",
            &seconds,
            "--kinds",
            "gauge=2,delta=2,cumulative=1",
        ],
        LOADGEN_TIMEOUT,
    );
    assert!(
        run.status.success(),
        "tally-loadgen failed: {}",
        run.describe()
    );
    let r = run.json();
    let planned = (SOURCES * METRICS) as i64 * SECONDS;
    assert_eq!(r["samples"]["accepted"].as_i64(), Some(planned), "{r:#}");
}

// ---------------------------------------------------------------------------
// The daemon's APIs.

struct Api {
    base: String,
    http: reqwest::Client,
}

impl Api {
    async fn get(&self, path: &str, params: &[(&str, String)]) -> (u16, Value) {
        let url = format!("{}{path}", self.base);
        let resp = tokio::time::timeout(HTTP_TIMEOUT, self.http.get(&url).query(params).send())
            .await
            .unwrap_or_else(|_| panic!("{url}: no answer within {HTTP_TIMEOUT:?}"))
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        let status = resp.status().as_u16();
        let body = resp.json().await.unwrap_or_else(|e| panic!("{url}: {e}"));
        (status, body)
    }

    /// Waits until everything pushed is flushed (catalog and rollups
    /// included).
    async fn wait_flushed(&self) {
        wait_settled(&self.base).await;
    }

    /// Every source's minute buckets of `metric`: source to minute start to
    /// (n, sum, min, max).
    async fn native(&self, metric: &str, from: i64, to: i64) -> Minutes {
        let (status, body) = self
            .get(
                "/api/v1/range",
                &[
                    ("source", "*".into()),
                    ("metric", metric.into()),
                    ("from", from.to_string()),
                    ("to", to.to_string()),
                    ("step", "1m".into()),
                ],
            )
            .await;
        assert_eq!(status, 200, "{body}");
        let mut out = Minutes::new();
        for s in body["series"].as_array().expect("series") {
            let src = s["source"].as_str().expect("source").to_string();
            let points = out.entry(src).or_default();
            for p in s["points"].as_array().expect("points") {
                let f = |k: &str| p[k].as_f64().unwrap_or_else(|| panic!("{k} in {p}"));
                points.insert(
                    p["t"].as_i64().expect("t"),
                    (f("n"), f("sum"), f("min"), f("max")),
                );
            }
        }
        out
    }
}

type Minutes = BTreeMap<String, BTreeMap<i64, (f64, f64, f64, f64)>>;
type Labels = BTreeMap<String, String>;
type Matrix<V = f64> = BTreeMap<Labels, BTreeMap<i64, V>>;

/// A range function of one source's minutes over the window ending at
/// `t`: the minutes starting in `[floor_minute(t) - r, floor_minute(t))`.
fn window(
    minutes: &BTreeMap<i64, (f64, f64, f64, f64)>,
    func: &str,
    t: i64,
    r: i64,
) -> Option<f64> {
    let end = t.div_euclid(60) * 60;
    let mut acc: Option<(f64, f64, f64, f64)> = None;
    for (_, m) in minutes.range(end - r..end) {
        acc = Some(match acc {
            None => *m,
            Some(a) => (a.0 + m.0, a.1 + m.1, a.2.min(m.2), a.3.max(m.3)),
        });
    }
    let (n, sum, min, max) = acc?;
    Some(match func {
        "avg_over_time" => sum / n,
        "min_over_time" => min,
        "max_over_time" => max,
        "sum_over_time" | "increase" => sum,
        "count_over_time" => n,
        "rate" => sum / r as f64,
        other => panic!("no model for {other}"),
    })
}

/// The bounds of the latest sample before `t` within the 5-minute
/// lookback: the newest minute with data that starts before `t`, whose last
/// sample lies within its minimum and maximum, or the minute starting at
/// `t` (see docs/promql.md, instant selectors).
fn latest(minutes: &BTreeMap<i64, (f64, f64, f64, f64)>, t: i64) -> Option<(f64, f64)> {
    let before = minutes
        .range(..t)
        .next_back()
        .filter(|(start, _)| *start + 60 > t - 300)
        .map(|(_, m)| (m.2, m.3));
    // A minute starting at `t` answers when its last sample is at `t` (a
    // run that ended right after a minute began): the native minutes give
    // no sample times, so its bounds count too.
    let at = minutes.get(&t).map(|m| (m.2, m.3));
    before.map(|(lo, hi)| match at {
        Some((a_lo, a_hi)) => (lo.min(a_lo), hi.max(a_hi)),
        None => (lo, hi),
    })
}

/// The expected result of one dashboard expression (as written in the
/// dashboard) from the native minutes, at `times`: each point's bounds,
/// equal for the values the minutes determine.
fn expected(
    template: &str,
    gauge: (&str, &Minutes),
    counter: (&str, &Minutes),
    times: &[i64],
) -> Matrix<(f64, f64)> {
    let instance = r#"(?:\{instance=~"\$instance"\})?"#;
    let bare = regex::Regex::new(&format!(r#"^\$(metric|counter){instance}$"#)).expect("a pattern");
    if let Some(caps) = bare.captures(template) {
        let (metric, minutes) = if &caps[1] == "metric" { gauge } else { counter };
        let mut out = Matrix::new();
        for &t in times {
            for (src, m) in minutes {
                if let Some(b) = latest(m, t) {
                    let labels = [("__name__", metric), ("instance", src)]
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect();
                    out.entry(labels).or_default().insert(t, b);
                }
            }
        }
        return out;
    }
    let re = regex::Regex::new(&format!(
        r#"^(?:(sum|avg|min|max)\(|topk\((\d+), )?(sum by \(instance\) \()?(\w+)\(\$(metric|counter){instance}\[(\$__interval|\$__rate_interval|\d+m)\]\)\)?\)?$"#
    ))
    .expect("a valid pattern");
    let caps = re.captures(template).unwrap_or_else(|| {
        panic!("the test has no model for the dashboard's expression {template:?}: add one")
    });
    // The load generator's series have no labels, so `sum by (instance)`
    // of one instance's series is that series.
    let (agg, k, func) = (caps.get(1), caps.get(2), &caps[4]);
    let (_, minutes) = if &caps[5] == "metric" { gauge } else { counter };
    let r = match &caps[6] {
        "$__interval" => INTERVAL_S,
        "$__rate_interval" => RATE_INTERVAL_S,
        m => m.trim_end_matches('m').parse::<i64>().expect("minutes") * 60,
    };
    let per_source = |t: i64| -> Vec<(&String, f64)> {
        minutes
            .iter()
            .filter_map(|(src, m)| window(m, func, t, r).map(|v| (src, v)))
            .collect()
    };
    // A function's result has no name; the instance is the source.
    let series_labels =
        |src: &str| -> Labels { [("instance".to_string(), src.to_string())].into() };
    let mut out = Matrix::new();
    for &t in times {
        let values = per_source(t);
        if values.is_empty() {
            continue;
        }
        match (agg.map(|a| a.as_str()), k) {
            (None, None) => {
                for (src, v) in values {
                    out.entry(series_labels(src)).or_default().insert(t, (v, v));
                }
            }
            (None, Some(k)) => {
                let mut ranked = values;
                ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
                let k: usize = k.as_str().parse().expect("k");
                for (src, v) in ranked.into_iter().take(k) {
                    out.entry(series_labels(src)).or_default().insert(t, (v, v));
                }
            }
            (Some(op), _) => {
                let it = values.iter().map(|x| x.1);
                let v = match op {
                    "sum" => it.sum(),
                    "avg" => it.sum::<f64>() / values.len() as f64,
                    "min" => it.fold(f64::INFINITY, f64::min),
                    _ => it.fold(f64::NEG_INFINITY, f64::max),
                };
                out.entry(Labels::new()).or_default().insert(t, (v, v));
            }
        }
    }
    out
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Every target expression of the dashboard, panels in rows included.
fn target_exprs(dashboard: &Value) -> Vec<String> {
    fn walk(panels: &Value, out: &mut Vec<String>) {
        for p in panels.as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                let expr = t["expr"].as_str().expect("every target has an expr");
                assert_eq!(
                    t["datasource"],
                    serde_json::json!({"type": "prometheus", "uid": "${datasource}"}),
                    "{expr}"
                );
                out.push(expr.to_string());
            }
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// Reads the dashboard, checks its variables are Grafana's usual ones, and
/// returns its target expressions.
fn dashboard_targets_and_variables_checked() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dashboards/tally-fleet.json");
    let text = std::fs::read_to_string(&path).expect("dashboards/tally-fleet.json");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    assert_eq!(dashboard["schemaVersion"], 39);
    let vars: Vec<&Value> = dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
        .iter()
        .collect();
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no {name} variable"))
    };
    assert_eq!(var("datasource")["type"], "datasource");
    assert_eq!(var("datasource")["query"], "prometheus");
    assert_eq!(var("instance")["definition"], "label_values(instance)");
    assert_eq!(var("metric")["definition"], "label_values(__name__)");
    let templates = target_exprs(&dashboard);
    assert!(templates.len() >= 8, "{templates:?}");
    templates
}

/// The dashboard's variables as Grafana would fill them from the API.
struct Variables {
    /// `$instance`: every source, as a regex alternation.
    instance_regex: String,
    /// `$metric`: a gauge.
    gauge: String,
    /// `$counter`: a counter.
    counter: String,
}

/// Fills the variables from the label values and metadata APIs, checking
/// that every source the load generator pushed is listed.
async fn variables_as_grafana_fills_them(api: &Api) -> Variables {
    let (status, sources) = api
        .get("/prometheus/api/v1/label/instance/values", &[])
        .await;
    assert_eq!(status, 200, "{sources}");
    let sources: Vec<String> = serde_json::from_value(sources["data"].clone()).expect("names");
    assert_eq!(sources.len(), SOURCES, "{sources:?}");
    let (_, meta) = api.get("/prometheus/api/v1/metadata", &[]).await;
    let of_type = |ty: &str| -> String {
        meta["data"]
            .as_object()
            .expect("metadata")
            .iter()
            .find(|(_, v)| v[0]["type"] == ty)
            .map(|(k, _)| k.clone())
            .unwrap_or_else(|| panic!("no {ty} in {meta}"))
    };
    let (gauge, counter) = (of_type("gauge"), of_type("counter"));
    // Loadgen metric names are valid Prometheus names as they are.
    Variables {
        instance_regex: sources.join("|"),
        gauge,
        counter,
    }
}

/// `expr` through `/prometheus/api/v1/query_range` every minute over
/// `[start, end]`: a non-empty matrix.
async fn query_range_matrix(api: &Api, expr: &str, start: i64, end: i64) -> Matrix {
    let (status, body) = api
        .get(
            "/prometheus/api/v1/query_range",
            &[
                ("query", expr.to_string()),
                ("start", start.to_string()),
                ("end", end.to_string()),
                ("step", "60".into()),
            ],
        )
        .await;
    assert_eq!(status, 200, "{expr}: {body}");
    let result = body["data"]["result"].as_array().expect("a matrix");
    assert!(!result.is_empty(), "{expr}: empty result");
    result
        .iter()
        .map(|s| {
            let labels: Labels = serde_json::from_value(s["metric"].clone()).expect("labels");
            let points = s["values"]
                .as_array()
                .expect("values")
                .iter()
                .map(|p| {
                    let v: f64 = p[1].as_str().expect("value").parse().expect("number");
                    (p[0].as_i64().expect("whole seconds"), v)
                })
                .collect();
            (labels, points)
        })
        .collect()
}

/// The same series at the same times, each value within its bounds (equal
/// up to rounding where the bounds are one value).
fn assert_matrices_match(expr: &str, got: &Matrix, want: &Matrix<(f64, f64)>) {
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "{expr}: series differ"
    );
    for (labels, pts) in want {
        let g = &got[labels];
        assert_eq!(
            g.keys().collect::<Vec<_>>(),
            pts.keys().collect::<Vec<_>>(),
            "{expr} {labels:?}: times differ"
        );
        for (t, (lo, hi)) in pts {
            let v = g[t];
            assert!(
                close(v, *lo) || close(v, *hi) || (*lo..=*hi).contains(&v),
                "{expr} {labels:?} at {t}: got {v}, want {lo}..={hi}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fleet_dashboard_query_answers_correctly() {
    let templates = dashboard_targets_and_variables_checked();

    let d = Daemon::start_async(tallyd().flush_interval("1s")).await;
    let before = chrono::Utc::now().timestamp();
    let addr = (d.grpc_url(), d.http_url());
    let daemon = std::sync::Arc::new(d);
    {
        let d = daemon.clone();
        tokio::task::spawn_blocking(move || run_loadgen(&d))
            .await
            .expect("the load generator panicked");
    }
    let after = chrono::Utc::now().timestamp();
    let api = Api {
        base: addr.1.clone(),
        http: reqwest::Client::builder()
            .no_proxy()
            .timeout(HTTP_TIMEOUT)
            .build()
            .expect("an HTTP client"),
    };
    api.wait_flushed().await;

    let vars = variables_as_grafana_fills_them(&api).await;
    let (gauge, counter) = (&vars.gauge, &vars.counter);

    // Evaluation times: every minute from the first with data to the one
    // after the last; native minutes from a rate window before that.
    let first = before - SECONDS;
    let start = first.div_euclid(60) * 60 + 60;
    let end = after.div_euclid(60) * 60 + 60;
    let times: Vec<i64> = (start..=end).step_by(60).collect();
    let gauge_minutes = api.native(gauge, start - 2 * RATE_INTERVAL_S, end).await;
    let counter_minutes = api.native(counter, start - 2 * RATE_INTERVAL_S, end).await;
    assert_eq!(gauge_minutes.len(), SOURCES);
    assert_eq!(counter_minutes.len(), SOURCES);

    for template in &templates {
        let expr = template
            .replace("$__rate_interval", &format!("{}m", RATE_INTERVAL_S / 60))
            .replace("$__interval", &format!("{}m", INTERVAL_S / 60))
            .replace("$instance", &vars.instance_regex)
            .replace("$metric", gauge)
            .replace("$counter", counter);
        let got = query_range_matrix(&api, &expr, start, end).await;
        let want = expected(
            template,
            (gauge, &gauge_minutes),
            (counter, &counter_minutes),
            &times,
        );
        assert_matrices_match(&expr, &got, &want);
    }
    drop(daemon);
}

#[test]
fn every_fleet_dashboard_expression_has_a_model() {
    let none = Minutes::new();
    for template in dashboard_targets_and_variables_checked() {
        // Panics naming the expression when the model has no case for it.
        let want = expected(&template, ("g", &none), ("c", &none), &[60]);
        assert!(want.is_empty(), "{template}");
    }
}
