//! A damaged document met by a fold: its series' pending minutes are kept
//! as dead letters, durable before the commit that forgets them, and the
//! other series go on; a hook that cannot keep them fails the flush and
//! drops nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::*;
use crate::deadletter::{as_series, DeadLetters};
use crate::model::SeriesMinutes;
use crate::store::embedded::layout::HOUR_DOCS;
use crate::store::embedded::EmbeddedStore;
use crate::store::SetAside;

fn open_spread(dir: &tempfile::TempDir) -> EmbeddedStore {
    // Folds the series waiting longest at about every other flush.
    EmbeddedStore::open_with(dir.path(), checkpointed(1, 200)).unwrap()
}

/// Flush `id` of `bad|m` and `good|m`: one sample each, `id` at second
/// `id` of the minute starting at `h`.
fn flush(id: u64, h: i64) -> Arc<FlushBatch> {
    let at = [(h + id as i64, id as f64)];
    Arc::new(batch(
        id,
        vec![
            series("bad", "m", SampleKind::Gauge, &at),
            series("good", "m", SampleKind::Gauge, &at),
        ],
    ))
}

fn minute_of(store: &EmbeddedStore, source: &str, h: i64) -> Option<Slot> {
    let q = ReadQuery {
        series: SeriesId::new(source, "m"),
        tier: Tier::Day,
        resolution: Resolution::Minute,
        from: h,
        to: h + 60,
    };
    let docs = store.inner.read(&q).unwrap();
    docs.iter().flat_map(|d| &d.slots).map(|(_, s)| *s).next()
}

#[test]
fn a_damaged_documents_minutes_become_dead_letters_with_their_exact_slots() {
    let (dir, letters_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let dead = DeadLetters::new(letters_dir.path(), "embedded");
    let store = open_spread(&dir);
    store.set_aside_to(Arc::new(dead.clone()));
    let h = ts(2026, 3, 14, 10, 0);
    write_raw(&store, HOUR_DOCS, (h, "bad", "m"), &[1, 2, 3]);
    for id in 1..=10u64 {
        store.inner.apply(&flush(id, h)).unwrap();
    }
    // An idle fold that meets the damage fails once, setting it aside.
    if let Err(e) = store.fold_all() {
        assert!(matches!(e, StoreError::Corrupt { .. }), "{e:?}");
    }
    store.fold_all().unwrap();

    let mut want = Slot::EMPTY;
    for id in 1..=10 {
        want.add((h + id) * 1000, id as f64);
    }
    assert_eq!(minute_of(&store, "good", h), Some(want));
    let files = dead.list().unwrap();
    assert!(!files.is_empty());
    for (path, f) in &files {
        let name = path.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with("damaged-"), "{name}");
        assert!(f.letters.iter().all(|l| l.series == "bad|m"));
        assert!(f.letters[0].error.contains("corrupt"), "{:?}", f.letters[0]);
    }
    let letters: Vec<_> = files.iter().flat_map(|(_, f)| f.letters.clone()).collect();
    let kept: Vec<SeriesMinutes> = as_series(&letters).unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].minutes.as_slice(), &[(h / 60, want)]);

    // Forgotten in the file too: opened again, nothing of it comes back,
    // and nothing more is kept.
    drop(store);
    let store = open_spread(&dir);
    store.set_aside_to(Arc::new(dead.clone()));
    assert!(store
        .inner
        .pending
        .lock()
        .view(&SeriesId::new("bad", "m"))
        .is_none());
    store.fold_all().unwrap();
    assert_eq!(dead.list().unwrap(), files);
}

/// Keeps nothing while `fail` is set; records what it keeps otherwise.
#[derive(Default)]
struct Hook {
    fail: AtomicBool,
    kept: Mutex<Vec<(u64, SeriesMinutes)>>,
}

impl SetAside for Hook {
    fn keep(&self, since: u64, minutes: &SeriesMinutes, _error: &str) -> Result<(), String> {
        if self.fail.load(Ordering::SeqCst) {
            return Err("no room".into());
        }
        self.kept.lock().push((since, minutes.clone()));
        Ok(())
    }
}

#[test]
fn a_hook_that_cannot_keep_them_fails_the_flush_and_drops_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_spread(&dir);
    let hook = Arc::new(Hook::default());
    hook.fail.store(true, Ordering::SeqCst);
    store.set_aside_to(hook.clone());
    let h = ts(2026, 3, 14, 10, 0);
    write_raw(&store, HOUR_DOCS, (h, "bad", "m"), &[1, 2, 3]);
    let mut failed = None;
    for id in 1..=10u64 {
        if let Err(e) = store.inner.apply(&flush(id, h)) {
            assert!(matches!(e, StoreError::Unavailable(_)), "{e:?}");
            assert!(e.to_string().contains("no room"), "{e}");
            failed = Some(id);
            break;
        }
    }
    let id = failed.expect("a fold met the damage");
    assert!(store
        .inner
        .pending
        .lock()
        .view(&SeriesId::new("bad", "m"))
        .is_some());

    // Room again: the same flush, retried, lands, and every minute of the
    // series so far is kept.
    hook.fail.store(false, Ordering::SeqCst);
    store.inner.apply(&flush(id, h)).unwrap();
    let kept = hook.kept.lock();
    assert_eq!(kept.len(), 1);
    let n: u64 = kept[0].1.minutes.iter().map(|(_, s)| s.n).sum();
    assert_eq!(n, id - 1, "the flushes before the failed one");
}
