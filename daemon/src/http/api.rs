//! The native JSON API, mounted under `/api/v1/`: range, latest,
//! series/sources/metrics discovery, groups, aggregate, and the `watch`
//! Server-Sent Events stream. Its parameters are Tally's own (`source`,
//! `metric`, `step`, times as `now-6h`), unlike the Prometheus API next to
//! it, which speaks PromQL.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;

use crate::labels::validate_label_name;
use crate::model::{SampleKind, SeriesId};
use crate::query::{
    Aggregate, AggregateQuery, Names, QueryEngine, QueryError, Selection, Sources, StepSpec,
};
use crate::selector::{parse_label_matchers, LabelMatcher, NameMatcher, PatternLimits};
use crate::store::CatalogQuery;
use crate::watch::WatchHub;

/// What the JSON API reads.
#[derive(Clone)]
pub(crate) struct ApiState {
    pub(crate) query: Arc<QueryEngine>,
    pub(crate) watch: Arc<WatchHub>,
}

impl ApiState {
    /// The bounds on the `source` and `metric` patterns of a request.
    fn patterns(&self) -> PatternLimits {
        self.query.limits().pattern_limits()
    }
}

/// The routes, relative to `/api/v1`.
pub(crate) fn router() -> Router<ApiState> {
    Router::new()
        .route("/range", get(range))
        .route("/latest", get(latest))
        .route("/series", get(series))
        .route(
            "/sources",
            get(|State(s): State<ApiState>, q| names(s, Names::Sources, q)),
        )
        .route(
            "/metrics",
            get(|State(s): State<ApiState>, q| names(s, Names::Metrics, q)),
        )
        .route("/labels", get(label_names))
        .route("/label/{name}/values", get(label_values))
        .route("/groups", get(groups))
        .route("/aggregate", get(aggregate))
        .route("/watch", get(watch_sse))
}

/// A JSON error body with a specific, actionable message.
fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, Json(serde_json::json!({ "error": msg.into() }))).into_response()
}

pub(super) fn bad(msg: impl Into<String>) -> Response {
    error(StatusCode::BAD_REQUEST, msg)
}

impl IntoResponse for QueryError {
    fn into_response(self) -> Response {
        match self {
            QueryError::Invalid(msg) | QueryError::Limit(msg) => bad(msg),
            QueryError::Busy(msg) => error(StatusCode::SERVICE_UNAVAILABLE, msg),
            QueryError::Store(e) if e.is_retryable() => {
                error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
            }
            QueryError::Store(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        }
    }
}

/// Records a read's latency under its endpoint.
/// A read's answer, with `partial` beside its fields when it was answered
/// from memory alone because the store is unreachable.
#[derive(serde::Serialize)]
pub(super) struct MaybePartial<T> {
    #[serde(flatten)]
    body: T,
    #[serde(skip_serializing_if = "Option::is_none")]
    partial: Option<String>,
}

/// Runs a read, noting whether it had to answer from memory alone.
pub(super) async fn read<T>(
    read: impl std::future::Future<Output = Result<T, QueryError>>,
) -> Result<Json<MaybePartial<T>>, QueryError> {
    let (r, partial) = crate::query::partial::tracking(read).await;
    r.map(|body| Json(MaybePartial { body, partial }))
}

pub(super) fn timed<T: IntoResponse>(
    endpoint: &'static str,
    started: Instant,
    r: Result<T, QueryError>,
) -> Response {
    metrics::histogram!("tally_query_duration_seconds", "endpoint" => endpoint)
        .record(started.elapsed().as_secs_f64());
    match r {
        Ok(v) => v.into_response(),
        Err(e) => e.into_response(),
    }
}

/// Parameters shared by the read endpoints. Unknown parameters are refused,
/// so a typo (`metrics=`) is an error, not a silently wider query.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    source: Option<String>,
    metric: Option<String>,
    group: Option<String>,
    from: Option<String>,
    to: Option<String>,
    step: Option<String>,
    max_points: Option<usize>,
    agg: Option<String>,
    fan_out: Option<bool>,
    kind: Option<String>,
    seen_since: Option<String>,
    limit: Option<usize>,
    after: Option<String>,
    window: Option<String>,
    labels: Option<String>,
    by: Option<String>,
}

/// Default page size of the listings.
const DEFAULT_PAGE: usize = 100;

impl Params {
    fn matcher(
        value: &Option<String>,
        name: &str,
        limits: &PatternLimits,
    ) -> Result<Vec<NameMatcher>, QueryError> {
        match value {
            None => Ok(Vec::new()),
            Some(v) => NameMatcher::parse_list_within(v, limits)
                .map(|m| vec![m])
                .map_err(|e| QueryError::Invalid(format!("{name}: {e}"))),
        }
    }

