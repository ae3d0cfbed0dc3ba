//! The Prometheus-compatible read API under `/prometheus`, so that
//! Grafana's Prometheus data source (and `promtool`) can browse and graph
//! Tally's series: `query`, `query_range`, `series`, `labels`,
//! `label/<name>/values`, `metadata`, `query_exemplars` and
//! `status/buildinfo`, over GET or form-encoded POST, in Prometheus' JSON
//! format and with its error types and status codes.
//!
//! A series appears as `<metric>{source="…", tally_metric="…"}` (see
//! [`names`] for the name mapping). PromQL is parsed with `promql-parser`,
//! checked by [`plan`] (anything Tally cannot answer exactly is a
//! `bad_data` error naming the construct) and evaluated from the slots by
//! [`eval`] through the query engine.

pub mod eval;
pub mod names;
pub mod plan;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{FromRequest, Path, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde_json::{json, Value as Json_};

use crate::http::HttpState;
use crate::query::{QueryEngine, QueryError};
use crate::store::CatalogQuery;

use eval::{EvalError, Evaluator, Labels, Resolved, Value};
use names::{prom_name, NameCache, NAME_LABEL, SOURCE_LABEL, TALLY_METRIC_LABEL};
use plan::{AggOp, Plan, PlanError};

/// The Prometheus version reported to clients. Grafana enables features by
/// version; this one has every API this module serves.
pub const PROMETHEUS_VERSION: &str = "2.42.0";

/// Response header naming the rollup groups a query read, for operators
/// (and tests) checking which queries avoid fanning out.
pub const ROLLUP_HEADER: &str = "x-tally-rollup";

/// Series that stopped reporting this long before a listing's `start` may
/// still be listed: the catalog refreshes `last_seen` coarsely.
const SEEN_SLACK_S: i64 = 86_400;

/// State of this API beyond the daemon's.
pub struct PromState {
    names: NameCache,
}

impl PromState {
    fn new() -> PromState {
        PromState {
            names: NameCache::new(),
        }
    }
}

/// The routes, relative to `/prometheus`.
pub fn router() -> Router<HttpState> {
    Router::new()
        .route("/api/v1/query", get(query).post(query))
        .route("/api/v1/query_range", get(query_range).post(query_range))
        .route("/api/v1/series", get(series).post(series))
        .route("/api/v1/labels", get(labels).post(labels))
        .route("/api/v1/label/{name}/values", get(label_values))
        .route("/api/v1/metadata", get(metadata))
        .route("/api/v1/query_exemplars", get(exemplars).post(exemplars))
        .route("/api/v1/status/buildinfo", get(buildinfo))
        .layer(Extension(Arc::new(PromState::new())))
}

// ---------------------------------------------------------------------------
// Errors and responses.

/// A Prometheus API error: its `errorType` and HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadData(String),
    /// The query is valid but a limit refuses it.
    #[error("{0}")]
    Execution(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    fn parts(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadData(_) => (StatusCode::BAD_REQUEST, "bad_data"),
            ApiError::Execution(_) => (StatusCode::UNPROCESSABLE_ENTITY, "execution"),
            ApiError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

impl From<QueryError> for ApiError {
    fn from(e: QueryError) -> ApiError {
        match e {
            QueryError::Invalid(m) => ApiError::BadData(m),
            QueryError::Limit(m) => ApiError::Execution(m),
            QueryError::Busy(m) => ApiError::Unavailable(m),
            QueryError::Store(e) if e.is_retryable() => ApiError::Unavailable(e.to_string()),
            QueryError::Store(e) => ApiError::Internal(e.to_string()),
        }
    }
}

impl From<EvalError> for ApiError {
    fn from(e: EvalError) -> ApiError {
        match e {
            EvalError::BadData(m) => ApiError::BadData(m),
            EvalError::Query(q) => q.into(),
        }
    }
}

impl From<PlanError> for ApiError {
    fn from(e: PlanError) -> ApiError {
        ApiError::BadData(e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, kind) = self.parts();
        (
            status,
            Json(json!({ "status": "error", "errorType": kind, "error": self.to_string() })),
        )
            .into_response()
    }
}

fn success(data: Json_) -> Response {
    Json(json!({ "status": "success", "data": data })).into_response()
}

fn success_with_warnings(data: Json_, warnings: Vec<String>) -> Response {
    if warnings.is_empty() {
        return success(data);
    }
    Json(json!({ "status": "success", "data": data, "warnings": warnings })).into_response()
}

/// A sample's timestamp as Prometheus writes it: seconds, with
/// milliseconds when there are any.
fn json_time(t_ms: i64) -> Json_ {
    if t_ms % 1000 == 0 {
        json!(t_ms / 1000)
    } else {
        json!(t_ms as f64 / 1000.0)
    }
}

/// A sample value as Prometheus writes it (Go's shortest `'f'` format).
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

fn sample(t_ms: i64, v: f64) -> Json_ {
    json!([json_time(t_ms), format_value(v)])
}

/// Records a read's latency under the same histogram as the native API.
fn timed(endpoint: &'static str, started: Instant, r: Result<Response, ApiError>) -> Response {
    metrics::histogram!("tally_query_duration_seconds", "endpoint" => endpoint)
        .record(started.elapsed().as_secs_f64());
    r.unwrap_or_else(IntoResponse::into_response)
}

// ---------------------------------------------------------------------------
// Parameters.

/// Request parameters from the URL and, for form-encoded POSTs, the body
/// (which wins, as in Prometheus). Repeated keys (`match[]`) keep every
/// value.
pub struct Params(Vec<(String, String)>);

impl<S: Send + Sync> FromRequest<S> for Params {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let url: Vec<(String, String)> = req
            .uri()
            .query()
            .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
            .unwrap_or_default();
        let form = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
        let mut pairs = Vec::new();
        if form {
            let body = Bytes::from_request(req, state).await.map_err(|e| {
                ApiError::BadData(format!("reading the form body: {e}")).into_response()
            })?;
            pairs.extend(form_urlencoded::parse(&body).into_owned());
        }
        pairs.extend(url);
        Ok(Params(pairs))
    }
}

impl Params {
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    fn time_ms(&self, key: &str) -> Result<Option<i64>, ApiError> {
        self.get(key)
            .map(|v| {
                parse_time_ms(v)
                    .map_err(|e| ApiError::BadData(format!("invalid parameter {key:?}: {e}")))
            })
            .transpose()
    }

    fn required_time_ms(&self, key: &str) -> Result<i64, ApiError> {
        self.time_ms(key)?.ok_or_else(|| {
            ApiError::BadData(format!(
                "invalid parameter {key:?}: missing (Unix seconds or RFC 3339)"
            ))
        })
    }

    fn limit(&self) -> Result<Option<usize>, ApiError> {
        match self.get("limit") {
            None => Ok(None),
            Some(v) => v
                .parse::<usize>()
                .map(|n| (n > 0).then_some(n))
                .map_err(|_| {
                    ApiError::BadData(format!(
                        "invalid parameter \"limit\": {v:?} is not a non-negative integer"
                    ))
                }),
        }
    }
}

/// Unix seconds (fractions allowed) or RFC 3339, to Unix milliseconds.
pub fn parse_time_ms(s: &str) -> Result<i64, String> {
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() && secs.abs() < 1e13 {
            return Ok((secs * 1000.0).round() as i64);
        }
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_millis())
        .map_err(|_| format!("cannot parse {s:?} to a valid timestamp"))
}

/// Seconds (fractions allowed) or a Prometheus duration (`15s`, `1m30s`,
/// `2h`, `1d`, `1w`, `1y`, `500ms`), to milliseconds.
pub fn parse_duration_ms(s: &str) -> Result<i64, String> {
    let bad = || format!("cannot parse {s:?} to a valid duration");
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() && secs.abs() < 1e13 {
            return Ok((secs * 1000.0).round() as i64);
        }
        return Err(bad());
    }
    let mut total: i64 = 0;
    let mut rest = s;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(bad());
        }
        let n: i64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit_ms: i64 = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 7 * 86_400_000,
            "y" => 365 * 86_400_000,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total = n
            .checked_mul(unit_ms)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(bad)?;
    }
    Ok(total)
}

