//! `tallyd`: wires configuration, the store, the aggregator, the flush
//! pipeline and the gRPC and HTTP listeners together, and runs the shutdown
//! sequence: stop accepting, flush everything, close the store, exit within
//! the deadline.

// Input and I/O must not reach a panic: production code answers with an
// error instead. Tests may unwrap.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)
)]

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Parser;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use tokio_util::sync::CancellationToken;

use tally::aggregator::Aggregator;
use tally::catalog::CatalogWriter;
use tally::config::{Cli, Command, Config, DeadLettersCommand, LogFormat, StoreKind};
use tally::deadletter::DeadLetters;
use tally::fleet::{Fleet, SourceRates};
use tally::flush::Pipeline;
use tally::grpc::IngestService;
use tally::ingest::{IngestGate, Ingestor};
use tally::listen::{self, ConnThreads, Listener};
use tally::maintenance::Maintenance;
use tally::query::QueryEngine;
use tally::rollup::Rollups;
use tally::security::Security;
use tally::store::embedded::EmbeddedStore;
use tally::store::mongodb::{redact_uri, MongoStore};
use tally::store::Store;
use tally::tls::Protocol;
use tally::wal::Wal;
use tally::watch::WatchHub;
use tally::{grpc, http, telemetry};

// jemalloc: one arena, freed pages returned after about five seconds (its
// build-time settings and why are in `.cargo/config.toml`; the one set at
// run time is in `tally::allocator`). Each flush frees
// about as much as the next allocates (the store's copied pages; the
// drained batch is reused, see `Aggregator::drain_into`), on whichever
// blocking-pool thread ran it. mimalloc, used before, kept memory per
// thread, and RSS settled higher after each SIGKILL restart (about 250 ->
// 320 MiB at 100,000 series); jemalloc stays level across restarts and
// lower. BENCHMARKS.md, Soak, has the runs.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> Result<()> {
    let cli = Cli::parse();
    let config = Config::load(&cli)?;
    telemetry::init_logging(&config.log_level, config.log_format == LogFormat::Json)?;
    if let Err(e) = tally::allocator::raise_purge_threshold() {
        warn!(error = %e, "memory may swing more than it needs to under a steady load");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(tally::store::embedded::blocking_threads())
        .thread_name("tallyd")
        .build()
        .context("starting the async runtime")?;
    // The daemon runs on a worker thread, not on this one: this thread
    // only waits for it. What start-up allocates (the store's pending
    // minutes, replayed series) lives on, and is freed later by workers,
    // so it belongs to the workers' memory, not to a thread parked in
    // `block_on` that never allocates again (with mimalloc, which frees a
    // page only when its owning thread looks at it again, that held it).
    runtime.block_on(async move {
        match cli.command {
            None => tokio::spawn(run(config)),
            Some(Command::DeadLetters(cmd)) => tokio::spawn(dead_letters(config, cmd)),
            Some(Command::StoreUsage) => tokio::spawn(store_usage(config)),
        }
        .await
        .context("the daemon's main task panicked")?
    })
}

async fn run(config: Config) -> Result<()> {
    let metrics = telemetry::init_metrics()?;
    let security = Arc::new(Security::load(&config.tls, &config.auth)?);
    let _lock = tally::datadir::lock(&config.data_dir)?;
    let dead = dead_letters_of(&config);
    dead.check_no_replay_pending()?;
    let store = open_store(&config, &dead).await?;
    let parts = Parts::build(&config, store, dead).await?;
    let wal = recover(&config, &parts).await?;
    let grpc_listener = tally::listen::bind(config.grpc_listen)
        .with_context(|| format!("binding grpc_listen {}", config.grpc_listen))?;
    let http_listener = tally::listen::bind(config.http_listen)
        .with_context(|| format!("binding http_listen {}", config.http_listen))?;
    let graphite_listener = match config.graphite.addr() {
        Some(addr) => Some(
            tally::listen::bind(addr).with_context(|| format!("binding graphite.listen {addr}"))?,
        ),
        None => None,
    };
    let graphite_addr = graphite_listener
        .as_ref()
        .map(TcpListener::local_addr)
        .transpose()
        .context("reading graphite.listen's address")?;
    check_open_files(&config);
    let threads = Arc::new(ConnThreads::per_cpu().context("starting the connection threads")?);
    let grpc_listener = security
        .listener(
            grpc_listener,
            Protocol::Grpc,
            grpc::listen_limits(&config.grpc),
        )?
        .on_threads(threads.clone());
    let http_listener = security
        .listener(http_listener, Protocol::Http, http::limits(&config.http))?
        .on_threads(threads);
    let (grpc_addr, http_addr) = (grpc_listener.local_addr(), http_listener.local_addr());
    // Tests start the daemon on port 0 and read the real ports from here.
    info!(
        grpc = %grpc_addr,
        http = %http_addr,
        graphite = %graphite_addr.map_or_else(|| "off".to_owned(), |a| a.to_string()),
        store = %parts.store.name(),
        tls = security.tls_enabled(),
        auth = security.auth().enabled(),
        "tallyd listening"
    );
    security.warn_exposure(&[("grpc_listen", grpc_addr), ("http_listen", http_addr)]);
    if let Some(addr) = graphite_addr {
        tally::graphite::warn_exposure(addr, security.auth().enabled());
    }
    let shutdown = Shutdown::default();
    tokio::spawn(security.clone().reload_on_sighup(shutdown.stop.clone()));
    let tasks = parts.start(
        &config,
        &security,
        shutdown.clone(),
        (grpc_listener, http_listener, graphite_listener),
        metrics,
    );
    shutdown_signal().await;
    let stopped = tasks
        .shut_down(&parts, &shutdown, config.flush.shutdown_deadline)
        .await;
    if let Some(wal) = wal {
        wal.close().await;
    }
    stopped
}

