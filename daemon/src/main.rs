//! `tallyd`: wires configuration, the store, the aggregator, the flush
//! pipeline and the gRPC and HTTP listeners together, and runs the shutdown
//! sequence: stop accepting, flush everything, close the store, exit within
//! the deadline.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Parser;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{error, info, warn};

use tally::aggregator::{Aggregator, AggregatorConfig};
use tally::catalog::CatalogWriter;
use tally::config::{Cli, Config, LogFormat, StoreKind};
use tally::flush::{FlushConfig, Pipeline};
use tally::ingest::{IngestGate, IngestLimits, IngestService};
use tally::maintenance::{self, MaintenanceConfig};
use tally::query::{QueryEngine, QueryLimits};
use tally::rollup::Rollups;
use tally::store::embedded::EmbeddedStore;
use tally::store::mongodb::MongoStore;
use tally::store::Store;
use tally::watch::{WatchConfig, WatchHub};
use tally::{grpc, http, telemetry};

// Ingest decodes many small strings and arrays per request; mimalloc's
// per-thread free lists measured faster than the system allocator here (see
// BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> Result<()> {
    let cli = Cli::parse();
    let config = Config::load(&cli)?;
    telemetry::init_logging(&config.log_level, config.log_format == LogFormat::Json)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("tallyd")
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run(config))
}

