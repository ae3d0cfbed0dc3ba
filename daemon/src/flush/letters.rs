//! Applying dead letters again (`tallyd dead-letters replay`), through the
//! same refusal handling as every flush, one bounded part at a time; the
//! replay marker (`crate::deadletter::replay`) makes each part exactly
//! once.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::info;

use super::{Mode, Pipeline};
use crate::deadletter::{as_series, DeadLetterError, DeadLetters, ReplayMarker};
use crate::model::{FlushBatch, FlushId};

/// What a replay did, over all of its parts.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LettersReplayed {
    /// Parts applied, each a flush of its own.
    pub parts: usize,
    /// The flush ids of the first and the last part; 0 when there were
    /// none.
    pub first_flush_id: u64,
    pub last_flush_id: u64,
    /// Files and letters (refused documents) replayed.
    pub files: usize,
    pub letters: usize,
    pub samples: u64,
    /// Letters the store refused again, kept under their part's flush id.
    pub still_refused: usize,
    /// Whether this finished a part an earlier run left.
    pub resumed: bool,
}

impl LettersReplayed {
    fn part(&mut self, flush_id: u64) {
        if self.parts == 0 {
            self.first_flush_id = flush_id;
        }
        self.parts += 1;
        self.last_flush_id = flush_id;
    }
}

impl Pipeline {
    /// Applies every dead letter there is now again, exactly once, in
    /// parts of bounded size, each a flush with a new id made durable in
    /// the store before the next is read. A part an earlier run left
    /// unfinished is finished first, with its own id. Run with no other
    /// writer: `tallyd dead-letters replay`, after the write-ahead log's
    /// replay.
    pub async fn replay_dead_letters(&self) -> Result<LettersReplayed, DeadLetterError> {
        let Some(dead) = self.dead_letters.clone() else {
            return Err(DeadLetterError::Refused(
                "this pipeline keeps no dead letters".into(),
            ));
        };
        let mut out = LettersReplayed::default();
        // Taken before anything is applied: what the parts set aside again
        // is not read again in this run, so a store that still refuses
        // cannot keep a replay going.
        let mut queue = dead.replay_queue()?;
        if let Some(marker) = dead.replay_marker()? {
            out.resumed = true;
            let own = DeadLetters::file_name(marker.flush_id);
            queue.retain(|(name, _)| !marker.files.contains(name) && *name != own);
            self.replay_part(&dead, &marker, &mut out).await?;
        }
        while let Some(marker) = dead.begin_part(self.inflight.next_id().0, &mut queue)? {
            self.replay_part(&dead, &marker, &mut out).await?;
        }
        Ok(out)
    }

    /// Applies one part (unless its marker says it is done already), makes
    /// it durable, and finishes it: its files deleted, the marker removed.
    async fn replay_part(
        &self,
        dead: &DeadLetters,
        marker: &ReplayMarker,
        out: &mut LettersReplayed,
    ) -> Result<(), DeadLetterError> {
        out.part(marker.flush_id);
        out.files += marker.files.len();
        if !marker.done {
            let letters = dead.letters_of(marker)?;
            let samples: u64 = letters.iter().map(|l| l.samples()).sum();
            out.letters += letters.len();
            out.samples += samples;
            let batch = Arc::new(FlushBatch {
                hashes: Vec::new(),
                resumable: false,
                id: FlushId(marker.flush_id),
                series: as_series(&letters)?,
            });
            drop(letters);
            info!(
                flush_id = marker.flush_id,
                files = marker.files.len(),
                series = batch.series.len(),
                samples,
                resumed = out.resumed && out.parts == 1,
                "applying dead letters again"
            );
            // Replay mode never holds: it ends applied or set aside.
            self.apply_flush(&batch, &CancellationToken::new(), Mode::Replay)
                .await;
            // Durable before the marker says done and the files go.
            self.store.close().await?;
        }
        out.still_refused += dead.letters_in(marker.flush_id)?;
        dead.finish_replay(marker)
    }
}
