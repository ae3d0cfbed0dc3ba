//! Configuration keys: every key the docs name (`section.key` in a code
//! span, a `[section]`, a key of a fenced TOML example, a
//! `TALLYD_SECTION_KEY` variable) is in `config/tallyd.toml`, and
//! `docs/configuration.md` has one table row per key of that file, whose
//! default is the file's value.

use std::collections::BTreeMap;
use std::path::Path;

use toml::{Table, Value};

use crate::markdown::{cells, spans, Doc};

/// Keys the docs may name that are not in the reference file: accepted for
/// older configurations and ignored (each must still be in the code).
const RETIRED: &[(&str, &str)] = &[(
    "mongodb.day_write_delay",
    "daemon/src/store/mongodb/config.rs",
)];

/// Code spans that look like `section.key` but are something else.
const NOT_KEYS: &[&str] = &[
    "http.route",                   // an OTLP attribute
    "grpc.ssl_channel_credentials", // a Python grpcio call
    "prometheus.remote_write",      // a Grafana Alloy component
];

/// File name extensions: `<name>.rs` is a file, not a key.
const EXTENSIONS: &[&str] = &["rs", "md", "toml", "json", "py", "yml", "proto", "sh"];

/// The reference file: top-level keys and sections' keys, by dotted name.
struct Reference {
    keys: BTreeMap<String, Value>,
    sections: Vec<String>,
}

impl Reference {
    fn load(root: &Path) -> Reference {
        let text = std::fs::read_to_string(root.join("config/tallyd.toml")).unwrap();
        let table: Table = text.parse().expect("config/tallyd.toml parses");
        let mut keys = BTreeMap::new();
        let mut sections = Vec::new();
        for (name, value) in table {
            match value {
                Value::Table(t) => {
                    for (k, v) in t {
                        keys.insert(format!("{name}.{k}"), v);
                    }
                    sections.push(name);
                }
                v => {
                    keys.insert(name, v);
                }
            }
        }
        Reference { keys, sections }
    }

    fn has(&self, root: &Path, key: &str) -> bool {
        self.keys.contains_key(key)
            || RETIRED.iter().any(|(k, file)| {
                *k == key
                    && std::fs::read_to_string(root.join(file))
                        .is_ok_and(|s| s.contains(key.rsplit('.').next().unwrap_or(key)))
            })
    }

    /// The dotted key a `TALLYD_*` variable sets, if any.
    fn key_of_env(&self, var: &str) -> Option<&str> {
        let rest = var.strip_prefix("TALLYD_")?.to_lowercase();
        if let Some((k, _)) = self.keys.get_key_value(&rest) {
            return Some(k);
        }
        self.sections.iter().find_map(|s| {
            let key = rest.strip_prefix(&format!("{s}_"))?;
            let (k, _) = self.keys.get_key_value(&format!("{s}.{key}"))?;
            Some(k.as_str())
        })
    }
}

pub fn check(root: &Path, docs: &[Doc]) -> Vec<String> {
    let reference = Reference::load(root);
    let mut problems = Vec::new();
    for doc in docs {
        problems.extend(named_keys(root, &reference, doc));
    }
    let page = docs
        .iter()
        .find(|d| d.name == "docs/configuration.md")
        .expect("docs/configuration.md exists");
    problems.extend(documented(&reference, page));
    problems
}

/// Keys the document names that the reference file does not have.
fn named_keys(root: &Path, reference: &Reference, doc: &Doc) -> Vec<String> {
    let mut problems = Vec::new();
    let mut missing = |what: &str| problems.push(format!("{}: {what}", doc.name));
    for span in doc.spans() {
        if let Some((section, key)) = span.split_once('.') {
            let word =
                |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_lowercase() || c == '_');
            if word(section)
                && word(key)
                && !EXTENSIONS.contains(&key)
                && reference.sections.iter().any(|s| s == section)
                && !NOT_KEYS.contains(&span)
                && !reference.has(root, span)
            {
                missing(&format!("`{span}` is not a key of config/tallyd.toml"));
            }
        }
        if let Some(section) = span.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            // `[r]` in PromQL and `[]` are not sections; section names are longer.
            let word =
                section.len() >= 3 && section.chars().all(|c| c.is_ascii_lowercase() || c == '_');
            if word && !reference.sections.iter().any(|s| s == section) {
                missing(&format!(
                    "`[{section}]` is not a section of config/tallyd.toml"
                ));
            }
        }
    }
    for var in env_vars(&doc.text) {
        if var != "TALLYD_CONFIG" && reference.key_of_env(var).is_none() {
            missing(&format!("`{var}` sets no key of config/tallyd.toml"));
        }
    }
    for fence in doc.fences.iter().filter(|f| f.lang == "toml") {
        let Ok(table) = fence.body.parse::<Table>() else {
            missing(&format!("a TOML example does not parse:\n{}", fence.body));
            continue;
        };
        for (name, value) in &table {
            let keys: Vec<String> = match value {
                Value::Table(t) if reference.sections.contains(name) => {
                    t.keys().map(|k| format!("{name}.{k}")).collect()
                }
                // Another file's tables (tokens.toml's `[[token]]`).
                Value::Table(_) | Value::Array(_) => Vec::new(),
                _ => vec![name.clone()],
            };
            for key in keys.iter().filter(|k| !reference.has(root, k)) {
                missing(&format!(
                    "the TOML example sets `{key}`, not a key of config/tallyd.toml"
                ));
            }
        }
    }
    problems
}

/// `TALLYD_*` variable names in `text`.
fn env_vars(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("TALLYD_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        let var = &tail[..end];
        if var.len() > "TALLYD_".len() && !var.ends_with('_') {
            out.push(var);
        }
        rest = &tail[end..];
    }
    out
}

/// The configuration page's tables against the reference file: one row
/// per key, none for a key it does not have, and the file's default.
fn documented(reference: &Reference, page: &Doc) -> Vec<String> {
    let mut problems = Vec::new();
    let mut rows: BTreeMap<String, String> = BTreeMap::new();
    for line in page.prose.lines() {
        let Some(cells) = cells(line) else { continue };
        let [key, default, ..] = cells.as_slice() else {
            continue;
        };
        let Some(key) = key.strip_prefix('`').and_then(|k| k.strip_suffix('`')) else {
            continue;
        };
        if rows.insert(key.to_string(), default.to_string()).is_some() {
            problems.push(format!("{}: `{key}` has two rows", page.name));
        }
    }
    for (key, value) in &reference.keys {
        let Some(default) = rows.remove(key) else {
            problems.push(format!(
                "{}: no row for `{key}`, a key of config/tallyd.toml",
                page.name
            ));
            continue;
        };
        let written = spans(&default).first().map(|s| s.to_string());
        let parsed = written
            .as_deref()
            .and_then(|w| format!("v = {w}").parse::<Table>().ok())
            .and_then(|t| t.get("v").cloned());
        if parsed.as_ref() != Some(value) {
            problems.push(format!(
                "{}: `{key}`'s default is written {}, config/tallyd.toml has {value}",
                page.name,
                written.as_deref().unwrap_or("(nothing in backticks)")
            ));
        }
    }
    for key in rows.keys() {
        problems.push(format!(
            "{}: a row for `{key}`, which is not a key of config/tallyd.toml",
            page.name
        ));
    }
    problems
}
