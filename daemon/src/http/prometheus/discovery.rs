//! The discovery endpoints Grafana browses with: `series`, `labels`,
//! `label/<name>/values`, `metadata`, plus `query_exemplars` and
//! `status/buildinfo`, which it probes. They list from the catalog rather
//! than evaluate PromQL, so they share little with the query endpoints.

use std::collections::{BTreeMap, BTreeSet};

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::IntoResponse as _;
use axum::response::Response;
use serde_json::{json, Value as Json_};

use super::eval::{self, Labels, Resolved};
use super::names::{self, prom_name, NameCache, NAME_LABEL, SOURCE_LABEL, TALLY_METRIC_LABEL};
use super::params::Params;
use super::plan;
use super::response::{labels_json, success, success_with_warnings, timed, ApiError};
use super::state::PromState;
use crate::query::{LabelMap, QueryEngine};
use crate::store::CatalogQuery;

/// The Prometheus version reported to clients. Grafana enables features by
/// version; this one has every API `/prometheus` serves.
const PROMETHEUS_VERSION: &str = "2.42.0";

/// Series that stopped reporting this long before a listing's `start` may
/// still be listed: the catalog refreshes `last_seen` coarsely.
const SEEN_SLACK_S: i64 = 86_400;

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

/// A listed series: source, metric and its own labels.
type Listed = (String, String, LabelMap);

/// A series' full label set: its own labels and the three Tally adds.
fn series_labels((source, metric, own): &Listed) -> Labels {
    let mut labels = own.clone();
    labels.insert(NAME_LABEL.to_string(), prom_name(metric));
    labels.insert(SOURCE_LABEL.to_string(), source.to_string());
    labels.insert(TALLY_METRIC_LABEL.to_string(), metric.to_string());
    labels
}

