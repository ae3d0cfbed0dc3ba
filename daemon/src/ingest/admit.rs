//! The admission every protocol shares: request limits, backpressure, the
//! token's sources, the sources' group declarations and their labels are
//! checked here, and what passes is folded into the aggregator. Each front
//! door reads its request as a `tally.v1.PushRequest` ([`PushView`]:
//! tally.v1, OTLP protobuf, remote-write, line protocol and Graphite
//! straight from their bytes, OTLP/HTTP JSON once converted), then turns
//! the [`IngestOutcome`] or [`IngestError`] back into its own protocol's
//! answer.
//!
//! Backpressure: when the aggregator has reached its memory bound (the store
//! is behind), a request is refused whole before anything is taken, so a
//! client can retry the same batch safely.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tally_proto::v1 as pb;

use super::builder::Budget;
use super::view::PushView;
use super::IngestGate;
use crate::aggregator::{Aggregator, IngestOutcome, RejectReason, SeriesBatch, FOLD_CHUNK};
use crate::auth::Grant;
use crate::deadletter::Refusing;
use crate::labels::{check_unlabelled, LabelArena, Pairs};
use crate::metadata::MetadataBook;
use crate::model::SampleKind;
use crate::rollup::Rollups;
use crate::store::Store;
use crate::wal::Wal;

/// Which front door a request came through, for the ingest metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `tally.v1.Ingest/Push`.
    TallyPush,
    /// `tally.v1.Ingest/PushStream`.
    TallyPushStream,
    /// OTLP `MetricsService/Export` over gRPC.
    OtlpGrpc,
    /// OTLP `POST /v1/metrics`.
    OtlpHttp,
    /// Prometheus remote-write 1.0, `POST /api/v1/write`.
    RemoteWrite,
    /// InfluxDB line protocol, v1 API: `POST /write`.
    InfluxV1,
    /// InfluxDB line protocol, v2 API: `POST /api/v2/write`.
    InfluxV2,
    /// Graphite plaintext over TCP.
    Graphite,
}

impl Protocol {
    /// Every protocol, in declaration order (`as usize` indexes it).
    pub const ALL: [Protocol; 8] = [
        Protocol::TallyPush,
        Protocol::TallyPushStream,
        Protocol::OtlpGrpc,
        Protocol::OtlpHttp,
        Protocol::RemoteWrite,
        Protocol::InfluxV1,
        Protocol::InfluxV2,
        Protocol::Graphite,
    ];

    /// The `protocol` label of the ingest metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::TallyPush | Protocol::TallyPushStream => "tally",
            Protocol::OtlpGrpc => "otlp_grpc",
            Protocol::OtlpHttp => "otlp_http",
            Protocol::RemoteWrite => "remote_write",
            Protocol::InfluxV1 | Protocol::InfluxV2 => "influx",
            Protocol::Graphite => "graphite",
        }
    }

    /// The `rpc` label: the call within the protocol.
    pub fn rpc(self) -> &'static str {
        match self {
            Protocol::TallyPush => "push",
            Protocol::TallyPushStream => "push_stream",
            Protocol::OtlpGrpc | Protocol::OtlpHttp => "export",
            Protocol::RemoteWrite => "write",
            Protocol::InfluxV1 => "write_v1",
            Protocol::InfluxV2 => "write_v2",
            Protocol::Graphite => "plaintext",
        }
    }
}

/// How long a client refused for backpressure should wait before retrying:
/// about one flush, after which the store has usually caught up a step.
pub const PUSHBACK_RETRY_AFTER: Duration = Duration::from_secs(1);

/// A request refused whole: nothing of it was taken.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error(
        "batch holds {samples} samples; the limit is {limit} (ingest.max_batch_samples): split it"
    )]
    TooLarge { samples: usize, limit: usize },
    #[error("the daemon holds {pending} unflushed slots (ingest.max_pending_slots = {limit}): the store is behind; retry this batch with backoff")]
    Pushback { pending: usize, limit: usize },
    #[error("the request holds more than {samples} samples (ingest.max_batch_samples) or more than {bytes} bytes of metric names and labels once its points are expanded into series (four times ingest.max_message_bytes): split it")]
    ConvertedTooLarge { samples: usize, bytes: usize },
    #[error("tallyd is shutting down; send to another instance or retry later")]
    ShuttingDown,
    #[error("nothing of this request was taken: {0}")]
    Log(#[from] crate::wal::WalError),
    #[error("the store has failed and cannot keep new samples ({0}); nothing of this request was taken: send to another instance")]
    StoreFailed(String),
    #[error("no source of this request may be pushed with this token: {0}")]
    Denied(String),
    #[error("{0}; nothing of this request was taken: retry with backoff")]
    StoreRefusing(String),
}

