//! Debian's Chromium, headless, through its WebDriver server
//! `chromedriver`, driven with `fantoccini`: one driver and one browser
//! (with a fresh profile) per test, both killed when the test ends.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder};
use serde_json::{json, Value};

/// Longest wait for anything the page does.
pub const PAGE_TIMEOUT: Duration = Duration::from_secs(60);

pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The browser's console messages (chromedriver's `browser` log).
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base: &url::Url,
        session: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(r#"{"type":"browser"}"#.into()))
    }
}

/// chromedriver in a process group of its own, so the browser it starts
/// goes with it.
struct Driver {
    child: Child,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Browser {
    pub client: Client,
    /// The daemon's HTTP base URL, which pages are opened under.
    pub base: String,
    _driver: Driver,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// A headless Chromium on a fresh profile, or None (saying why) when
    /// Chromium or chromedriver is not installed.
    pub async fn start(base: &str) -> Option<Browser> {
        let (Some(chromium), Some(chromedriver)) = (which("chromium"), which("chromedriver"))
        else {
            eprintln!(
                "skipped: chromium or chromedriver is not installed (scripts/setup-test-deps installs the Debian packages chromium and chromium-driver)"
            );
            return None;
        };
        let port = free_port();
        let mut cmd = Command::new(&chromedriver);
        cmd.arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let driver = Driver {
            child: cmd.spawn().expect("starting chromedriver"),
        };
        let url = format!("http://127.0.0.1:{port}");
        wait_for_driver(&url).await;
        let profile = tempfile::Builder::new()
            .prefix("tally-chromium-")
            .tempdir()
            .unwrap();
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1280,900",
            // Any host but this one fails to resolve: a request to another
            // host would show as a console error.
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        ]
        .iter()
        .map(|a| a.to_string())
        .chain([format!("--user-data-dir={}", profile.path().display())])
        .collect::<Vec<_>>();
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": chromium, "args": args },
            "goog:loggingPrefs": { "browser": "ALL" },
        });
        let Value::Object(caps) = caps else {
            unreachable!()
        };
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&url)
            .await
            .expect("starting a Chromium session");
        Some(Browser {
            client,
            base: base.to_string(),
            _driver: driver,
            _profile: profile,
        })
    }

    /// Opens `path` (e.g. `/?view=fleet`) of the daemon.
    pub async fn open(&self, path: &str) {
        self.client
            .goto(&format!("{}{path}", self.base))
            .await
            .unwrap_or_else(|e| panic!("opening {path}: {e}"));
    }

    /// The value of a script's `return`.
    pub async fn js(&self, script: &str) -> Value {
        self.client
            .execute(script, vec![])
            .await
            .unwrap_or_else(|e| panic!("running {script}: {e}"))
    }

    /// Runs `script` until it returns something other than null or false;
    /// panics after [`PAGE_TIMEOUT`] naming `what`.
    pub async fn wait_js(&self, what: &str, script: &str) -> Value {
        let deadline = Instant::now() + PAGE_TIMEOUT;
        loop {
            let v = self.js(script).await;
            if !v.is_null() && v != Value::Bool(false) {
                return v;
            }
            if Instant::now() > deadline {
                let page = self
                    .js("return document.body ? document.body.innerText : ''")
                    .await;
                panic!("waited {PAGE_TIMEOUT:?} for {what}; the page shows:\n{page}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Console messages at level SEVERE (errors) since the last call.
    pub async fn console_errors(&self) -> Vec<Value> {
        let log = self
            .client
            .issue_cmd(BrowserLog)
            .await
            .expect("reading the browser's console log");
        log.as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e["level"] == "SEVERE")
            .collect()
    }

    pub async fn close(self) {
        let _ = self.client.close().await;
    }
}

async fn wait_for_driver(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let http = tally_testkit::client::http_client();
    while Instant::now() < deadline {
        if let Ok(r) = http.get(format!("{url}/status")).send().await {
            if r.status().is_success() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("chromedriver did not answer {url}/status within 30 s");
}
