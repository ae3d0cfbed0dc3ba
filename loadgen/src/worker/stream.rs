//! Client streaming (`--mode stream`): batches as messages of
//! `PushStream`, each stream closed after `--stream-messages` messages (in
//! real time also every few seconds) and acknowledged by its summary.
//!
//! A refused stream tells how far the daemon got (see [`stream_progress`]):
//! the messages it took are settled, the rest are resent first, in order,
//! so every series still reaches the daemon in time order.

use std::collections::VecDeque;

use bytes::Bytes;
use futures::SinkExt;
use tally_proto::v1 as pb;
use tokio::time::Instant;
use tonic::transport::Channel;
use tonic::Status;

use super::{describe_error, hint, Worker, INITIAL_BACKOFF, STREAM_BUFFER, STREAM_MAX_AGE};
use crate::batch::Plan;
use crate::progress::Live;
use crate::transport::{classify, Backoff, Verdict};
use crate::wire::{self, PushCodec};

impl Worker {
    pub(super) async fn run_stream(&mut self, ch: Channel) -> Result<(), String> {
        // Plans refused by the daemon, to be resent first, in order.
        let mut resend: VecDeque<Plan> = VecDeque::new();
        let mut backoff = Backoff::new(INITIAL_BACKOFF, self.opts.max_backoff);
        let mut attempts = 0u32;
        loop {
            let (in_stream, exhausted, result, closed_at) = self.one_stream(&ch, &mut resend).await;
            if in_stream.is_empty() {
                match result {
                    _ if exhausted || self.cancel.is_cancelled() => return Ok(()),
                    // The stream ended before carrying anything (say, the
                    // connection dropped while a real-time worker waited):
                    // nothing to settle, but retry only as often as allowed.
                    Err(status) => {
                        self.record_error(&status);
                        attempts += 1;
                        match classify(&status) {
                            Verdict::Fatal => return Err(hint(&status)),
                            _ => self.back_off(&mut backoff, attempts, &status).await?,
                        }
                    }
                    Ok(_) => {}
                }
                continue;
            }
            match result {
                Ok(resp) => {
                    self.record_latency(closed_at.elapsed());
                    self.record_ack();
                    self.settle(&in_stream, &resp);
                    attempts = 0;
                    backoff = Backoff::new(INITIAL_BACKOFF, self.opts.max_backoff);
                }
                Err(status) => {
                    self.record_error(&status);
                    let verdict = classify(&status);
                    let progress = stream_progress(&status);
                    let taken = match progress {
                        Some((i, accepted)) if i <= in_stream.len() => {
                            self.settle_taken(&in_stream[..i], accepted);
                            i
                        }
                        _ => 0,
                    };
                    let rest = &in_stream[taken..];
                    match verdict {
                        // Refused from message `taken` on: resend those.
                        Verdict::Retry => {
                            for p in rest.iter().rev() {
                                resend.push_front(*p);
                            }
                            attempts = if taken > 0 { 1 } else { attempts + 1 };
                            if let Err(e) = self.back_off(&mut backoff, attempts, &status).await {
                                self.tally.unacknowledged +=
                                    resend.iter().map(Plan::samples).sum::<u64>();
                                return Err(e);
                            }
                        }
                        Verdict::Ambiguous => self.ambiguous(rest)?,
                        Verdict::Fatal => {
                            self.tally.unacknowledged +=
                                rest.iter().map(Plan::samples).sum::<u64>();
                            return Err(hint(&status));
                        }
                    }
                }
            }
            if self.cancel.is_cancelled() {
                self.tally.unacknowledged += resend.iter().map(Plan::samples).sum::<u64>();
                return Ok(());
            }
            if exhausted && resend.is_empty() {
                return Ok(());
            }
        }
    }

    /// Sends one stream's worth of messages (resends first) and waits for
    /// its summary. Returns the plans sent in message order, whether the
    /// schedule is exhausted, the outcome, and when the stream was closed.
    async fn one_stream(
        &mut self,
        ch: &Channel,
        resend: &mut VecDeque<Plan>,
    ) -> (Vec<Plan>, bool, Result<pb::PushResponse, Status>, Instant) {
        let (mut tx, mut call) = open_stream(ch);
        let opened = Instant::now();
        let realtime = self.opts.realtime_t0.is_some();
        let mut plans = Vec::new();
        let mut exhausted = false;
        let mut early = None;
        while plans.len() < self.opts.stream_messages
            && !(realtime && opened.elapsed() >= STREAM_MAX_AGE)
        {
            let plan = match resend.pop_front() {
                Some(p) => p,
                None => {
                    let next = tokio::select! {
                        p = self.next_plan() => p,
                        r = &mut call => { early = Some(r); break; }
                    };
                    match next {
                        Some(p) => p,
                        None => {
                            exhausted = true;
                            break;
                        }
                    }
                }
            };
            plans.push(plan);
            let msg = self.encode(&plan);
            let timeout = self.opts.timeout;
            tokio::select! {
                sent = tokio::time::timeout(timeout, tx.send(msg)) => match sent {
                    Ok(Ok(())) => {}
                    // The call ended (its receiver is gone): collect its outcome.
                    Ok(Err(_)) => break,
                    Err(_) => {
                        early = Some(Ok(Err(Status::deadline_exceeded(format!(
                            "the daemon took no stream message within --timeout {timeout:?}"
                        )))));
                        call.abort();
                        break;
                    }
                },
                r = &mut call => { early = Some(r); break; }
            }
        }
        // Half-close: the daemon answers once it has read everything.
        drop(tx);
        let closed_at = Instant::now();
        if plans.is_empty() {
            call.abort();
            let result = match early {
                Some(Ok(Err(status))) => Err(status),
                _ => Ok(pb::PushResponse::default()),
            };
            return (plans, exhausted, result, closed_at);
        }
        let result = summary(early, call, self.opts.timeout).await;
        (plans, exhausted, result, closed_at)
    }