// ---------------------------------------------------------------------------
// Queries.

fn query_text(p: &Params) -> Result<&str, ApiError> {
    p.get("query").ok_or_else(|| {
        ApiError::BadData("invalid parameter \"query\": missing (a PromQL expression)".into())
    })
}

/// Adds the rollup header when rollups served the query.
fn with_rollups(mut r: Response, groups: &[String]) -> Response {
    if !groups.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&groups.join(",")) {
            r.headers_mut().insert(ROLLUP_HEADER, v);
        }
    }
    r
}

fn labels_json(labels: &Labels) -> Json_ {
    Json_::Object(
        labels
            .iter()
            .map(|(k, v)| (k.clone(), Json_::String(v.clone())))
            .collect(),
    )
}

async fn query_range(
    State(s): State<HttpState>,
    Extension(prom): Extension<Arc<PromState>>,
    p: Params,
) -> Response {
    let started = Instant::now();
    let r = run_range(&s.query, &prom, &p).await;
    timed("prometheus_query_range", started, r)
}

async fn run_range(
    engine: &QueryEngine,
    prom: &PromState,
    p: &Params,
) -> Result<Response, ApiError> {
    let q = query_text(p)?;
    let start = p.required_time_ms("start")?;
    let end = p.required_time_ms("end")?;
    let step = match p.get("step") {
        None => {
            return Err(ApiError::BadData(
                "invalid parameter \"step\": missing (a duration such as 60s or 1m)".into(),
            ))
        }
        Some(v) => parse_duration_ms(v)
            .map_err(|e| ApiError::BadData(format!("invalid parameter \"step\": {e}")))?,
    };
    if end < start {
        return Err(ApiError::BadData(
            "end timestamp must not be before start time".into(),
        ));
    }
    if step <= 0 {
        return Err(ApiError::BadData(
            "zero or negative query resolution step widths are not accepted. Try a positive integer".into(),
        ));
    }
    let max = engine.limits().max_points;
    let points = (end - start) / step + 1;
    if points > max as i64 {
        return Err(ApiError::BadData(format!(
            "exceeded maximum resolution of {max} points per timeseries (query.max_points). Try decreasing the query resolution (?step=XX)"
        )));
    }
    let plan = plan::plan(q)?;
    let times: Vec<i64> = (0..points).map(|i| start + i * step).collect();
    let mut ev = Evaluator::new(engine, &prom.names, times);
    let value = ev.eval(&plan).await?;
    let times = ev.times_ms();
    let result: Vec<Json_> = match value {
        Value::Scalar(v) => vec![json!({
            "metric": {},
            "values": times.iter().zip(&v).map(|(t, x)| sample(*t, *x)).collect::<Vec<_>>(),
        })],
        Value::Vector(mut series) => {
            series.sort_by(|a, b| a.labels.cmp(&b.labels));
            series
                .iter()
                .map(|s| {
                    let values: Vec<Json_> = times
                        .iter()
                        .zip(&s.values)
                        .filter_map(|(t, v)| v.map(|v| sample(*t, v)))
                        .collect();
                    json!({ "metric": labels_json(&s.labels), "values": values })
                })
                .collect()
        }
    };
    Ok(with_rollups(
        success(json!({ "resultType": "matrix", "result": result })),
        &ev.rollups,
    ))
}