impl IngestError {
    /// The `outcome` label of `tally_ingest_requests_total`.
    fn outcome(&self) -> &'static str {
        match self {
            IngestError::TooLarge { .. } | IngestError::ConvertedTooLarge { .. } => "too_large",
            IngestError::Pushback { .. } => "pushback",
            IngestError::ShuttingDown => "shutting_down",
            IngestError::Log(_) => "log_failed",
            IngestError::StoreFailed(_) => "store_failed",
            IngestError::Denied(_) => "denied",
            IngestError::StoreRefusing(_) => "store_refusing",
        }
    }

    /// True when the same request may succeed later, so the client should
    /// keep it and retry with backoff.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            IngestError::Pushback { .. }
                | IngestError::ShuttingDown
                | IngestError::StoreRefusing(_)
        )
    }
}

/// Admits requests of every protocol into the aggregator.
pub struct Ingestor {
    agg: Arc<Aggregator>,
    rollups: Arc<Rollups>,
    gate: Arc<IngestGate>,
    /// Set once replay at start is done; requests are logged from then on.
    wal: OnceLock<Arc<Wal>>,
    /// Asked before every request: a store that failed for good cannot
    /// keep what would be acknowledged.
    store: OnceLock<Arc<dyn Store>>,
    /// What agents say of their metric families (remote-write metadata).
    metadata: Arc<MetadataBook>,
    /// Set while the store refuses whole flushes: what is acknowledged
    /// then could not be kept, so nothing is.
    refusing: OnceLock<Arc<Refusing>>,
}

impl Ingestor {
    pub fn new(agg: Arc<Aggregator>, rollups: Arc<Rollups>, gate: Arc<IngestGate>) -> Ingestor {
        Ingestor {
            agg,
            rollups,
            gate,
            wal: OnceLock::new(),
            store: OnceLock::new(),
            metadata: Arc::default(),
            refusing: OnceLock::new(),
        }
    }

    /// Shares `book` with the readers that show it (see [`crate::metadata`]).
    pub fn with_metadata(mut self, book: Arc<MetadataBook>) -> Ingestor {
        self.metadata = book;
        self
    }

    pub fn metadata(&self) -> &MetadataBook {
        &self.metadata
    }

    /// Refuses ingest from the moment `store` reports a fault.
    pub fn watch_store(&self, store: Arc<dyn Store>) {
        let _ = self.store.set(store);
    }

    /// Refuses ingest while the store refuses whole flushes.
    pub fn watch_refusals(&self, refusing: Arc<Refusing>) {
        let _ = self.refusing.set(refusing);
    }

    /// Logs every request from now on. Called once, after replay.
    pub fn log_to(&self, wal: Arc<Wal>) {
        let _ = self.wal.set(wal);
    }

    /// The `[ingest]` limits requests are held to.
    pub fn limits(&self) -> &super::IngestConfig {
        self.agg.limits()
    }

    /// The kind of a series in memory, for protocols that guess kinds (see
    /// `remote_write`); labels in any order. None when it is not in memory,
    /// or its labels are not a valid set.
    pub fn known_kind(
        &self,
        source: &str,
        metric: &str,
        labels: &[(&str, &str)],
    ) -> Option<pb::SampleKind> {
        let labels =
            crate::labels::Labels::from_pairs(labels.iter().copied(), self.limits().max_labels)
                .ok()?;
        let kind = self.agg.kind_of(crate::model::SeriesRef {
            source,
            metric,
            labels: labels.as_str(),
        })?;
        Some(match kind {
            SampleKind::Gauge => pb::SampleKind::Gauge,
            SampleKind::DeltaCounter => pb::SampleKind::DeltaCounter,
            SampleKind::CumulativeCounter => pb::SampleKind::CumulativeCounter,
        })
    }

    /// The budget a converted request gets: the sample limit, and four
    /// times the message limit in names and labels (histograms repeat each
    /// point's labels per bucket).
    pub fn budget(&self) -> Budget {
        let limits = self.limits();
        Budget {
            samples: limits.max_batch_samples,
            bytes: limits.max_message_bytes.saturating_mul(4),
        }
    }