    /// Messages the daemon read before a stream failed. It reports only how
    /// many samples it accepted from them, not which were rejected: if that
    /// is all of them the books are exact, otherwise their series cannot be
    /// checked.
    fn settle_taken(&mut self, taken: &[Plan], accepted: Option<u64>) {
        let total: u64 = taken.iter().map(Plan::samples).sum();
        match accepted {
            Some(a) if a == total => {
                let resp = pb::PushResponse {
                    accepted: a,
                    ..Default::default()
                };
                self.settle(taken, &resp);
            }
            _ => {
                let a = accepted.unwrap_or(0).min(total);
                self.tally.accepted += a;
                self.tally.rejected += total - a;
                Live::add(&self.live.accepted, a);
                if let Some(e) = &mut self.expect {
                    for p in taken {
                        e.mark_ambiguous(p);
                    }
                }
            }
        }
    }
}

/// From a failed stream's status, tallyd's own account of how far it got:
/// `message {i}: … ({n} samples of messages 0..{i} were accepted)`, i.e.
/// messages before `i` were ingested and `i` onwards were not.
fn stream_progress(status: &Status) -> Option<(usize, Option<u64>)> {
    if std::error::Error::source(status).is_some() {
        return None;
    }
    let msg = status.message();
    let rest = msg.strip_prefix("message ")?;
    let index: usize = rest[..rest.find(':')?].parse().ok()?;
    let accepted = msg
        .rfind('(')
        .and_then(|at| msg[at + 1..].split_whitespace().next())
        .and_then(|n| n.parse().ok());
    Some((index, accepted))
}

/// A `PushStream` call in progress, in its own task.
type StreamCall = tokio::task::JoinHandle<Result<tonic::Response<pb::PushResponse>, Status>>;

/// Opens a `PushStream` on `ch`: the sender of its messages, and the call.
fn open_stream(ch: &Channel) -> (futures::channel::mpsc::Sender<Bytes>, StreamCall) {
    let (tx, rx) = futures::channel::mpsc::channel::<Bytes>(STREAM_BUFFER);
    let mut grpc = tonic::client::Grpc::new(ch.clone());
    let call = tokio::spawn(async move {
        grpc.ready().await.map_err(|e| {
            Status::unknown(format!("Service was not ready: {}", describe_error(&e)))
        })?;
        grpc.client_streaming(
            tonic::Request::new(rx),
            wire::push_stream_path(),
            PushCodec::default(),
        )
        .await
    });
    (tx, call)
}

/// The summary of a half-closed stream: what the call ended with while
/// messages were still going out (`early`), or what it answers within
/// `timeout` of the close.
async fn summary(
    early: Option<<StreamCall as std::future::Future>::Output>,
    mut call: StreamCall,
    timeout: std::time::Duration,
) -> Result<pb::PushResponse, Status> {
    let joined = match early {
        Some(r) => r,
        None => match tokio::time::timeout(timeout, &mut call).await {
            Ok(r) => r,
            Err(_) => {
                call.abort();
                Ok(Err(Status::deadline_exceeded(format!(
                    "no stream summary within --timeout {timeout:?} of closing it"
                ))))
            }
        },
    };
    match joined {
        Ok(Ok(resp)) => Ok(resp.into_inner()),
        Ok(Err(status)) => Err(status),
        Err(e) => Err(Status::internal(format!("stream task failed: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_progress_reads_tallyds_account() {
        let s = Status::resource_exhausted(
            "message 3: the daemon holds 10 unflushed slots (ingest.max_pending_slots = 10): the store is behind; retry this batch with backoff (1200 samples of messages 0..3 were accepted)",
        );
        assert_eq!(stream_progress(&s), Some((3, Some(1200))));
        assert_eq!(
            stream_progress(&Status::resource_exhausted("message 0: x")),
            Some((0, None))
        );
        assert_eq!(stream_progress(&Status::unavailable("gone")), None);
    }
}
