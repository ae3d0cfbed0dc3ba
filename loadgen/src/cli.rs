//! Command-line flags, and their checks: every inconsistent combination is
//! refused up front with a message naming the flag, rather than discovered
//! half-way through a run.

use std::time::Duration;

use clap::Parser;

use crate::fleet::KindMix;
use crate::labels::LabelSpec;
use crate::protocol::Protocol;
use crate::worker::Mode;

const AFTER_HELP: &str = "\
Examples:
  # 1,000 agents × 20 metrics in real time for a minute, unary batches
  tally-loadgen --sources 1000 --metrics 20 --duration 60s
  # as fast as possible over the last 5 simulated minutes, then check everything
  tally-loadgen --max --sources 1000 --metrics 20 --seconds 300 --verify
  # node-exporter-like: each metric per cpu and mode (10 series per metric)
  tally-loadgen --max --sources 500 --metrics 20 --labels cpu=2,mode=5 --seconds 120 --verify
  # check an earlier --max run again (same seed, fleet, --start and --seconds)
  tally-loadgen --verify-only --sources 1000 --metrics 20 --start 1767225600 --seconds 300

Exit status: 0 success; 1 the run failed (bad flags, no connection, the
daemon kept refusing, a request error that retrying cannot fix); 2 --verify
found mismatches or could not read series; 3 some requests failed
ambiguously (their series were left out of verification, which otherwise
passed).";

#[derive(Debug, Parser)]
#[command(
    name = "tally-loadgen",
    version,
    about = "Simulates a fleet of monitoring agents pushing to tallyd, reports throughput and latency, and verifies the stored aggregates exactly",
    after_help = AFTER_HELP
)]
pub struct Cli {
    /// tallyd's gRPC address.
    #[arg(long, default_value = "http://127.0.0.1:4317")]
    pub target: String,
    /// tallyd's HTTP address, for --verify's reads (`/api/v1/range`) and
    /// the HTTP protocols.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub http: String,
    /// The Graphite plaintext listener (`host:port`), for --protocol graphite.
    #[arg(long, default_value = "127.0.0.1:2003")]
    pub graphite: String,
    /// Graphite: close each connection after this many batches and open
    /// another (0: one connection for the whole run). Only a connection
    /// the daemon closed after the client's own close confirms its lines,
    /// so shorter connections leave less ambiguous when a connection fails
    /// (a crash loop's kills).
    #[arg(long, default_value_t = 0)]
    pub graphite_batches: usize,

    /// Sources (agents), named <prefix>000001, <prefix>000002, …
    #[arg(long, default_value_t = 100)]
    pub sources: usize,
    /// Metrics per source, named m_0001, m_0002, …
    #[arg(long, default_value_t = 20)]
    pub metrics: usize,
    /// Label sets of every metric, as NAME=COUNT,...: `cpu=4,mode=8` sends
    /// each metric of each source with 32 label sets (cpu="0".."3" ×
    /// mode="0".."7"), so 32 series [default: no labels].
    #[arg(long)]
    pub labels: Option<LabelSpec>,
    /// Relative weights of the metric kinds.
    #[arg(long, default_value_t = KindMix::default())]
    pub kinds: KindMix,
    /// Seed of every value, kind assignment and counter reset.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Prefix of source names; use a new one to run again against a daemon
    /// that already holds data of an earlier run in the same time range.
    #[arg(long, default_value = "src-")]
    pub source_prefix: String,
    /// Mean samples between resets of each cumulative counter (0 = never).
    #[arg(long, default_value_t = 600)]
    pub reset_every: u64,

    /// Samples per series per second (simulated seconds with --max).
    #[arg(long, default_value_t = 1.0)]
    pub rate: f64,
    /// Send as fast as possible over a simulated time range instead of in
    /// real time.
    #[arg(long)]
    pub max: bool,
    /// Length of a real-time run [default: 60s].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// Start of the simulated range (--max, --verify-only): RFC 3339, Unix
    /// seconds, `now` or `now-<duration>` [default: now minus --seconds].
    #[arg(long)]
    pub start: Option<String>,
    /// Length of the simulated range in seconds (--max, --verify-only)
    /// [default: 300].
    #[arg(long)]
    pub seconds: Option<u64>,

