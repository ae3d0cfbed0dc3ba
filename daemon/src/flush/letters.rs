//! Applying dead letters again (`tallyd dead-letters replay`), through the
//! same refusal handling as every flush; the replay marker
//! (`crate::deadletter::replay`) makes it exactly once.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::info;

use super::{Mode, Pipeline};
use crate::deadletter::{as_series, DeadLetterError};
use crate::model::{FlushBatch, FlushId};

/// What a replay did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LettersReplayed {
    /// The flush id the letters were applied with; 0 when there were none.
    pub flush_id: u64,
    /// Files and letters (refused documents) replayed.
    pub files: usize,
    pub letters: usize,
    pub samples: u64,
    /// Letters the store refused again, kept under the replay's flush id.
    pub still_refused: usize,
    /// Whether this finished a replay an earlier run left.
    pub resumed: bool,
}

impl Pipeline {
    /// Applies every dead letter again as one flush with a new id, exactly
    /// once, and makes it durable in the store. Run with no other writer:
    /// `tallyd dead-letters replay`, after the write-ahead log's replay.
    pub async fn replay_dead_letters(&self) -> Result<LettersReplayed, DeadLetterError> {
        let Some(dead) = self.dead_letters.clone() else {
            return Err(DeadLetterError::Refused(
                "this pipeline keeps no dead letters".into(),
            ));
        };
        let (marker, resumed) = match dead.replay_marker()? {
            Some(m) => (m, true),
            None => match dead.begin_replay(self.inflight.next_id().0)? {
                Some(m) => (m, false),
                None => return Ok(LettersReplayed::default()),
            },
        };
        let mut out = LettersReplayed {
            flush_id: marker.flush_id,
            files: marker.files.len(),
            resumed,
            ..LettersReplayed::default()
        };
        if !marker.done {
            let letters = dead.letters_of(&marker)?;
            out.letters = letters.len();
            out.samples = letters.iter().map(|l| l.samples()).sum();
            let batch = Arc::new(FlushBatch {
                id: FlushId(marker.flush_id),
                series: as_series(&letters)?,
            });
            info!(
                flush_id = marker.flush_id,
                letters = out.letters,
                samples = out.samples,
                resumed,
                "applying dead letters again"
            );
            // Replay mode never holds: it ends applied or set aside.
            self.apply_flush(&batch, &CancellationToken::new(), Mode::Replay)
                .await;
            self.store.close().await?;
        }
        let own = dead
            .list()?
            .into_iter()
            .find(|(_, f)| f.flush_id == marker.flush_id);
        out.still_refused = own.map_or(0, |(_, f)| f.letters.len());
        dead.finish_replay(&marker)?;
        Ok(out)
    }
}
