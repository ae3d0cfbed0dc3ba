//! Real third-party servers a test runs beside `tallyd`: Prometheus and its
//! node exporter from Debian's `prometheus` and `prometheus-node-exporter`
//! packages (`scripts/setup-test-deps` installs both). Each is a child
//! process on a free loopback port, its output in a file of the test's
//! temporary directory, killed when dropped; a test that fails shows the
//! tail of that output.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::client::http_client;

/// How long a server may take to answer its readiness URL.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A child process killed when dropped, its output in a file.
pub struct Server {
    name: &'static str,
    child: Child,
    log: PathBuf,
    url: String,
}

impl Server {
    /// Starts `bin args…` with stdout and stderr into `dir/<name>.log`.
    /// `url` is where it listens (`http://127.0.0.1:PORT`).
    pub fn start(name: &'static str, bin: &Path, args: &[String], dir: &Path, url: String) -> Self {
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).expect("creating a log file");
        let child = Command::new(bin)
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("a second handle on the log"))
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        Server {
            name,
            child,
            log,
            url,
        }
    }

    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `127.0.0.1:PORT`: the `instance` label Prometheus gives it.
    pub fn address(&self) -> &str {
        self.url.trim_start_matches("http://")
    }

    /// Everything it has written so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `path` answers 200, for at most 30 s.
    pub async fn wait_ready(&self, path: &str) {
        let url = format!("{}{path}", self.url);
        let deadline = Instant::now() + READY_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(r) = http_client().get(&url).send().await {
                if r.status().is_success() {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!(
            "{} did not answer {url} within {READY_TIMEOUT:?}\n{}",
            self.name,
            self.log()
        );
    }

    /// Kills and reaps the process.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            let log = self.log();
            let mut from = log.len().saturating_sub(8000);
            while !log.is_char_boundary(from) {
                from += 1;
            }
            let tail = &log[from..];
            eprintln!("---- {} log (tail) ----\n{tail}", self.name);
        }
    }
}

/// The program `name` on `PATH`, if there is one.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("binding a loopback port")
        .local_addr()
        .expect("its address")
        .port()
}

/// `prometheus` and `prometheus-node-exporter` on `PATH`, or why not.
pub fn programs() -> Result<(PathBuf, PathBuf), &'static str> {
    match (which("prometheus"), which("prometheus-node-exporter")) {
        (Some(p), Some(n)) => Ok((p, n)),
        _ => Err("prometheus or prometheus-node-exporter is not installed \
                  (scripts/setup-test-deps installs both)"),
    }
}

/// A node exporter on a free loopback port, ready.
pub async fn start_node_exporter(bin: &Path, dir: &Path) -> Server {
    let port = free_port();
    let node = Server::start(
        "node_exporter",
        bin,
        &[format!("--web.listen-address=127.0.0.1:{port}")],
        dir,
        format!("http://127.0.0.1:{port}"),
    );
    node.wait_ready("/metrics").await;
    node
}

/// A Prometheus on a free loopback port, ready, with `config(address)`
/// (YAML; `address` is its own `127.0.0.1:PORT`, for a config that
/// scrapes itself) as its configuration and its TSDB in
/// `dir/<name>-tsdb`; `extra` flags are added (e.g.
/// `--web.enable-remote-write-receiver`).
pub async fn start_prometheus(
    name: &'static str,
    bin: &Path,
    dir: &Path,
    config: impl FnOnce(&str) -> String,
    extra: &[&str],
) -> Server {
    let port = free_port();
    let config_path = dir.join(format!("{name}.yml"));
    std::fs::write(&config_path, config(&format!("127.0.0.1:{port}")))
        .expect("writing the Prometheus config");
    let mut args = vec![
        format!("--config.file={}", config_path.display()),
        format!(
            "--storage.tsdb.path={}",
            dir.join(format!("{name}-tsdb")).display()
        ),
        format!("--web.listen-address=127.0.0.1:{port}"),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let prom = Server::start(name, bin, &args, dir, format!("http://127.0.0.1:{port}"));
    prom.wait_ready("/-/ready").await;
    prom
}
