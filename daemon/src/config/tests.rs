use super::cli::FLAG_KEYS;
use super::load::{default_leaves, env_name, ENV_ALLOW_LIST};
use super::*;
use clap::CommandFactory;
use clap::Parser;
use figment::value::Value;
use std::io::Write as _;
use std::time::Duration;

fn no_env() -> Vec<(String, String)> {
    Vec::new()
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn toml_file(text: &str) -> tempfile::NamedTempFile {
    let mut file = match tempfile::NamedTempFile::new() {
        Ok(f) => f,
        Err(e) => panic!("temp file: {e}"),
    };
    if let Err(e) = file.write_all(text.as_bytes()) {
        panic!("write temp file: {e}");
    }
    file
}

fn cli_with_file(file: &tempfile::NamedTempFile) -> Cli {
    Cli {
        config: Some(file.path().to_path_buf()),
        ..Cli::default()
    }
}

fn cli(args: &[&str]) -> Cli {
    let argv = std::iter::once("tallyd").chain(args.iter().copied());
    match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) => panic!("{e}"),
    }
}

fn load_err(cli: &Cli, env: Vec<(String, String)>) -> String {
    match Config::load_from(cli, env) {
        Ok(config) => panic!("expected an error, loaded {config:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn defaults() {
    let config = Config::load_from(&Cli::default(), no_env()).unwrap();
    assert_eq!(config, Config::default());
    assert_eq!(config.grpc_listen, "127.0.0.1:4317".parse().unwrap());
    assert_eq!(config.http_listen, "127.0.0.1:8080".parse().unwrap());
    assert_eq!(config.store, StoreKind::Embedded);
    assert_eq!(config.data_dir, PathBuf::from("./tally-data"));
    assert_eq!(config.writer_id, "");
    assert_eq!(config.log_format, LogFormat::Text);
    assert_eq!(config.log_level, "info");
    assert_eq!(config.ingest.max_message_bytes, 16 << 20);
    assert_eq!(config.ingest.lateness_window, Duration::from_secs(3600));
    assert_eq!(config.ingest.max_pending_slots, 4_000_000);
    assert_eq!(
        config.flush.retry_initial_backoff,
        Duration::from_millis(100)
    );
    assert_eq!(config.prealloc.hour_window, Duration::from_secs(600));
    assert_eq!(config.retention.day, Duration::from_secs(400 * 86_400));
    assert_eq!(config.mongodb.hour_collection, "metrics_by_hour");
    assert_eq!(config.query.max_points, 100_000);
    assert!(Config::default().validate().is_ok());
}

#[test]
fn partial_sections_fill_in_defaults() {
    let file = toml_file("[flush]\ninterval = \"250ms\"\n");
    let config = Config::load_from(&cli_with_file(&file), no_env()).unwrap();
    assert_eq!(config.flush.interval, Duration::from_millis(250));
    assert_eq!(config.flush.queue_depth, 1);
    assert_eq!(config.ingest, IngestConfig::default());
}

#[test]
fn file_overrides_default() {
    let file = toml_file(
        r#"
        grpc_listen = "0.0.0.0:4317"
        store = "mongodb"
        log_format = "json"
        [ingest]
        max_series = 5_000
        lateness_window = "90m"
        [prealloc]
        enabled = false
        [mongodb]
        database = "metrics"
        "#,
    );
    let config = Config::load_from(&cli_with_file(&file), no_env()).unwrap();
    assert_eq!(config.grpc_listen, "0.0.0.0:4317".parse().unwrap());
    assert_eq!(config.store, StoreKind::Mongodb);
    assert_eq!(config.log_format, LogFormat::Json);
    assert_eq!(config.ingest.max_series, 5_000);
    assert_eq!(config.ingest.lateness_window, Duration::from_secs(90 * 60));
    assert!(!config.prealloc.enabled);
    assert_eq!(config.mongodb.database, "metrics");
    assert_eq!(config.http_listen, Config::default().http_listen);
}

#[test]
fn config_path_from_env() {
    let file = toml_file("[query]\nmax_points = 7\n");
    let path = file.path().to_string_lossy().into_owned();
    let config = Config::load_from(&Cli::default(), env(&[("TALLYD_CONFIG", &path)])).unwrap();
    assert_eq!(config.query.max_points, 7);

    // The flag names the file when both are given.
    let other = toml_file("[query]\nmax_points = 9\n");
    let config =
        Config::load_from(&cli_with_file(&other), env(&[("TALLYD_CONFIG", &path)])).unwrap();
    assert_eq!(config.query.max_points, 9);
}

#[test]
fn env_overrides_file() {
    let file = toml_file(
        r#"
        [flush]
        interval = "5s"
        [mongodb]
        uri = "mongodb://file:27017"
        [ingest]
        max_series = 10
        "#,
    );
    let config = Config::load_from(
        &cli_with_file(&file),
        env(&[
            ("TALLYD_FLUSH_INTERVAL", "2s"),
            ("TALLYD_MONGODB_URI", "mongodb://env:27017"),
            ("TALLYD_INGEST_MAX_SERIES", "20"),
            ("TALLYD_PREALLOC_HOUR_WINDOW", "15m"),
            ("TALLYD_PREALLOC_ENABLED", "false"),
            ("TALLYD_GRPC_LISTEN", "0.0.0.0:9999"),
            ("TALLYD_STORE", "mongodb"),
            // Digits stay a string for string settings.
            ("TALLYD_MONGODB_DATABASE", "2024"),
            ("TALLYD_WRITER_ID", "7"),
            ("PATH", "/usr/bin"),
        ]),
    )
    .unwrap();
    assert_eq!(config.flush.interval, Duration::from_secs(2));
    assert_eq!(config.mongodb.uri, "mongodb://env:27017");
    assert_eq!(config.ingest.max_series, 20);
    assert_eq!(config.prealloc.hour_window, Duration::from_secs(15 * 60));
    assert!(!config.prealloc.enabled);
    assert_eq!(config.grpc_listen, "0.0.0.0:9999".parse().unwrap());
    assert_eq!(config.store, StoreKind::Mongodb);
    assert_eq!(config.mongodb.database, "2024");
    assert_eq!(config.writer_id, "7");
}

#[test]
fn flag_overrides_env() {
    let file = toml_file("data_dir = \"/from/file\"\nlog_level = \"warn\"\n");
    let mut cli = cli(&[
        "--grpc-listen",
        "0.0.0.0:1111",
        "--store",
        "embedded",
        "--mongodb-uri",
        "mongodb://flag:27017",
        "--log-format",
        "json",
    ]);
    cli.config = Some(file.path().to_path_buf());
    let config = Config::load_from(
        &cli,
        env(&[
            ("TALLYD_GRPC_LISTEN", "0.0.0.0:2222"),
            ("TALLYD_HTTP_LISTEN", "0.0.0.0:3333"),
            ("TALLYD_STORE", "mongodb"),
            ("TALLYD_MONGODB_URI", "mongodb://env:27017"),
            ("TALLYD_LOG_LEVEL", "debug"),
        ]),
    )
    .unwrap();
    assert_eq!(config.grpc_listen, "0.0.0.0:1111".parse().unwrap());
    assert_eq!(config.store, StoreKind::Embedded);
    assert_eq!(config.mongodb.uri, "mongodb://flag:27017");
    assert_eq!(config.log_format, LogFormat::Json);
    // Flags not given leave env and file in charge.
    assert_eq!(config.http_listen, "0.0.0.0:3333".parse().unwrap());
    assert_eq!(config.log_level, "debug");
    assert_eq!(config.data_dir, PathBuf::from("/from/file"));
}

#[test]
fn missing_config_file_is_an_error() {
    let cli = Cli {
        config: Some(PathBuf::from("/nonexistent/tallyd.toml")),
        ..Cli::default()
    };
    let err = Config::load_from(&cli, no_env()).unwrap_err();
    assert!(matches!(err, ConfigError::File { .. }), "{err}");
    assert!(
        err.to_string().contains("/nonexistent/tallyd.toml"),
        "{err}"
    );
}

#[test]
fn unknown_file_key_names_key() {
    let file = toml_file("[flush]\nintervall = \"1s\"\n");
    let err = Config::load_from(&cli_with_file(&file), no_env()).unwrap_err();
    let ConfigError::Parse(problems) = &err else {
        panic!("unexpected error {err}");
    };
    assert_eq!(problems[0].key, "flush.intervall");
    let text = err.to_string();
    assert!(
        text.contains("unknown field `intervall` in flush"),
        "{text}"
    );
    assert!(text.contains("`interval`"), "{text}");
    assert!(text.contains(&file.path().display().to_string()), "{text}");

    let file = toml_file("flsh = 1\n");
    let text = load_err(&cli_with_file(&file), no_env());
    assert!(text.contains("unknown field `flsh` at top level"), "{text}");

    let file = toml_file("[flussh]\ninterval = \"1s\"\n");
    let text = load_err(&cli_with_file(&file), no_env());
    assert!(text.contains("flussh"), "{text}");
}

#[test]
fn toml_syntax_error_names_file() {
    let file = toml_file("[flush\ninterval = 1s\n");
    let text = load_err(&cli_with_file(&file), no_env());
    assert!(text.contains(&file.path().display().to_string()), "{text}");
}

#[test]
fn unknown_env_var_names_it() {
    let err = Config::load_from(
        &Cli::default(),
        env(&[("TALLYD_FLUSH_INTERVL", "1s"), ("TALLYD_BOGUS", "x")]),
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("unknown environment variable TALLYD_BOGUS"),
        "{text}"
    );
    assert!(
        text.contains("TALLYD_FLUSH_INTERVL (did you mean TALLYD_FLUSH_INTERVAL?)"),
        "{text}"
    );
    // Section and key are joined by one underscore, not figment's two.
    let text = load_err(&Cli::default(), env(&[("TALLYD_INGEST__MAX_SERIES", "1")]));
    assert!(
        text.contains("did you mean TALLYD_INGEST_MAX_SERIES?"),
        "{text}"
    );
    // Unprefixed look-alikes are someone else's business.
    assert!(Config::load_from(&Cli::default(), env(&[("TALLY_BOGUS", "x")])).is_ok());
}

#[test]
fn bad_values_name_key_and_source() {
    let text = load_err(&Cli::default(), env(&[("TALLYD_FLUSH_INTERVAL", "5x")]));
    assert!(text.contains("flush.interval"), "{text}");
    assert!(text.contains("TALLYD_FLUSH_INTERVAL"), "{text}");
    assert!(text.contains("\"5x\""), "{text}");
    assert!(text.contains("such as \"500ms\""), "{text}");

    let text = load_err(
        &Cli::default(),
        env(&[("TALLYD_INGEST_MAX_SERIES", "lots")]),
    );
    assert!(text.contains("ingest.max_series"), "{text}");
    assert!(text.contains("TALLYD_INGEST_MAX_SERIES"), "{text}");

    let text = load_err(&Cli::default(), env(&[("TALLYD_GRPC_LISTEN", "localhost")]));
    assert!(text.contains("TALLYD_GRPC_LISTEN"), "{text}");

    let text = load_err(&Cli::default(), env(&[("TALLYD_STORE", "postgres")]));
    assert!(text.contains("TALLYD_STORE"), "{text}");
    assert!(
        text.contains("unknown value `postgres`; expected `embedded` or `mongodb`"),
        "{text}"
    );

    let file = toml_file("[retention]\nday = \"1 fortnight\"\n");
    let text = load_err(&cli_with_file(&file), no_env());
    assert!(text.contains("retention.day"), "{text}");
    assert!(text.contains(&file.path().display().to_string()), "{text}");

    // A bare number is ambiguous (seconds? milliseconds?), so refuse it.
    let file = toml_file("[flush]\ninterval = 5\n");
    let text = load_err(&cli_with_file(&file), no_env());
    assert!(text.contains("flush.interval"), "{text}");
    assert!(text.contains("with a unit, such as"), "{text}");
}

#[test]
fn validation_errors_name_keys() {
    let file = toml_file(
        r#"
        [flush]
        interval = "1ms"
        queue_depth = 0
        [aggregator]
        shards = 5000
        [prealloc]
        hour_window = "1h"
        day_window = "25h"
        [retention]
        hour = "30m"
        day = "12h"
        [mongodb]
        statements_per_batch = 100001
        hour_collection = "same"
        day_collection = "same"
        [query]
        max_points = 0
        "#,
    );
    let err = Config::load_from(&cli_with_file(&file), no_env()).unwrap_err();
    let ConfigError::Invalid(problems) = &err else {
        panic!("unexpected error {err}");
    };
    let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
    for key in [
        "flush.interval",
        "flush.queue_depth",
        "aggregator.shards",
        "prealloc.hour_window",
        "prealloc.day_window",
        "retention.hour",
        "retention.day",
        "mongodb.statements_per_batch",
        "mongodb.day_collection",
        "query.max_points",
        // 1h of lateness outlives 30m of hour retention.
        "ingest.lateness_window",
    ] {
        assert!(keys.contains(&key), "{key} missing from {err}");
    }
    let text = err.to_string();
    assert!(
        text.contains("flush.interval: must be at least 10ms"),
        "{text}"
    );
    assert!(
        text.contains("retention.day: must be at least 1d"),
        "{text}"
    );
    assert!(text.contains("(from config file"), "{text}");
    // Only the bad settings are reported.
    assert!(!keys.contains(&"mongodb.uri"), "{text}");
}

#[test]
fn validation_error_names_env_origin() {
    let text = load_err(&Cli::default(), env(&[("TALLYD_FLUSH_QUEUE_DEPTH", "0")]));
    assert!(
        text.contains(
            "flush.queue_depth: must be at least 1 (from environment variable TALLYD_FLUSH_QUEUE_DEPTH)"
        ),
        "{text}"
    );
    let text = load_err(&cli(&["--http-listen", "127.0.0.1:4317"]), no_env());
    assert!(
        text.contains("http_listen: 127.0.0.1:4317 clashes with grpc_listen"),
        "{text}"
    );
    assert!(text.contains("flag --http-listen"), "{text}");
}

#[test]
fn series_collection_is_validated() {
    let mut c = Config::default();
    assert_eq!(c.mongodb.series_collection, "tally_series");
    for bad in [
        "",
        "system.series",
        "a$b",
        "metrics_by_hour",
        "metrics_by_day",
        "tally_writers",
    ] {
        c.mongodb.series_collection = bad.into();
        let Err(ConfigError::Invalid(problems)) = c.validate() else {
            panic!("{bad:?} accepted");
        };
        assert!(
            problems
                .iter()
                .any(|p| p.key == "mongodb.series_collection"),
            "{bad:?}: {problems:?}"
        );
    }
}

#[test]
fn more_validation() {
    let mut c = Config::default();
    c.mongodb.uri = "http://x".into();
    c.mongodb.database = "a.b".into();
    c.mongodb.hour_collection = String::new();
    c.mongodb.day_collection = "system.x".into();
    c.flush.retry_max_backoff = Duration::from_millis(1);
    c.ingest.max_message_bytes = 10;
    c.log_level = "info,foo=loudest".into();
    c.retention.day = Duration::from_secs(100 * 365 * 86_400);
    let Err(ConfigError::Invalid(problems)) = c.validate() else {
        panic!("expected validation errors");
    };
    let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
    for key in [
        "mongodb.uri",
        "mongodb.database",
        "mongodb.hour_collection",
        "mongodb.day_collection",
        "flush.retry_max_backoff",
        "ingest.max_message_bytes",
        "log_level",
        "retention.day",
    ] {
        assert!(keys.contains(&key), "{key} missing from {keys:?}");
    }
    // Port 0 asks the OS for a free port, so two listeners may share it.
    let mut c = Config::default();
    c.grpc_listen = "127.0.0.1:0".parse().unwrap();
    c.http_listen = c.grpc_listen;
    assert!(c.validate().is_ok());
    c.grpc_listen = "0.0.0.0:9000".parse().unwrap();
    c.http_listen = "127.0.0.1:9000".parse().unwrap();
    assert!(c.validate().is_err());
    c.http_listen = "127.0.0.2:9000".parse().unwrap();
    c.grpc_listen = "127.0.0.1:9000".parse().unwrap();
    assert!(c.validate().is_ok());
}

#[test]
fn example_config_loads_and_equals_defaults() {
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../config/tallyd.toml"
    ));
    let cli = Cli {
        config: Some(path.clone()),
        ..Cli::default()
    };
    let config = Config::load_from(&cli, no_env()).unwrap();
    assert_eq!(config, Config::default());

    // Every key must appear uncommented, so the file really is the
    // reference and not just a sample.
    let text = std::fs::read_to_string(&path).unwrap();
    let mut section = String::new();
    let mut found = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
        } else if let Some((key, _)) = line.split_once('=') {
            if !line.starts_with('#') {
                let key = key.trim();
                found.push(if section.is_empty() {
                    key.to_string()
                } else {
                    format!("{section}.{key}")
                });
            }
        }
    }
    let expected: Vec<String> = default_leaves()
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    for key in &expected {
        assert!(found.contains(key), "config/tallyd.toml lacks {key}");
    }
}

