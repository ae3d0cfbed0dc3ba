//! Commands: the `cargo`, `scripts/`, `tallyd` and `tally-loadgen`
//! commands the docs show, in fenced shell blocks and in code spans, name
//! a real package, binary, bench, test target and script, and only flags
//! that exist: cargo's per `cargo <command> --help`, the binaries' per
//! their `--help`, a script's per its text.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use tally_testkit::bins::Bin;
use toml::{Table, Value};

use crate::markdown::Doc;

/// What `cargo test`/`cargo bench` pass to the test harness after `--`
/// that the docs may use (libtest's own; criterion takes filters).
const HARNESS_FLAGS: &[&str] = &[
    "--ignored",
    "--include-ignored",
    "--nocapture",
    "--test-threads",
    "--exact",
    "--list",
    "--skip",
    "--show-output",
];

/// A workspace package: its binaries, benches and integration tests.
#[derive(Debug, Default)]
struct Package {
    bins: Vec<String>,
    benches: Vec<String>,
    tests: Vec<String>,
}

pub fn check(root: &Path, docs: &[Doc]) -> Vec<String> {
    let mut checker = Checker {
        root: root.to_path_buf(),
        packages: packages(root),
        help: BTreeMap::new(),
    };
    let mut problems = Vec::new();
    for doc in docs {
        for command in commands(doc) {
            for p in checker.check(&command) {
                problems.push(format!("{}: `{}`: {p}", doc.name, command.join(" ")));
            }
        }
    }
    problems
}

/// The commands of a document: every line of its shell blocks, and the
/// code spans that start like one.
fn commands(doc: &Doc) -> Vec<Vec<String>> {
    let mut lines: Vec<String> = Vec::new();
    for fence in &doc.fences {
        if !matches!(fence.lang.as_str(), "sh" | "bash" | "console" | "") {
            continue;
        }
        let mut joined = String::new();
        for line in fence.body.lines() {
            match line.strip_suffix('\\') {
                Some(head) => joined.push_str(head),
                None => {
                    joined.push_str(line);
                    lines.push(std::mem::take(&mut joined));
                }
            }
        }
    }
    let mut commands: Vec<Vec<String>> = lines.iter().flat_map(|l| split_line(l)).collect();
    // Code spans that are a command (environment assignments first allowed):
    // `scripts/bench-ingest --runs 3`, `NO_BUILD=1 scripts/bench-realtime 50000`.
    let programs = ["cargo", "tallyd", "tally-loadgen"];
    for span in doc.spans() {
        commands.extend(split_line(span).into_iter().filter(|c| {
            let p = c[0].as_str();
            (c.len() > 1 && (programs.contains(&p) || p.starts_with("target/release/")))
                || (p.starts_with("scripts/") && !p.ends_with('/'))
        }));
    }
    commands
}

/// A shell line as commands: words, without comments, environment
/// assignments and redirections, cut at `&&`, `||`, `|` and `;`.
fn split_line(line: &str) -> Vec<Vec<String>> {
    let line = line.trim().trim_start_matches("$ ");
    let mut commands = vec![Vec::new()];
    let mut redirected = false;
    for word in words(line) {
        if word.starts_with('#') {
            break;
        }
        if matches!(word.as_str(), "&&" | "||" | "|" | ";") {
            commands.push(Vec::new());
            redirected = false;
            continue;
        }
        if word.starts_with(['>', '<']) || word.starts_with("2>") {
            redirected = true;
        }
        let current = commands.last_mut().expect("one command at least");
        let assignment = current.is_empty()
            && word.split_once('=').is_some_and(|(k, _)| {
                !k.is_empty() && k.chars().all(|c| c.is_ascii_uppercase() || c == '_')
            });
        if !redirected && !assignment {
            current.push(word);
        }
    }
    commands.retain(|c| !c.is_empty());
    commands
}

/// Words, with single and double quotes taken off.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut started = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                started = true;
            }
            (None, c) if c.is_whitespace() => {
                if started || !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
                started = false;
            }
            (None, c) => word.push(c),
        }
    }
    if started || !word.is_empty() {
        out.push(word);
    }
    out
}

