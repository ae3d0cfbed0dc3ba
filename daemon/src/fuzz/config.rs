//! The config loader: random TOML files built from real and misspelt keys
//! with values of every type, and random `TALLYD_*` variables. Loading must
//! answer Ok or a `ConfigError`, never panic, and whatever loads must pass
//! its own validation.

use std::io::Write as _;

use proptest::prelude::*;
use proptest::test_runner::TestRunner;

use crate::config::{Cli, Config};

const KEYS: &[&str] = &[
    "grpc_listen",
    "http_listen",
    "store",
    "data_dir",
    "writer_id",
    "log_level",
    "log_format",
    "ingest.max_message_bytes",
    "ingest.lateness_window",
    "ingest.max_series",
    "ingest.max_series_per_source",
    "ingest.max_labels",
    "flush.interval",
    "flush.queue_depth",
    "retention.hour",
    "retention.day",
    "mongodb.uri",
    "mongodb.timeout",
    "query.max_points",
    "rollup.prefix_delimiter",
    "rollup.groups",
    "watch.window",
    "catalog.refresh",
    "aggregator.shards",
    "bogus.key",
    "flush.intervl",
    "prealloc.enabled",
    "prealloc.max_per_second",
];

const VALUES: &[&str] = &[
    "0",
    "1",
    "-1",
    "18446744073709551616",
    "1.5",
    "true",
    "\"\"",
    "\"1s\"",
    "\"500ms\"",
    "\"14d\"",
    "\"5x\"",
    "\"0s\"",
    "\"127.0.0.1:0\"",
    "\"mongodb://a@b\"",
    "[]",
    "[{name = \"g\", sources = [\"*\"]}]",
    "{}",
    "\"mongodb\"",
    "\"embedded\"",
    "\"\\u0000\"",
    "nan",
    "inf",
];

fn toml_text() -> impl Strategy<Value = String> {
    let line = (
        proptest::sample::select(KEYS),
        proptest::sample::select(VALUES),
    )
        .prop_map(|(k, v)| match k.split_once('.') {
            Some((table, key)) => format!("[{table}]\n{key} = {v}\n"),
            None => format!("{k} = {v}\n"),
        });
    prop_oneof![
        4 => proptest::collection::vec(line, 0..8).prop_map(|v| v.concat()),
        1 => any::<String>(),
    ]
}

fn env_vars() -> impl Strategy<Value = Vec<(String, String)>> {
    let name = proptest::sample::select(KEYS)
        .prop_map(|k| format!("TALLYD_{}", k.replace('.', "_").to_ascii_uppercase()));
    let value = prop_oneof![
        proptest::sample::select(VALUES).prop_map(|v| v.trim_matches('"').to_string()),
        any::<String>(),
    ];
    proptest::collection::vec((name, value), 0..4)
}

#[test]
fn fuzz_config_loader() {
    let mut runner = TestRunner::new(super::runner());
    let result = runner.run(&(toml_text(), env_vars()), |(text, env)| {
        let mut file = tempfile::NamedTempFile::new()
            .map_err(|e| TestCaseError::fail(format!("temp file: {e}")))?;
        file.write_all(text.as_bytes())
            .map_err(|e| TestCaseError::fail(format!("write: {e}")))?;
        let cli = Cli {
            config: Some(file.path().to_path_buf()),
            ..Cli::default()
        };
        if let Ok(config) = Config::load_from(&cli, env) {
            prop_assert!(config.validate().is_ok(), "loaded but invalid: {config:?}");
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
