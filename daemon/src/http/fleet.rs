//! `GET /api/v1/fleet`: one page of the fleet view (see [`crate::fleet`]),
//! filtered, sorted and cut on the daemon so the dashboard fetches only the
//! rows in view, whatever the size of the fleet.
//!
//! A read like the rest of `/api/v1`: it needs a read token when tokens are
//! on, and its parameters are checked as strictly (unknown ones refused).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;

use crate::fleet::{Fleet, FleetQuery, SortBy, MAX_PAGE};
use crate::selector::{NameMatcher, PatternLimits};

/// What the fleet endpoint reads.
#[derive(Clone)]
pub(crate) struct FleetState {
    pub(crate) fleet: Arc<Fleet>,
    /// `ui.stale_after`, unless a request names its own threshold.
    pub(crate) stale_after: Duration,
    pub(crate) patterns: PatternLimits,
}

/// The route, relative to `/api/v1`.
pub(crate) fn router() -> Router<FleetState> {
    Router::new().route("/fleet", get(fleet))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    source: Option<String>,
    sort: Option<String>,
    order: Option<String>,
    stale_only: Option<bool>,
    stale_after: Option<String>,
    offset: Option<usize>,
    limit: Option<usize>,
}

/// Rows per page unless the reader asks for another number.
const DEFAULT_LIMIT: usize = 100;

fn bad(msg: impl Into<String>) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(serde_json::json!({ "error": msg.into() })),
    )
        .into_response()
}

impl Params {
    fn query(self, s: &FleetState) -> Result<FleetQuery, String> {
        let source = match &self.source {
            None => Vec::new(),
            Some(spec) => vec![NameMatcher::parse_list_within(spec, &s.patterns)
                .map_err(|e| format!("source: {e}"))?],
        };
        let sort = match self.sort.as_deref() {
            None => SortBy::Source,
            Some(by) => SortBy::parse(by)
                .ok_or_else(|| format!("sort {by:?} is not one of source, series, rate, age"))?,
        };
        let descending = match self.order.as_deref() {
            None | Some("asc") => false,
            Some("desc") => true,
            Some(o) => return Err(format!("order {o:?} is not asc or desc")),
        };
        let stale_after = match self.stale_after.as_deref() {
            None => s.stale_after,
            Some(d) => humantime::parse_duration(d)
                .map_err(|e| format!("stale_after: {e} (e.g. 30s, 5m)"))?,
        };
        let limit = self.limit.unwrap_or(DEFAULT_LIMIT);
        if limit > MAX_PAGE {
            return Err(format!(
                "limit {limit} is above {MAX_PAGE}: ask for at most {MAX_PAGE} rows and page with offset"
            ));
        }
        Ok(FleetQuery {
            source,
            sort,
            descending,
            stale_only: self.stale_only.unwrap_or(false),
            stale_after,
            offset: self.offset.unwrap_or(0),
            limit,
        })
    }
}

async fn fleet(State(s): State<FleetState>, q: Result<Query<Params>, QueryRejection>) -> Response {
    let p = match q {
        Ok(Query(p)) => p,
        Err(e) => return bad(format!("bad query string: {}", e.body_text())),
    };
    let q = match p.query(&s) {
        Ok(q) => q,
        Err(e) => return bad(e),
    };
    let started = Instant::now();
    let page = s.fleet.page(&q).await;
    metrics::histogram!("tally_query_duration_seconds", "endpoint" => "fleet")
        .record(started.elapsed().as_secs_f64());
    Json(page).into_response()
}