async fn query(
    State(s): State<HttpState>,
    Extension(prom): Extension<Arc<PromState>>,
    p: Params,
) -> Response {
    let started = Instant::now();
    let r = run_instant(&s.query, &prom, &p).await;
    timed("prometheus_query", started, r)
}

async fn run_instant(
    engine: &QueryEngine,
    prom: &PromState,
    p: &Params,
) -> Result<Response, ApiError> {
    let q = query_text(p)?;
    let t = match p.time_ms("time")? {
        Some(t) => t,
        None => chrono::Utc::now().timestamp_millis(),
    };
    let plan = plan::plan(q)?;
    let mut ev = Evaluator::new(engine, &prom.names, vec![t]);
    let data = match ev.eval(&plan).await? {
        Value::Scalar(v) => json!({
            "resultType": "scalar",
            "result": sample(t, v.first().copied().unwrap_or(f64::NAN)),
        }),
        Value::Vector(series) => {
            let mut present: Vec<(Labels, f64)> = series
                .into_iter()
                .filter_map(|s| s.values.first().copied().flatten().map(|v| (s.labels, v)))
                .collect();
            // topk and bottomk answer in rank order, as in Prometheus;
            // everything else in label order.
            match &plan {
                Plan::Aggregate {
                    op: AggOp::Topk, ..
                } => present.sort_by(|a, b| b.1.total_cmp(&a.1)),
                Plan::Aggregate {
                    op: AggOp::Bottomk, ..
                } => present.sort_by(|a, b| a.1.total_cmp(&b.1)),
                _ => present.sort_by(|a, b| a.0.cmp(&b.0)),
            }
            let result: Vec<Json_> = present
                .iter()
                .map(|(l, v)| json!({ "metric": labels_json(l), "value": sample(t, *v) }))
                .collect();
            json!({ "resultType": "vector", "result": result })
        }
    };
    Ok(with_rollups(success(data), &ev.rollups))
}