#[test]
fn env_names_follow_keys() {
    let names = env_var_names();
    for name in [
        "TALLYD_CONFIG",
        "TALLYD_GRPC_LISTEN",
        "TALLYD_FLUSH_INTERVAL",
        "TALLYD_MONGODB_URI",
        "TALLYD_INGEST_MAX_SERIES",
        "TALLYD_PREALLOC_HOUR_WINDOW",
        "TALLYD_RETENTION_DAY",
        "TALLYD_QUERY_MAX_POINTS",
        "TALLYD_AGGREGATOR_SHARDS",
    ] {
        assert!(names.contains(&name.to_string()), "{name} missing");
    }
    let mut unique = names.clone();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "two keys share an env name");
    // Every leaf of the default config has a variable.
    assert_eq!(
        names.len(),
        default_leaves().unwrap().len() + ENV_ALLOW_LIST.len()
    );
}

/// How an operator would type `value` in a variable.
fn env_text(value: &Value) -> String {
    match value {
        Value::Bool(_, b) => b.to_string(),
        Value::Num(_, n) => match (n.to_u128(), n.to_i128(), n.to_f64()) {
            (Some(u), _, _) => u.to_string(),
            (_, Some(i), _) => i.to_string(),
            (_, _, Some(f)) => format!("{f:?}"),
            _ => panic!("unprintable number {n:?}"),
        },
        Value::Array(_, items) => {
            let items: Vec<String> = items.iter().map(env_text).collect();
            format!("[{}]", items.join(", "))
        }
        // Only inside an array: a top-level string is typed as it is.
        Value::String(_, s) => format!("{s:?}"),
        other => panic!("no default of this shape expected: {other:?}"),
    }
}

