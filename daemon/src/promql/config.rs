//! `[prometheus]`: how the Prometheus-compatible API shows Tally's series.

use serde::{Deserialize, Serialize};

use crate::validate::Problems;

/// How series are shown to PromQL and the Prometheus API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PrometheusConfig {
    /// The label that carries a series' source. `instance`, as Prometheus
    /// and every node_exporter dashboard name the scraped target.
    pub source_label: String,
}

impl Default for PrometheusConfig {
    fn default() -> Self {
        PrometheusConfig {
            source_label: "instance".to_string(),
        }
    }
}

impl PrometheusConfig {
    pub(crate) fn check(&self, p: &mut Problems) {
        let name = self.source_label.as_str();
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        p.require(
            valid,
            "prometheus.source_label",
            "must be a Prometheus label name ([A-Za-z_][A-Za-z0-9_]*)",
        );
        p.require(
            !name.starts_with("__") && name != super::names::TALLY_METRIC_LABEL,
            "prometheus.source_label",
            "must not start with `__` or be `tally_metric`: those names are taken",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(label: &str) -> usize {
        let mut p = Problems::default();
        PrometheusConfig {
            source_label: label.into(),
        }
        .check(&mut p);
        p.into_vec().len()
    }

    #[test]
    fn source_label_is_a_free_label_name() {
        assert_eq!(problems("instance"), 0);
        assert_eq!(problems("source"), 0);
        assert_eq!(problems(""), 1);
        assert_eq!(problems("9x"), 1);
        assert_eq!(problems("__name__"), 1);
        assert_eq!(problems("tally_metric"), 1);
    }
}