/// `tallyd dead-letters ...`: lists, drops or replays the dead letters of
/// the daemon these settings describe. Replay does what a start does up to
/// the listeners (the write-ahead log's replay included, so the store is
/// complete first), applies the letters, flushes and closes.
/// `tallyd store-usage`: the embedded store file's bytes by table.
async fn store_usage(config: Config) -> Result<()> {
    let _lock = tally::datadir::lock(&config.data_dir)?;
    let dir = config.data_dir.clone();
    let usage = tokio::task::spawn_blocking(move || tally::store::embedded::file_usage(&dir))
        .await
        .context("counting the store file's pages")??;
    print!("{usage}");
    Ok(())
}

async fn dead_letters(config: Config, cmd: DeadLettersCommand) -> Result<()> {
    let dead = dead_letters_of(&config);
    match cmd {
        DeadLettersCommand::List => {
            print!("{}", tally::deadletter::report(&dead.list()?));
            Ok(())
        }
        DeadLettersCommand::Drop { flushes, all } => {
            if !all && flushes.is_empty() {
                bail!("name the flushes to drop (--flush ID, as `list` shows them) or --all");
            }
            let _lock = tally::datadir::lock(&config.data_dir)?;
            dead.check_no_replay_pending()?;
            let dropped = dead.drop_files((!all).then_some(flushes.as_slice()))?;
            println!("dropped {dropped} dead-letter file(s)");
            Ok(())
        }
        DeadLettersCommand::Replay => {
            // The replay is how room is made: the write-ahead log's replay
            // before it must not hold on the bound.
            let mut config = config;
            config.flush.dead_letters_max_bytes = u64::MAX;
            let dead = dead_letters_of(&config);
            let _lock = tally::datadir::lock(&config.data_dir)?;
            let store = open_store(&config, &dead).await?;
            let parts = Parts::build(&config, store, dead).await?;
            let wal = recover(&config, &parts).await?;
            let replayed = parts.pipeline.replay_dead_letters().await;
            // What the log's replay left in memory goes to the store too.
            let (stop, give_up) = (CancellationToken::new(), CancellationToken::new());
            stop.cancel();
            let deadline = config.flush.shutdown_deadline;
            let drain = parts.pipeline.clone().run(stop, give_up.clone());
            if tokio::time::timeout(deadline, drain).await.is_err() {
                give_up.cancel();
            }
            if let Some(wal) = wal {
                wal.close().await;
            }
            parts.store.close().await.context("closing the store")?;
            let r = replayed?;
            if r.parts == 0 {
                println!("no dead letters to replay");
            } else {
                println!(
                    "replayed {} dead letter(s) ({} sample(s)) from {} file(s) in {} part(s), as flushes {} to {}{}; {} still refused{}",
                    r.letters,
                    r.samples,
                    r.files,
                    r.parts,
                    r.first_flush_id,
                    r.last_flush_id,
                    if r.resumed { ", finishing an interrupted replay first" } else { "" },
                    r.still_refused,
                    if r.still_refused > 0 { " and kept (see `tallyd dead-letters list`)" } else { "" },
                );
            }
            Ok(())
        }
    }
}

