//! The tail of a server's output (the stand-in's, FerretDB's), kept in
//! memory so a failing test can show it, without the buffer growing
//! without bound or the pipe ever filling.

use std::io::{BufRead, BufReader, Read};
use std::sync::{Arc, Mutex};

/// The log is cut back to its last 32 KiB when it passes this.
const LOG_LIMIT: usize = 64 * 1024;

/// A shared, bounded log.
pub(super) type Log = Arc<Mutex<String>>;

/// The log's text so far.
pub(super) fn text(log: &Log) -> String {
    log.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Reads `stream` line by line on a thread of its own into `log` (echoed
/// to stderr when `echo`), calling `on_line` with each line first.
pub(super) fn keep(
    name: &str,
    stream: impl Read + Send + 'static,
    log: &Log,
    echo: bool,
    mut on_line: impl FnMut(&str) + Send + 'static,
) -> Result<(), String> {
    let buffer = Arc::clone(log);
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                on_line(&line);
                if echo {
                    eprintln!("{line}");
                }
                let mut log = buffer.lock().unwrap_or_else(|p| p.into_inner());
                if log.len() > LOG_LIMIT {
                    let cut = log.len() - LOG_LIMIT / 2;
                    let cut = (cut..log.len())
                        .find(|&i| log.is_char_boundary(i))
                        .unwrap_or(0);
                    log.drain(..cut);
                }
                log.push_str(&line);
                log.push('\n');
            }
        })
        .map(drop)
        .map_err(|e| e.to_string())
}
