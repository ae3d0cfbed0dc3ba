//! A small exporter the alerting oracle serves on loopback, in node
//! exporter's metric names, whose values the test sets: CPU time counters
//! that advance as busy or idle cores would, a file system's free and total
//! bytes, and a textfile-collector series the test can make disappear.
//! Prometheus scrapes it and remote-writes what it scraped to `tallyd`, so
//! both see the same samples. Stopping it leaves the port closed: the
//! target is down.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Cores the CPU counters stand for.
const CPUS: usize = 4;
/// The file system's size, and its free bytes while not low (60 %) and
/// while low (5 %).
const FS_SIZE: f64 = 100e9;
const FS_FREE: f64 = 60e9;
const FS_LOW: f64 = 5e9;

/// What the test changes while the exporter runs.
struct State {
    busy: bool,
    disk_low: bool,
    backup: bool,
    /// Seconds per core spent busy and idle so far, and when they were
    /// last advanced.
    user: f64,
    idle: f64,
    since: Instant,
}

impl State {
    /// Moves the counters on to now at the current load.
    fn advance(&mut self) {
        let now = Instant::now();
        let dt = now.duration_since(self.since).as_secs_f64();
        self.since = now;
        if self.busy {
            self.user += dt;
        } else {
            self.idle += dt;
        }
    }

    fn page(&mut self) -> String {
        self.advance();
        let mut p = String::from("# TYPE node_cpu_seconds_total counter\n");
        for cpu in 0..CPUS {
            p.push_str(&format!(
                "node_cpu_seconds_total{{cpu=\"{cpu}\",mode=\"idle\"}} {:.3}\n\
                 node_cpu_seconds_total{{cpu=\"{cpu}\",mode=\"user\"}} {:.3}\n",
                1000.0 + self.idle,
                100.0 + self.user
            ));
        }
        let free = if self.disk_low { FS_LOW } else { FS_FREE };
        p.push_str(&format!(
            "# TYPE node_filesystem_avail_bytes gauge\n\
             node_filesystem_avail_bytes{{device=\"/dev/sdb1\",fstype=\"ext4\",mountpoint=\"/data\"}} {free}\n\
             # TYPE node_filesystem_size_bytes gauge\n\
             node_filesystem_size_bytes{{device=\"/dev/sdb1\",fstype=\"ext4\",mountpoint=\"/data\"}} {FS_SIZE}\n"
        ));
        if self.backup {
            p.push_str(
                "# TYPE node_textfile_mtime_seconds gauge\n\
                 node_textfile_mtime_seconds{file=\"backup.prom\"} 1.7e9\n",
            );
        }
        p
    }
}

/// The exporter: its address and the knobs the test turns.
pub(super) struct Exporter {
    state: Arc<Mutex<State>>,
    address: String,
    task: JoinHandle<()>,
}

impl Exporter {
    /// Serves on `address` (`127.0.0.1:0` for a free port): idle, disk not
    /// low, the backup series present.
    pub(super) async fn start(address: &str) -> Exporter {
        let listener = TcpListener::bind(address).await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let state = Arc::new(Mutex::new(State {
            busy: false,
            disk_low: false,
            backup: true,
            user: 0.0,
            idle: 0.0,
            since: Instant::now(),
        }));
        let task = tokio::spawn(serve(listener, state.clone()));
        Exporter {
            state,
            address,
            task,
        }
    }

    /// `127.0.0.1:PORT`: the `instance` Prometheus gives it.
    pub(super) fn address(&self) -> &str {
        &self.address
    }

    pub(super) fn set_busy(&self, busy: bool) {
        let mut s = self.state.lock().unwrap();
        s.advance();
        s.busy = busy;
    }

    pub(super) fn set_disk_low(&self, low: bool) {
        self.state.lock().unwrap().disk_low = low;
    }

    pub(super) fn set_backup(&self, present: bool) {
        self.state.lock().unwrap().backup = present;
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        // Aborting the accept loop drops the listener: the port is closed.
        self.task.abort();
    }
}

/// Answers every connection with the page, whatever was asked: Prometheus
/// only ever asks for `/metrics`.
async fn serve(listener: TcpListener, state: Arc<Mutex<State>>) {
    while let Ok((mut conn, _)) = listener.accept().await {
        let state = state.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let mut got = Vec::new();
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            let body = state.lock().unwrap().page();
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = conn.write_all(head.as_bytes()).await;
            let _ = conn.write_all(body.as_bytes()).await;
            let _ = conn.shutdown().await;
        });
    }
}