    /// Counts and returns the refusal of a request that does not fit its
    /// [`Budget`] once converted.
    pub fn too_large(&self, protocol: Protocol, budget: Budget) -> IngestError {
        let e = IngestError::ConvertedTooLarge {
            samples: budget.samples,
            bytes: budget.bytes,
        };
        count_request(protocol, e.outcome());
        e
    }

    /// Counts a request refused because it could not be read (a body that
    /// does not decode, an unsupported content type or encoding).
    pub fn count_unread(&self, protocol: Protocol) {
        count_request(protocol, "invalid");
    }

    /// Checks, logs and folds one request. `refused` holds what the front
    /// door already rejected while converting its protocol's request (it is
    /// counted in the metrics and the outcome like the rest). With the
    /// write-ahead log on, returns once the request is in the log.
    pub async fn ingest(
        &self,
        req: &pb::PushRequest,
        grant: &Grant,
        protocol: Protocol,
        refused: IngestOutcome,
    ) -> Result<IngestOutcome, IngestError> {
        self.ingest_read(&PushView::of(req), grant, protocol, refused)
            .await
    }

    /// [`Ingestor::ingest`] of a request a front door read straight into a
    /// view (every protocol but OTLP/HTTP JSON): the log encodes its
    /// record from the same view.
    pub async fn ingest_read(
        &self,
        req: &PushView<'_>,
        grant: &Grant,
        protocol: Protocol,
        refused: IngestOutcome,
    ) -> Result<IngestOutcome, IngestError> {
        let result = self.admit(req, grant, refused).await;
        match &result {
            Ok(out) => record(out, protocol),
            Err(e) => count_request(protocol, e.outcome()),
        }
        result
    }

    async fn admit(
        &self,
        req: &PushView<'_>,
        grant: &Grant,
        refused: IngestOutcome,
    ) -> Result<IngestOutcome, IngestError> {
        let limits = self.agg.limits();
        let samples = req.samples();
        if samples > limits.max_batch_samples {
            return Err(IngestError::TooLarge {
                samples,
                limit: limits.max_batch_samples,
            });
        }
        if let Some(fault) = self.store.get().and_then(|s| s.fault()) {
            return Err(IngestError::StoreFailed(fault));
        }
        if let Some(why) = self.refusing.get().and_then(|r| r.why()) {
            return Err(IngestError::StoreRefusing(why));
        }
        if self.agg.over_memory_bound() {
            return Err(IngestError::Pushback {
                pending: self.agg.pending_slots(),
                limit: limits.max_pending_slots,
            });
        }
        let now_ms = chrono::Utc::now().timestamp_millis();
        let by_grant = |_: usize, source: &str| grant.source_refusal(source);
        let labels = encode_labels(req, limits.max_labels);
        let p = self.prepare(req, now_ms, by_grant);
        let mut outcome = refused;
        // Every source refused by the token: nothing is folded, and a
        // request with any series is refused whole.
        let denied = p.allowed_sources == 0 && grant.limits_sources();
        if denied {
            groups(req, labels.as_ref(), &p, &mut outcome, |_| {});
            if outcome.rejected > 0 {
                let why = outcome.rejections.first().map_or("", |r| r.detail.as_str());
                return Err(IngestError::Denied(why.to_owned()));
            }
        }
        let Some(open) = self.gate.enter().await else {
            return Err(IngestError::ShuttingDown);
        };
        if let Some(wal) = self.wal.get() {
            wal.append_request(now_ms, &p.refused_sources, req)
                .await
                .map_err(IngestError::Log)?;
        }
        if !denied {
            self.fold(req, labels.as_ref(), &p, now_ms, &mut outcome);
        }
        drop(open);
        Ok(outcome)
    }

    /// Folds the series of `req` whose sources `p` kept, counting the
    /// per-series refusals (label sets, key lengths, stale samples) into
    /// `outcome`.
    fn fold(
        &self,
        req: &PushView<'_>,
        labels: Option<&LabelArena>,
        p: &Prepared,
        now_ms: i64,
        outcome: &mut IngestOutcome,
    ) {
        let mut folding = self.agg.folding(now_ms, req.series_len());
        groups(req, labels, p, outcome, |chunk| folding.fold(chunk));
        outcome.merge(folding.finish());
    }

