//! What `tallyd dead-letters list` prints: per file its flush, when and by
//! which store it was refused, its documents and samples, and each distinct
//! error once with how many documents it refused.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use super::LetterFile;

/// Series named per file before the list says "and N more".
const SERIES_SHOWN: usize = 5;

pub fn report(files: &[(PathBuf, LetterFile)]) -> String {
    let mut out = String::new();
    if files.is_empty() {
        out.push_str("no dead letters\n");
        return out;
    }
    let (mut letters, mut samples) = (0usize, 0u64);
    for (path, f) in files {
        let n: u64 = f.letters.iter().map(|l| l.samples()).sum();
        letters += f.letters.len();
        samples += n;
        let when = chrono::DateTime::from_timestamp_millis(f.written_ms)
            .map_or_else(|| f.written_ms.to_string(), |t| t.to_rfc3339());
        let _ = writeln!(
            out,
            "flush {}: {} document(s), {n} sample(s), refused by {} at {when} ({})",
            f.flush_id,
            f.letters.len(),
            f.store,
            path.display()
        );
        let mut errors: BTreeMap<&str, usize> = BTreeMap::new();
        for l in &f.letters {
            *errors.entry(l.error.as_str()).or_default() += 1;
        }
        for (error, count) in errors {
            let _ = writeln!(out, "  {count} x {error}");
        }
        for l in f.letters.iter().take(SERIES_SHOWN) {
            let _ = writeln!(out, "  series {} ({} minute(s))", l.series, l.minutes.len());
        }
        if f.letters.len() > SERIES_SHOWN {
            let _ = writeln!(out, "  and {} more", f.letters.len() - SERIES_SHOWN);
        }
    }
    let _ = writeln!(
        out,
        "{} file(s), {letters} document(s), {samples} sample(s); `tallyd dead-letters replay` applies them again once the cause is fixed",
        files.len()
    );
    out
}