/// Replays the write-ahead log (when it is on) into the daemon before the
/// listeners open, then starts logging every request and flush.
async fn recover(config: &Config, parts: &Parts) -> Result<Option<Arc<Wal>>> {
    if !config.wal.enabled {
        return Ok(None);
    }
    let dir = config.data_dir.join("wal");
    let segments = tally::wal::recover(&dir).context("reading the write-ahead log")?;
    let durable = tally::recovery::resume_flush_id(&segments, || parts.store.complete_flush_id())
        .await
        .context("reading where the store is complete, to replay the write-ahead log from there")?;
    let held = tally::recovery::held_flush_id(&segments, durable, parts.store.as_ref()).await;
    let at = tally::recovery::StoreAt {
        complete: durable,
        held,
    };
    let replayed = tally::recovery::replay(
        &segments,
        at,
        &parts.agg,
        &parts.ingestor,
        &parts.pipeline,
        &CancellationToken::new(),
    )
    .await
    .context("replaying the write-ahead log")?;
    let wal = Arc::new(
        Wal::start(
            &dir,
            config.wal.clone(),
            &segments,
            replayed.baselines,
            config.ingest.baseline_keep(),
        )
        .context("starting the write-ahead log")?,
    );
    parts.ingestor.log_to(wal.clone());
    parts.pipeline.log_to(wal.clone(), parts.gate.clone());
    Ok(Some(wal))
}

/// The daemon's components, wired together.
struct Parts {
    store: Arc<dyn Store>,
    agg: Arc<Aggregator>,
    rollups: Arc<Rollups>,
    catalog: Arc<CatalogWriter>,
    pipeline: Arc<Pipeline>,
    fleet: Arc<Fleet>,
    engine: Arc<QueryEngine>,
    watch: Arc<WatchHub>,
    gate: Arc<IngestGate>,
    ingestor: Arc<Ingestor>,
}

impl Parts {
    async fn build(config: &Config, store: Arc<dyn Store>, dead: DeadLetters) -> Result<Parts> {
        let agg = Arc::new(
            Aggregator::new(&config.aggregator, &config.ingest)
                .with_catalog(config.catalog.refresh),
        );
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
        // Counted now: a directory that cannot be read fails the start.
        dead.bytes().context("counting the dead letters' bytes")?;
        let rollups = Arc::new(Rollups::new(config.rollup.clone()).context("[rollup]")?);
        let catalog = Arc::new(CatalogWriter::new(config.catalog.refresh));
        let source_rates = Arc::new(SourceRates::default());
        let pipeline = Arc::new(
            Pipeline::new(agg.clone(), store.clone(), config.flush.clone(), last_flush)
                .with_dead_letters(dead)
                .with_rollups(rollups.clone())
                .with_catalog(catalog.clone())
                .with_source_rates(source_rates.clone()),
        );
        let metadata = Arc::new(tally::metadata::MetadataBook::new());
        let fleet = Arc::new(Fleet::new(agg.clone(), source_rates));
        let engine = Arc::new(
            QueryEngine::new(
                store.clone(),
                agg.clone(),
                rollups.clone(),
                pipeline.inflight().clone(),
                config.query.clone(),
                config.retention.hour.as_secs() as i64,
            )
            .with_lateness(config.ingest.lateness_window)
            .with_metadata(metadata.clone()),
        );
        let watch = Arc::new(WatchHub::new(engine.clone(), config.watch.clone()));
        let gate = Arc::new(IngestGate::default());
        let ingestor = Arc::new(
            Ingestor::new(agg.clone(), rollups.clone(), gate.clone()).with_metadata(metadata),
        );
        ingestor.watch_store(store.clone());
        ingestor.watch_refusals(pipeline.refusing().clone());
        Ok(Parts {
            store,
            agg,
            rollups,
            catalog,
            pipeline,
            fleet,
            engine,
            watch,
            gate,
            ingestor,
        })
    }