struct Checker {
    root: PathBuf,
    packages: BTreeMap<String, Package>,
    /// `--help` texts, by what was asked.
    help: BTreeMap<String, Option<String>>,
}

impl Checker {
    fn check(&mut self, command: &[String]) -> Vec<String> {
        let Some(program) = command.first() else {
            return Vec::new();
        };
        let args = &command[1..];
        match program.as_str() {
            "cargo" => self.cargo(args).unwrap_or_default(),
            "tallyd" | "target/release/tallyd" => self.flags_of_binary("tallyd", args),
            "tally-loadgen" | "target/release/tally-loadgen" => {
                self.flags_of_binary("tally-loadgen", args)
            }
            p if p.starts_with("scripts/") => self.script(p, args),
            _ => Vec::new(),
        }
    }

    /// None when cargo cannot say (a component such as clippy missing).
    fn cargo(&mut self, args: &[String]) -> Option<Vec<String>> {
        let Some(sub) = args.first() else {
            return Some(vec!["no cargo command".into()]);
        };
        let (own, after) = match args.iter().position(|a| a == "--") {
            Some(i) => (&args[1..i], &args[i + 1..]),
            None => (&args[1..], &[][..]),
        };
        // `cargo clippy --help` lists its own flags and defers to `cargo
        // check` for the rest.
        let mut help = String::new();
        for cmd in [sub.as_str(), if sub == "clippy" { "check" } else { "" }] {
            if !cmd.is_empty() {
                help.push_str(&self.help_of(&format!("cargo {cmd}"), || {
                    Command::new(option_env!("CARGO").unwrap_or("cargo"))
                        .args([cmd, "--help"])
                        .output()
                })?);
            }
        }
        let mut problems = unknown_flags(own, &help, &format!("cargo {sub} --help"));
        let value = |flags: &[&str]| {
            own.windows(2)
                .find(|w| flags.contains(&w[0].as_str()))
                .map(|w| w[1].clone())
        };
        let package = value(&["-p", "--package"]);
        let pkg = match &package {
            Some(name) => match self.packages.get(name) {
                Some(p) => Some(p),
                None => {
                    problems.push(format!("no package {name} in the workspace"));
                    None
                }
            },
            None => None,
        };
        if let Some(pkg) = pkg {
            for (flag, names, what) in [
                ("--bench", &pkg.benches, "bench"),
                ("--test", &pkg.tests, "test target"),
                ("--bin", &pkg.bins, "binary"),
            ] {
                if let Some(name) = value(&[flag]) {
                    if !names.contains(&name) {
                        problems.push(format!(
                            "no {what} {name} in {}",
                            package.as_deref().unwrap_or("")
                        ));
                    }
                }
            }
        }
        match sub.as_str() {
            "run" => {
                let bin = value(&["--bin"]).or_else(|| pkg.and_then(|p| p.bins.first().cloned()));
                if let Some(bin) = bin {
                    problems.extend(self.flags_of_binary(&bin, after));
                }
            }
            "test" | "bench" => {
                for flag in after.iter().filter(|a| a.starts_with("--")) {
                    let name = flag.split('=').next().unwrap_or(flag);
                    if !HARNESS_FLAGS.contains(&name) {
                        problems.push(format!("{name} is not a test harness flag"));
                    }
                }
            }
            _ => {}
        }
        Some(problems)
    }