    /// A selection that must name its sources and metrics (`*` for all).
    fn selection(&self, limits: &PatternLimits) -> Result<Selection, QueryError> {
        if self.source.is_none() || self.metric.is_none() {
            return Err(QueryError::Invalid(
                "`source` and `metric` are required: names, comma-separated lists or globs (`*` selects all)".into(),
            ));
        }
        Ok(Selection {
            source: Params::matcher(&self.source, "source", limits)?,
            metric: Params::matcher(&self.metric, "metric", limits)?,
            labels: self.label_matchers(limits)?,
        })
    }

    /// `labels`: PromQL-style label matchers, e.g. `mode="idle",cpu=~"0|1"`.
    fn label_matchers(&self, limits: &PatternLimits) -> Result<Vec<LabelMatcher>, QueryError> {
        match &self.labels {
            None => Ok(Vec::new()),
            Some(spec) => parse_label_matchers(spec, limits)
                .map_err(|e| QueryError::Invalid(format!("labels: {e}"))),
        }
    }

    /// `by`: comma-separated label names an aggregate is grouped by.
    fn group_by(&self) -> Result<Vec<String>, QueryError> {
        let Some(spec) = &self.by else {
            return Ok(Vec::new());
        };
        let names: Vec<String> = spec
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(String::from)
            .collect();
        for n in &names {
            validate_label_name(n).map_err(|e| QueryError::Invalid(format!("by: {e}")))?;
        }
        Ok(names)
    }

    /// `[from, to)`: `to` defaults to now (inclusive of this second), `from`
    /// to an hour before `to`.
    fn range(&self, now: i64) -> Result<(i64, i64), QueryError> {
        let to = match self.to.as_deref().map(|t| parse_time(t, now)).transpose() {
            Ok(t) => t.unwrap_or(now + 1),
            Err(e) => return Err(QueryError::Invalid(format!("to: {e}"))),
        };
        let from = match self.from.as_deref().map(|t| parse_time(t, now)).transpose() {
            Ok(t) => t.unwrap_or(to - 3600),
            Err(e) => return Err(QueryError::Invalid(format!("from: {e}"))),
        };
        Ok((from, to))
    }

    fn step(&self) -> Result<StepSpec, QueryError> {
        StepSpec::parse(self.step.as_deref().unwrap_or("1m"), self.max_points)
    }

    fn aggregates(&self) -> Result<Vec<Aggregate>, QueryError> {
        Aggregate::parse_list(self.agg.as_deref().unwrap_or(""))
    }

    fn refuse(&self, present: &[(&str, bool)]) -> Result<(), QueryError> {
        match present.iter().find(|(_, p)| *p) {
            Some((name, _)) => Err(QueryError::Invalid(format!(
                "`{name}` does not apply to this endpoint"
            ))),
            None => Ok(()),
        }
    }
}

/// The query string, or a JSON 400 naming what is wrong with it (axum's own
/// rejection would be plain text).
macro_rules! params {
    ($q:expr) => {
        match $q {
            Ok(Query(p)) => p,
            Err(e) => return bad(format!("bad query string: {}", e.body_text())),
        }
    };
}

macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return QueryError::into_response(e),
        }
    };
}

async fn range(State(s): State<ApiState>, q: Result<Query<Params>, QueryRejection>) -> Response {
    let p = params!(q);
    let now = chrono::Utc::now().timestamp();
    tri!(p.refuse(&[
        ("group", p.group.is_some()),
        ("kind", p.kind.is_some()),
        ("after", p.after.is_some())
    ]));
    let sel = tri!(p.selection(&s.patterns()));
    let (from, to) = tri!(p.range(now));
    let step = tri!(p.step());
    let aggs = tri!(p.aggregates());
    let started = Instant::now();
    let r = read(s.query.range(&sel, from, to, step, &aggs)).await;
    timed("range", started, r)
}

async fn latest(State(s): State<ApiState>, q: Result<Query<Params>, QueryRejection>) -> Response {
    let p = params!(q);
    let sel = tri!(p.selection(&s.patterns()));
    let started = Instant::now();
    let now = chrono::Utc::now().timestamp();
    let latest = async {
        let series = s.query.latest(&sel, now).await?;
        Ok(serde_json::json!({ "series": series }))
    };
    timed("latest", started, read(latest).await)
}

