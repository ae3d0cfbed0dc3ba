//! The open-file limit against the listeners' caps, checked at start.
//!
//! Every connection is a file descriptor, and so is every store file, log
//! segment and database connection. The caps (`grpc.max_connections`,
//! `http.max_connections` and `http.reserved_connections`) are what keep
//! the daemon below `RLIMIT_NOFILE`; past it, `accept` fails for both
//! listeners at once and the store can no longer open files. At start the
//! soft limit is raised towards what the caps need (never above the hard
//! limit, never lowered), and the daemon warns when even that falls short.

/// Descriptors the daemon needs besides its connections: the embedded
/// store's files, write-ahead log segments, MongoDB connections, the
/// listening sockets, the runtime's and standard streams, with room.
pub const BASELINE: u64 = 256;

/// What the limit was, what the daemon needs and what it has now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFiles {
    pub needed: u64,
    /// The soft limit before and after the start; `None` is unlimited.
    pub was: Option<u64>,
    pub now: Option<u64>,
    /// The hard limit, which only a privileged process may raise.
    pub hard: Option<u64>,
}

impl OpenFiles {
    /// Whether the limit in force covers what the caps need.
    pub fn enough(&self) -> bool {
        self.now.is_none_or(|n| n >= self.needed)
    }
}

/// Descriptors needed for `connections` (the sum of the listeners' caps,
/// evictions in flight included) besides [`BASELINE`].
pub fn needed(connections: u64) -> u64 {
    connections.saturating_add(BASELINE)
}

/// Raises the soft open-file limit to `needed` if it is lower, within the
/// hard limit; reports what it found and did.
pub fn raise_to(needed: u64) -> OpenFiles {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let before = getrlimit(Resource::Nofile);
    let mut out = OpenFiles {
        needed,
        was: before.current,
        now: before.current,
        hard: before.maximum,
    };
    let Some(current) = before.current else {
        return out;
    };
    if current >= needed {
        return out;
    }
    let target = before.maximum.map_or(needed, |hard| hard.min(needed));
    if target > current
        && setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(target),
                maximum: before.maximum,
            },
        )
        .is_ok()
    {
        out.now = getrlimit(Resource::Nofile).current;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_is_raised_within_the_hard_one_and_never_lowered() {
        let start = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        // Asking for less changes nothing.
        let small = raise_to(8);
        assert_eq!(small.was, start.current);
        assert_eq!(small.now, start.current);
        assert!(small.enough());
        // Asking for more than the hard limit reaches the hard limit at
        // most, and says it is not enough.
        if let Some(hard) = start.maximum {
            let big = raise_to(hard.saturating_add(1));
            assert!(big.now.is_some_and(|n| n <= hard));
            assert!(!big.enough());
        }
    }
}