    fn flags_of_binary(&mut self, bin: &str, args: &[String]) -> Vec<String> {
        let path = match bin {
            "tallyd" => PathBuf::from(env!("CARGO_BIN_EXE_tallyd")),
            "tally-loadgen" => Bin::Loadgen
                .beside(env!("CARGO_BIN_EXE_tallyd"))
                .to_path_buf(),
            other => return vec![format!("no binary {other} in the workspace")],
        };
        // A subcommand's flags are in its own help: the bare words that
        // look like command names (`dead-letters drop`) pick it. Only
        // `tallyd` has subcommands (the load generator's bare words are
        // flag values).
        let words: Vec<&str> = args
            .iter()
            .filter(|_| bin == "tallyd")
            .map(String::as_str)
            .filter(|a| !a.is_empty() && a.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
            .filter(|a| !a.starts_with('-'))
            .collect();
        let Some(mut help) = self.help_of(bin, || Command::new(&path).arg("--help").output())
        else {
            return vec![format!("{bin} --help failed")];
        };
        let mut source = format!("{bin} --help");
        if !words.is_empty() {
            let what = format!("{bin} {} --help", words.join(" "));
            let run = || Command::new(&path).args(&words).arg("--help").output();
            match self.help_of(&what, run) {
                Some(sub) => {
                    help.push_str(&sub);
                    source = what;
                }
                None => return vec![format!("{what} failed")],
            }
        }
        unknown_flags(args, &help, &source)
    }

    fn script(&mut self, script: &str, args: &[String]) -> Vec<String> {
        let path = self.root.join(script);
        let Ok(text) = std::fs::read_to_string(&path) else {
            return vec![format!("no script {script}")];
        };
        // After `--`, a script hands the flags on (to the load generator).
        let own = match args.iter().position(|a| a == "--") {
            Some(i) => &args[..i],
            None => args,
        };
        own.iter()
            .filter(|a| a.starts_with("--"))
            .map(|a| a.split('=').next().unwrap_or(a))
            .filter(|flag| !text.contains(flag))
            .map(|flag| format!("{script} does not know {flag}"))
            .collect()
    }

    /// What `--help` of `what` prints; None when it cannot be run.
    fn help_of(
        &mut self,
        what: &str,
        run: impl FnOnce() -> std::io::Result<std::process::Output>,
    ) -> Option<String> {
        self.help
            .entry(what.to_string())
            .or_insert_with(|| {
                let out = run().ok().filter(|o| o.status.success())?;
                Some(String::from_utf8_lossy(&out.stdout).into_owned())
            })
            .clone()
    }
}

/// The `--flags` of `args` that `help` does not list.
fn unknown_flags(args: &[String], help: &str, source: &str) -> Vec<String> {
    args.iter()
        .filter(|a| a.starts_with("--") && a.len() > 2)
        .map(|a| a.split('=').next().unwrap_or(a))
        .filter(|flag| {
            !help
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .any(|w| w == *flag)
        })
        .map(|flag| format!("{flag} is not in {source}"))
        .collect()
}

/// The workspace's packages, from their manifests and folders.
fn packages(root: &Path) -> BTreeMap<String, Package> {
    let manifest: Table = std::fs::read_to_string(root.join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let members = manifest["workspace"]["members"].as_array().unwrap();
    let mut out = BTreeMap::new();
    for member in members.iter().filter_map(Value::as_str) {
        let dir = root.join(member);
        let cargo: Table = std::fs::read_to_string(dir.join("Cargo.toml"))
            .unwrap()
            .parse()
            .unwrap();
        let name = cargo["package"]["name"].as_str().unwrap().to_string();
        let named = |kind: &str| -> Vec<String> {
            cargo
                .get(kind)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_string))
                .collect()
        };
        let mut pkg = Package {
            bins: named("bin"),
            benches: named("bench"),
            tests: named("test"),
        };
        if pkg.bins.is_empty() && dir.join("src/main.rs").exists() {
            pkg.bins.push(name.clone());
        }
        pkg.benches.extend(stems(&dir.join("benches")));
        pkg.tests.extend(stems(&dir.join("tests")));
        out.insert(name, pkg);
    }
    out
}

/// Target names Cargo finds in a folder: `<name>.rs` and `<name>/main.rs`.
fn stems(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs") || p.join("main.rs").exists())
        .filter_map(|p| p.file_stem().and_then(|s| s.to_str()).map(str::to_string))
        .collect()
}

#[test]
fn shell_lines_split_into_commands() {
    assert_eq!(
        split_line(
            "NO_BUILD=1 DURATION=30s scripts/bench-realtime 20000 > out.txt && echo ok # done"
        ),
        vec![
            vec!["scripts/bench-realtime".to_string(), "20000".into()],
            vec!["echo".into(), "ok".into()]
        ]
    );
    assert_eq!(
        words(r#"curl 'http://a?x=1&y=2' "two words""#),
        ["curl", "http://a?x=1&y=2", "two words"]
    );
}