    /// The protocol batches are sent in: tally.v1 or OTLP over gRPC
    /// (--target), OTLP/HTTP, Prometheus remote-write or InfluxDB line
    /// protocol (--http), Graphite plaintext (--graphite).
    #[arg(long, value_enum, default_value_t = Protocol::Tally)]
    pub protocol: Protocol,
    /// gRPC call per batch (unary `Push`) or client streaming (`PushStream`).
    #[arg(long, value_enum, default_value_t = Mode::Unary)]
    pub mode: Mode,
    /// Samples per message, at most.
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// With --max: consecutive samples of each series per message (an agent
    /// that pushes every N seconds). Real time always sends 1.
    #[arg(long, default_value_t = 1)]
    pub span: u32,
    /// Connections, each with one request or stream in flight.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Messages per stream before it is closed and acknowledged (--mode stream).
    #[arg(long, default_value_t = 100)]
    pub stream_messages: usize,
    /// With --max over OTLP, remote-write or line protocol: encode every
    /// request before the clock starts, so the run times the server and the
    /// wire, not this generator's encoders. Every body is held in memory.
    #[arg(long)]
    pub prerender: bool,
    /// The path the HTTP protocols POST to instead of tallyd's
    /// (`/v1/metrics`, `/api/v1/write`, `/api/v2/write?…`), to send the
    /// same bytes to another server, e.g. `/opentelemetry/v1/metrics`.
    #[arg(long)]
    pub http_path: Option<String>,

    /// Time allowed per request (a unary call, or a stream's summary after it
    /// is closed).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Time allowed to open a connection.
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    pub connect_timeout: Duration,
    /// Resends of a batch the daemon refused (RESOURCE_EXHAUSTED,
    /// UNAVAILABLE, connection refused) before giving up.
    #[arg(long, default_value_t = 10)]
    pub retries: u32,
    /// Longest wait between resends (exponential backoff from 50ms).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub max_backoff: Duration,

    /// After the run, read every series back and check every minute slot.
    #[arg(long)]
    pub verify: bool,
    /// Send nothing; verify the daemon against a re-generated earlier run
    /// (same --seed, fleet flags, --rate, --start and --seconds/--duration),
    /// assuming the daemon accepted every sample of it.
    #[arg(long, conflicts_with_all = ["max", "mode"])]
    pub verify_only: bool,
    /// Concurrent reads during verification.
    #[arg(long, default_value_t = 32)]
    pub verify_concurrency: usize,
    /// Pause between the last acknowledgement and the first read.
    #[arg(long, default_value = "250ms", value_parser = humantime::parse_duration)]
    pub settle: Duration,
    /// How long a read the daemon answers `partial` (from memory alone,
    /// its store unreachable) is read again before it counts as a read
    /// error; it never counts as missing data.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub partial_patience: Duration,
    /// How long a read the daemon does not answer (refused or reset, as
    /// while it restarts; or 502 to 504, such as its 503 while busy) is
    /// tried again before it counts as a read error. Once one read has
    /// waited this long in vain, no other waits; a timeout or another
    /// server error is tried four times in all.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub read_patience: Duration,
    /// Mismatches listed in the report (all are counted).
    #[arg(long, default_value_t = 20)]
    pub max_mismatches: usize,

    /// Print the final report as JSON on stdout (the human report goes to
    /// stderr).
    #[arg(long)]
    pub json: bool,
    /// No progress bar and no human report.
    #[arg(long, short)]
    pub quiet: bool,
}

/// How the run is paced, resolved from the flags.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// `--max`: `start_ms` and the simulated length.
    Max { start_ms: i64, seconds: u64 },
    /// Real time for `duration`; the start is taken when the run begins.
    RealTime { duration: Duration },
    /// `--verify-only`: the range of the earlier run.
    VerifyOnly { start_ms: i64, seconds: f64 },
}

