//! The discovery endpoints Grafana browses with: `series`, `labels`,
//! `label/<name>/values`, `metadata`, plus `query_exemplars` and
//! `status/buildinfo`, which it probes. They list from the catalog rather
//! than evaluate PromQL, so they share little with the query endpoints;
//! series are shown with the same labels (`promql::names`).

use std::collections::{BTreeMap, BTreeSet};

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::Response;
use promql_parser::label::Matcher;
use serde_json::{json, Value as Json_};

use super::params::Params;
use super::response::{labels_json, success, success_with_warnings, timed, ApiError};
use super::state::PromState;
use crate::promql::names::{
    self, prom_name, tally_metric_value, Route, NAME_LABEL, TALLY_METRIC_LABEL,
};
use crate::promql::select::{resolve_matchers, Resolved};
use crate::promql::{Context, Labels};
use crate::query::{LabelMap, QueryEngine};
use crate::store::CatalogQuery;

/// The Prometheus version reported to clients. Grafana enables features by
/// version; this one has every API `/prometheus` serves.
const PROMETHEUS_VERSION: &str = "2.42.0";

/// Series that stopped reporting this long before a listing's `start` may
/// still be listed: the catalog refreshes `last_seen` coarsely.
const SEEN_SLACK_S: i64 = 86_400;

/// The selectors of `match[]`, each as its alternatives of matchers (one
/// unless `or` is used between matchers).
fn match_selectors(p: &Params) -> Result<Vec<Vec<Vec<Matcher>>>, ApiError> {
    p.all("match[]")
        .into_iter()
        .map(|m| {
            let expr = promql_parser::parser::parse(m)
                .map_err(|e| ApiError::BadData(format!("invalid parameter \"match[]\": {e}")))?;
            let promql_parser::parser::Expr::VectorSelector(vs) = expr else {
                return Err(ApiError::BadData(format!(
                    "invalid parameter \"match[]\": {m} is not a series selector"
                )));
            };
            let name = vs
                .name
                .as_ref()
                .map(|n| Matcher::new(promql_parser::label::MatchOp::Equal, NAME_LABEL, n));
            let mut alternatives = if vs.matchers.or_matchers.is_empty() {
                vec![vs.matchers.matchers.clone()]
            } else {
                vs.matchers.or_matchers.clone()
            };
            for alt in &mut alternatives {
                alt.extend(name.clone());
            }
            Ok(alternatives)
        })
        .collect()
}

/// A listed series: source, metric and its own labels.
type Listed = (String, String, LabelMap);

fn shown(ctx: Context<'_>, (source, metric, own): &Listed) -> Labels {
    let mut map: BTreeMap<String, String> = own
        .iter()
        .map(|(k, v)| (ctx.scheme.shown_own(k).into_owned(), v.clone()))
        .collect();
    let name = prom_name(metric);
    if name != *metric {
        map.insert(TALLY_METRIC_LABEL.to_string(), metric.clone());
    }
    map.insert(NAME_LABEL.to_string(), name);
    map.insert(ctx.scheme.source_label().to_string(), source.clone());
    Labels::new(map)
}

