//! Live counters shared by the workers, and the progress bar that shows them.
//!
//! Workers bump relaxed atomics (cheap, and the bar only needs a rough live
//! view); the exact figures of the final report come from each worker's own
//! tallies, merged at the end.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

#[derive(Debug, Default)]
pub struct Live {
    pub sent: AtomicU64,
    pub accepted: AtomicU64,
    pub rejected: AtomicU64,
    pub acks: AtomicU64,
    pub errors: AtomicU64,
    pub retries: AtomicU64,
}

impl Live {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// The bar on stderr, hidden when stderr is not a terminal or with `--quiet`.
pub struct Progress {
    bar: ProgressBar,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    pub fn start(live: Arc<Live>, total: u64, quiet: bool) -> Progress {
        if quiet || !std::io::stderr().is_terminal() {
            return Progress {
                bar: ProgressBar::hidden(),
                task: None,
            };
        }
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template(
            "{spinner} {elapsed_precise} {bar:24} {percent:>3}% {wide_msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        let b = bar.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            let (mut last_sent, mut last_at) = (0u64, Instant::now());
            loop {
                tick.tick().await;
                let sent = Live::get(&live.sent);
                let now = Instant::now();
                let rate = (sent - last_sent) as f64 / now.duration_since(last_at).as_secs_f64();
                (last_sent, last_at) = (sent, now);
                b.set_position(sent);
                // Narrow enough for an 80-column terminal next to the bar.
                b.set_message(format!(
                    "{}/s sent {} ok {} acks {} rej {} err {} retry {}",
                    si(rate),
                    si(sent as f64),
                    si(Live::get(&live.accepted) as f64),
                    si(Live::get(&live.acks) as f64),
                    si(Live::get(&live.rejected) as f64),
                    Live::get(&live.errors),
                    Live::get(&live.retries),
                ));
            }
        });
        Progress {
            bar,
            task: Some(task),
        }
    }

    pub fn finish(self) {
        if let Some(t) = self.task {
            t.abort();
        }
        self.bar.finish_and_clear();
    }
}

/// `1234567.0` → `1.23M`, for narrow live displays.
pub fn si(x: f64) -> String {
    match x.abs() {
        a if a >= 1e9 => format!("{:.2}G", x / 1e9),
        a if a >= 1e6 => format!("{:.2}M", x / 1e6),
        a if a >= 1e4 => format!("{:.1}k", x / 1e3),
        _ => format!("{x:.0}"),
    }
}
