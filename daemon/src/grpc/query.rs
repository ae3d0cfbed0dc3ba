//! The query service (`tally.v1.Query`): range reads, latest values,
//! discovery listings, cross-source aggregates and the `Watch` stream, all
//! answered by the query engine. Request and response conversions are in
//! [`super::convert`], so each call here reads as what it asks the engine.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use tally_proto::v1 as pb;
use tonic::{Request, Response, Status};

use super::convert::{
    aggregates, group_by, kind_from_proto, kind_to_proto, label_matchers, labels_to_proto,
    latest_series, matcher, page_size, point, seconds, selection, series_after, series_info,
    series_points, step_spec, token,
};
use crate::labels::validate_label_name;
use crate::query::partial::tracking;
use crate::query::{AggregateQuery, Names, QueryEngine, Selection, Sources};
use crate::store::CatalogQuery;
use crate::watch::{Subscription, WatchHub};

pub struct QueryService {
    engine: Arc<QueryEngine>,
    watch: Arc<WatchHub>,
}

impl QueryService {
    pub fn new(engine: Arc<QueryEngine>, watch: Arc<WatchHub>) -> Self {
        QueryService { engine, watch }
    }

    /// The bounds on the `source` and `metric` patterns of a request.
    fn patterns(&self) -> crate::selector::PatternLimits {
        self.engine.limits().pattern_limits()
    }

    /// The series a label listing looks at (empty selectors: all).
    fn listing_selection(&self, r: &pb::ListLabelsRequest) -> Result<Selection, Status> {
        Ok(Selection {
            source: matcher(&r.source, "source", &self.patterns())?,
            metric: matcher(&r.metric, "metric", &self.patterns())?,
            labels: label_matchers(&r.labels, &self.patterns())?,
        })
    }

    async fn list_names(
        &self,
        which: Names,
        r: pb::ListNamesRequest,
    ) -> Result<Response<pb::ListNamesResponse>, Status> {
        let page = self
            .engine
            .names(
                which,
                matcher(&r.source, "source", &self.patterns())?,
                matcher(&r.metric, "metric", &self.patterns())?,
                (!r.page_token.is_empty()).then_some(r.page_token),
                page_size(r.page_size),
            )
            .await?;
        Ok(Response::new(pb::ListNamesResponse {
            names: page.items,
            next_page_token: token(page.next),
        }))
    }
}

type WatchUpdates = Pin<Box<dyn Stream<Item = Result<pb::WatchUpdate, Status>> + Send>>;

/// A subscription's events as `WatchUpdate`s; a subscriber the hub dropped
/// for lagging gets `RESOURCE_EXHAUSTED` before the stream ends.
fn watch_updates(sub: Subscription) -> WatchUpdates {
    Box::pin(futures::stream::unfold(Some(sub), |sub| async move {
        let mut sub = sub?;
        match sub.events.recv().await {
            Some(ev) => Some((
                Ok(pb::WatchUpdate {
                    t_ms: ev.t_ms,
                    snapshot: ev.snapshot,
                    skipped: ev.skipped,
                    series: ev.series.iter().map(series_points).collect(),
                }),
                Some(sub),
            )),
            None if sub.was_dropped_for_lag() => Some((
                Err(Status::resource_exhausted(
                    "dropped: this subscriber stopped reading for longer than watch.max_lag",
                )),
                None,
            )),
            None => None,
        }
    }))
}

#[tonic::async_trait]
impl pb::query_server::Query for QueryService {
    async fn range(
        &self,
        request: Request<pb::RangeRequest>,
    ) -> Result<Response<pb::RangeResponse>, Status> {
        let r = request.into_inner();
        let sel = selection(&r.source, &r.metric, &r.labels, &self.patterns())?;
        let step = step_spec(r.step, r.step_ms, r.max_points)?;
        let aggs = aggregates(&r.aggregates)?;
        let (from, to) = seconds(r.from_ms, r.to_ms);
        let (result, partial) = tracking(self.engine.range(&sel, from, to, step, &aggs)).await;
        let result = result?;
        let resp = pb::RangeResponse {
            step_ms: result.step_s * 1000,
            series: result.series.iter().map(series_points).collect(),
        };
        Ok(answer(resp, partial))
    }

    async fn latest(
        &self,
        request: Request<pb::LatestRequest>,
    ) -> Result<Response<pb::LatestResponse>, Status> {
        let r = request.into_inner();
        let sel = selection(&r.source, &r.metric, &r.labels, &self.patterns())?;
        let now = chrono::Utc::now().timestamp();
        let (latest, partial) = tracking(self.engine.latest(&sel, now)).await;
        let resp = pb::LatestResponse {
            series: latest?.into_iter().map(latest_series).collect(),
        };
        Ok(answer(resp, partial))
    }