    /// Folds a request read back from the write-ahead log, making the
    /// decisions it made when it was taken: the same clock, the same
    /// sources refused.
    pub fn replay(&self, req: &pb::PushRequest, now_ms: i64, refused_sources: &[u32]) {
        let by_log = |i: usize, _: &str| {
            refused_sources
                .contains(&(i as u32))
                .then(|| "refused when it was taken".to_owned())
        };
        let view = PushView::of(req);
        let limits = self.agg.limits();
        let labels = encode_labels(&view, limits.max_labels);
        let p = self.prepare(&view, now_ms, by_log);
        self.fold(
            &view,
            labels.as_ref(),
            &p,
            now_ms,
            &mut IngestOutcome::default(),
        );
    }

    /// Declares a logged request's rollup groups without folding it (its
    /// samples are in the store already), so that replayed flushes find
    /// the same group memberships.
    pub fn replay_groups(&self, req: &pb::PushRequest, now_ms: i64, refused_sources: &[u32]) {
        for (i, src) in req.sources.iter().enumerate() {
            if !refused_sources.contains(&(i as u32))
                && Rollups::check_declaration(&src.groups).is_ok()
            {
                self.rollups
                    .declare(&src.source, &src.groups, now_ms.div_euclid(1000));
            }
        }
    }

    /// Judges `req`'s sources before anything is logged: those `by_token`
    /// refuses, and those with a bad group declaration. Declares the
    /// groups of the sources it keeps.
    fn prepare(
        &self,
        req: &PushView<'_>,
        now_ms: i64,
        by_token: impl Fn(usize, &str) -> Option<String>,
    ) -> Prepared {
        let mut p = Prepared {
            refusals: Vec::new(),
            allowed_sources: 0,
            refused_sources: Vec::new(),
        };
        for (si, src) in req.sources().enumerate() {
            let refusal = match by_token(si, src.source()) {
                Some(why) => {
                    p.refused_sources.push(si as u32);
                    Some((RejectReason::SourceNotAllowed, why))
                }
                None => {
                    p.allowed_sources += 1;
                    Rollups::check_declaration(src.groups())
                        .err()
                        .map(|why| (RejectReason::InvalidGroup, why))
                }
            };
            match refusal {
                Some((reason, why)) => p.refusals.push((si, reason, why)),
                None => self
                    .rollups
                    .declare(src.source(), src.groups(), now_ms.div_euclid(1000)),
            }
        }
        p
    }
}

/// A request's sources, judged.
struct Prepared {
    /// The refused sources' places in the request, in order, and why:
    /// none in steady state, so a request allocates no list for them.
    refusals: Vec<(usize, RejectReason, String)>,
    allowed_sources: usize,
    /// Sources refused by the token, for the log.
    refused_sources: Vec<u32>,
}

