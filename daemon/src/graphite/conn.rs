//! One Graphite connection: reading lines within the bounds, batching them
//! and admitting each batch (see the parent module for when a line counts
//! as kept).
//!
//! A batch is admitted on a task of its own while the connection reads
//! the next one: over one connection, as collectd and carbon relays send,
//! reading and admitting then take two cores instead of taking turns on
//! one. At most one batch is being admitted at a time, and the next waits
//! for it, so batches are admitted in the order they were read and a
//! connection holds at most two.

use std::fmt::Display;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::GraphiteConfig;
use crate::aggregator::RejectReason;
use crate::auth::Grant;
use crate::ingest::bytemask::Positions;
use crate::ingest::graphite::{parse_line, parse_text, Batch, LineError, PushError};
use crate::ingest::{first_problems, IngestError, Ingestor, Protocol};

/// Bytes read from the socket at a time.
const READ_BUF: usize = 64 * 1024;
/// Backoff while the store is behind, doubling up to the maximum.
const PUSHBACK_FIRST: Duration = Duration::from_millis(50);
const PUSHBACK_MAX: Duration = Duration::from_secs(1);
/// How long closing our side of a connection may take.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// What every connection of the listener shares.
pub(super) struct Ctx {
    ingest: Arc<Ingestor>,
    cfg: GraphiteConfig,
    log: Limited,
}

impl Ctx {
    pub(super) fn new(ingest: Arc<Ingestor>, cfg: GraphiteConfig) -> Ctx {
        Ctx {
            ingest,
            cfg,
            log: Limited::default(),
        }
    }

    fn batch(&self) -> Batch {
        Batch::new(self.cfg.source_component, self.ingest.budget())
    }
}

/// Why a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The client closed its side.
    Eof,
    Idle,
    Shutdown,
    Error,
}

/// Reads `stream` until the client closes it, it idles past
/// `graphite.idle_timeout`, or `shutdown`; then admits what was read and
/// closes the connection.
pub(super) async fn serve(
    mut stream: TcpStream,
    peer: SocketAddr,
    ctx: Arc<Ctx>,
    shutdown: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let abort_on_crash = abort_if_dropped(&stream);
    let idle = ctx.cfg.idle_timeout;
    let mut r = Reader::new(ctx, peer, shutdown.clone());
    let mut buf = vec![0u8; READ_BUF];
    let mut idle_at = Instant::now() + idle;
    let end = loop {
        let due = r.batch_due;
        let read = tokio::select! {
            biased;
            _ = shutdown.cancelled() => break End::Shutdown,
            _ = sleep_until(due), if due.is_some() => {
                r.admit().await;
                continue;
            }
            _ = tokio::time::sleep_until(idle_at) => break End::Idle,
            read = stream.read(&mut buf) => read,
        };
        match read {
            Ok(0) => break End::Eof,
            Ok(n) => {
                idle_at = Instant::now() + idle;
                r.take(&buf[..n]).await;
            }
            Err(e) => {
                debug!(%peer, error = %e, "graphite: read failed");
                break End::Error;
            }
        }
    };
    if end == End::Eof {
        // A last line without its newline still counts.
        r.end_of_stream().await;
    }
    r.admit().await;
    drop(r.settle().await);
    if end == End::Idle {
        debug!(%peer, "graphite: connection idle past graphite.idle_timeout; closed");
    }
    if r.lost || end != End::Eof {
        // Not everything the client sent is known kept: a batch was not,
        // or the connection ended before the client's own close (shutdown,
        // the idle timeout, a read error), with lines perhaps still unread
        // in the socket. The client must not take the close for a
        // confirmation, so it gets a reset (the zero linger's close).
        return;
    }
    if abort_on_crash {
        // Everything the client sent is read and kept: from here an
        // orderly close is the truth.
        let _ = socket2::SockRef::from(&stream).set_linger(None);
    }
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, stream.shutdown()).await;
}

/// Makes the connection end in a reset, not an orderly close, if the
/// process dies before [`serve`] is done with it: a zero linger time, which
/// the kernel applies when it closes a killed process's sockets.
///
/// Why: an orderly close is the only confirmation Graphite has (the
/// client half-closes, then waits for the daemon's close, which comes once
/// every line read is admitted). Without this, a daemon killed after
/// reading a client's last lines but before admitting them would still
/// close in order (the kernel closes the socket of a killed process that
/// way when nothing is left unread), and the client would take those lines
/// as kept. With it, the client sees a reset and knows they may not be.
/// A zero linger never blocks: the close it governs is an abort. True
/// when it was set.
fn abort_if_dropped(stream: &TcpStream) -> bool {
    socket2::SockRef::from(stream)
        .set_linger(Some(Duration::ZERO))
        .is_ok()
}