#[test]
fn every_setting_settable_from_env() {
    // Round-trip each default through its variable: proves the mapping
    // and the type-aware parsing for every key, not just a sample.
    for (key, default) in default_leaves().unwrap() {
        let raw = match &default {
            Value::String(_, s) => s.clone(),
            other => env_text(other),
        };
        let result = Config::load_from(&Cli::default(), vec![(env_name(&key), raw)]);
        assert_eq!(result.ok(), Some(Config::default()), "{key}");
    }
}

#[test]
fn every_setting_round_trips_through_a_file() {
    let mut config = Config::default();
    config.mongodb.uri = "mongodb://tally@db1:27017,db2:27017/?replicaSet=rs".into();
    config.writer_id = "w \"1\"\\".into();
    config.flush.interval = Duration::from_millis(1500);
    config.rollup.groups = vec![crate::rollup::GroupRule {
        name: "edge".into(),
        sources: vec!["web-*".into()],
    }];
    let text = match toml::to_string(&config) {
        Ok(text) => text,
        Err(e) => panic!("serialising the config: {e}"),
    };
    assert!(text.contains("[flush]"), "{text}");
    let file = toml_file(&text);
    let loaded = Config::load_from(&cli_with_file(&file), no_env()).unwrap();
    assert_eq!(loaded, config);
}

