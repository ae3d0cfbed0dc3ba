//! Write commands: built byte by byte, cut to the server's size limits,
//! and sent over the wire (`wire.rs`) several at once, with the fallbacks
//! for a server that stops an unordered command early or refuses one
//! whole.

use std::io::Write as _;

use bson::raw::{RawDocument, RawDocumentBuf};
use bson::spec::ElementType;
use bson::Document;
use futures::stream::{self, StreamExt};

use super::errors::{all_or_worst, parse_write_reply, read_write_reply, WriteReply};
use super::features::Feature;
use super::stats::Op;
use super::wire::Wire;
use crate::model::Tier;
use crate::store::{Cause, StoreError};

/// A command stays below this many bytes of BSON: well under the 16 MiB
/// (+16 KiB) a server accepts, with room for the envelope.
pub(super) const MAX_COMMAND_BYTES: usize = 12 * 1024 * 1024;

/// Builds `{<verb>: <collection>, <field>: [...], ordered: false,
/// writeConcern: ...}` byte by byte, so each statement is copied once, into
/// the command (the bson crate can only append owned documents to an
/// array).
pub(super) struct WriteCommand {
    buf: Vec<u8>,
    array_at: usize,
    count: usize,
}

impl WriteCommand {
    pub(super) fn new(verb: &str, collection: &str, field: &str) -> WriteCommand {
        let mut buf = Vec::with_capacity(64 * 1024);
        buf.extend_from_slice(&[0; 4]);
        buf.push(ElementType::String as u8);
        push_cstring(&mut buf, verb);
        let len = i32::try_from(collection.len() + 1).unwrap_or(i32::MAX);
        buf.extend_from_slice(&len.to_le_bytes());
        buf.extend_from_slice(collection.as_bytes());
        buf.push(0);
        buf.push(ElementType::Array as u8);
        push_cstring(&mut buf, field);
        let array_at = buf.len();
        buf.extend_from_slice(&[0; 4]);
        WriteCommand {
            buf,
            array_at,
            count: 0,
        }
    }

    pub(super) fn push(&mut self, doc: &RawDocument) {
        self.buf.push(ElementType::EmbeddedDocument as u8);
        // Writing to a Vec cannot fail.
        let _ = write!(self.buf, "{}", self.count);
        self.buf.push(0);
        self.buf.extend_from_slice(doc.as_bytes());
        self.count += 1;
    }

    pub(super) fn finish(
        mut self,
        write_concern: Option<&RawDocument>,
    ) -> Result<RawDocumentBuf, StoreError> {
        self.buf.push(0);
        let array_len = self.buf.len() - self.array_at;
        put_len(&mut self.buf, self.array_at, array_len)?;
        self.buf.push(ElementType::Boolean as u8);
        push_cstring(&mut self.buf, "ordered");
        self.buf.push(0);
        if let Some(wc) = write_concern {
            self.buf.push(ElementType::EmbeddedDocument as u8);
            push_cstring(&mut self.buf, "writeConcern");
            self.buf.extend_from_slice(wc.as_bytes());
        }
        self.buf.push(0);
        let total = self.buf.len();
        put_len(&mut self.buf, 0, total)?;
        RawDocumentBuf::from_bytes(self.buf).map_err(|e| {
            StoreError::Invalid(Cause::of(format!("building a write command: {e}"), e))
        })
    }
}

fn push_cstring(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(s.as_bytes());
    buf.push(0);
}

fn put_len(buf: &mut [u8], at: usize, len: usize) -> Result<(), StoreError> {
    let len = i32::try_from(len)
        .map_err(|_| StoreError::Invalid(format!("a write command of {len} bytes").into()))?;
    if let Some(dst) = buf.get_mut(at..at + 4) {
        dst.copy_from_slice(&len.to_le_bytes());
    }
    Ok(())
}

/// Splits statements into commands of at most `per_command` statements and
/// [`MAX_COMMAND_BYTES`] bytes (never empty: one oversized statement still
/// gets a command, and the server judges it).
pub(super) fn chunk_by_size(
    sizes: impl Iterator<Item = usize>,
    per_command: usize,
) -> Vec<(usize, usize)> {
    chunk_by_bytes(sizes, per_command, MAX_COMMAND_BYTES)
}

