//! One scrape of `/metrics`, read as metric names and the label names seen
//! on each, and the check of a dashboard's queries against scrapes.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::model::{queries, reads, substitute, variable_names};
use super::TARGET_LABELS;

/// One `/metrics` text: series name -> label names seen on it.
#[derive(Debug, Clone)]
pub(super) struct Scrape {
    /// `embedded`, `mongodb`: for messages.
    pub(super) what: String,
    pub(super) text: String,
    pub(super) series: BTreeMap<String, BTreeSet<String>>,
}

impl Scrape {
    pub(super) fn parse(what: &str, text: &str) -> Scrape {
        let mut series: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            let labels = series.entry(line[..end].to_string()).or_default();
            if line[end..].starts_with('{') {
                labels.extend(label_names(&line[end + 1..]));
            }
        }
        Scrape {
            what: what.to_string(),
            text: text.to_string(),
            series,
        }
    }

    pub(super) fn has(&self, metric: &str) -> bool {
        self.series.contains_key(metric)
    }

    pub(super) fn has_label(&self, metric: &str, label: &str) -> bool {
        self.series
            .get(metric)
            .is_some_and(|labels| labels.contains(label))
    }

    /// Sum of the values of `metric`'s series (any labels); None if absent.
    pub(super) fn value(&self, metric: &str) -> Option<f64> {
        metric_value(&self.text, metric)
    }
}

/// Label names of `a="x",b="y\"z"} 1`: everything up to the closing brace.
pub(super) fn label_names(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = s.chars();
    let mut name = String::new();
    while let Some(c) = chars.next() {
        match c {
            '}' => break,
            '=' => {
                out.push(std::mem::take(&mut name).trim().to_string());
                // The quoted value, escapes and all.
                let mut escaped = false;
                let mut opened = false;
                for c in chars.by_ref() {
                    match c {
                        '"' if !opened => opened = true,
                        '"' if !escaped => break,
                        '\\' if !escaped => escaped = true,
                        _ => escaped = false,
                    }
                }
            }
            ',' => {}
            c => name.push(c),
        }
    }
    out
}

/// Everything wrong between the dashboard's queries and the scrapes: a
/// metric in none of them, a label no series of the metric has, a
/// MongoDB-only metric on a panel not titled as such, a query that does not
/// parse. `exempt` metrics are not looked for.
pub(super) fn check_metrics(dash: &Value, scrapes: &[&Scrape], exempt: &[&str]) -> Vec<String> {
    let variables = variable_names(dash);
    let queries = match queries(dash) {
        Ok(q) => q,
        Err(e) => return vec![e],
    };
    let scraped: Vec<&str> = scrapes.iter().map(|s| s.what.as_str()).collect();
    let mut problems = Vec::new();
    for q in &queries {
        let r = match substitute(&q.expr, &variables).and_then(|e| reads(&e)) {
            Ok(r) => r,
            Err(e) => {
                problems.push(format!("{}: {e}", q.place));
                continue;
            }
        };
        for (metric, labels) in &r.selectors {
            if metric.starts_with("tally_mongodb_") && !q.title.contains("MongoDB") {
                problems.push(format!(
                    "{}: `{metric}` exists only with the MongoDB store; say so in the title",
                    q.place
                ));
            }
            if exempt.contains(&metric.as_str()) {
                continue;
            }
            let having: Vec<&&Scrape> = scrapes.iter().filter(|s| s.has(metric)).collect();
            if having.is_empty() {
                problems.push(format!(
                    "{}: `{metric}` is in no scrape of /metrics ({})",
                    q.place,
                    scraped.join(", ")
                ));
                continue;
            }
            for label in labels {
                if !TARGET_LABELS.contains(&label.as_str())
                    && !having.iter().any(|s| s.has_label(metric, label))
                {
                    problems.push(format!(
                        "{}: `{metric}` has no label `{label}` in any scrape",
                        q.place
                    ));
                }
            }
        }
        for (by, metrics) in &r.groupings {
            for label in by {
                if TARGET_LABELS.contains(&label.as_str()) {
                    continue;
                }
                for metric in metrics {
                    let having: Vec<&&Scrape> = scrapes.iter().filter(|s| s.has(metric)).collect();
                    if !having.is_empty() && !having.iter().any(|s| s.has_label(metric, label)) {
                        problems.push(format!(
                            "{}: grouped by `{label}`, which `{metric}` does not have",
                            q.place
                        ));
                    }
                }
            }
        }
    }
    problems
}

/// Sum of the values of the series named exactly `metric`.
pub(super) fn metric_value(text: &str, metric: &str) -> Option<f64> {
    tally_testkit::metrics::metric(text, metric, &[])
}