// ---------------------------------------------------------------------------
// Discovery.

/// The selectors of `match[]`.
fn match_selectors(p: &Params) -> Result<Vec<plan::Selector>, ApiError> {
    p.all("match[]")
        .into_iter()
        .map(|m| {
            let expr = promql_parser::parser::parse(m)
                .map_err(|e| ApiError::BadData(format!("invalid parameter \"match[]\": {e}")))?;
            match expr {
                promql_parser::parser::Expr::VectorSelector(vs) => {
                    plan::selector(&vs).map_err(ApiError::from)
                }
                other => Err(ApiError::BadData(format!(
                    "invalid parameter \"match[]\": {other} is not a series selector"
                ))),
            }
        })
        .collect()
}

/// A series' full label set.
fn series_labels(source: &str, metric: &str) -> Labels {
    [
        (NAME_LABEL.to_string(), prom_name(metric)),
        (SOURCE_LABEL.to_string(), source.to_string()),
        (TALLY_METRIC_LABEL.to_string(), metric.to_string()),
    ]
    .into_iter()
    .collect()
}

/// The series matching any of `selectors` in `[start, end]`, up to `cap`.
/// Returns the series (source, metric) and whether there were more.
async fn list_series(
    engine: &QueryEngine,
    prom: &PromState,
    selectors: &[plan::Selector],
    start_ms: Option<i64>,
    end_ms: Option<i64>,
    cap: usize,
) -> Result<(BTreeSet<(String, String)>, bool), ApiError> {
    let mut out = BTreeSet::new();
    for sel in selectors {
        let Some(res) = eval::resolve(engine, &prom.names, sel).await? else {
            continue;
        };
        if page_series(engine, &res, start_ms, end_ms, cap, &mut out).await? {
            return Ok((out, true));
        }
    }
    Ok((out, false))
}

/// Adds one selection's series to `out`; true when `cap` was passed.
async fn page_series(
    engine: &QueryEngine,
    res: &Resolved,
    start_ms: Option<i64>,
    end_ms: Option<i64>,
    cap: usize,
    out: &mut BTreeSet<(String, String)>,
) -> Result<bool, ApiError> {
    let page = engine.limits().max_page;
    let mut after = None;
    loop {
        let found = engine
            .series(CatalogQuery {
                source: res.source.clone(),
                metric: res.metric.clone(),
                kind: None,
                seen_since: start_ms.map(|s| s.div_euclid(1000) - SEEN_SLACK_S),
                after: after.take(),
                limit: page,
            })
            .await?;
        for s in &found.items {
            let born_later = end_ms.is_some_and(|e| s.first_seen > e.div_euclid(1000));
            if born_later
                || crate::rollup::Rollups::is_rollup_source(&s.source)
                || !crate::selector::all_match(&res.names, &prom_name(&s.metric))
            {
                continue;
            }
            out.insert((s.source.clone(), s.metric.clone()));
            if out.len() > cap {
                return Ok(true);
            }
        }
        match found.next.as_deref().and_then(|k| k.split_once('|')) {
            Some((src, m)) => after = Some(crate::model::SeriesId::new(src, m)),
            None => return Ok(false),
        }
    }
}

/// Most entries a listing returns when the client sets no `limit`.
fn listing_cap(engine: &QueryEngine) -> usize {
    engine.limits().max_page.saturating_mul(10)
}

fn truncated(what: &str, cap: usize, limited: bool) -> Result<Vec<String>, ApiError> {
    if limited {
        Ok(vec![format!(
            "results truncated due to limit ({cap} {what})"
        )])
    } else {
        Err(ApiError::Execution(format!(
            "more than {cap} {what} match: narrow match[] or pass limit"
        )))
    }
}

async fn series(
    State(s): State<HttpState>,
    Extension(prom): Extension<Arc<PromState>>,
    p: Params,
) -> Response {
    let started = Instant::now();
    let r = run_series(&s.query, &prom, &p).await;
    timed("prometheus_series", started, r)
}