    async fn list_series(
        &self,
        request: Request<pb::ListSeriesRequest>,
    ) -> Result<Response<pb::ListSeriesResponse>, Status> {
        let r = request.into_inner();
        let after = series_after(&r.page_token)?;
        let page = self
            .engine
            .series(CatalogQuery {
                source: matcher(&r.source, "source", &self.patterns())?,
                metric: matcher(&r.metric, "metric", &self.patterns())?,
                labels: label_matchers(&r.labels, &self.patterns())?,
                kind: kind_from_proto(r.kind),
                seen_since: (r.seen_since_ms != 0).then(|| r.seen_since_ms.div_euclid(1000)),
                after,
                limit: page_size(r.page_size),
            })
            .await?;
        Ok(Response::new(pb::ListSeriesResponse {
            series: page.items.into_iter().map(series_info).collect(),
            next_page_token: token(page.next),
        }))
    }

    async fn list_sources(
        &self,
        request: Request<pb::ListNamesRequest>,
    ) -> Result<Response<pb::ListNamesResponse>, Status> {
        self.list_names(Names::Sources, request.into_inner()).await
    }

    async fn list_metrics(
        &self,
        request: Request<pb::ListNamesRequest>,
    ) -> Result<Response<pb::ListNamesResponse>, Status> {
        self.list_names(Names::Metrics, request.into_inner()).await
    }

    async fn list_label_names(
        &self,
        request: Request<pb::ListLabelsRequest>,
    ) -> Result<Response<pb::ListNamesResponse>, Status> {
        let r = request.into_inner();
        let sel = self.listing_selection(&r)?;
        let after = (!r.page_token.is_empty()).then_some(r.page_token);
        let page = self
            .engine
            .label_names(&sel, after, page_size(r.page_size))
            .await?;
        Ok(Response::new(pb::ListNamesResponse {
            names: page.items,
            next_page_token: token(page.next),
        }))
    }

    async fn list_label_values(
        &self,
        request: Request<pb::ListLabelsRequest>,
    ) -> Result<Response<pb::ListNamesResponse>, Status> {
        let r = request.into_inner();
        validate_label_name(&r.name).map_err(|e| Status::invalid_argument(format!("name: {e}")))?;
        let sel = self.listing_selection(&r)?;
        let after = (!r.page_token.is_empty()).then_some(r.page_token);
        let page = self
            .engine
            .label_values(&r.name, &sel, after, page_size(r.page_size))
            .await?;
        Ok(Response::new(pb::ListNamesResponse {
            names: page.items,
            next_page_token: token(page.next),
        }))
    }

    async fn aggregate(
        &self,
        request: Request<pb::AggregateRequest>,
    ) -> Result<Response<pb::AggregateResponse>, Status> {
        let r = request.into_inner();
        let sources = match r.sources {
            Some(pb::aggregate_request::Sources::Group(g)) => Sources::Group(g),
            Some(pb::aggregate_request::Sources::Source(s)) => {
                Sources::Matching(matcher(&s, "source", &self.patterns())?)
            }
            None => Sources::Matching(Vec::new()),
        };
        let (from, to) = seconds(r.from_ms, r.to_ms);
        let q = AggregateQuery {
            metric: r.metric,
            sources,
            from,
            to,
            step: step_spec(r.step, r.step_ms, r.max_points)?,
            aggregates: aggregates(&r.aggregates)?,
            use_rollup: !r.fan_out,
            labels: label_matchers(&r.labels, &self.patterns())?,
            by: group_by(&r.by)?,
        };
        let (result, partial) = tracking(self.engine.aggregate(&q)).await;
        let result = result?;
        let resp = pb::AggregateResponse {
            kind: kind_to_proto(result.kind) as i32,
            step_ms: result.step_s * 1000,
            fanned_out: result.fanned_out.map(|n| n.min(u32::MAX as usize) as u32),
            points: result.points.iter().map(point).collect(),
            groups: result
                .groups
                .iter()
                .map(|g| pb::AggregateGroup {
                    labels: labels_to_proto(&g.labels),
                    kind: kind_to_proto(g.kind) as i32,
                    points: g.points.iter().map(point).collect(),
                })
                .collect(),
            rollup: result.rollup,
            metric: result.metric,
        };
        Ok(answer(resp, partial))
    }

    type WatchStream = WatchUpdates;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let r = request.into_inner();
        let sel = selection(&r.source, &r.metric, &r.labels, &self.patterns())?;
        let sub = self.watch.subscribe(sel, r.window_minutes).await?;
        Ok(Response::new(watch_updates(sub)))
    }
}

/// A read's reply; one answered from memory alone because the store is
/// unreachable carries the reason in the `tally-partial` metadata.
fn answer<T>(msg: T, partial: Option<String>) -> Response<T> {
    let mut resp = Response::new(msg);
    if let Some(why) = partial {
        // Metadata values are visible ASCII: anything else becomes `?`.
        let ascii: String = why
            .chars()
            .map(|c| {
                if c.is_ascii_graphic() || c == ' ' {
                    c
                } else {
                    '?'
                }
            })
            .collect();
        if let Ok(v) = ascii.parse() {
            resp.metadata_mut().insert("tally-partial", v);
        }
    }
    resp
}