/// The series matching any of `selectors` in `[start, end]`, up to `cap`.
/// Returns the series (source, metric) and whether there were more.
async fn list_series(
    engine: &QueryEngine,
    cache: &NameCache,
    selectors: &[plan::Selector],
    start_ms: Option<i64>,
    end_ms: Option<i64>,
    cap: usize,
) -> Result<(BTreeSet<Listed>, bool), ApiError> {
    let mut out = BTreeSet::new();
    for sel in selectors {
        let Some(res) = eval::resolve(engine, cache, sel).await? else {
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
                || !crate::selector::all_match(&res.names, &prom_name(&s.metric))
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

pub(super) async fn series(State(prom): State<PromState>, p: Params) -> Response {
    timed("prometheus_series", run_series(&prom, &p)).await
}

async fn run_series(prom: &PromState, p: &Params) -> Result<Response, ApiError> {
    let (engine, cache) = (&*prom.engine, &*prom.names);
    let selectors = match_selectors(p)?;
    if selectors.is_empty() {
        return Err(ApiError::BadData("no match[] parameter provided".into()));
    }
    let (start, end) = (p.time_ms("start")?, p.time_ms("end")?);
    let limit = p.limit()?;
    let cap = limit.unwrap_or_else(|| listing_cap(engine));
    let (found, more) = list_series(engine, cache, &selectors, start, end, cap).await?;
    let warnings = if more {
        truncated("series", cap, limit.is_some())?
    } else {
        Vec::new()
    };
    let data: Vec<Json_> = found
        .iter()
        .take(cap)
        .map(|listed| labels_json(&series_labels(listed)))
        .collect();
    Ok(success_with_warnings(Json_::Array(data), warnings))
}

pub(super) async fn labels(State(prom): State<PromState>, p: Params) -> Response {
    timed("prometheus_labels", run_labels(&prom, &p)).await
}

async fn run_labels(prom: &PromState, p: &Params) -> Result<Response, ApiError> {
    let (engine, cache) = (&*prom.engine, &*prom.names);
    let selectors = match_selectors(p)?;
    let mut names: BTreeSet<String> = BTreeSet::new();
    if selectors.is_empty() {
        names.extend(own_label_names(engine).await?);
        names.extend([NAME_LABEL, SOURCE_LABEL, TALLY_METRIC_LABEL].map(String::from));
        return Ok(success(json!(names)));
    }
    let (start, end) = (p.time_ms("start")?, p.time_ms("end")?);
    let cap = listing_cap(engine);
    let (found, over) = list_series(engine, cache, &selectors, start, end, cap).await?;
    if over {
        return Err(ApiError::Execution(format!(
            "more than {cap} series match: narrow match[]"
        )));
    }
    for (_, _, own) in &found {
        names.extend(own.keys().cloned());
    }
    // Every series has the three labels Tally adds.
    if !found.is_empty() {
        names.extend([NAME_LABEL, SOURCE_LABEL, TALLY_METRIC_LABEL].map(String::from));
    }
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
    let Ok(Path(name)) = name else {
        return ApiError::BadData("invalid label name: not valid UTF-8".into()).into_response();
    };
    timed(
        "prometheus_label_values",
        run_label_values(&prom, &name, &p),
    )
    .await
}

async fn run_label_values(prom: &PromState, name: &str, p: &Params) -> Result<Response, ApiError> {
    let (engine, cache) = (&*prom.engine, &*prom.names);
    let selectors = match_selectors(p)?;
    let limit = p.limit()?;
    let cap = limit.unwrap_or_else(|| listing_cap(engine));
    let mut values: BTreeSet<String> = BTreeSet::new();
    let mut more = false;
    match (name, selectors.is_empty()) {
        (NAME_LABEL | TALLY_METRIC_LABEL, true) => {
            let names = cache.get(engine).await?;
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
                list_series(engine, cache, &selectors, start, end, listing_cap(engine)).await?;
            if over {
                return Err(ApiError::Execution(format!(
                    "more than {} series match: narrow match[]",
                    listing_cap(engine)
                )));
            }
            values.extend(found.into_iter().map(|(src, m, _)| match name {
                NAME_LABEL => prom_name(&m),
                SOURCE_LABEL => src,
                _ => m,
            }));
        }
        _ => more |= own_label_values(prom, name, &selectors, p, cap, &mut values).await?,
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

/// The values of one of the series' own labels (not one Tally adds): over
/// every series without `match[]`, else over the matching ones. True when
/// there were more than `cap`.
async fn own_label_values(
    prom: &PromState,
    name: &str,
    selectors: &[plan::Selector],
    p: &Params,
    cap: usize,
    values: &mut BTreeSet<String>,
) -> Result<bool, ApiError> {
    let (engine, cache) = (&*prom.engine, &*prom.names);
    if selectors.is_empty() {
        let every = crate::query::Selection {
            source: Vec::new(),
            metric: Vec::new(),
            labels: Vec::new(),
        };
        let limit = cap.saturating_add(1).min(engine.limits().max_page);
        let page = engine.label_values(name, &every, None, limit).await?;
        values.extend(page.items);
        return Ok(page.next.is_some());
    }
    let (start, end) = (p.time_ms("start")?, p.time_ms("end")?);
    let (found, over) =
        list_series(engine, cache, selectors, start, end, listing_cap(engine)).await?;
    if over {
        return Err(ApiError::Execution(format!(
            "more than {} series match: narrow match[]",
            listing_cap(engine)
        )));
    }
    values.extend(
        found
            .into_iter()
            .filter_map(|(_, _, mut own)| own.remove(name)),
    );
    Ok(false)
}

pub(super) async fn metadata(State(prom): State<PromState>, p: Params) -> Response {
    timed("prometheus_metadata", run_metadata(&prom, &p)).await
}

/// What agents said of a family (remote-write metadata, see
/// [`crate::metadata`]) when they said it; else kinds as Prometheus metric
/// types: gauges are `gauge`, counters (sent as deltas or cumulative
/// values, stored as deltas) `counter`.
async fn run_metadata(prom: &PromState, p: &Params) -> Result<Response, ApiError> {
    let (engine, cache) = (&*prom.engine, &*prom.names);
    let names = cache.get(engine).await?;
    let only = p.get("metric");
    let limit = p.limit()?.unwrap_or(usize::MAX);
    let book = engine.metadata();
    let mut described: BTreeMap<String, Json_> = BTreeMap::new();
    let mut by_name: BTreeMap<String, (Vec<&str>, Option<names::MetricKind>)> = BTreeMap::new();
    for (metric, kind) in &names.metrics {
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

/// Tally keeps no exemplars: always none.
pub(super) async fn exemplars() -> Response {
    success(json!([]))
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
