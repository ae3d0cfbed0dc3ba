//! vmalert, VictoriaMetrics' rule evaluator (built from the Go module
//! proxy by `tests/vmalert/install`), as the alerting oracle runs it: one
//! process per data source, the same rules file, and the alerts each one
//! has firing, as its `/api/v1/alerts` lists them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;
use tally_testkit::client::http_client;
use tally_testkit::gotool::{self, Availability};
use tally_testkit::prometheus::{free_port, Server};

/// vmalert's binary, built on first use; `Err` (why) to skip.
pub(super) fn binary() -> Result<PathBuf, String> {
    static FOUND: OnceLock<Result<Availability, String>> = OnceLock::new();
    let found = FOUND.get_or_init(|| match std::env::var("TALLY_VMALERT").as_deref() {
        Ok("off" | "0") => Ok(Availability::Skipped("TALLY_VMALERT=off".into())),
        _ => gotool::install("tests/vmalert/install", "vmalert"),
    });
    match found.clone() {
        Ok(Availability::Ready(bin)) => Ok(bin),
        Ok(Availability::Skipped(why)) => Err(why),
        Err(e) => panic!("building vmalert: {e}"),
    }
}

/// Starts vmalert `name` on a free loopback port, evaluating `rules` every
/// `interval` against the Prometheus API at `datasource` (the URL the
/// `/api/v1/query` path is appended to), its notifications dropped.
pub(super) async fn start(
    name: &'static str,
    bin: &Path,
    dir: &Path,
    rules: &Path,
    datasource: &str,
    interval: Duration,
) -> Server {
    let port = free_port();
    let args = vec![
        format!("-rule={}", rules.display()),
        format!("-datasource.url={datasource}"),
        format!("-evaluationInterval={}s", interval.as_secs()),
        format!("-httpListenAddr=127.0.0.1:{port}"),
        // Both sides are queried at the evaluation time itself: the delay
        // is for data sources that hold back their newest samples, and
        // neither does.
        "-rule.evalDelay=0s".to_string(),
        "-notifier.blackhole".to_string(),
        "-loggerLevel=WARN".to_string(),
    ];
    let server = Server::start(name, bin, &args, dir, format!("http://127.0.0.1:{port}"));
    server.wait_ready("/health").await;
    server
}

/// The names of the alerts in state `firing` (pending ones are not);
/// `None` when vmalert did not answer in time (the poll is skipped rather
/// than read as "nothing firing").
pub(super) async fn firing(server: &Server) -> Option<BTreeSet<String>> {
    let url = format!("{}/api/v1/alerts", server.url());
    let r = http_client()
        .get(&url)
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .ok()?;
    let body: Value = r.json().await.ok()?;
    let alerts = body["data"]["alerts"].as_array()?;
    Some(
        alerts
            .iter()
            .filter(|a| a["state"] == "firing")
            .filter_map(|a| a["name"].as_str().map(str::to_string))
            .collect(),
    )
}
