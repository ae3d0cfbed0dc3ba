//! Layered loading: defaults, then the TOML file, then `TALLYD_*`
//! variables, then flags, each merged by figment. A misspelt key or
//! variable is an error that names the closest real one, and every error
//! names the file, variable or flag the bad value came from.

use std::path::PathBuf;

use figment::error::Kind;
use figment::providers::{Format, Serialized, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};

use super::cli::flag_origin;
use super::error::parse_error;
use super::{Cli, Config, ConfigError, SettingError, UnknownEnvVar};

/// Prefix shared by every environment variable the daemon reads.
pub const ENV_PREFIX: &str = "TALLYD_";

/// Names the config file when `--config` is not given.
pub const CONFIG_ENV: &str = "TALLYD_CONFIG";

/// `TALLYD_*` variables that are ours but are not settings, so the
/// unknown-variable check must let them through.
pub(super) const ENV_ALLOW_LIST: &[&str] = &[CONFIG_ENV];

// Metadata names of our own providers; error rendering matches on them to
// name the exact variable or flag instead of a generic source.
const ENV_SOURCE: &str = "environment";
const FLAG_SOURCE: &str = "command line";

impl Config {
    /// Loads the configuration from `cli`, the process environment, the
    /// config file and defaults, then validates it.
    pub fn load(cli: &Cli) -> Result<Config, ConfigError> {
        let mut env = Vec::new();
        // `std::env::vars` panics on non-UTF-8 entries; only ours are our
        // business, everyone else's odd variables must not stop the daemon.
        for (name, value) in std::env::vars_os() {
            let name = name.to_string_lossy().into_owned();
            if !name.starts_with(ENV_PREFIX) {
                continue;
            }
            match value.into_string() {
                Ok(value) => env.push((name, value)),
                Err(_) => return Err(ConfigError::EnvNotUnicode { name }),
            }
        }
        Config::load_from(cli, env)
    }

    /// [`Config::load`] with the environment given explicitly, so callers
    /// (and tests) need not touch the process environment.
    pub fn load_from(
        cli: &Cli,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let leaves = default_leaves().map_err(|e| parse_error("", None, e))?;

        let EnvSettings {
            overrides: env_overrides,
            config: config_env,
        } = env_settings(&leaves, env)?;

        // An empty TALLYD_CONFIG is how shells "unset" it in a one-off
        // command, so treat it as absent rather than as a file named "".
        let config_path = cli
            .config
            .clone()
            .or_else(|| config_env.filter(|p| !p.is_empty()).map(PathBuf::from));

        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = config_path {
            // Read it ourselves: figment treats a missing file as empty, but
            // a file the operator named and we cannot read must stop startup.
            let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::File {
                path: path.clone(),
                source,
            })?;
            figment = figment.merge(TomlFile { path, text });
        }
        figment = figment
            .merge(Overrides {
                kind: OverrideKind::Env,
                entries: env_overrides,
            })
            .merge(Overrides {
                kind: OverrideKind::Flag,
                entries: cli.overrides()?,
            });

        let config: Config = figment
            .extract()
            .map_err(|e| ConfigError::Parse(setting_errors(&figment, e)))?;

        let problems: Vec<SettingError> = config
            .problems()
            .into_iter()
            .map(|(key, message)| SettingError {
                key: key.to_string(),
                origin: describe_origin(figment.find_metadata(key), key),
                message,
            })
            .collect();
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(ConfigError::Invalid(problems))
        }
    }
}

