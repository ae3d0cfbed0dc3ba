//! The daemon's own observability: `tracing` logs and the Prometheus
//! recorder behind `/metrics`. Metric names follow Prometheus conventions
//! (base units, `_total` on counters) and are described here in one place.

use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("log filter {0:?} is invalid: {1}")]
    Filter(String, String),
    #[error("installing the metrics recorder: {0}")]
    Metrics(String),
}

/// Installs the global `tracing` subscriber. `RUST_LOG`, when set, overrides
/// `level` so an operator can raise one module's verbosity without a restart
/// of the config.
pub fn init_logging(level: &str, json: bool) -> Result<(), TelemetryError> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(f) if !f.is_empty() => f,
        _ => level.to_string(),
    };
    let env_filter = tracing_subscriber::EnvFilter::try_new(&filter)
        .map_err(|e| TelemetryError::Filter(filter.clone(), e.to_string()))?;
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(env_filter)
        .with_writer(std::io::stderr)
        // Colour codes only for a human at a terminal, never in log files.
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none());
    // A second install (tests building several daemons in one process) is harmless.
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
    Ok(())
}

/// Installs the Prometheus recorder and describes every metric the daemon emits.
pub fn init_metrics() -> Result<PrometheusHandle, TelemetryError> {
    let latency_buckets = [
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ];
    let size_buckets = [1.0, 10.0, 100.0, 1_000.0, 10_000.0, 100_000.0, 1_000_000.0];
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &latency_buckets)
        .and_then(|b| {
            b.set_buckets_for_metric(Matcher::Full("tally_flush_series".into()), &size_buckets)
        })
        .map_err(|e| TelemetryError::Metrics(e.to_string()))?
        .install_recorder()
        .map_err(|e| TelemetryError::Metrics(e.to_string()))?;
    describe();
    process_collector().describe();
    Ok(handle)
}

/// The standard `process_*` metrics (resident memory, CPU seconds, open
/// file descriptors, start time, threads), read from the OS.
fn process_collector() -> &'static metrics_process::Collector {
    static COLLECTOR: std::sync::OnceLock<metrics_process::Collector> = std::sync::OnceLock::new();
    COLLECTOR.get_or_init(metrics_process::Collector::default)
}

/// Refreshes the `process_*` metrics; called on every scrape of `/metrics`,
/// so they are as fresh as the scrape.
pub fn collect_process_metrics() {
    process_collector().collect();
}

/// Counts one store operation and records its latency.
pub fn store_operation(store: &'static str, op: &'static str, seconds: f64) {
    metrics::counter!("tally_store_operations_total", "store" => store, "op" => op).increment(1);
    metrics::histogram!("tally_store_operation_duration_seconds", "store" => store, "op" => op)
        .record(seconds);
}