impl Cli {
    /// Checks the combination of flags and resolves the pace; `now_ms` is
    /// the wall clock, for `--start now-…` and the default start.
    pub fn pace(&self, now_ms: i64) -> Result<Pace, String> {
        self.check_sending()?;
        let start = |default_seconds: u64| -> Result<i64, String> {
            match &self.start {
                Some(s) => parse_time(s, now_ms).map_err(|e| format!("--start {e}")),
                // Whole seconds, ending now: inside the daemon's lateness
                // window and never ahead of its clock.
                None => Ok((now_ms.div_euclid(1000) - default_seconds as i64) * 1000),
            }
        };
        if self.verify_only {
            if self.start.is_none() {
                return Err("--verify-only needs the --start of the run to check (it is in that run's report as start_ms)".into());
            }
            let seconds = match (self.seconds, self.duration) {
                (Some(_), Some(_)) => {
                    return Err("--verify-only: give --seconds or --duration, not both".into())
                }
                (Some(s), None) => s as f64,
                (None, Some(d)) => d.as_secs_f64(),
                (None, None) => 300.0,
            };
            return Ok(Pace::VerifyOnly {
                start_ms: start(0)?,
                seconds,
            });
        }
        if self.max {
            if self.duration.is_some() {
                return Err(
                    "--duration is for real-time runs; with --max the simulated range is --seconds"
                        .into(),
                );
            }
            let seconds = self.seconds.unwrap_or(300);
            if seconds == 0 {
                return Err("--seconds must be at least 1".into());
            }
            return Ok(Pace::Max {
                start_ms: start(seconds)?,
                seconds,
            });
        }
        if self.seconds.is_some() || self.start.is_some() {
            return Err("--seconds and --start set the simulated range of --max; a real-time run starts now and lasts --duration".into());
        }
        if self.span != 1 {
            return Err(
                "--span is for --max; in real time every series sends one sample per tick".into(),
            );
        }
        let duration = self.duration.unwrap_or(Duration::from_secs(60));
        if duration.is_zero() {
            return Err("--duration must be more than zero".into());
        }
        Ok(Pace::RealTime { duration })
    }

    /// The flags that shape what is sent, each within range and together
    /// making sense for the protocol.
    fn check_sending(&self) -> Result<(), String> {
        if !(self.rate.is_finite() && self.rate > 0.0 && self.rate <= 1000.0) {
            return Err(format!(
                "--rate {}: must be more than 0 and at most 1000 samples per series per second",
                self.rate
            ));
        }
        if self.batch == 0 || self.concurrency == 0 || self.stream_messages == 0 {
            return Err("--batch, --concurrency and --stream-messages must be at least 1".into());
        }
        if self.verify_concurrency == 0 {
            return Err("--verify-concurrency must be at least 1".into());
        }
        if self.span == 0 || self.span as usize > self.batch {
            return Err(format!(
                "--span {}: must be between 1 and --batch ({})",
                self.span, self.batch
            ));
        }
        if self.protocol != Protocol::Tally && self.mode == Mode::Stream {
            return Err("--mode stream is tally.v1's PushStream; other protocols send one request per batch".into());
        }
        if self.protocol == Protocol::RemoteWrite && self.kinds.has_delta() {
            return Err("--protocol remote-write: remote-write has no delta counters; give --kinds with delta=0 (e.g. gauge=2,cumulative=1)".into());
        }
        if self.protocol.gauges_only() && self.kinds.has_counters() {
            return Err(format!("--protocol {}: it carries numbers the daemon keeps as gauges; give --kinds gauge=1", self.protocol.name()));
        }
        if self.prerender
            && (!self.max
                || self.protocol.uses_grpc() && self.protocol != Protocol::OtlpGrpc
                || self.protocol == Protocol::Graphite)
        {
            return Err(
                "--prerender is for --max runs over OTLP, remote-write or line protocol".into(),
            );
        }
        if let Some(path) = &self.http_path {
            if !path.starts_with('/')
                || self.protocol.uses_grpc()
                || self.protocol == Protocol::Graphite
            {
                return Err(format!("--http-path {path}: a path starting with '/', for the HTTP protocols (otlp-http, remote-write, influx)"));
            }
        }
        if self.timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err("--timeout and --connect-timeout must be more than zero".into());
        }
        Ok(())
    }
}

