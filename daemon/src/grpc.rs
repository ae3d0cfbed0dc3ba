//! The gRPC listener: the ingest service, the query service,
//! `grpc.health.v1` (tracking the store's health) and server reflection, on
//! one port.

use std::future::Future;
use std::sync::Arc;

use tally_proto::v1 as pb;
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};

use crate::ingest::{kind_from_proto, kind_to_proto, IngestService};
use crate::model::SeriesId;
use crate::query::{
    Aggregate, AggregateQuery, Names, Point, QueryEngine, QueryError, Selection, SeriesRange,
    Sources, Step, StepSpec,
};
use crate::selector::NameMatcher;
use crate::store::CatalogQuery;
use crate::watch::WatchHub;

pub struct QueryService {
    engine: Arc<QueryEngine>,
    watch: Arc<WatchHub>,
}

impl QueryService {
    pub fn new(engine: Arc<QueryEngine>, watch: Arc<WatchHub>) -> Self {
        QueryService { engine, watch }
    }
}

impl QueryService {
    async fn list_names(
        &self,
        which: Names,
        r: pb::ListNamesRequest,
    ) -> Result<Response<pb::ListNamesResponse>, Status> {
        let page = self
            .engine
            .names(
                which,
                matcher(&r.source, "source")?,
                matcher(&r.metric, "metric")?,
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

impl From<QueryError> for Status {
    fn from(e: QueryError) -> Status {
        match e {
            QueryError::Invalid(msg) | QueryError::Limit(msg) => Status::invalid_argument(msg),
            QueryError::Busy(msg) => Status::resource_exhausted(msg),
            QueryError::Store(e) if e.is_retryable() => Status::unavailable(e.to_string()),
            QueryError::Store(e) => Status::internal(e.to_string()),
        }
    }
}

fn matcher(value: &str, name: &str) -> Result<Vec<NameMatcher>, Status> {
    if value.is_empty() {
        return Ok(Vec::new());
    }
    NameMatcher::parse_list(value)
        .map(|m| vec![m])
        .map_err(|e| Status::invalid_argument(format!("{name}: {e}")))
}

fn selection(source: &str, metric: &str) -> Result<Selection, Status> {
    if source.is_empty() || metric.is_empty() {
        return Err(Status::invalid_argument(
            "source and metric are required: names, comma-separated lists or globs (\"*\" selects all)",
        ));
    }
    Ok(Selection {
        source: matcher(source, "source")?,
        metric: matcher(metric, "metric")?,
    })
}

fn step_spec(step: i32, step_ms: i64, max_points: u32) -> Result<StepSpec, Status> {
    if step_ms != 0 {
        if step_ms % 1000 != 0 {
            return Err(Status::invalid_argument(format!(
                "step_ms {step_ms} is not a whole number of minutes"
            )));
        }
        return Ok(StepSpec::Fixed(Step::fixed(step_ms / 1000)?));
    }
    Ok(match pb::Step::try_from(step) {
        Ok(pb::Step::Minute) => StepSpec::Fixed(Step::MINUTE),
        Ok(pb::Step::Hour) => StepSpec::Fixed(Step::HOUR),
        Ok(pb::Step::Day) => StepSpec::Fixed(Step::DAY),
        Ok(pb::Step::Auto) => StepSpec::Auto {
            max_points: (max_points > 0).then_some(max_points as usize),
        },
        _ => {
            return Err(Status::invalid_argument(
                "step must be STEP_MINUTE, STEP_HOUR, STEP_DAY or STEP_AUTO, or step_ms a whole number of minutes",
            ))
        }
    })
}

fn aggregates(list: &[i32]) -> Result<Vec<Aggregate>, Status> {
    let mut out = Vec::new();
    for a in list {
        out.push(match pb::Aggregate::try_from(*a) {
            Ok(pb::Aggregate::Avg) => Aggregate::Avg,
            Ok(pb::Aggregate::Min) => Aggregate::Min,
            Ok(pb::Aggregate::Max) => Aggregate::Max,
            Ok(pb::Aggregate::Sum) => Aggregate::Sum,
            Ok(pb::Aggregate::Count) => Aggregate::Count,
            Ok(pb::Aggregate::Rate) => Aggregate::Rate,
            _ => {
                return Err(Status::invalid_argument(format!(
                    "aggregate {a} is not one of AGGREGATE_AVG … AGGREGATE_RATE"
                )))
            }
        });
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// `[from, to)` in seconds from milliseconds; `to` rounds up so a
/// sub-second end keeps its bucket.
fn seconds(from_ms: i64, to_ms: i64) -> (i64, i64) {
    (from_ms.div_euclid(1000), (to_ms + 999).div_euclid(1000))
}

fn point(p: &Point) -> pb::Point {
    pb::Point {
        t_ms: p.t * 1000,
        n: p.n,
        sum: p.sum,
        min: p.min,
        max: p.max,
        avg: p.avg,
        rate: p.rate,
    }
}

fn series_points(s: &SeriesRange) -> pb::SeriesPoints {
    pb::SeriesPoints {
        source: s.source.clone(),
        metric: s.metric.clone(),
        kind: kind_to_proto(s.kind) as i32,
        points: s.points.iter().map(point).collect(),
    }
}

fn page_size(n: u32) -> usize {
    if n == 0 {
        100
    } else {
        n as usize
    }
}

fn token(next: Option<String>) -> String {
    next.unwrap_or_default()
}

#[tonic::async_trait]
impl pb::query_server::Query for QueryService {
    async fn range(
        &self,
        request: Request<pb::RangeRequest>,
    ) -> Result<Response<pb::RangeResponse>, Status> {
        let r = request.into_inner();
        let sel = selection(&r.source, &r.metric)?;
        let step = step_spec(r.step, r.step_ms, r.max_points)?;
        let aggs = aggregates(&r.aggregates)?;
        let (from, to) = seconds(r.from_ms, r.to_ms);
        let result = self.engine.range(&sel, from, to, step, &aggs).await?;
        Ok(Response::new(pb::RangeResponse {
            step_ms: result.step_s * 1000,
            series: result.series.iter().map(series_points).collect(),
        }))
    }

    async fn latest(
        &self,
        request: Request<pb::LatestRequest>,
    ) -> Result<Response<pb::LatestResponse>, Status> {
        let r = request.into_inner();
        let sel = selection(&r.source, &r.metric)?;
        let now = chrono::Utc::now().timestamp();
        let latest = self.engine.latest(&sel, now).await?;
        Ok(Response::new(pb::LatestResponse {
            series: latest
                .into_iter()
                .map(|l| pb::LatestSeries {
                    kind: kind_to_proto(l.kind) as i32,
                    last_t_ms: l.last.as_ref().map(|v| v.t_ms),
                    last_value: l.last.as_ref().map(|v| v.value),
                    minute: l.minute.as_ref().map(point),
                    source: l.source,
                    metric: l.metric,
                })
                .collect(),
        }))
    }

    async fn list_series(
        &self,
        request: Request<pb::ListSeriesRequest>,
    ) -> Result<Response<pb::ListSeriesResponse>, Status> {
        let r = request.into_inner();
        let after = match r.page_token.as_str() {
            "" => None,
            t => match t.split_once('|') {
                Some((s, m)) => Some(SeriesId::new(s, m)),
                None => {
                    return Err(Status::invalid_argument(
                        "page_token: pass next_page_token of the previous page",
                    ))
                }
            },
        };
        let page = self
            .engine
            .series(CatalogQuery {
                source: matcher(&r.source, "source")?,
                metric: matcher(&r.metric, "metric")?,
                kind: kind_from_proto(r.kind),
                seen_since: (r.seen_since_ms != 0).then(|| r.seen_since_ms.div_euclid(1000)),
                after,
                limit: page_size(r.page_size),
            })
            .await?;
        Ok(Response::new(pb::ListSeriesResponse {
            series: page
                .items
                .into_iter()
                .map(|s| pb::SeriesInfo {
                    kind: kind_to_proto(Some(s.kind)) as i32,
                    first_seen_ms: s.first_seen * 1000,
                    last_seen_ms: s.last_seen * 1000,
                    source: s.source,
                    metric: s.metric,
                })
                .collect(),
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

    async fn aggregate(
        &self,
        request: Request<pb::AggregateRequest>,
    ) -> Result<Response<pb::AggregateResponse>, Status> {
        let r = request.into_inner();
        let sources = match r.sources {
            Some(pb::aggregate_request::Sources::Group(g)) => Sources::Group(g),
            Some(pb::aggregate_request::Sources::Source(s)) => {
                Sources::Matching(matcher(&s, "source")?)
            }
            None => Sources::Matching(Vec::new()),
        };
        let (from, to) = seconds(r.from_ms, r.to_ms);
        let result = self
            .engine
            .aggregate(&AggregateQuery {
                metric: r.metric,
                sources,
                from,
                to,
                step: step_spec(r.step, r.step_ms, r.max_points)?,
                aggregates: aggregates(&r.aggregates)?,
                use_rollup: !r.fan_out,
            })
            .await?;
        Ok(Response::new(pb::AggregateResponse {
            kind: kind_to_proto(result.kind) as i32,
            step_ms: result.step_s * 1000,
            fanned_out: result.fanned_out.map(|n| n.min(u32::MAX as usize) as u32),
            points: result.points.iter().map(point).collect(),
            rollup: result.rollup,
            metric: result.metric,
        }))
    }

    type WatchStream =
        std::pin::Pin<Box<dyn futures::Stream<Item = Result<pb::WatchUpdate, Status>> + Send>>;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let r = request.into_inner();
        let sel = selection(&r.source, &r.metric)?;
        let sub = self.watch.subscribe(sel, r.window_minutes).await?;
        let stream = futures::stream::unfold(Some(sub), |sub| async move {
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
        });
        Ok(Response::new(Box::pin(stream)))
    }
}

/// Serves gRPC on `listener` until `shutdown` resolves; in-progress calls
/// finish first.
pub async fn serve(
    listener: TcpListener,
    ingest: IngestService,
    query: QueryService,
    health: tonic_health::server::HealthReporter,
    health_service: tonic_health::pb::health_server::HealthServer<
        impl tonic_health::pb::health_server::Health,
    >,
    max_message_bytes: usize,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), GrpcError> {
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(tally_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| GrpcError::Reflection(e.to_string()))?;
    let ingest =
        pb::ingest_server::IngestServer::new(ingest).max_decoding_message_size(max_message_bytes);
    let query = pb::query_server::QueryServer::new(query);
    health
        .set_serving::<pb::ingest_server::IngestServer<IngestService>>()
        .await;
    health
        .set_serving::<pb::query_server::QueryServer<QueryService>>()
        .await;
    tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(reflection)
        .add_service(ingest)
        .add_service(query)
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::TcpListenerStream::new(listener),
            shutdown,
        )
        .await
        .map_err(|e| GrpcError::Transport(e.to_string()))
}

#[derive(Debug, thiserror::Error)]
pub enum GrpcError {
    #[error("building the reflection service: {0}")]
    Reflection(String),
    #[error("gRPC server: {0}")]
    Transport(String),
}