    /// Starts the listeners and the background loops.
    fn start(
        &self,
        config: &Config,
        security: &Security,
        shutdown: Shutdown,
        (grpc_listener, http_listener, graphite_listener): (
            Listener,
            Listener,
            Option<TcpListener>,
        ),
        metrics: metrics_exporter_prometheus::PrometheusHandle,
    ) -> Tasks {
        let graphite = graphite_listener.map(|listener| {
            tokio::spawn(tally::graphite::serve(
                listener,
                self.ingestor.clone(),
                config.graphite.clone(),
                shutdown.close.clone(),
            ))
        });
        let (health, health_service) = tonic_health::server::health_reporter();
        let grpc = tokio::spawn(grpc::serve(grpc::GrpcServer {
            listener: grpc_listener,
            auth: security.auth().clone(),
            ingest: IngestService::new(self.ingestor.clone()),
            otlp: grpc::OtlpService::new(self.ingestor.clone(), config.otlp.clone()),
            query: grpc::QueryService::new(self.engine.clone(), self.watch.clone()),
            health: health.clone(),
            health_service,
            limits: grpc::Limits {
                grpc: config.grpc.clone(),
                max_message_bytes: config.ingest.max_message_bytes,
            },
            shutdown: shutdown.close.clone(),
        }));
        let state = self.http_state(config, security, metrics, shutdown.close.clone());
        // HTTP outlives `close`: `/readyz` answers 503 while the final
        // flush drains, instead of refusing connections.
        let http = tokio::spawn(http::serve(
            http_listener,
            state,
            config.http.clone(),
            security.tls_enabled(),
            shutdown.http.clone(),
        ));
        let maintenance = Maintenance {
            agg: self.agg.clone(),
            store: self.store.clone(),
            catalog: Some(self.catalog.clone()),
            rollups: self.rollups.clone(),
            prealloc: config.prealloc.clone(),
            retention: config.retention.clone(),
            series_idle_timeout: config.ingest.series_idle_timeout,
        };
        let stop = shutdown.stop.clone();
        Tasks {
            grpc,
            http,
            graphite,
            flush: tokio::spawn(self.pipeline.clone().run(stop.clone(), shutdown.give_up)),
            // Watch streams end when the listeners close, or graceful
            // shutdown would wait on them for the whole grace period.
            watch: tokio::spawn(self.watch.clone().run(shutdown.close.clone())),
            maintenance: tokio::spawn(maintenance.run(stop.clone())),
            health: tokio::spawn(grpc::track_health(
                self.pipeline.clone(),
                health.clone(),
                stop,
            )),
            health_reporter: health,
        }
    }

    /// What the HTTP listener serves: the query engine, pushes, the
    /// dashboard; `draining` turns readiness 503 once the close begins.
    fn http_state(
        &self,
        config: &Config,
        security: &Security,
        metrics: metrics_exporter_prometheus::PrometheusHandle,
        draining: CancellationToken,
    ) -> http::HttpState {
        http::HttpState {
            query: self.engine.clone(),
            pipeline: self.pipeline.clone(),
            watch: self.watch.clone(),
            store: self.store.clone(),
            metrics: Some(metrics),
            draining,
            auth: security.auth().clone(),
            push: Arc::new(http::PushShared {
                ingest: self.ingestor.clone(),
                otlp: config.otlp.clone(),
                remote_write: config.remote_write.clone(),
                influx: config.influx.clone(),
            }),
            fleet: self.fleet.clone(),
            ui: config.ui.clone(),
            prometheus: config.prometheus.clone(),
        }
    }
}

/// Shutdown runs in steps, each with its own token: the gRPC and Graphite
/// listeners stop accepting and readiness turns 503 (`close`), then the pipeline makes its
/// final flush and the background loops end (`stop`), and if the deadline
/// passes, retries are abandoned (`give_up`); the HTTP listener, which
/// reports the drain, closes last (`http`).
#[derive(Clone, Default)]
struct Shutdown {
    close: CancellationToken,
    stop: CancellationToken,
    give_up: CancellationToken,
    http: CancellationToken,
}

/// The running listeners and loops.
struct Tasks {
    grpc: JoinHandle<Result<(), grpc::GrpcError>>,
    http: JoinHandle<()>,
    /// The Graphite listener, when `graphite.listen` is set.
    graphite: Option<JoinHandle<std::io::Result<()>>>,
    flush: JoinHandle<()>,
    watch: JoinHandle<()>,
    maintenance: JoinHandle<()>,
    health: JoinHandle<()>,
    health_reporter: tonic_health::server::HealthReporter,
}

impl Tasks {
    /// Stops accepting, flushes everything acknowledged, closes the store;
    /// an error if the deadline left slots unwritten.
    async fn shut_down(mut self, parts: &Parts, s: &Shutdown, deadline_in: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + deadline_in;
        info!(deadline = ?deadline_in, "shutting down: no new samples, flushing");
        self.health_reporter
            .set_service_status("", tonic_health::ServingStatus::NotServing)
            .await;
        s.close.cancel();
        // 1. Listeners: in-progress calls finish; connections get a bounded
        //    grace, because a client that never closes its connection would
        //    otherwise hold graceful shutdown for the whole deadline.
        let grace = LISTENER_GRACE.min(deadline_in / 2);
        wait_listener(&mut self.grpc, grace, "gRPC").await;
        if let Some(graphite) = &mut self.graphite {
            // Each connection admits what it has read before it closes.
            wait_listener(graphite, grace, "Graphite").await;
        }
        parts.gate.close().await;
        // 2. Final flush: everything acknowledged is in the aggregator now.
        s.stop.cancel();
        if tokio::time::timeout_at(deadline, &mut self.flush)
            .await
            .is_err()
        {
            s.give_up.cancel();
            // The applier notices `give_up` at its next retry wait.
            let _ = tokio::time::timeout(Duration::from_secs(1), &mut self.flush).await;
        }
        // 3. The HTTP listener, which answered 503 on /readyz meanwhile.
        s.http.cancel();
        wait_listener(&mut self.http, grace, "HTTP").await;
        let _ = self.maintenance.await;
        let _ = self.watch.await;
        let _ = self.health.await;
        if let Err(e) = parts.store.close().await {
            error!(error = %e, "closing the store");
        }
        let left = parts.pipeline.unflushed_slots();
        if left > 0 {
            bail!("shutdown deadline ({deadline_in:?}) passed with {left} minute slots not written to the store");
        }
        info!("tallyd stopped cleanly");
        Ok(())
    }
}

