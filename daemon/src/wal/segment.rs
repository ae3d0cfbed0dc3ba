//! Segment files and the frames in them: `wal-<number>.log`, each frame a
//! little-endian `u32` length, a CRC-32 of the payload and the payload.
//! Reading stops at the first frame that is cut short or fails its
//! checksum: that is where a crash interrupted a write (a torn tail).

use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

/// Largest record accepted when reading: a larger length is corruption, not
/// a record (requests are bounded by `ingest.max_message_bytes`).
pub const MAX_RECORD: usize = 1 << 30;
const HEADER: usize = 8;

/// The file name of segment `number`.
pub fn name(number: u64) -> String {
    format!("wal-{number:016}.log")
}

/// The segments in `dir`, oldest first.
pub fn list(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        let number = path.file_name().and_then(|n| n.to_str()).and_then(|n| {
            n.strip_prefix("wal-")?
                .strip_suffix(".log")?
                .parse::<u64>()
                .ok()
        });
        if let Some(n) = number {
            out.push((n, path));
        }
    }
    out.sort_unstable_by_key(|(n, _)| *n);
    Ok(out)
}

/// Appends one frame holding `payload` to `out`.
pub fn frame(out: &mut Vec<u8>, payload: &[u8]) {
    frame_parts(out, payload, &[]);
}

/// Appends one frame holding `head` followed by `body`, as if they were one
/// payload: a request's record is framed this way around its wire bytes,
/// which are then copied only once, here.
pub fn frame_parts(out: &mut Vec<u8>, head: &[u8], body: &[u8]) {
    let mut crc = crc32fast::Hasher::new();
    crc.update(head);
    crc.update(body);
    out.extend_from_slice(&((head.len() + body.len()) as u32).to_le_bytes());
    out.extend_from_slice(&crc.finalize().to_le_bytes());
    out.extend_from_slice(head);
    out.extend_from_slice(body);
}

/// A segment's intact frames, and how many bytes after them are not.
pub struct Scanned {
    pub payloads: Vec<Vec<u8>>,
    /// Bytes of intact frames from the start; the rest is a torn or
    /// corrupt tail.
    pub valid: u64,
}

/// Reads a segment's frames up to the first bad one.
pub fn scan(bytes: &[u8]) -> Scanned {
    let mut payloads = Vec::new();
    let mut at = 0usize;
    while bytes.len() - at >= HEADER {
        let len =
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]) as usize;
        let crc = u32::from_le_bytes([bytes[at + 4], bytes[at + 5], bytes[at + 6], bytes[at + 7]]);
        let start = at + HEADER;
        if len > MAX_RECORD || bytes.len() - start < len {
            break;
        }
        let payload = &bytes[start..start + len];
        if crc32fast::hash(payload) != crc {
            break;
        }
        payloads.push(payload.to_vec());
        at = start + len;
    }
    Scanned {
        payloads,
        valid: at as u64,
    }
}

/// Cuts `path` to `len` bytes and makes that durable.
pub fn truncate(path: &Path, len: u64) -> io::Result<()> {
    let f = fs::OpenOptions::new().write(true).open(path)?;
    f.set_len(len)?;
    f.sync_all()
}

/// A segment being written.
pub struct Open {
    pub number: u64,
    pub file: fs::File,
    pub len: u64,
}

impl Open {
    /// Creates segment `number` in `dir` (it must not exist) and makes its
    /// directory entry durable.
    pub fn create(dir: &Path, number: u64) -> io::Result<Open> {
        let file = fs::OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(dir.join(name(number)))?;
        sync_dir(dir)?;
        Ok(Open {
            number,
            file,
            len: 0,
        })
    }

    /// Appends `bytes`; `len` counts them only once all are written.
    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all(bytes)?;
        self.len += bytes.len() as u64;
        Ok(())
    }
}

/// Makes the directory's entries (created or removed files) durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Cutting the file anywhere, or flipping any byte, loses only the
        /// frames from the damaged one on; the ones before read back intact.
        #[test]
        fn damage_loses_only_the_tail(
            payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 1..8),
            cut in any::<prop::sample::Index>(),
            flip in any::<prop::sample::Index>(),
            flip_it in any::<bool>(),
        ) {
            let mut bytes = Vec::new();
            let mut ends = Vec::new();
            for p in &payloads {
                frame(&mut bytes, p);
                ends.push(bytes.len());
            }
            let whole = scan(&bytes);
            prop_assert_eq!(&whole.payloads, &payloads);
            prop_assert_eq!(whole.valid, bytes.len() as u64);
            let mut damaged = bytes.clone();
            let at = if flip_it {
                let i = flip.index(damaged.len());
                damaged[i] ^= 0x5a;
                i
            } else {
                let i = cut.index(damaged.len());
                damaged.truncate(i);
                i
            };
            let got = scan(&damaged);
            // Frames that end at or before the damage are all kept.
            let intact = ends.iter().filter(|&&e| e <= at).count();
            prop_assert!(got.payloads.len() >= intact);
            prop_assert_eq!(&got.payloads[..intact], &payloads[..intact]);
            prop_assert!(got.valid <= damaged.len() as u64);
            if !flip_it {
                prop_assert_eq!(got.payloads.len(), intact);
            }
        }
    }
}