/// [`chunk_by_size`] with a byte bound of the caller's.
pub(super) fn chunk_by_bytes(
    sizes: impl Iterator<Item = usize>,
    per_command: usize,
    max_bytes: usize,
) -> Vec<(usize, usize)> {
    let mut chunks = Vec::new();
    let (mut start, mut count, mut bytes) = (0usize, 0usize, 0usize);
    for (i, size) in sizes.enumerate() {
        if count > 0 && (count >= per_command || bytes + size > max_bytes) {
            chunks.push((start, i));
            start = i;
            count = 0;
            bytes = 0;
        }
        count += 1;
        bytes += size + 16;
    }
    if count > 0 {
        chunks.push((start, start + count));
    }
    chunks
}

pub(super) fn to_raw(d: &Document) -> Result<RawDocumentBuf, StoreError> {
    RawDocumentBuf::from_document(d)
        .map_err(|e| StoreError::Invalid(Cause::of(format!("BSON: {e}"), e)))
}

/// A command made of constants and names: it always converts, and if it did
/// not, the server would refuse the empty command.
pub(super) fn raw_command(d: &Document) -> RawDocumentBuf {
    RawDocumentBuf::from_document(d).unwrap_or_default()
}

pub(super) fn bson_len(d: &Document) -> usize {
    RawDocumentBuf::from_document(d).map_or(0, |r| r.as_bytes().len())
}

/// Statements and round trips of one call, for [`crate::store::ApplyStats`].
#[derive(Debug, Default)]
pub(super) struct Work {
    pub(super) statements: usize,
    pub(super) round_trips: usize,
}

/// `items` split by tier, hour first, leaving out a tier with none: one
/// group per collection.
pub(super) fn by_tier<T: Copy>(items: &[T], tier_of: impl Fn(T) -> Tier) -> Vec<(Tier, Vec<T>)> {
    [Tier::Hour, Tier::Day]
        .into_iter()
        .map(|tier| {
            let of_tier = items.iter().copied().filter(|&x| tier_of(x) == tier);
            (tier, of_tier.collect::<Vec<_>>())
        })
        .filter(|(_, v)| !v.is_empty())
        .collect()
}

impl Wire {
    /// Sends write statements, grouped by collection, in commands of
    /// bounded size, several at once. Update statements are all upserts, so
    /// each one matches, inserts or fails, and a reply that accounts for
    /// fewer (a server that stops an unordered command at its first error)
    /// has its command sent again one statement at a time. Returns each command's reply with the
    /// index of its group, duplicate indexes counted within the group.
    /// Every command runs to its end even when another fails, so that the
    /// error reported is the most telling one. A statement the server
    /// refuses fails the call.
    pub(super) async fn write_all(
        &self,
        op: Op,
        groups: &[(&str, Vec<&RawDocument>)],
        work: &mut Work,
    ) -> Result<Vec<(usize, WriteReply)>, StoreError> {
        self.write_groups(op, groups, work, false).await
    }

    /// [`Self::write_all`] that sets refused statements aside instead of
    /// failing: each reply lists them in [`WriteReply::refused`] (indexes
    /// within the group, as duplicates), and every other statement is
    /// applied. A command the server refuses whole is sent again one
    /// statement at a time, so that a refusal is pinned on its statement.
    pub(super) async fn write_isolating(
        &self,
        op: Op,
        groups: &[(&str, Vec<&RawDocument>)],
        work: &mut Work,
    ) -> Result<Vec<(usize, WriteReply)>, StoreError> {
        self.write_groups(op, groups, work, true).await
    }