/// Waits up to `grace` for a listener's task to end, then aborts it.
async fn wait_listener<T: Outcome>(task: &mut JoinHandle<T>, grace: Duration, what: &str) {
    match tokio::time::timeout(grace, &mut *task).await {
        Ok(Ok(outcome)) => outcome.log(what),
        Ok(Err(e)) => error!(error = %e, "{what} task failed"),
        Err(_) => {
            warn!("{what} connections still open after the grace period; closing them");
            task.abort();
        }
    }
}

/// How a listener's task ended.
trait Outcome {
    fn log(self, what: &str);
}

impl Outcome for () {
    fn log(self, _: &str) {}
}

impl<E: std::fmt::Display> Outcome for Result<(), E> {
    fn log(self, what: &str) {
        if let Err(e) = self {
            error!(error = %e, "{what} server failed");
        }
    }
}

/// Raises the open-file limit to what the listeners' caps need (see
/// `listen::fds`), and warns, naming the settings, when it cannot.
fn check_open_files(config: &Config) {
    // Every listener may pass its cap by the evictions in flight.
    let connections = config.grpc.max_connections
        + config.http.max_connections
        + config.http.reserved_connections
        + config
            .graphite
            .addr()
            .map_or(0, |_| config.graphite.max_connections)
        + 2 * listen::MAX_EVICTING;
    let files = listen::fds::raise_to(listen::fds::needed(connections as u64));
    if files.was != files.now {
        info!(was = ?files.was, now = ?files.now, "raised the open-file limit (RLIMIT_NOFILE) for the connection caps");
    }
    if !files.enough() {
        warn!(
            limit = ?files.now,
            hard_limit = ?files.hard,
            needed = files.needed,
            "the open-file limit (RLIMIT_NOFILE) is below what grpc.max_connections + http.max_connections + http.reserved_connections (+ graphite.max_connections when on) need (plus {} for the store and logs): when connections fill it, accepts fail on both listeners; lower the caps or raise the limit (ulimit -n, LimitNOFILE=)",
            listen::fds::BASELINE
        );
    }
}

/// How long open connections may take to finish at shutdown (at most half
/// the shutdown deadline).
const LISTENER_GRACE: Duration = Duration::from_secs(5);

/// The daemon's dead letters, bounded by `flush.dead_letters_max_bytes`:
/// one value, shared by the flush pipeline and the embedded store, so that
/// both keep the one count of the directory's bytes.
fn dead_letters_of(config: &Config) -> DeadLetters {
    let store_name = match config.store {
        StoreKind::Embedded => "embedded",
        StoreKind::Mongodb => "mongodb",
    };
    DeadLetters::new(&config.data_dir, store_name)
        .with_max_bytes(config.flush.dead_letters_max_bytes)
}

/// Opens the configured store; the embedded one keeps what it finds it
/// cannot store (a damaged document's pending minutes) in `dead`.
async fn open_store(config: &Config, dead: &DeadLetters) -> Result<Arc<dyn Store>> {
    match config.store {
        StoreKind::Embedded => {
            let started = std::time::Instant::now();
            let store = EmbeddedStore::open_with(&config.data_dir, config.embedded.clone())
                .with_context(|| {
                    format!(
                        "opening the embedded store in {}",
                        config.data_dir.display()
                    )
                })?;
            store.set_aside_to(Arc::new(dead.clone()));
            info!(
                data_dir = %config.data_dir.display(),
                took_s = started.elapsed().as_secs_f64(),
                "embedded store open"
            );
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
            // In the background: it waits for the server and never holds
            // up the start or readiness; its task ends by itself.
            drop(store.start_first_seen_pass());
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
