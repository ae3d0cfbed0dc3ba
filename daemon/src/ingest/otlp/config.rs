//! `[otlp]`, how OTLP resources and attributes map to series: the section's
//! type, its defaults and its checks, kept beside what it configures.

use serde::{Deserialize, Serialize};

use super::attrs;
use crate::labels::validate_label_name;
use crate::validate::Problems;

/// `[otlp]`: how OTLP resources and attributes map to sources and labels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OtlpConfig {
    /// Resource attributes that name a point's source; the first one
    /// present with a non-empty value wins. Points whose resource has none
    /// are refused (`missing_source`), the rest of the request kept.
    pub source_attributes: Vec<String>,
    /// Resource attributes copied onto every point of the resource as
    /// labels (sanitised like point attributes), for example
    /// `deployment.environment`. A point's own attribute of the same name
    /// wins.
    pub resource_labels: Vec<String>,
    /// Label every point with `job` from the resource's `service.name`
    /// (`service.namespace/service.name` when there is a namespace), as
    /// Prometheus' own OTLP translation does; with the source shown as
    /// `instance`, PromQL sees OTLP series as it would in Prometheus. A
    /// point's own `job` attribute wins.
    pub job_label: bool,
}

impl Default for OtlpConfig {
    fn default() -> Self {
        OtlpConfig {
            source_attributes: ["service.instance.id", "host.name", "service.name"]
                .map(String::from)
                .to_vec(),
            resource_labels: Vec::new(),
            job_label: true,
        }
    }
}

impl OtlpConfig {
    pub(crate) fn check(&self, p: &mut Problems) {
        p.require(
            !self.source_attributes.is_empty(),
            "otlp.source_attributes",
            "must name at least one resource attribute",
        );
        for name in &self.resource_labels {
            let label = attrs::label_name(name);
            p.require(
                validate_label_name(&label).is_ok(),
                "otlp.resource_labels",
                format!("{name:?} does not make a valid label name ({label:?})"),
            );
        }
    }
}