/// The series matching any of `selectors` in `[start, end]`, up to `cap`;
/// and whether there were more.
async fn list_series(
    ctx: Context<'_>,
    selectors: &[Vec<Vec<Matcher>>],
    start_ms: Option<i64>,
    end_ms: Option<i64>,
    cap: usize,
) -> Result<(BTreeSet<Listed>, bool), ApiError> {
    let mut out = BTreeSet::new();
    for alternatives in selectors {
        for matchers in alternatives {
            let Some(res) = resolve_matchers(ctx, matchers).await? else {
                continue;
            };
            if page_series(ctx.engine, &res, start_ms, end_ms, cap, &mut out).await? {
                return Ok((out, true));
            }
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
    out: &mut BTreeSet<Listed>,
) -> Result<bool, ApiError> {
    let page = engine.limits().max_page;
    let mut after = None;
    loop {
        let found = engine
            .series(CatalogQuery {
                source: res.source.clone(),
                metric: res.metric.clone(),
                labels: res.labels.clone(),
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
                || !res.metric_ok(&s.metric)
            {
                continue;
            }
            out.insert((s.source.clone(), s.metric.clone(), s.labels.clone()));
            if out.len() > cap {
                return Ok(true);
            }
        }
        match found
            .next
            .as_deref()
            .and_then(crate::model::SeriesId::from_key)
        {
            Some(next) => after = Some(next),
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

/// `start` and `end`, checked whether or not they narrow the listing.
fn time_range(p: &Params) -> Result<(Option<i64>, Option<i64>), ApiError> {
    Ok((p.time_ms("start")?, p.time_ms("end")?))
}

pub(super) async fn series(State(prom): State<PromState>, p: Params) -> Response {
    timed("prometheus_series", run_series(&prom, &p)).await
}

async fn run_series(prom: &PromState, p: &Params) -> Result<Response, ApiError> {
    let ctx = prom.ctx();
    let selectors = match_selectors(p)?;
    if selectors.is_empty() {
        return Err(ApiError::BadData("no match[] parameter provided".into()));
    }
    let (start, end) = time_range(p)?;
    let limit = p.limit()?;
    let cap = limit.unwrap_or_else(|| listing_cap(ctx.engine));
    let (found, more) = list_series(ctx, &selectors, start, end, cap).await?;
    let warnings = if more {
        truncated("series", cap, limit.is_some())?
    } else {
        Vec::new()
    };
    let data: Vec<Json_> = found
        .iter()
        .take(cap)
        .map(|listed| labels_json(&shown(ctx, listed)))
        .collect();
    Ok(success_with_warnings(Json_::Array(data), warnings))
}

pub(super) async fn labels(State(prom): State<PromState>, p: Params) -> Response {
    timed("prometheus_labels", run_labels(&prom, &p)).await
}

async fn run_labels(prom: &PromState, p: &Params) -> Result<Response, ApiError> {
    let ctx = prom.ctx();
    let selectors = match_selectors(p)?;
    let (start, end) = time_range(p)?;
    let limit = p.limit()?;
    let mut names: BTreeSet<String> = BTreeSet::new();
    if selectors.is_empty() {
        names.extend(
            own_label_names(ctx.engine)
                .await?
                .into_iter()
                .map(|n| ctx.scheme.shown_own(&n).into_owned()),
        );
        names.extend(ctx.scheme.added().map(String::from));
        let metrics = ctx.names.get(ctx.engine).await?;
        if metrics
            .metrics
            .keys()
            .any(|m| !tally_metric_value(m).is_empty())
        {
            names.insert(TALLY_METRIC_LABEL.to_string());
        }
    } else {
        let cap = listing_cap(ctx.engine);
        let (found, over) = list_series(ctx, &selectors, start, end, cap).await?;
        if over {
            return Err(ApiError::Execution(format!(
                "more than {cap} series match: narrow match[]"
            )));
        }
        for listed in &found {
            names.extend(shown(ctx, listed).iter().map(|(k, _)| k.to_string()));
        }
    }
    let names: Vec<String> = names
        .into_iter()
        .take(limit.unwrap_or(usize::MAX))
        .collect();
    Ok(success(json!(names)))
}

/// Every label name any series has, from the catalog (bounded the way the
/// engine's listings are).
async fn own_label_names(engine: &QueryEngine) -> Result<Vec<String>, ApiError> {
    let every = crate::query::Selection {
        source: Vec::new(),
        metric: Vec::new(),
        labels: Vec::new(),
    };
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let page = engine
            .label_names(&every, after.take(), engine.limits().max_page)
            .await?;
        out.extend(page.items);
        match page.next {
            Some(n) => after = Some(n),
            None => return Ok(out),
        }
    }
}

pub(super) async fn label_values(
    State(prom): State<PromState>,
    name: Result<Path<String>, PathRejection>,
    p: Params,
) -> Response {
    // A name that does not decode (invalid UTF-8 once percent-decoded) is
    // refused as Prometheus refuses an invalid name, in its JSON error.
    let run = async {
        let Path(name) =
            name.map_err(|e| ApiError::BadData(format!("invalid label name: {}", e.body_text())))?;
        run_label_values(&prom, &name, &p).await
    };
    timed("prometheus_label_values", run).await
}

fn valid_label_name(name: &str) -> bool {
    name.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

async fn run_label_values(prom: &PromState, name: &str, p: &Params) -> Result<Response, ApiError> {
    let ctx = prom.ctx();
    if !valid_label_name(name) {
        return Err(ApiError::BadData(format!("invalid label name: {name:?}")));
    }
    let selectors = match_selectors(p)?;
    let (start, end) = time_range(p)?;
    let limit = p.limit()?;
    let cap = limit.unwrap_or_else(|| listing_cap(ctx.engine));
    let mut values: BTreeSet<String> = BTreeSet::new();
    let mut more = false;
    if !selectors.is_empty() {
        let (found, over) =
            list_series(ctx, &selectors, start, end, listing_cap(ctx.engine)).await?;
        if over {
            return Err(ApiError::Execution(format!(
                "more than {} series match: narrow match[]",
                listing_cap(ctx.engine)
            )));
        }
        values.extend(
            found
                .iter()
                .filter_map(|l| shown(ctx, l).get(name).map(str::to_string)),
        );
    } else {
        match ctx.scheme.route(name) {
            Route::Name | Route::TallyMetric => {
                let metrics = ctx.names.get(ctx.engine).await?;
                values.extend(metrics.metrics.keys().filter_map(|m| {
                    if name == NAME_LABEL {
                        Some(prom_name(m))
                    } else {
                        let v = tally_metric_value(m);
                        (!v.is_empty()).then(|| v.to_string())
                    }
                }));
            }
            Route::Source => more = source_values(ctx.engine, cap, &mut values).await?,
            Route::Own(own) => {
                let every = crate::query::Selection {
                    source: Vec::new(),
                    metric: Vec::new(),
                    labels: Vec::new(),
                };
                let page_limit = cap.saturating_add(1).min(ctx.engine.limits().max_page);
                let page = ctx
                    .engine
                    .label_values(own, &every, None, page_limit)
                    .await?;
                values.extend(page.items);
                more = page.next.is_some();
            }
        }
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

/// Every source, up to `cap`; true when there were more.
async fn source_values(
    engine: &QueryEngine,
    cap: usize,
    values: &mut BTreeSet<String>,
) -> Result<bool, ApiError> {
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
            return Ok(true);
        }
        match page.next {
            Some(n) => after = Some(n),
            None => return Ok(false),
        }
    }
}

pub(super) async fn metadata(State(prom): State<PromState>, p: Params) -> Response {
    timed("prometheus_metadata", run_metadata(&prom, &p)).await
}

/// What agents said of a family (remote-write metadata, see
/// [`crate::metadata`]) when they said it; else kinds as Prometheus metric
/// types: gauges are `gauge`, counters (sent as deltas or cumulative
/// values, stored as deltas) `counter`.
async fn run_metadata(prom: &PromState, p: &Params) -> Result<Response, ApiError> {
    let ctx = prom.ctx();
    let metrics = ctx.names.get(ctx.engine).await?;
    let only = p.get("metric");
    let limit = p.limit()?.unwrap_or(usize::MAX);
    let book = ctx.engine.metadata();
    let mut described: BTreeMap<String, Json_> = BTreeMap::new();
    let mut by_name: BTreeMap<String, (Vec<&str>, Option<names::MetricKind>)> = BTreeMap::new();
    for (metric, kind) in &metrics.metrics {
        let prom_metric = prom_name(metric);
        if let Some((family, f)) = book.of_series(&prom_metric) {
            if only.is_none_or(|o| o == family) {
                let entry =
                    json!([{ "type": f.kind.as_str(), "help": &*f.help, "unit": &*f.unit }]);
                described.insert(family, entry);
            }
            continue;
        }
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
    let fallback = by_name.into_iter().map(|(name, (metrics, kind))| {
        let help = format!("Tally metric {}", metrics.join(", "));
        let kind = kind.map_or("unknown", names::MetricKind::prom_type);
        (name, json!([{ "type": kind, "help": help, "unit": "" }]))
    });
    let mut all: BTreeMap<String, Json_> = fallback.collect();
    all.extend(described);
    let data: serde_json::Map<String, Json_> = all.into_iter().take(limit).collect();
    Ok(success(Json_::Object(data)))
}

/// Tally keeps no exemplars: always none. The query is still checked, as
/// Prometheus checks it.
pub(super) async fn exemplars(p: Params) -> Response {
    let run = async {
        if let Some(q) = p.get("query") {
            promql_parser::parser::parse(q)
                .map_err(|e| ApiError::BadData(format!("invalid parameter \"query\": {e}")))?;
        }
        time_range(&p)?;
        Ok(success(json!([])))
    };
    timed("prometheus_query_exemplars", run).await
}

pub(super) async fn buildinfo() -> Response {
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