#[test]
fn cli_parses_and_help_reads_well() {
    Cli::command().debug_assert();
    let cli = cli(&[
        "--config",
        "/etc/tallyd.toml",
        "--http-listen",
        "0.0.0.0:8080",
        "--data-dir",
        "/var/lib/tally",
        "--store",
        "mongodb",
        "--log-level",
        "debug",
    ]);
    assert_eq!(cli.config, Some(PathBuf::from("/etc/tallyd.toml")));
    assert_eq!(cli.store, Some(StoreKind::Mongodb));
    assert_eq!(cli.grpc_listen, None);
    assert!(Cli::try_parse_from(["tallyd", "--store", "postgres"]).is_err());
    assert!(Cli::try_parse_from(["tallyd", "--grpc-listen", "nope"]).is_err());

    // The defaults quoted in --help must be the real ones.
    let help = Cli::command().render_long_help().to_string();
    let d = Config::default();
    for shown in [
        d.grpc_listen.to_string(),
        d.http_listen.to_string(),
        d.data_dir.display().to_string(),
        d.mongodb.uri.clone(),
        d.log_level.clone(),
        "TALLYD_CONFIG".to_string(),
        "TALLYD_<SECTION>_<KEY>".to_string(),
    ] {
        assert!(help.contains(&shown), "--help lacks {shown}:\n{help}");
    }
    // Every flag maps to a real key.
    let keys: Vec<String> = default_leaves()
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    for (key, flag) in FLAG_KEYS {
        assert!(keys.contains(&key.to_string()), "{key}");
        assert!(help.contains(flag), "{flag}");
    }
}

#[test]
fn an_env_value_the_value_parser_chokes_on_is_a_type_error() {
    // Found by fuzzing: figment's value parser panics on this string.
    let text = load_err(
        &Cli::default(),
        env(&[("TALLYD_PREALLOC_ENABLED", "\"\u{1FACE}\\0\"")]),
    );
    assert!(text.contains("TALLYD_PREALLOC_ENABLED"), "{text}");
}