async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A connection's state between reads.
struct Reader {
    ctx: Arc<Ctx>,
    peer: SocketAddr,
    shutdown: CancellationToken,
    batch: Batch,
    /// The batch before, being admitted; it comes back emptied.
    in_flight: Option<JoinHandle<(Batch, Kept)>>,
    /// Some batch of this connection was not kept (shutdown, a failed
    /// store): it then ends in a reset, not an orderly close.
    lost: bool,
    /// When the batch must be admitted; None while it is empty.
    batch_due: Option<Instant>,
    /// The start of a line whose newline has not arrived yet.
    partial: Vec<u8>,
    /// The rest of an over-long line is being skipped.
    discarding: bool,
}

impl Reader {
    fn new(ctx: Arc<Ctx>, peer: SocketAddr, shutdown: CancellationToken) -> Reader {
        Reader {
            batch: ctx.batch(),
            in_flight: None,
            lost: false,
            ctx,
            peer,
            shutdown,
            batch_due: None,
            partial: Vec::new(),
            discarding: false,
        }
    }

    /// Takes the bytes of one read: every complete line, and the start of
    /// the next one within `graphite.max_line_bytes`. The complete lines
    /// are checked as UTF-8 in one pass; only when that fails is each
    /// checked on its own, to refuse just the lines that are not text.
    /// Lines are taken in a plain loop that stops only when the batch must
    /// be admitted: awaiting each line stepped through the connection's
    /// nested futures line by line, 6% of the daemon's time on W1.
    async fn take(&mut self, data: &[u8]) {
        let now_ms = chrono::Utc::now().timestamp_millis();
        let whole = memchr::memrchr(b'\n', data).map_or(0, |at| at + 1);
        let (complete, mut data) = data.split_at(whole);
        let mut lines = Lines::new(complete);
        if !self.partial.is_empty() || self.discarding {
            // The first line ends one an earlier read began.
            if let Some(first) = lines.next() {
                self.piece(first, now_ms).await;
            }
        }
        while let Some(left) = self.add_until_due(&mut lines, now_ms) {
            self.admit().await;
            if let Some(line) = left {
                if self.add(line, now_ms, false) == Added::Due {
                    self.admit().await;
                }
            }
        }
        if self.discarding {
            return;
        }
        if self.partial.len() + data.len() > self.ctx.cfg.max_line_bytes {
            self.partial.clear();
            self.discarding = true;
            self.too_long();
            data = &[];
        }
        self.partial.extend_from_slice(data);
    }

