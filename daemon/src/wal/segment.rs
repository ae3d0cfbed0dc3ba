//! Segment files and the frames in them: `wal-<number>.log`, each frame a
//! little-endian `u32` length, a CRC-32 of the payload and the payload.
//! Reading stops at the first frame that is cut short or fails its
//! checksum: that is where a crash interrupted a write (a torn tail).

use std::fs;
use std::io::{self, BufReader, Read, Write as _};
use std::path::{Path, PathBuf};

/// Largest record accepted when reading: a larger length is corruption, not
/// a record (requests are bounded by `ingest.max_message_bytes`).
pub const MAX_RECORD: usize = 1 << 30;
/// Bytes of a frame's header: the payload's length and CRC.
pub const HEADER: usize = 8;

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
    let crc = crc32fast::hash(payload);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(payload);
}

/// Fills in the header of a frame written in place: `frame` holds
/// [`HEADER`] bytes of room, then the payload.
pub fn seal_frame(frame: &mut [u8]) {
    let (head, payload) = frame.split_at_mut(HEADER);
    head[..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    head[4..].copy_from_slice(&crc32fast::hash(payload).to_le_bytes());
}

/// A segment's frames read in order, one payload at a time, so that
/// reading a segment back takes memory for one record, not the file.
/// Reading stops at the end or at the first frame that is cut short or
/// fails its checksum.
pub struct Frames<R> {
    reader: R,
    /// Bytes the reader holds: a length past them is a torn frame, found
    /// without allocating for it.
    len: u64,
    /// Bytes of intact frames read so far.
    valid: u64,
    payload: Vec<u8>,
    /// The end or damage was met: the reader is no longer at a frame.
    done: bool,
}

impl<R: Read> Frames<R> {
    /// Frames of `reader`, which holds `len` bytes.
    pub fn new(reader: R, len: u64) -> Frames<R> {
        Frames {
            reader,
            len,
            valid: 0,
            payload: Vec::new(),
            done: false,
        }
    }

    /// Bytes of intact frames from the start, up to the last one returned:
    /// what follows them (once [`Frames::next`] says `None`) is a torn or
    /// corrupt tail.
    pub fn valid(&self) -> u64 {
        self.valid
    }

    /// The next intact frame's payload, or `None` at the end or at damage,
    /// and from then on.
    pub fn next(&mut self) -> io::Result<Option<&[u8]>> {
        if self.done || !self.read_frame()? {
            self.done = true;
            return Ok(None);
        }
        Ok(Some(&self.payload))
    }

    /// Reads the next frame into `payload`; false if it is not intact.
    fn read_frame(&mut self) -> io::Result<bool> {
        let mut head = [0u8; HEADER];
        if self.len - self.valid < HEADER as u64 {
            return Ok(false);
        }
        if !read_all(&mut self.reader, &mut head)? {
            return Ok(false);
        }
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        let left = self.len - self.valid - HEADER as u64;
        if len > MAX_RECORD || left < len as u64 {
            return Ok(false);
        }
        self.payload.clear();
        self.payload.resize(len, 0);
        if !read_all(&mut self.reader, &mut self.payload)? {
            return Ok(false);
        }
        if crc32fast::hash(&self.payload) != crc {
            return Ok(false);
        }
        self.valid += (HEADER + len) as u64;
        Ok(true)
    }
}

/// Fills `buf`; false if the reader ends first (the file shrank since its
/// length was read: a tail, like any other cut short).
fn read_all(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<bool> {
    match reader.read_exact(buf) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

impl Frames<BufReader<fs::File>> {
    /// Frames of the segment file at `path`.
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = fs::File::open(path)?;
        let len = file.metadata()?.len();
        Ok(Frames::new(BufReader::with_capacity(1 << 20, file), len))
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

    /// Every intact frame's payload, and the bytes they take.
    fn scan(bytes: &[u8]) -> (Vec<Vec<u8>>, u64) {
        let mut frames = Frames::new(bytes, bytes.len() as u64);
        let mut out = Vec::new();
        while let Some(p) = frames.next().unwrap() {
            out.push(p.to_vec());
        }
        (out, frames.valid())
    }

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
            prop_assert_eq!(&whole.0, &payloads);
            prop_assert_eq!(whole.1, bytes.len() as u64);
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
            prop_assert!(got.0.len() >= intact);
            prop_assert_eq!(&got.0[..intact], &payloads[..intact]);
            prop_assert!(got.1 <= damaged.len() as u64);
            if !flip_it {
                prop_assert_eq!(got.0.len(), intact);
            }
        }
    }
}