/// Every `TALLYD_*` variable the daemon reads, sorted: one per setting plus
/// `TALLYD_CONFIG`.
pub fn env_var_names() -> Vec<String> {
    let mut names: Vec<String> = default_leaves()
        .unwrap_or_default()
        .iter()
        .map(|(key, _)| env_name(key))
        .chain(ENV_ALLOW_LIST.iter().map(|s| s.to_string()))
        .collect();
    names.sort();
    names
}
/// The settings the `TALLYD_*` variables of `env` give, and
/// `TALLYD_CONFIG`'s value; a variable that names no setting (nor one of
/// the allowed others) stops startup, with the closest name.
fn env_settings(
    leaves: &[(String, Value)],
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<EnvSettings, ConfigError> {
    let mut env_overrides = Vec::new();
    let mut unknown = Vec::new();
    let mut config_env = None;
    for (name, raw) in env {
        if !name.starts_with(ENV_PREFIX) {
            continue;
        }
        if name == CONFIG_ENV {
            config_env = Some(raw);
            continue;
        }
        if ENV_ALLOW_LIST.contains(&name.as_str()) {
            continue;
        }
        match leaves.iter().find(|(key, _)| env_name(key) == name) {
            Some((key, default)) => env_overrides.push((key.clone(), env_value(default, raw))),
            None => unknown.push(name),
        }
    }
    if !unknown.is_empty() {
        unknown.sort();
        unknown.dedup();
        let known: Vec<String> = leaves.iter().map(|(key, _)| env_name(key)).collect();
        let unknown = unknown
            .into_iter()
            .map(|name| UnknownEnvVar {
                suggestion: closest(&name, &known),
                name,
            })
            .collect();
        return Err(ConfigError::UnknownEnv(unknown));
    }
    Ok(EnvSettings {
        overrides: env_overrides,
        config: config_env,
    })
}

/// What the environment sets: settings, and the config file's path.
struct EnvSettings {
    overrides: Vec<(String, Value)>,
    /// `TALLYD_CONFIG`.
    config: Option<String>,
}

/// `flush.interval` -> `TALLYD_FLUSH_INTERVAL`.
pub(super) fn env_name(key: &str) -> String {
    format!("{ENV_PREFIX}{}", key.replace('.', "_").to_ascii_uppercase())
}

/// Dotted key and default value of every setting, read off the serialized
/// defaults so the list cannot drift from the structs.
// A String error: figment::Error is too large to pass around by value, and
// this can only fail if Config itself stops being serializable.
pub(super) fn default_leaves() -> Result<Vec<(String, Value)>, String> {
    fn walk(prefix: &str, dict: &Dict, out: &mut Vec<(String, Value)>) {
        for (name, value) in dict {
            let key = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}.{name}")
            };
            match value {
                Value::Dict(_, inner) => walk(&key, inner, out),
                leaf => out.push((key, leaf.clone())),
            }
        }
    }
    let data = Serialized::defaults(Config::default())
        .data()
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    if let Some(root) = data.get(&Profile::Default) {
        walk("", root, &mut out);
    }
    Ok(out)
}

/// Reads an environment value with the type its setting expects.
fn env_value(default: &Value, raw: String) -> Value {
    match default {
        // Without this, a database named "2024" or a writer id "7" would be
        // parsed as a number and then rejected as "expected a string".
        Value::String(..) => Value::from(raw),
        // figment's value parser panics on some quoted strings with
        // escapes (found by fuzzing); such a value is kept as the string it
        // is, and the setting's type check then names the variable.
        _ => {
            let text = raw.clone();
            match std::panic::catch_unwind(move || text.parse::<Value>()) {
                Ok(Ok(value)) => value,
                Ok(Err(never)) => match never {},
                Err(_) => Value::from(raw),
            }
        }
    }
}

/// The known name nearest to `name`, if it is close enough to be a typo.
fn closest(name: &str, known: &[String]) -> Option<String> {
    known
        .iter()
        .map(|k| (strsim::levenshtein(name, k), k))
        .filter(|(d, _)| *d <= 3)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k.clone())
}

/// The config file, read by us so a missing file is an error, but still
/// named in figment's metadata so errors point at it.
struct TomlFile {
    path: PathBuf,
    text: String,
}

impl Provider for TomlFile {
    fn metadata(&self) -> Metadata {
        Metadata::from("config file", figment::Source::File(self.path.clone()))
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Toml::string(&self.text).data()
    }
}

#[derive(Clone, Copy)]
enum OverrideKind {
    Env,
    Flag,
}