    /// Adds `lines` until the batch is due, then returns, with the line
    /// it had no room for if that is why; None once they are all added.
    fn add_until_due<'d>(
        &mut self,
        lines: &mut Lines<'d>,
        now_ms: i64,
    ) -> Option<Option<Line<'d>>> {
        for line in lines {
            match self.add(line, now_ms, true) {
                Added::Taken => {}
                Added::Due => return Some(None),
                Added::NoRoom => return Some(Some(line)),
            }
        }
        None
    }

    /// Takes a piece of a read that ends a line: the line, joined to the
    /// start of it an earlier read left.
    async fn piece(&mut self, piece: Line<'_>, now_ms: i64) {
        if std::mem::take(&mut self.discarding) {
            return;
        }
        let bytes = piece.bytes();
        if self.partial.len() + bytes.len() > self.ctx.cfg.max_line_bytes {
            self.partial.clear();
            self.too_long();
        } else if self.partial.is_empty() {
            self.line(piece, now_ms).await;
        } else {
            let mut line = std::mem::take(&mut self.partial);
            line.extend_from_slice(bytes);
            self.line(Line::Bytes(&line), now_ms).await;
            line.clear();
            self.partial = line;
        }
    }

    /// The client closed its side: what is left is its last line.
    async fn end_of_stream(&mut self) {
        if self.discarding || self.partial.is_empty() {
            return;
        }
        let line = std::mem::take(&mut self.partial);
        self.line(Line::Bytes(&line), chrono::Utc::now().timestamp_millis())
            .await;
    }

    /// Takes one complete line, admitting the batch when it is due, or
    /// first when it has no room for the line.
    async fn line(&mut self, line: Line<'_>, now_ms: i64) {
        let mut step = self.add(line, now_ms, true);
        if step == Added::NoRoom {
            self.admit().await;
            step = self.add(line, now_ms, false);
        }
        if step == Added::Due {
            self.admit().await;
        }
    }

    /// [`Reader::line`] up to admission, which it leaves to the caller.
    /// Everything else a line takes is synchronous and kept out of the
    /// connection's future: inside it, each line cost a copy of that
    /// future's state.
    /// A line the batch has no room for is refused as too large unless
    /// `may_wait` (the batch is then admitted and the line added again).
    fn add(&mut self, line: Line<'_>, now_ms: i64, may_wait: bool) -> Added {
        let bytes = line.bytes();
        if bytes.len() > self.ctx.cfg.max_line_bytes {
            self.too_long();
            return Added::Taken;
        }
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Added::Taken;
        }
        let parsed = match line {
            Line::Text(text) => parse_text(text),
            Line::Bytes(bytes) => parse_line(bytes),
        };
        // The line is read where the parser left it: moved out of its
        // `Result`, it was copied in wide loads over the parser's narrow
        // stores, which the CPU cannot forward (a stall that took about
        // half of this function's time on a Graphite stream).
        let parsed = match &parsed {
            Ok(l) => l,
            Err(e) => {
                self.refuse(e, bytes);
                return Added::Taken;
            }
        };
        match self.batch.push(parsed, now_ms) {
            Ok(()) => {}
            Err(PushError::Full) if may_wait => return Added::NoRoom,
            Err(PushError::Line(e)) => {
                self.refuse(&e, bytes);
                return Added::Taken;
            }
            Err(PushError::Full) => {
                self.refuse(&LineError::TooLarge, bytes);
                return Added::Taken;
            }
        }
        if self.batch_due.is_none() {
            self.batch_due = Some(Instant::now() + self.ctx.cfg.batch_delay);
        }
        match self.batch.lines >= self.ctx.cfg.batch_lines {
            true => Added::Due,
            false => Added::Taken,
        }
    }

    fn refuse(&self, e: &LineError, bytes: &[u8]) {
        count_refused(e.reason());
        let text = String::from_utf8_lossy(&bytes[..bytes.len().min(120)]);
        self.ctx
            .log
            .warn(self.peer, format_args!("line refused: {e}: {text:?}"));
    }

    fn too_long(&self) {
        count_refused(RejectReason::InvalidPoint);
        let max = self.ctx.cfg.max_line_bytes;
        self.ctx.log.warn(
            self.peer,
            format_args!("line refused: longer than {max} bytes (graphite.max_line_bytes); the rest of it is skipped"),
        );
    }

    /// Hands the batch to admission, once the batch before has been
    /// admitted, and goes on with an empty one. While the store is behind,
    /// a batch waits (with backoff), and so the connection is not read
    /// past the batch after it. At shutdown, or when the store has failed,
    /// the batch's lines are not kept, and that is logged.
    async fn admit(&mut self) {
        self.batch_due = None;
        if self.batch.lines == 0 {
            return;
        }
        let spare = self.settle().await;
        let full = std::mem::replace(&mut self.batch, spare);
        let (ctx, shutdown, peer) = (self.ctx.clone(), self.shutdown.clone(), self.peer);
        self.in_flight = Some(spawn_beside(async move {
            admit_batch(&ctx, peer, &shutdown, full).await
        }));
    }

    /// Waits until no batch is being admitted, and returns the one that
    /// was, emptied (or a new one).
    async fn settle(&mut self) -> Batch {
        match self.in_flight.take() {
            Some(admitting) => match admitting.await {
                Ok((batch, kept)) => {
                    self.lost |= kept == Kept::No;
                    batch
                }
                Err(e) => {
                    warn!(peer = %self.peer, "graphite: a batch's admission failed: {e}");
                    self.lost = true;
                    self.ctx.batch()
                }
            },
            None => self.ctx.batch(),
        }
    }
}