/// `now`, `now-<duration>` (`now-10m`), Unix seconds (`1767225600`, also
/// fractional) or RFC 3339 (`2026-01-01T00:00:00Z`), to Unix milliseconds.
pub fn parse_time(s: &str, now_ms: i64) -> Result<i64, String> {
    let s = s.trim();
    if s == "now" {
        return Ok(now_ms);
    }
    if let Some(ago) = s.strip_prefix("now-") {
        let d = humantime::parse_duration(ago).map_err(|e| format!("{s:?}: {e}"))?;
        return Ok(now_ms - d.as_millis() as i64);
    }
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() && (0.0..1e11).contains(&secs) {
            return Ok((secs * 1000.0).floor() as i64);
        }
        return Err(format!("{s:?}: Unix seconds out of range"));
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_millis())
        .map_err(|_| {
            format!(
                "{s:?} is not RFC 3339 (2026-01-01T00:00:00Z), Unix seconds, `now` or `now-10m`"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("tally-loadgen").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn times_parse() {
        assert_eq!(parse_time("now", 5_000), Ok(5_000));
        assert_eq!(parse_time("now-2s", 5_000), Ok(3_000));
        assert_eq!(parse_time("1767225600", 0), Ok(1_767_225_600_000));
        assert_eq!(parse_time("1.5", 0), Ok(1_500));
        assert_eq!(parse_time("2026-01-01T00:00:00Z", 0), Ok(1_767_225_600_000));
        assert!(parse_time("yesterday", 0).unwrap_err().contains("RFC 3339"));
    }

    #[test]
    fn paces_resolve_from_flags() {
        let now = 1_000_000_000;
        assert_eq!(
            cli(&["--max", "--seconds", "60"]).pace(now),
            Ok(Pace::Max {
                start_ms: now - 60_000,
                seconds: 60
            })
        );
        assert_eq!(
            cli(&[]).pace(now),
            Ok(Pace::RealTime {
                duration: Duration::from_secs(60)
            })
        );
        assert_eq!(
            cli(&["--verify-only", "--start", "100", "--seconds", "10"]).pace(now),
            Ok(Pace::VerifyOnly {
                start_ms: 100_000,
                seconds: 10.0
            })
        );
    }

    #[test]
    fn inconsistent_flags_are_refused() {
        let now = 0;
        for (args, needle) in [
            (&["--seconds", "5"][..], "--seconds"),
            (&["--max", "--duration", "5s"][..], "--duration"),
            (&["--verify-only"][..], "--start"),
            (&["--rate", "0"][..], "--rate"),
            (&["--batch", "10", "--span", "11", "--max"][..], "--span"),
            (&["--span", "2"][..], "--span"),
            (&["--protocol", "graphite"][..], "--kinds gauge=1"),
            (
                &["--protocol", "influx", "--kinds", "gauge=1,cumulative=1"][..],
                "--kinds",
            ),
            (
                &["--prerender", "--protocol", "otlp-http"][..],
                "--prerender",
            ),
            (&["--prerender", "--max"][..], "--prerender"),
            (&["--max", "--http-path", "v1/metrics"][..], "--http-path"),
            (
                &["--max", "--protocol", "otlp-grpc", "--http-path", "/x"][..],
                "--http-path",
            ),
        ] {
            let err = cli(args).pace(now).unwrap_err();
            assert!(err.contains(needle), "{args:?}: {err}");
        }
        assert!(Cli::try_parse_from(["x", "--verify-only", "--max"]).is_err());
        let err = Cli::try_parse_from(["x", "--labels", "cpu=2,source=3"]).unwrap_err();
        assert!(err.to_string().contains("reserved"), "{err}");
    }

    #[test]
    fn prerender_and_http_path_fit_the_http_protocols() {
        let args = [
            "--max",
            "--prerender",
            "--protocol",
            "otlp-http",
            "--http-path",
            "/opentelemetry/v1/metrics",
        ];
        assert!(cli(&args).pace(0).is_ok());
        assert!(cli(&["--max", "--prerender", "--protocol", "otlp-grpc"])
            .pace(0)
            .is_ok());
    }

    #[test]
    fn labels_default_to_none() {
        assert_eq!(cli(&[]).labels, None);
        let spec = cli(&["--labels", "cpu=2,mode=5"]).labels.unwrap();
        assert_eq!(spec.sets(), 10);
    }
}