fn parse_kind(k: &Option<String>) -> Result<Option<SampleKind>, QueryError> {
    match k.as_deref() {
        None => Ok(None),
        Some("gauge") => Ok(Some(SampleKind::Gauge)),
        Some("delta_counter") => Ok(Some(SampleKind::DeltaCounter)),
        Some("cumulative_counter") => Ok(Some(SampleKind::CumulativeCounter)),
        Some(other) => Err(QueryError::Invalid(format!(
            "kind {other:?} is not gauge, delta_counter or cumulative_counter"
        ))),
    }
}

async fn series(State(s): State<ApiState>, q: Result<Query<Params>, QueryRejection>) -> Response {
    let p = params!(q);
    let now = chrono::Utc::now().timestamp();
    let kind = tri!(parse_kind(&p.kind));
    let seen_since = match p
        .seen_since
        .as_deref()
        .map(|t| parse_time(t, now))
        .transpose()
    {
        Ok(t) => t,
        Err(e) => return bad(format!("seen_since: {e}")),
    };
    let after = match p.after.as_deref() {
        None => None,
        Some(a) => match SeriesId::from_key(a) {
            Some(after) => Some(after),
            None => {
                return bad("after: pass the `next` value of the previous page (`source|metric`)")
            }
        },
    };
    let q = CatalogQuery {
        source: tri!(Params::matcher(&p.source, "source", &s.patterns())),
        metric: tri!(Params::matcher(&p.metric, "metric", &s.patterns())),
        labels: tri!(p.label_matchers(&s.patterns())),
        kind,
        seen_since,
        after,
        limit: p.limit.unwrap_or(DEFAULT_PAGE),
    };
    let started = Instant::now();
    let r = s
        .query
        .series(q)
        .await
        .map(|page| Json(serde_json::json!({ "series": page.items, "next": page.next })));
    timed("series", started, r)
}

/// `/api/v1/sources` and `/api/v1/metrics`: distinct names, paginated.
async fn names(s: ApiState, which: Names, q: Result<Query<Params>, QueryRejection>) -> Response {
    let p = params!(q);
    let (src, met) = (
        tri!(Params::matcher(&p.source, "source", &s.patterns())),
        tri!(Params::matcher(&p.metric, "metric", &s.patterns())),
    );
    let started = Instant::now();
    let r = s
        .query
        .names(
            which,
            src,
            met,
            p.after.clone(),
            p.limit.unwrap_or(DEFAULT_PAGE),
        )
        .await
        .map(|page| Json(serde_json::json!({ which.as_str(): page.items, "next": page.next })));
    timed(which.as_str(), started, r)
}

/// The series a discovery listing looks at: any `source`, `metric` and
/// `labels` given narrow it, none means every series.
fn discovery_selection(s: &ApiState, p: &Params) -> Result<Selection, QueryError> {
    Ok(Selection {
        source: Params::matcher(&p.source, "source", &s.patterns())?,
        metric: Params::matcher(&p.metric, "metric", &s.patterns())?,
        labels: p.label_matchers(&s.patterns())?,
    })
}

/// `/api/v1/labels`: distinct label names of the selected series.
async fn label_names(
    State(s): State<ApiState>,
    q: Result<Query<Params>, QueryRejection>,
) -> Response {
    let p = params!(q);
    let sel = tri!(discovery_selection(&s, &p));
    let started = Instant::now();
    let r = s
        .query
        .label_names(&sel, p.after.clone(), p.limit.unwrap_or(DEFAULT_PAGE))
        .await
        .map(|page| Json(serde_json::json!({ "labels": page.items, "next": page.next })));
    timed("labels", started, r)
}

/// `/api/v1/label/<name>/values`: distinct values of one label.
async fn label_values(
    State(s): State<ApiState>,
    Path(name): Path<String>,
    q: Result<Query<Params>, QueryRejection>,
) -> Response {
    let p = params!(q);
    if let Err(e) = validate_label_name(&name) {
        return bad(format!("label name: {e}"));
    }
    let sel = tri!(discovery_selection(&s, &p));
    let started = Instant::now();
    let r = s
        .query
        .label_values(
            &name,
            &sel,
            p.after.clone(),
            p.limit.unwrap_or(DEFAULT_PAGE),
        )
        .await
        .map(|page| Json(serde_json::json!({ "values": page.items, "next": page.next })));
    timed("label_values", started, r)
}

async fn groups(State(s): State<ApiState>) -> Response {
    let r = s.query.rollups();
    Json(serde_json::json!({
        "groups": r.listed().into_iter().map(|g| serde_json::json!({
            "name": g.name, "rule": g.rule, "sources": g.sources,
            "declared_members": g.declared_members,
        })).collect::<Vec<_>>(),
        "prefix_delimiter": r.prefix_delimiter().map(String::from),
    }))
    .into_response()
}