    async fn write_groups(
        &self,
        op: Op,
        groups: &[(&str, Vec<&RawDocument>)],
        work: &mut Work,
        isolate: bool,
    ) -> Result<Vec<(usize, WriteReply)>, StoreError> {
        let mut jobs = Vec::new();
        for (group, (collection, stmts)) in groups.iter().enumerate() {
            let sizes = stmts.iter().map(|s| s.as_bytes().len());
            for (from, to) in chunk_by_size(sizes, self.statements_per_batch) {
                jobs.push((group, *collection, from, &stmts[from..to]));
                work.statements += to - from;
                work.round_trips += 1;
            }
        }
        // The futures are built before the stream: a stream over a mapping
        // closure with borrowed arguments trips the `Send` check of the
        // trait's boxed futures ("FnOnce is not general enough").
        let futures: Vec<_> = jobs
            .into_iter()
            .map(|(group, collection, offset, chunk)| async move {
                let mut reply = self.write_chunk(op, collection, chunk, isolate).await?;
                for i in reply.duplicates.iter_mut() {
                    *i += offset;
                }
                for (i, _) in reply.refused.iter_mut() {
                    *i += offset;
                }
                Ok::<_, StoreError>((group, reply))
            })
            .collect();
        let results: Vec<_> = stream::iter(futures)
            .buffer_unordered(self.max_concurrent)
            .collect()
            .await;
        all_or_worst(results)
    }

    /// One command of [`Self::write_groups`]; indexes within `chunk`.
    async fn write_chunk(
        &self,
        op: Op,
        collection: &str,
        chunk: &[&RawDocument],
        isolate: bool,
    ) -> Result<WriteReply, StoreError> {
        let (verb, field) = match op {
            Op::Insert => ("insert", "documents"),
            _ => ("update", "updates"),
        };
        let mut cmd = WriteCommand::new(verb, collection, field);
        for s in chunk {
            cmd.push(s);
        }
        let cmd = cmd.finish(self.write_concern.as_deref())?;
        let reply = match self.command(op, cmd, chunk.len(), true).await {
            Ok(reply) => reply,
            // Refused whole: which statement is at fault only one at a
            // time can tell.
            Err(StoreError::Invalid(_)) if isolate && verb == "update" && chunk.len() > 1 => {
                return self.one_by_one(op, collection, chunk, isolate).await;
            }
            Err(StoreError::Invalid(why)) if isolate => {
                return Ok(WriteReply {
                    refused: (0..chunk.len()).map(|i| (i, why.to_string())).collect(),
                    ..WriteReply::default()
                });
            }
            Err(e) => return Err(e),
        };
        let reply = if isolate {
            read_write_reply(&reply, chunk.len())?
        } else {
            parse_write_reply(&reply, chunk.len())?
        };
        let answered = reply.n as usize + reply.duplicates.len() + reply.refused.len();
        if verb == "update" && answered < chunk.len() {
            self.features.mark_missing(
                Feature::UnorderedUpdates,
                &format!(
                    "an update of {} statements answered for {answered}",
                    chunk.len(),
                ),
            );
            return self.one_by_one(op, collection, chunk, isolate).await;
        }
        Ok(reply)
    }

    /// `update` statements sent one per command, in order, after a reply
    /// that did not say which of them were applied, or a command refused
    /// whole. The watermark filter makes this safe: a statement that had
    /// been applied now fails with a duplicate key and counts as skipped.
    async fn one_by_one(
        &self,
        op: Op,
        collection: &str,
        stmts: &[&RawDocument],
        isolate: bool,
    ) -> Result<WriteReply, StoreError> {
        let mut out = WriteReply::default();
        for (i, s) in stmts.iter().enumerate() {
            let mut cmd = WriteCommand::new("update", collection, "updates");
            cmd.push(s);
            let cmd = cmd.finish(self.write_concern.as_deref())?;
            let reply = match self.command(op, cmd, 1, true).await {
                Ok(reply) => reply,
                Err(StoreError::Invalid(why)) if isolate => {
                    out.refused.push((i, why.into()));
                    continue;
                }
                Err(e) => return Err(e),
            };
            let reply = if isolate {
                read_write_reply(&reply, 1)?
            } else {
                parse_write_reply(&reply, 1)?
            };
            out.n += reply.n;
            out.upserted += reply.upserted;
            if !reply.duplicates.is_empty() {
                out.duplicates.push(i);
            }
            if let Some((_, why)) = reply.refused.into_iter().next() {
                out.refused.push((i, why));
            }
        }
        Ok(out)
    }
}