/// What kind of metric a description is for.
#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Every metric the daemon exports, with its unit and help text, so
/// `/metrics` carries `# HELP` for each from the first scrape.
const DESCRIPTIONS: &[(Kind, &str, Unit, &str)] = &[
    (Kind::Counter, "tally_samples_accepted_total", Unit::Count, "Samples accepted by ingest, by protocol (tally, otlp_grpc, otlp_http, remote_write, influx, graphite)."),
    (Kind::Counter, "tally_samples_rejected_total", Unit::Count, "Samples rejected by ingest, by protocol and reason."),
    (Kind::Counter, "tally_ingest_requests_total", Unit::Count, "Ingest requests (stream messages) by protocol, RPC and outcome (ok, pushback, too_large, denied, shutting_down, invalid)."),
    (Kind::Counter, "tally_counter_resets_total", Unit::Count, "Cumulative counters seen going down (counted process restarted)."),
    (Kind::Gauge, "tally_pending_slots", Unit::Count, "Unflushed (series, minute) accumulators in memory."),
    (Kind::Gauge, "tally_series", Unit::Count, "Series tracked by the aggregator."),
    (Kind::Gauge, "tally_sources", Unit::Count, "Sources with series tracked by the aggregator."),
    (Kind::Counter, "tally_series_refused_total", Unit::Count, "New series refused because a series limit was reached: limit=\"daemon\" (ingest.max_series) or \"source\" (ingest.max_series_per_source)."),
    (Kind::Gauge, "tally_flush_inflight_batches", Unit::Count, "Flush batches drained and not yet finished (applied to the store and recorded in the catalog, or given up)."),
    (Kind::Gauge, "tally_store_lag_seconds", Unit::Seconds, "How long the oldest flush batch the store has not applied yet has waited since it was cut; 0 when the store has every batch."),
    (Kind::Counter, "tally_flush_paced_total", Unit::Count, "Flush ticks skipped to keep the store's server under mongodb.max_statements_per_s."),
    (Kind::Counter, "tally_flush_deferred_total", Unit::Count, "Flush ticks skipped because the store is behind (backpressure)."),
    (Kind::Counter, "tally_wal_bytes_total", Unit::Bytes, "Bytes written to the write-ahead log."),
    (Kind::Counter, "tally_wal_groups_total", Unit::Count, "Group commits of the write-ahead log (one write, and with sync = fsync one sync, each)."),
    (Kind::Counter, "tally_wal_errors_total", Unit::Count, "Failed writes to the write-ahead log (a full disk); ingest answers UNAVAILABLE and tallyd is unready until a write succeeds again."),
    (Kind::Counter, "tally_wal_queue_full_total", Unit::Count, "Times a request waited because the write-ahead log's queue (wal.queue) was full."),
    (Kind::Gauge, "tally_store_pending_series", Unit::Count, "Series whose flushed minutes the embedded store holds in memory (and its checkpoint log), not yet folded into their documents."),
    (Kind::Gauge, "tally_allocator_allocated_bytes", Unit::Bytes, "Bytes the daemon holds allocated, by the allocator's count."),
    (Kind::Gauge, "tally_allocator_active_bytes", Unit::Bytes, "Bytes of the allocator's pages with live allocations in them (allocated plus fragmentation within them)."),
    (Kind::Gauge, "tally_allocator_resident_bytes", Unit::Bytes, "Bytes the allocator keeps resident: active pages, its metadata, and freed pages not yet returned."),
    (Kind::Gauge, "tally_allocator_retained_bytes", Unit::Bytes, "Bytes the allocator holds mapped but has returned to the system."),
    (Kind::Gauge, "tally_store_pending_bytes", Unit::Bytes, "Memory the embedded store's pending minutes take (bounded by embedded.pending_max_bytes)."),
    (Kind::Counter, "tally_store_folded_series_total", Unit::Count, "Series the embedded store folded from its pending minutes into their documents."),
    (Kind::Counter, "tally_store_checkpoints_total", Unit::Count, "Checkpoints of the embedded store: the minutes changed since the last one written to its file, after which the write-ahead log lets go of the flushes they hold."),
    (Kind::Gauge, "tally_store_file_bytes", Unit::Bytes, "Bytes the embedded store's file takes on disk, as of its last checkpoint."),
    (Kind::Gauge, "tally_store_document_bytes", Unit::Bytes, "Bytes of the hour and day documents the embedded store's file holds, counted unpacked, as of its last checkpoint."),
    (Kind::Gauge, "tally_store_failed", Unit::Count, "1 while the embedded store cannot be used: its file is damaged (until restarted) or an I/O error has not been cured by reopening it yet."),
    (Kind::Gauge, "tally_wal_segments", Unit::Count, "Write-ahead log segments on disk, the one being written included."),
    (Kind::Counter, "tally_flushes_total", Unit::Count, "Flush batches applied to the store."),
    (Kind::Counter, "tally_store_refused_documents_total", Unit::Count, "Documents the store refused for good in an attempt (not transient failures); retried, then kept as dead letters."),
    (Kind::Counter, "tally_dead_letters_total", Unit::Count, "Refused documents kept as dead letters in the data directory (tallyd dead-letters replay applies them)."),
    (Kind::Counter, "tally_dead_letter_samples_total", Unit::Count, "Samples in the documents kept as dead letters."),
    (Kind::Gauge, "tally_dead_letter_files", Unit::Count, "Dead-letter files in the data directory, one per flush with refused documents."),
    (Kind::Gauge, "tally_dead_letter_bytes", Unit::Bytes, "Bytes the dead-letter files take, of flush.dead_letters_max_bytes."),
    (Kind::Gauge, "tally_store_refusing", Unit::Count, "1 while the store refuses every document of a flush: the flush is held, tallyd is unready and ingest answers with retry signals."),
    (Kind::Histogram, "tally_flush_cut_seconds", Unit::Seconds, "Time to cut one flush batch: drain the aggregator, add the group rollups and index the batch for reads (which wait for it)."),
    (Kind::Histogram, "tally_ingest_held_seconds", Unit::Seconds, "How long each flush held new requests back: from asking for the write-ahead log's barrier (requests in progress finish first) until its marker is queued."),
    (Kind::Histogram, "tally_flush_duration_seconds", Unit::Seconds, "Time to apply one flush batch to the store, per attempt."),
    (Kind::Histogram, "tally_flush_series", Unit::Count, "Active series per applied flush."),
    (Kind::Counter, "tally_flush_documents_total", Unit::Count, "Documents updated by flushes."),
    (Kind::Counter, "tally_flush_documents_skipped_total", Unit::Count, "Documents a replayed flush had already updated (exactly-once)."),
    (Kind::Counter, "tally_store_operations_total", Unit::Count, "Store operations by store and operation."),
    (Kind::Counter, "tally_store_errors_total", Unit::Count, "Store errors by store, operation and kind."),
    (Kind::Histogram, "tally_store_operation_duration_seconds", Unit::Seconds, "Store operation latency by store and operation."),
    (Kind::Counter, "tally_preallocated_documents_total", Unit::Count, "Documents pre-allocated ahead of their period, by tier."),
    (Kind::Gauge, "tally_prealloc_retry_documents", Unit::Count, "Pre-allocations that failed and wait to be tried again, with backoff, until their period begins."),
    (Kind::Counter, "tally_prealloc_expired_total", Unit::Count, "Failed pre-allocations given up because their period began (the flush's upsert makes the document) or the retry queue was full."),
    (Kind::Counter, "tally_evicted_series_total", Unit::Count, "Idle series forgotten by the aggregator."),
    (Kind::Counter, "tally_expired_documents_total", Unit::Count, "Documents removed by tallyd's retention sweep (embedded store; MongoDB servers without TTL indexes)."),
    (Kind::Gauge, "tally_query_budget_reserved_bytes", Unit::Bytes, "Memory reserved by reads in progress, of query.read_budget_bytes."),
    (Kind::Counter, "tally_query_budget_timeouts_total", Unit::Count, "Reads refused (503) after waiting query.read_budget_wait for the read budget."),
    (Kind::Histogram, "tally_query_duration_seconds", Unit::Seconds, "HTTP read latency by endpoint (range, latest, series, sources, metrics, aggregate, fleet)."),
    (Kind::Counter, "tally_mongodb_round_trips_total", Unit::Count, "Commands sent to MongoDB, by operation."),
    (Kind::Histogram, "tally_mongodb_round_trip_duration_seconds", Unit::Seconds, "MongoDB command round-trip latency, by operation."),
    (Kind::Counter, "tally_mongodb_bytes_sent_total", Unit::Bytes, "Bytes of commands sent to MongoDB."),
    (Kind::Counter, "tally_mongodb_statements_total", Unit::Count, "Write statements (updates, inserted documents) sent to MongoDB, by operation."),
    (Kind::Histogram, "tally_mongodb_batch_statements", Unit::Count, "Write statements per MongoDB command, by operation."),
    (Kind::Gauge, "tally_mongodb_feature_missing", Unit::Count, "1 when the MongoDB server lacks a feature Tally uses and Tally falls back, 0 when present; by feature (ttl_index, coll_mod, infinity, unordered_updates)."),
    (Kind::Counter, "tally_mongodb_fallback_upserts_total", Unit::Count, "MongoDB documents created by a flush's fallback upsert (not pre-allocated)."),
    (Kind::Counter, "tally_mongodb_sealed_documents_total", Unit::Count, "MongoDB day documents whose block of an hour was sealed from the hour document (changed slots set)."),
    (Kind::Counter, "tally_mongodb_seal_refused_total", Unit::Count, "MongoDB hour documents that could not be sealed into their day documents (rewritten by hand, or fewer samples than the day's block): logged at error level."),
    (Kind::Counter, "tally_mongodb_writer_takeovers_total", Unit::Count, "Stopped MongoDB writers (no flush-id reservation for 2 h) whose unsealed hours this daemon took over."),
    (Kind::Gauge, "tally_mongodb_unsealed_series", Unit::Count, "Series with hours this daemon wrote and has not sealed into the day documents yet."),
    (Kind::Counter, "tally_mongodb_sightings_dropped_total", Unit::Count, "Day documents first seen by a flush that the upkeep's bounded queue had no room to pre-allocate (the seal's upsert makes them)."),
    (Kind::Counter, "tally_catalog_writes_total", Unit::Count, "Series catalog entries written (new series, or last_seen refreshed)."),
    (Kind::Counter, "tally_rollup_skipped_total", Unit::Count, "Member series left out of a group rollup (kind conflict, rollup.max_series reached, or a sum beyond 1e300), per flush."),
    (Kind::Counter, "tally_rollup_groups_refused_total", Unit::Count, "Group names agents declared beyond rollup.max_agent_groups, ignored."),
    (Kind::Gauge, "tally_watch_subscribers", Unit::Count, "Live watch subscriptions (gRPC Watch and SSE)."),
    (Kind::Counter, "tally_watch_skipped_total", Unit::Count, "Watch updates skipped because a subscriber's queue was full."),
    (Kind::Counter, "tally_watch_dropped_total", Unit::Count, "Watch subscribers dropped for reading nothing for watch.max_lag."),
    (Kind::Gauge, "tally_http_connections", Unit::Count, "Open HTTP connections (at most http.max_connections)."),
    (Kind::Counter, "tally_http_connections_refused_total", Unit::Count, "HTTP connections answered 503 and closed at http.max_connections."),
    (Kind::Counter, "tally_http_connections_accepted_total", Unit::Count, "HTTP connections accepted; each is then refused, closed or open."),
    (Kind::Counter, "tally_http_connections_closed_total", Unit::Count, "HTTP connections ended, by reason (closed, evicted, header_timeout, body_timeout, write_timeout, handshake_timeout, handshake_failed, protocol_error, shutdown)."),
    (Kind::Gauge, "tally_http_reserved_connections", Unit::Count, "Connections beyond http.max_connections served by the reserve (health and metrics only)."),
    (Kind::Gauge, "tally_grpc_connections", Unit::Count, "Open gRPC connections (at most grpc.max_connections)."),
    (Kind::Counter, "tally_grpc_connections_accepted_total", Unit::Count, "gRPC connections accepted; each is then refused, closed or open."),
    (Kind::Counter, "tally_grpc_connections_refused_total", Unit::Count, "gRPC connections closed at once at grpc.max_connections, with no connection to evict."),
    (Kind::Counter, "tally_grpc_connections_closed_total", Unit::Count, "gRPC connections ended, by reason (closed, evicted, preface_timeout, idle_timeout, keepalive_timeout, handshake_timeout, handshake_failed, protocol_error, shutdown)."),
    (Kind::Counter, "tally_influx_string_fields_total", Unit::Count, "InfluxDB line-protocol string fields skipped (Tally keeps numbers only)."),
    (Kind::Gauge, "tally_graphite_connections", Unit::Count, "Open Graphite plaintext connections (at most graphite.max_connections)."),
    (Kind::Counter, "tally_graphite_connections_refused_total", Unit::Count, "Graphite connections closed at once at graphite.max_connections."),
    (Kind::Histogram, "tally_watch_tick_duration_seconds", Unit::Seconds, "Time to compute and send one watch tick to every subscriber."),
];

fn describe() {
    for &(kind, name, unit, help) in DESCRIPTIONS {
        match kind {
            Kind::Counter => describe_counter!(name, unit, help),
            Kind::Gauge => describe_gauge!(name, unit, help),
            Kind::Histogram => describe_histogram!(name, unit, help),
        }
    }
}