async fn run(config: Config) -> Result<()> {
    let metrics = telemetry::init_metrics()?;
    let store = open_store(&config).await?;
    let shards = match config.aggregator.shards {
        0 => 4 * std::thread::available_parallelism().map_or(2, |n| n.get()),
        n => n,
    };
    let agg = Arc::new(Aggregator::new(AggregatorConfig {
        shards,
        lateness_ms: config.ingest.lateness_window.as_millis() as i64,
        future_skew_ms: config.ingest.max_future_skew.as_millis() as i64,
        max_series: config.ingest.max_series,
        max_pending_slots: config.ingest.max_pending_slots,
        max_rejections_reported: config.ingest.max_rejections_reported,
    }));
    let last_flush = match store.last_flush_id().await {
        Ok(id) => id,
        // A store that is down at start must not keep the daemon from
        // ingesting; flush ids also follow the wall clock, so 0 is safe.
        Err(e) if e.is_retryable() => {
            warn!(error = %e, "store unavailable at start; flushes will retry");
            0
        }
        Err(e) => return Err(e).context("reading the store's last flush id"),
    };
    let rollups = Arc::new(Rollups::new(config.rollup_config()).context("[rollup]")?);
    let catalog = Arc::new(CatalogWriter::new(config.catalog.refresh));
    let pipeline = Arc::new(
        Pipeline::new(
            agg.clone(),
            store.clone(),
            FlushConfig {
                interval: config.flush.interval,
                queue_depth: config.flush.queue_depth,
                retry_initial_backoff: config.flush.retry_initial_backoff,
                retry_max_backoff: config.flush.retry_max_backoff,
            },
            last_flush,
        )
        .with_rollups(rollups.clone())
        .with_catalog(catalog.clone()),
    );
    let engine = Arc::new(QueryEngine::new(
        pipeline.clone(),
        QueryLimits {
            max_points: config.query.max_points,
            default_points: config.query.default_points,
            max_series: config.query.max_series,
            max_fanout: config.query.max_fanout,
            max_page: config.query.max_page,
            max_total_points: config.query.max_total_points,
        },
        config.retention.hour.as_secs() as i64,
    ));
    let watch_hub = Arc::new(WatchHub::new(
        engine.clone(),
        WatchConfig {
            max_subscribers: config.watch.max_subscribers,
            max_series: config.watch.max_series,
            window: config.watch.window,
            buffer: config.watch.buffer,
            max_lag: config.watch.max_lag,
            ..WatchConfig::default()
        },
    ));

    let grpc_listener = TcpListener::bind(config.grpc_listen)
        .await
        .with_context(|| format!("binding grpc_listen {}", config.grpc_listen))?;
    let http_listener = TcpListener::bind(config.http_listen)
        .await
        .with_context(|| format!("binding http_listen {}", config.http_listen))?;
    // Tests start the daemon on port 0 and read the real ports from here.
    info!(
        grpc = %grpc_listener.local_addr()?,
        http = %http_listener.local_addr()?,
        store = %store.name(),
        "tallyd listening"
    );

    // Shutdown runs in three steps, each with its own signal: listeners stop
    // accepting (`close_listeners`), then the pipeline makes its final flush
    // and background loops end (`stop`), and if the deadline passes, retries
    // are abandoned (`give_up`).
    let (close_tx, close_rx) = watch::channel(false);
    let (stop_tx, stop_rx) = watch::channel(false);
    let (give_up_tx, give_up_rx) = watch::channel(false);
    let draining = Arc::new(AtomicBool::new(false));

    let gate = Arc::new(IngestGate::default());
    let (health, health_service) = tonic_health::server::health_reporter();
    let mut grpc_task = tokio::spawn(grpc::serve(
        grpc_listener,
        IngestService::new(
            agg.clone(),
            rollups.clone(),
            IngestLimits {
                max_batch_samples: config.ingest.max_batch_samples,
            },
            gate.clone(),
        ),
        grpc::QueryService::new(engine.clone(), watch_hub.clone()),
        health.clone(),
        health_service,
        config.ingest.max_message_bytes,
        wait_for(close_rx.clone()),
    ));
    let mut http_task = tokio::spawn(http::serve(
        http_listener,
        http::HttpState {
            query: engine.clone(),
            pipeline: pipeline.clone(),
            watch: watch_hub.clone(),
            store: store.clone(),
            metrics: Some(metrics),
            draining: draining.clone(),
        },
        wait_for(close_rx.clone()),
    ));
    let flush_task = tokio::spawn(pipeline.clone().run(stop_rx.clone(), give_up_rx));
    // Watch streams end when the listeners close, or graceful shutdown
    // would wait on them for the whole grace period.
    let watch_task = tokio::spawn(watch_hub.clone().run(close_rx.clone()));
    let maintenance_task = tokio::spawn(maintenance::run(
        agg.clone(),
        store.clone(),
        Some(catalog),
        rollups.clone(),
        MaintenanceConfig {
            prealloc_enabled: config.prealloc.enabled,
            prealloc_hour_window_s: config.prealloc.hour_window.as_secs() as i64,
            prealloc_day_window_s: config.prealloc.day_window.as_secs() as i64,
            prealloc_max_per_second: config.prealloc.max_per_second as usize,
            hour_retention_s: config.retention.hour.as_secs() as i64,
            day_retention_s: config.retention.day.as_secs() as i64,
            series_idle_timeout_s: config.ingest.series_idle_timeout.as_secs() as i64,
        },
        stop_rx.clone(),
    ));
    let health_task = tokio::spawn(track_store_health(
        store.clone(),
        health.clone(),
        stop_rx.clone(),
    ));

    shutdown_signal().await;
    let deadline = tokio::time::Instant::now() + config.flush.shutdown_deadline;
    info!(deadline = ?config.flush.shutdown_deadline, "shutting down: no new samples, flushing");
    draining.store(true, Ordering::Relaxed);
    health
        .set_service_status("", tonic_health::ServingStatus::NotServing)
        .await;
    let _ = close_tx.send(true);

    // 1. Listeners: in-progress calls finish; connections get a bounded
    //    grace, because a client that never closes its connection would
    //    otherwise hold graceful shutdown for the whole deadline.
    let grace =
        tokio::time::Instant::now() + LISTENER_GRACE.min(config.flush.shutdown_deadline / 2);
    match tokio::time::timeout_at(grace, &mut grpc_task).await {
        Ok(Ok(Err(e))) => error!(error = %e, "gRPC server failed"),
        Ok(Err(e)) => error!(error = %e, "gRPC task failed"),
        Ok(Ok(Ok(()))) => {}
        Err(_) => {
            warn!("gRPC connections still open after the grace period; closing them");
            grpc_task.abort();
        }
    }
    gate.close();
    match tokio::time::timeout_at(grace, &mut http_task).await {
        Ok(Ok(Err(e))) => error!(error = %e, "HTTP server failed"),
        Ok(Err(e)) => error!(error = %e, "HTTP task failed"),
        Ok(Ok(Ok(()))) => {}
        Err(_) => http_task.abort(),
    }

    // 2. Final flush: everything acknowledged is in the aggregator now.
    let _ = stop_tx.send(true);
    let mut flush_task = flush_task;
    if tokio::time::timeout_at(deadline, &mut flush_task)
        .await
        .is_err()
    {
        let _ = give_up_tx.send(true);
        // The applier notices `give_up` at its next retry wait.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), &mut flush_task).await;
    }
    let _ = maintenance_task.await;
    let _ = watch_task.await;
    let _ = health_task.await;
    if let Err(e) = store.close().await {
        error!(error = %e, "closing the store");
    }
    let left = pipeline.unflushed_slots();
    if left > 0 {
        bail!(
            "shutdown deadline ({:?}) passed with {left} minute slots not written to the store",
            config.flush.shutdown_deadline,
        );
    }
    info!("tallyd stopped cleanly");
    Ok(())
}