async fn run_series(
    engine: &QueryEngine,
    prom: &PromState,
    p: &Params,
) -> Result<Response, ApiError> {
    let selectors = match_selectors(p)?;
    if selectors.is_empty() {
        return Err(ApiError::BadData("no match[] parameter provided".into()));
    }
    let (start, end) = (p.time_ms("start")?, p.time_ms("end")?);
    let limit = p.limit()?;
    let cap = limit.unwrap_or_else(|| listing_cap(engine));
    let (found, more) = list_series(engine, prom, &selectors, start, end, cap).await?;
    let warnings = if more {
        truncated("series", cap, limit.is_some())?
    } else {
        Vec::new()
    };
    let data: Vec<Json_> = found
        .iter()
        .take(cap)
        .map(|(src, m)| labels_json(&series_labels(src, m)))
        .collect();
    Ok(success_with_warnings(Json_::Array(data), warnings))
}

async fn labels(
    State(s): State<HttpState>,
    Extension(prom): Extension<Arc<PromState>>,
    p: Params,
) -> Response {
    let started = Instant::now();
    let r = run_labels(&s.query, &prom, &p).await;
    timed("prometheus_labels", started, r)
}

async fn run_labels(
    engine: &QueryEngine,
    prom: &PromState,
    p: &Params,
) -> Result<Response, ApiError> {
    let selectors = match_selectors(p)?;
    let all = [NAME_LABEL, SOURCE_LABEL, TALLY_METRIC_LABEL];
    if selectors.is_empty() {
        return Ok(success(json!(all)));
    }
    // Every series has all three labels: any match has them all.
    let (start, end) = (p.time_ms("start")?, p.time_ms("end")?);
    let (found, _) = list_series(engine, prom, &selectors, start, end, 1).await?;
    Ok(success(if found.is_empty() {
        json!([])
    } else {
        json!(all)
    }))
}

async fn label_values(
    State(s): State<HttpState>,
    Extension(prom): Extension<Arc<PromState>>,
    Path(name): Path<String>,
    p: Params,
) -> Response {
    let started = Instant::now();
    let r = run_label_values(&s.query, &prom, &name, &p).await;
    timed("prometheus_label_values", started, r)
}

async fn run_label_values(
    engine: &QueryEngine,
    prom: &PromState,
    name: &str,
    p: &Params,
) -> Result<Response, ApiError> {
    let selectors = match_selectors(p)?;
    let limit = p.limit()?;
    let cap = limit.unwrap_or_else(|| listing_cap(engine));
    let mut values: BTreeSet<String> = BTreeSet::new();
    let mut more = false;
    match (name, selectors.is_empty()) {
        (NAME_LABEL | TALLY_METRIC_LABEL, true) => {
            let names = prom.names.get(engine).await?;
            values.extend(names.metrics.keys().map(|m| {
                if name == NAME_LABEL {
                    prom_name(m)
                } else {
                    m.clone()
                }
            }));
        }
        (SOURCE_LABEL, true) => {
            let mut after = None;
            loop {
                let page = engine
                    .sources(
                        Vec::new(),
                        Vec::new(),
                        after.take(),
                        engine.limits().max_page,
                    )
                    .await?;
                values.extend(page.items);
                if values.len() > cap {
                    more = true;
                    break;
                }
                match page.next {
                    Some(n) => after = Some(n),
                    None => break,
                }
            }
        }
        (NAME_LABEL | SOURCE_LABEL | TALLY_METRIC_LABEL, false) => {
            let (start, end) = (p.time_ms("start")?, p.time_ms("end")?);
            let (found, over) =
                list_series(engine, prom, &selectors, start, end, listing_cap(engine)).await?;
            if over {
                return Err(ApiError::Execution(format!(
                    "more than {} series match: narrow match[]",
                    listing_cap(engine)
                )));
            }
            values.extend(found.into_iter().map(|(src, m)| match name {
                NAME_LABEL => prom_name(&m),
                SOURCE_LABEL => src,
                _ => m,
            }));
        }
        // No series has any other label.
        _ => {}
    }
    more |= values.len() > cap;
    let warnings = if more {
        truncated("values", cap, limit.is_some())?
    } else {
        Vec::new()
    };
    let data: Vec<String> = values.into_iter().take(cap).collect();
    Ok(success_with_warnings(json!(data), warnings))
}