/// Values from the environment or the command line, keyed by dotted path.
struct Overrides {
    kind: OverrideKind,
    entries: Vec<(String, Value)>,
}

impl Provider for Overrides {
    fn metadata(&self) -> Metadata {
        // The interpolater is what turns a failing key back into the exact
        // variable or flag the operator typed.
        match self.kind {
            OverrideKind::Env => Metadata::named(ENV_SOURCE).interpolater(|_, keys| {
                format!("environment variable {}", env_name(&keys.join(".")))
            }),
            OverrideKind::Flag => {
                Metadata::named(FLAG_SOURCE).interpolater(|_, keys| flag_origin(&keys.join(".")))
            }
        }
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        fn insert(dict: &mut Dict, key: &str, value: Value) {
            match key.split_once('.') {
                None => {
                    dict.insert(key.to_string(), value);
                }
                Some((head, rest)) => {
                    let entry = dict
                        .entry(head.to_string())
                        .or_insert_with(|| Value::from(Dict::new()));
                    if let Value::Dict(_, inner) = entry {
                        insert(inner, rest, value);
                    }
                }
            }
        }
        let mut root = Dict::new();
        for (key, value) in &self.entries {
            insert(&mut root, key, value.clone());
        }
        let mut data = Map::new();
        data.insert(Profile::Default, root);
        Ok(data)
    }
}

/// Names the file, variable or flag that supplied `key`; `None` for a
/// built-in default, where there is nothing for the operator to go and fix.
fn describe_origin(metadata: Option<&Metadata>, key: &str) -> Option<String> {
    let md = metadata?;
    if md.name == ENV_SOURCE || md.name == FLAG_SOURCE {
        let path: Vec<&str> = key.split('.').collect();
        return Some(md.interpolate(&Profile::Default, &path));
    }
    let file = md.source.as_ref().and_then(figment::Source::file_path)?;
    Some(format!("config file {}", file.display()))
}

/// Turns figment's errors into ones that name the dotted key and the exact
/// file, variable or flag that supplied the bad value.
fn setting_errors(figment: &Figment, error: figment::Error) -> Vec<SettingError> {
    error
        .into_iter()
        .map(|e| {
            let mut path = e.path.clone();
            let (message, metadata) = match &e.kind {
                Kind::UnknownField(field, expected) => {
                    // figment already appends the unknown name to the path;
                    // the enclosing table is what precedes it.
                    if path.last() != Some(field) {
                        path.push(field.clone());
                    }
                    let table = &path[..path.len() - 1];
                    let place = if table.is_empty() {
                        "at top level".to_string()
                    } else {
                        format!("in {}", table.join("."))
                    };
                    let message = format!(
                        "unknown field `{field}` {place}; expected {}",
                        one_of(expected)
                    );
                    // The error carries the enclosing table's metadata, which
                    // for a merged table is the defaults; the unknown key's
                    // own value knows which file it came from.
                    (message, figment.find_metadata(&path.join(".")))
                }
                // figment's own wording doubles the backticks here.
                Kind::UnknownVariant(value, expected) => (
                    format!("unknown value `{value}`; expected {}", one_of(expected)),
                    e.metadata.as_ref(),
                ),
                kind => (with_hint(kind.to_string()), e.metadata.as_ref()),
            };
            let key = path.join(".");
            SettingError {
                origin: describe_origin(metadata, &key),
                key,
                message,
            }
        })
        .collect()
}

/// Durations are strings with a unit; say so where the parser only says
/// what it expected.
fn with_hint(message: String) -> String {
    if message.contains("expected a duration") {
        format!("{message}; write it with a unit, such as \"500ms\", \"30s\", \"90m\" or \"14d\"")
    } else {
        message
    }
}

fn one_of(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|name| format!("`{name}`")).collect();
    match quoted.as_slice() {
        [] => "nothing".to_string(),
        [only] => only.clone(),
        [first, second] => format!("{first} or {second}"),
        _ => format!("one of {}", quoted.join(", ")),
    }
}
