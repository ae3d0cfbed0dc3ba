//! Durations as the config file, the environment and the logs spell them
//! ("500ms", "90m", "14d"). Shared by the daemon's configuration and the
//! settings components own (such as the MongoDB store's), so that neither
//! depends on the other to read or print a duration.

use std::time::Duration;

/// Formats in the largest unit that divides evenly, so the defaults print
/// as "14d" or "90m" rather than humantime's "1year 1month ..." spellings.
pub(crate) fn format_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        let s = d.as_secs();
        for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
            if s != 0 && s.is_multiple_of(size) {
                return format!("{}{unit}", s / size);
            }
        }
        return format!("{s}s");
    }
    let nanos = d.as_nanos();
    for (unit, size) in [("ms", 1_000_000), ("us", 1_000)] {
        if nanos.is_multiple_of(size) {
            return format!("{}{unit}", nanos / size);
        }
    }
    format!("{nanos}ns")
}

/// Serde of a duration as text, for `#[serde(with = ...)]`: written by
/// [`format_duration`], read by humantime.
pub(crate) mod as_text {
    use std::fmt;
    use std::time::Duration;

    use serde::{de, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::format_duration(*value))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        deserializer.deserialize_str(Visitor)
    }

    struct Visitor;

    impl de::Visitor<'_> for Visitor {
        type Value = Duration;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a duration string such as \"500ms\", \"30s\", \"90m\" or \"14d\"")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
            humantime::parse_duration(v)
                .map_err(|e| E::custom(format!("invalid duration {v:?}: {e}")))
        }
    }
}