async fn metadata(
    State(s): State<HttpState>,
    Extension(prom): Extension<Arc<PromState>>,
    p: Params,
) -> Response {
    let started = Instant::now();
    let r = run_metadata(&s.query, &prom, &p).await;
    timed("prometheus_metadata", started, r)
}

/// Kinds as Prometheus metric types: gauges are `gauge`, counters (sent as
/// deltas or cumulative values, stored as deltas) `counter`.
async fn run_metadata(
    engine: &QueryEngine,
    prom: &PromState,
    p: &Params,
) -> Result<Response, ApiError> {
    let names = prom.names.get(engine).await?;
    let only = p.get("metric");
    let limit = p.limit()?.unwrap_or(usize::MAX);
    let mut by_name: BTreeMap<String, (Vec<&str>, Option<names::MetricKind>)> = BTreeMap::new();
    for (metric, kind) in &names.metrics {
        let prom_metric = prom_name(metric);
        if only.is_some_and(|o| o != prom_metric) {
            continue;
        }
        let e = by_name.entry(prom_metric).or_insert((Vec::new(), None));
        e.0.push(metric);
        e.1 = match e.1 {
            None => Some(*kind),
            Some(k) if k == *kind => Some(k),
            Some(_) => Some(names::MetricKind::Mixed),
        };
    }
    let data: serde_json::Map<String, Json_> = by_name
        .into_iter()
        .take(limit)
        .map(|(name, (metrics, kind))| {
            let help = format!("Tally metric {}", metrics.join(", "));
            let kind = kind.map_or("unknown", names::MetricKind::prom_type);
            (name, json!([{ "type": kind, "help": help, "unit": "" }]))
        })
        .collect();
    Ok(success(Json_::Object(data)))
}

/// Tally keeps no exemplars: always none.
async fn exemplars() -> Response {
    success(json!([]))
}

async fn buildinfo() -> Response {
    success(json!({
        "version": PROMETHEUS_VERSION,
        "revision": "",
        "branch": "",
        "buildUser": "",
        "buildDate": "",
        "goVersion": "",
        "application": "tally",
        "tallyVersion": env!("CARGO_PKG_VERSION"),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_durations() {
        assert_eq!(parse_time_ms("1700000000"), Ok(1_700_000_000_000));
        assert_eq!(parse_time_ms("1700000000.25"), Ok(1_700_000_000_250));
        assert_eq!(
            parse_time_ms("2023-11-14T22:13:20.5Z"),
            Ok(1_700_000_000_500)
        );
        assert!(parse_time_ms("soon").is_err());
        assert_eq!(parse_duration_ms("15"), Ok(15_000));
        assert_eq!(parse_duration_ms("0.5"), Ok(500));
        assert_eq!(parse_duration_ms("1m30s"), Ok(90_000));
        assert_eq!(parse_duration_ms("2h"), Ok(7_200_000));
        assert_eq!(parse_duration_ms("1d"), Ok(86_400_000));
        assert_eq!(parse_duration_ms("250ms"), Ok(250));
        assert!(parse_duration_ms("").is_err());
        assert!(parse_duration_ms("m").is_err());
        assert!(parse_duration_ms("5x").is_err());
    }

    #[test]
    fn values_and_times_as_prometheus_writes_them() {
        assert_eq!(format_value(1.0), "1");
        assert_eq!(format_value(0.1), "0.1");
        assert_eq!(format_value(-2.5), "-2.5");
        assert_eq!(format_value(1e21), "1000000000000000000000");
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(f64::NEG_INFINITY), "-Inf");
        assert_eq!(json_time(1_700_000_000_000).to_string(), "1700000000");
        assert_eq!(json_time(1_700_000_000_500).to_string(), "1700000000.5");
    }

    #[test]
    fn errors_map_to_prometheus_types() {
        let parts = |e: ApiError| e.parts();
        assert_eq!(
            parts(QueryError::Invalid("x".into()).into()),
            (StatusCode::BAD_REQUEST, "bad_data")
        );
        assert_eq!(
            parts(QueryError::Limit("x".into()).into()),
            (StatusCode::UNPROCESSABLE_ENTITY, "execution")
        );
        assert_eq!(
            parts(QueryError::Busy("x".into()).into()),
            (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
        );
        assert_eq!(
            parts(QueryError::Store(crate::store::StoreError::Unavailable("down".into())).into()),
            (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
        );
    }
}