/// Spawns `task` so that another worker can run it while this one goes on.
///
/// tokio puts a task spawned from a worker into that worker's LIFO slot,
/// which other workers cannot steal and which wakes no idle worker: the
/// reader and the batch it hands to admission would take turns on one
/// core. An empty task spawned after it takes the slot and pushes `task`
/// to the worker's run queue, where an idle worker is woken to steal it.
/// What it changed over one connection: BENCHMARKS.md, the Graphite rows
/// beside VictoriaMetrics.
fn spawn_beside<F>(task: F) -> JoinHandle<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handle = tokio::spawn(task);
    drop(tokio::spawn(async {}));
    handle
}

/// Whether a batch's lines were kept (or refused one by one, as bad lines
/// are), or not taken at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kept {
    Yes,
    No,
}

/// Admits `batch`, retrying while the store is behind, and returns it
/// emptied, with whether it was kept.
async fn admit_batch(
    ctx: &Ctx,
    peer: SocketAddr,
    shutdown: &CancellationToken,
    mut batch: Batch,
) -> (Batch, Kept) {
    let lines = batch.lines;
    let mut kept = Kept::Yes;
    let view = batch.view();
    let mut backoff = PUSHBACK_FIRST;
    loop {
        let result = ctx
            .ingest
            .ingest_read(
                &view,
                &Grant::open(),
                Protocol::Graphite,
                Default::default(),
            )
            .await;
        match result {
            Ok(out) if out.rejected > 0 => {
                let problems = first_problems(&out);
                ctx.log.warn(peer, format_args!("{problems}"));
                break;
            }
            Ok(_) => break,
            Err(IngestError::Pushback { .. }) if !shutdown.is_cancelled() => {
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.cancelled() => {}
                }
                backoff = (backoff * 2).min(PUSHBACK_MAX);
            }
            Err(e) => {
                warn!(%peer, "graphite: {lines} lines not kept: {e}");
                kept = Kept::No;
                break;
            }
        }
    }
    drop(view);
    batch.clear();
    (batch, kept)
}

/// What [`Reader::add`] did with a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Added {
    /// Added or refused; the batch may wait.
    Taken,
    /// Added; the batch is due now.
    Due,
    /// Not added: the batch has no room for it.
    NoRoom,
}

/// The complete lines of a read, without their newlines.
struct Lines<'d> {
    /// The lines' bytes, when they are all text.
    text: Option<&'d str>,
    bytes: &'d [u8],
    /// The newlines, found 64 bytes a window: memchr's call a line cost
    /// more to set up than to search one of W1's fifty-byte lines.
    ends: Positions<'d>,
    start: usize,
}

impl<'d> Lines<'d> {
    fn new(bytes: &'d [u8]) -> Lines<'d> {
        Lines {
            text: std::str::from_utf8(bytes).ok(),
            bytes,
            ends: Positions::new(bytes, b'\n'),
            start: 0,
        }
    }
}

impl<'d> Iterator for Lines<'d> {
    type Item = Line<'d>;

    fn next(&mut self) -> Option<Line<'d>> {
        let at = self.ends.next()?;
        let range = self.start..at;
        self.start = at + 1;
        Some(match self.text {
            Some(text) => Line::Text(text.get(range).unwrap_or_default()),
            None => Line::Bytes(self.bytes.get(range).unwrap_or_default()),
        })
    }
}

/// A line as a read holds it: known to be text, or not yet checked.
#[derive(Clone, Copy)]
enum Line<'a> {
    Text(&'a str),
    Bytes(&'a [u8]),
}

impl<'a> Line<'a> {
    fn bytes(self) -> &'a [u8] {
        match self {
            Line::Text(text) => text.as_bytes(),
            Line::Bytes(bytes) => bytes,
        }
    }
}

fn count_refused(reason: RejectReason) {
    metrics::counter!(
        "tally_samples_rejected_total",
        "protocol" => Protocol::Graphite.as_str(),
        "reason" => reason.as_str()
    )
    .increment(1);
}

/// A warning logged at most once a second for the whole listener, with
/// the number of warnings left out since the last one.
#[derive(Default)]
struct Limited {
    next_ms: AtomicI64,
    suppressed: AtomicU64,
}

impl Limited {
    fn warn(&self, peer: SocketAddr, what: impl Display) {
        let now = chrono::Utc::now().timestamp_millis();
        let next = self.next_ms.load(Ordering::Relaxed);
        let mine = now >= next
            && self
                .next_ms
                .compare_exchange(next, now + 1_000, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok();
        if mine {
            let suppressed = self.suppressed.swap(0, Ordering::Relaxed);
            warn!(%peer, suppressed, "graphite: {what}");
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
        }
    }
}