/// Hands `fold` the series groups of `req` to fold, a chunk at a time as
/// they are made from the view; the series of refused sources and those
/// with a bad label set (`labels`, or a key too long when None) go to
/// `refused`.
fn groups<'r>(
    req: &'r PushView<'_>,
    labels: Option<&'r LabelArena>,
    p: &Prepared,
    refused: &mut IngestOutcome,
    mut fold: impl FnMut(&[SeriesBatch<'r>]),
) {
    let mut chunk = Vec::with_capacity(req.series_len().min(FOLD_CHUNK));
    let mut series_at = 0;
    let mut refusals = p.refusals.iter().peekable();
    for (si, src) in req.sources().enumerate() {
        let refusal = refusals
            .next_if(|r| r.0 == si)
            .map(|(_, reason, why)| (reason, why));
        let source = src.source();
        for (mi, series) in src.series().enumerate() {
            let at = series_at;
            series_at += 1;
            let b = SeriesBatch {
                source,
                metric: series.metric,
                labels: "",
                kind: kind_from_proto(series.kind),
                timestamps_ms: series.timestamps_ms,
                values: series.values,
                start_times_ms: series.start_times_ms,
                source_index: si as u32,
                series_index: mi as u32,
            };
            if let Some((reason, why)) = refusal {
                refused.reject_series(&b, *reason, || why.clone());
                continue;
            }
            let encoded = match labels {
                Some(arena) => arena.get(at).map_err(Cow::Borrowed),
                None => check_unlabelled(source, b.metric)
                    .map(|()| "")
                    .map_err(Cow::Owned),
            };
            match encoded {
                Ok(l) => chunk.push(SeriesBatch { labels: l, ..b }),
                Err(e) => refused.reject_series(&b, RejectReason::InvalidLabel, || e.to_string()),
            }
            if chunk.len() == FOLD_CHUNK {
                fold(&chunk);
                chunk.clear();
            }
        }
    }
    if !chunk.is_empty() {
        fold(&chunk);
    }
}

pub(crate) fn kind_from_proto(k: i32) -> Option<SampleKind> {
    match pb::SampleKind::try_from(k).ok()? {
        pb::SampleKind::Gauge => Some(SampleKind::Gauge),
        pb::SampleKind::DeltaCounter => Some(SampleKind::DeltaCounter),
        pb::SampleKind::CumulativeCounter => Some(SampleKind::CumulativeCounter),
        pb::SampleKind::Unspecified => None,
    }
}

/// Every series' label encoding, in request order; None when no series
/// has labels (each key's length is then checked as it is folded).
fn encode_labels(req: &PushView<'_>, max_labels: usize) -> Option<LabelArena> {
    let label_bytes = req.label_bytes();
    if label_bytes == 0 {
        return None;
    }
    let mut arena = LabelArena::with_capacity(req.series_len(), label_bytes);
    // On the stack for the usual handful of labels, and reused: no
    // allocation or copy of the list per series.
    let mut pairs = Pairs::new();
    for src in req.sources() {
        for series in src.series() {
            pairs.clear();
            pairs.extend(series.labels.iter().copied());
            arena.push(src.source(), series.metric, &mut pairs, max_labels);
        }
    }
    Some(arena)
}

fn count_request(protocol: Protocol, outcome: &'static str) {
    metrics::counter!(
        "tally_ingest_requests_total",
        "protocol" => protocol.as_str(),
        "rpc" => protocol.rpc(),
        "outcome" => outcome
    )
    .increment(1);
}

/// The two counters every admitted request moves, per protocol.
struct Admitted {
    requests: metrics::Counter,
    samples: metrics::Counter,
}

/// [`Admitted`] by [`Protocol`], registered on first use. The macros
/// build a labelled key and look it up in the registry on every call,
/// about a microsecond a request with agents sending small requests in
/// real time. The daemon installs its recorder before anything is
/// admitted, so first use registers with it.
static ADMITTED: [OnceLock<Admitted>; Protocol::ALL.len()] =
    [const { OnceLock::new() }; Protocol::ALL.len()];

fn record(out: &IngestOutcome, protocol: Protocol) {
    let p = protocol.as_str();
    let counted = ADMITTED[protocol as usize].get_or_init(|| Admitted {
        requests: metrics::counter!(
            "tally_ingest_requests_total",
            "protocol" => p,
            "rpc" => protocol.rpc(),
            "outcome" => "ok"
        ),
        samples: metrics::counter!("tally_samples_accepted_total", "protocol" => p),
    });
    counted.requests.increment(1);
    counted.samples.increment(out.accepted);
    for reason in RejectReason::ALL {
        let n = out.rejected_by_reason[reason as usize];
        if n > 0 {
            metrics::counter!("tally_samples_rejected_total", "protocol" => p, "reason" => reason.as_str())
                .increment(n);
        }
    }
    if out.counter_resets > 0 {
        metrics::counter!("tally_counter_resets_total").increment(out.counter_resets);
    }
}

/// A short message naming the first few reasons `out` refused samples, for
/// protocols that answer with one message rather than a list.
pub(crate) fn first_problems(out: &IngestOutcome) -> String {
    const SHOWN: usize = 3;
    let mut msg = format!("{} samples rejected", out.rejected);
    for (i, r) in out.rejections.iter().take(SHOWN).enumerate() {
        msg.push_str(if i == 0 { ": " } else { "; " });
        msg.push_str(r.reason.as_str());
        msg.push_str(" (");
        msg.push_str(&r.detail);
        msg.push(')');
    }
    if out.rejections.len() > SHOWN || out.rejections_truncated {
        msg.push_str("; …");
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::Protocol;

    /// Where `p` must be in [`Protocol::ALL`]. Exhaustive, so that a new
    /// protocol does not compile until it has its place (and its counters).
    fn place(p: Protocol) -> usize {
        match p {
            Protocol::TallyPush => 0,
            Protocol::TallyPushStream => 1,
            Protocol::OtlpGrpc => 2,
            Protocol::OtlpHttp => 3,
            Protocol::RemoteWrite => 4,
            Protocol::InfluxV1 => 5,
            Protocol::InfluxV2 => 6,
            Protocol::Graphite => 7,
        }
    }

    #[test]
    fn every_protocol_indexes_its_own_place() {
        for (i, p) in Protocol::ALL.into_iter().enumerate() {
            assert_eq!(p as usize, i, "{p:?}");
            assert_eq!(place(p), i, "{p:?}");
        }
    }
}