/// How long open connections may take to finish at shutdown (at most half
/// the shutdown deadline).
const LISTENER_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

async fn open_store(config: &Config) -> Result<Arc<dyn Store>> {
    match config.store {
        StoreKind::Embedded => {
            let store = EmbeddedStore::open_with(&config.data_dir, config.embedded.clone())
                .with_context(|| {
                    format!(
                        "opening the embedded store in {}",
                        config.data_dir.display()
                    )
                })?;
            info!(data_dir = %config.data_dir.display(), "embedded store open");
            Ok(Arc::new(store))
        }
        StoreKind::Mongodb => {
            let writer = writer_id(config)?;
            let store = MongoStore::connect(
                &config.mongodb,
                (
                    config.retention.hour.as_secs(),
                    config.retention.day.as_secs(),
                ),
                &writer,
            )
            .await
            .context("configuring the MongoDB store")?;
            info!(
                uri = %redact_uri(&config.mongodb.uri),
                database = %config.mongodb.database,
                writer = %writer,
                "mongodb store configured"
            );
            Ok(Arc::new(store))
        }
    }
}

/// This daemon's identity in the documents' per-writer flush watermarks:
/// `writer_id` when set, else an id generated once and kept in
/// `data_dir/writer-id`, so a restarted daemon recognises its own flushes.
fn writer_id(config: &Config) -> Result<String> {
    if !config.writer_id.is_empty() {
        return Ok(config.writer_id.clone());
    }
    let path = config.data_dir.join("writer-id");
    match std::fs::read_to_string(&path) {
        Ok(id) => return Ok(id.trim().to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    }
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating data_dir {}", config.data_dir.display()))?;
    let id = format!("w{:016x}", rand::random::<u64>());
    std::fs::write(&path, &id).with_context(|| format!("writing {}", path.display()))?;
    Ok(id)
}

/// The URI without its password, for logs.
fn redact_uri(uri: &str) -> String {
    match (uri.find("://"), uri.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let creds = &uri[scheme + 3..at];
            let user = creds.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &uri[..scheme + 3], &uri[at..])
        }
        _ => uri.to_string(),
    }
}

/// Mirrors the store's health into `grpc.health.v1`, so gRPC load
/// balancers route around a daemon whose store is down.
async fn track_store_health(
    store: Arc<dyn Store>,
    health: tonic_health::server::HealthReporter,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(2));
    let mut healthy = true;
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tick.tick() => {}
        }
        let ok = store.health().await;
        let now_healthy = ok.is_ok();
        if now_healthy != healthy {
            match &ok {
                Ok(()) => info!(store = store.name(), "store healthy again"),
                Err(e) => warn!(store = store.name(), error = %e, "store unhealthy"),
            }
            let status = if now_healthy {
                tonic_health::ServingStatus::Serving
            } else {
                tonic_health::ServingStatus::NotServing
            };
            health.set_service_status("", status).await;
            healthy = now_healthy;
        }
    }
}

async fn wait_for(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            error!(error = %e, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => info!("SIGINT received"),
        _ = term => info!("SIGTERM received"),
    }
}