async fn aggregate(
    State(s): State<ApiState>,
    q: Result<Query<Params>, QueryRejection>,
) -> Response {
    let p = params!(q);
    let now = chrono::Utc::now().timestamp();
    let Some(metric) = p.metric.clone() else {
        return bad("`metric` is required (one metric name)");
    };
    let sources = match (&p.group, &p.source) {
        (Some(_), Some(_)) => return bad("give `group` or `source`, not both"),
        (Some(g), None) => Sources::Group(g.clone()),
        (None, _) => Sources::Matching(tri!(Params::matcher(&p.source, "source", &s.patterns()))),
    };
    let (from, to) = tri!(p.range(now));
    let q = AggregateQuery {
        metric,
        sources,
        from,
        to,
        step: tri!(p.step()),
        aggregates: tri!(p.aggregates()),
        use_rollup: !p.fan_out.unwrap_or(false),
        labels: tri!(p.label_matchers(&s.patterns())),
        by: tri!(p.group_by()),
    };
    let started = Instant::now();
    let r = read(s.query.aggregate(&q)).await;
    timed("aggregate", started, r)
}

/// Server-Sent Events: a `snapshot` event, then `update` events; `error`
/// and the end of the stream if the hub drops a subscriber that fell behind.
async fn watch_sse(
    State(s): State<ApiState>,
    q: Result<Query<Params>, QueryRejection>,
) -> Response {
    let p = params!(q);
    let sel = tri!(p.selection(&s.patterns()));
    let window_minutes = match p
        .window
        .as_deref()
        .map(humantime::parse_duration)
        .transpose()
    {
        Ok(w) => w.map_or(0, |d| (d.as_secs() / 60).min(u32::MAX as u64) as u32),
        Err(e) => return bad(format!("window: {e} (e.g. 15m, 1h)")),
    };
    let sub = match s.watch.subscribe(sel, window_minutes).await {
        Ok(sub) => sub,
        Err(e) => return e.into_response(),
    };
    let stream = futures::stream::unfold(Some(sub), |sub| async move {
        let mut sub = sub?;
        match sub.events.recv().await {
            Some(ev) => {
                let name = if ev.snapshot { "snapshot" } else { "update" };
                let event = Event::default()
                    .event(name)
                    .json_data(&ev)
                    .unwrap_or_else(|e| {
                        Event::default()
                            .event("error")
                            .data(format!("encoding: {e}"))
                    });
                Some((Ok::<_, std::convert::Infallible>(event), Some(sub)))
            }
            None if sub.was_dropped_for_lag() => Some((
                Ok(Event::default().event("error").data(
                    "dropped: this subscriber stopped reading for longer than watch.max_lag",
                )),
                None,
            )),
            None => None,
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// Accepts Unix seconds (`1764000000`, `1764000000.5`), RFC 3339
/// (`2026-11-22T10:00:00Z`), `now`, and `now-<duration>` (`now-6h`).
pub(super) fn parse_time(s: &str, now: i64) -> Result<i64, String> {
    let s = s.trim();
    if s == "now" {
        return Ok(now);
    }
    if let Some(ago) = s.strip_prefix("now-") {
        let d = humantime::parse_duration(ago).map_err(|e| format!("{s:?}: {e}"))?;
        return i64::try_from(d.as_secs())
            .ok()
            .filter(|secs| *secs <= crate::query::MAX_TIME_S)
            .map(|secs| now - secs)
            .ok_or_else(|| format!("{s:?} reaches too far back"));
    }
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() && secs.abs() < 1e13 {
            return Ok(secs.floor() as i64);
        }
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp())
        .map_err(|_| {
            format!("{s:?} is not Unix seconds, RFC 3339 (2026-11-22T10:00:00Z), `now` or `now-6h`")
        })
}

#[cfg(test)]
mod tests {
    use super::parse_time;

    #[test]
    fn time_forms() {
        assert_eq!(parse_time("1764000000", 0), Ok(1_764_000_000));
        assert_eq!(parse_time("1764000000.9", 0), Ok(1_764_000_000));
        assert_eq!(parse_time("2026-11-22T10:00:00Z", 0), Ok(1_795_341_600));
        assert_eq!(parse_time("now", 100), Ok(100));
        assert_eq!(parse_time("now-1m", 100), Ok(40));
        assert!(parse_time("yesterday", 0).unwrap_err().contains("RFC 3339"));
        assert!(parse_time("now-9223372036854775807s", 0)
            .unwrap_err()
            .contains("too far back"));
    }
}
