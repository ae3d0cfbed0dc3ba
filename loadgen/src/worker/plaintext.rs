//! Sending a worker's batches as Graphite plaintext over TCP: one
//! connection for the run, or a new one every `--graphite-batches`.
//!
//! Graphite answers nothing, so no batch is known taken until its
//! connection ends: the worker then shuts down its sending side and waits
//! for the daemon to close the connection, which tallyd does only once it
//! has admitted every line it read (its write-ahead log holds them). Every
//! batch written on a connection that ended so counts as accepted; a
//! connection that failed first leaves its batches ambiguous (out of
//! verification), and the worker goes on over a new one, connecting again
//! with a backoff while the daemon refuses (as `--retries` allows). The
//! latency recorded per batch is the time to hand it to the socket.

use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tonic::Status;

use super::foreign::{response, Refused};
use super::{Worker, INITIAL_BACKOFF};
use crate::batch::Plan;
use crate::text_wire;
use crate::transport::Backoff;

/// How long the daemon may take to admit what it read and close.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(120);

/// A connection and the batches written on it so far.
struct Conn {
    stream: TcpStream,
    written: Vec<Plan>,
}

impl Worker {
    pub(super) async fn run_graphite(&mut self) -> Result<(), String> {
        let mut conn: Option<Conn> = None;
        let mut text = String::new();
        while let Some(plan) = self.next_plan().await {
            let req = self.ws.build(&self.fleet, &self.tl, &plan);
            text.clear();
            text_wire::graphite(&req, &mut text);
            let c = match conn.as_mut() {
                Some(c) => c,
                None => match self.connect_graphite().await {
                    Ok(c) => conn.insert(c),
                    Err(why) => {
                        // Never sent: neither kept nor ambiguous.
                        self.tally.unacknowledged += plan.samples();
                        if self.cancel.is_cancelled() {
                            break;
                        }
                        return Err(why);
                    }
                },
            };
            let started = Instant::now();
            let write =
                tokio::time::timeout(self.opts.timeout, c.stream.write_all(text.as_bytes()));
            match write.await {
                Ok(Ok(())) => {
                    self.record_latency(started.elapsed());
                    c.written.push(plan);
                    let per = self.opts.graphite_batches;
                    if per > 0 && c.written.len() >= per {
                        if let Some(c) = conn.take() {
                            self.close_graphite(c).await?;
                        }
                    }
                }
                failed => {
                    let why = match failed {
                        Ok(Err(e)) => e.to_string(),
                        _ => format!("no progress within --timeout {:?}", self.opts.timeout),
                    };
                    self.record_error(&Status::unavailable(format!(
                        "writing to {}: {why}",
                        self.opts.graphite
                    )));
                    let mut lost = conn.take().map(|c| c.written).unwrap_or_default();
                    lost.push(plan);
                    self.ambiguous(&lost)?;
                }
            }
        }
        if let Some(c) = conn {
            self.close_graphite(c).await?;
        }
        Ok(())
    }

    /// Connects, retrying with a backoff as often as `--retries` allows
    /// (a daemon restarting refuses connections for a while).
    async fn connect_graphite(&mut self) -> Result<Conn, String> {
        let mut backoff = Backoff::new(INITIAL_BACKOFF, self.opts.max_backoff);
        let mut attempts = 0;
        loop {
            attempts += 1;
            let why = match self.try_connect_graphite().await {
                Ok(c) => return Ok(c),
                Err(why) => why,
            };
            if self.cancel.is_cancelled() {
                return Err(why);
            }
            let status = Status::unavailable(why);
            self.record_error(&status);
            self.back_off(&mut backoff, attempts, &status).await?;
        }
    }

    async fn try_connect_graphite(&self) -> Result<Conn, String> {
        let addr = &self.opts.graphite;
        let connect = tokio::time::timeout(self.opts.connect_timeout, TcpStream::connect(addr));
        match connect.await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                Ok(Conn {
                    stream,
                    written: Vec::new(),
                })
            }
            Ok(Err(e)) => Err(format!("cannot connect to the Graphite listener {addr}: {e}. Is graphite.listen set on the daemon, and is --graphite its address?")),
            Err(_) => Err(format!("cannot connect to the Graphite listener {addr} within --connect-timeout")),
        }
    }

    /// Half-closes the connection and waits for the daemon to close its
    /// side: then every batch written on it was admitted.
    async fn close_graphite(&mut self, mut c: Conn) -> Result<(), String> {
        let closed = async {
            c.stream.shutdown().await?;
            let mut rest = [0u8; 256];
            loop {
                if c.stream.read(&mut rest).await? == 0 {
                    return Ok::<(), std::io::Error>(());
                }
            }
        };
        match tokio::time::timeout(CLOSE_TIMEOUT, closed).await {
            Ok(Ok(())) => {
                for plan in std::mem::take(&mut c.written) {
                    self.record_ack();
                    self.settle(&[plan], &response(&plan, Refused::Count(0)));
                }
                Ok(())
            }
            failed => {
                let why = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => format!("not closed by the daemon within {CLOSE_TIMEOUT:?}"),
                };
                self.record_error(&Status::unknown(format!(
                    "closing {}: {why}",
                    self.opts.graphite
                )));
                self.ambiguous(&c.written)
            }
        }
    }
}
