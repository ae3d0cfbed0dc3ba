//! Scrapes of a daemon's `/metrics` and a reader for the Prometheus text
//! format, enough for tests to assert on counters and gauges by name and
//! labels. Separate from [`crate::client`]: parsing needs no daemon, and
//! the settle waits are built on it.

use crate::client::get_text;
use crate::daemon::Daemon;

/// The daemon's `/metrics` text; the scrape must answer 200.
pub async fn metrics_text(d: &Daemon) -> String {
    metrics_text_at(&d.http_url()).await
}

/// `/metrics` of the HTTP listener at `base` (`http://127.0.0.1:PORT`).
pub async fn metrics_text_at(base: &str) -> String {
    let (status, body) = get_text(&format!("{base}/metrics"), &[]).await;
    assert_eq!(status, 200, "/metrics answered {status}: {body}");
    body
}

/// Sum of the samples of metric `name` (exact name, any further labels)
/// whose labels include every `labels` pair; None if no line matches.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut total = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (label_part, value) = if let Some(r) = rest.strip_prefix('{') {
            match r.split_once('}') {
                Some(parts) => parts,
                None => continue,
            }
        } else if rest.starts_with(' ') {
            ("", rest)
        } else {
            continue;
        };
        if !labels
            .iter()
            .all(|(k, v)| label_part.contains(&format!("{k}=\"{v}\"")))
        {
            continue;
        }
        if let Some(v) = value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        {
            *total.get_or_insert(0.0) += v;
        }
    }
    total
}

/// The sum of every sample of metric `name` (all label sets) in a scrape.
pub fn metric_sum(text: &str, name: &str) -> f64 {
    metric(text, name, &[]).unwrap_or(0.0)
}
