//! Bounded runs of child processes: a binary run to completion with its
//! output captured ([`run`]), and the wait-with-deadline the daemon and
//! stand-in harnesses use too. Separate from [`crate::daemon`] because the
//! load generator and the stand-in's build steps are runs, not servers.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What a run printed and how it ended.
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Run {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// stdout as JSON (the load generator's `--json` report).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not a JSON report ({e})\nstdout:\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }

    pub fn describe(&self) -> String {
        format!(
            "exit {:?} after {:?}\nstdout:\n{}\nstderr:\n{}",
            self.status.code(),
            self.elapsed,
            self.stdout,
            self.stderr
        )
    }
}

/// Runs `bin` with `args` to completion; panics (with what it printed on
/// stderr so far) when it takes longer than `timeout`, after killing it.
pub fn run(bin: &Path, args: &[&str], timeout: Duration) -> Run {
    let mut cmd = Command::new(bin);
    cmd.args(args);
    run_command(cmd, timeout)
}

/// [`run`] of a command the caller built (arguments, environment,
/// directory); its standard streams are set here.
pub fn run_command(mut cmd: Command, timeout: Duration) -> Run {
    let started = Instant::now();
    let bin = cmd.get_program().to_owned();
    let bin = Path::new(&bin);
    let args: Vec<String> = cmd
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
    let (out, err) = drain_output(&mut child);
    let Some(status) = wait_for(&mut child, timeout) else {
        let stderr = err.join().unwrap_or_default();
        panic!(
            "{} {args:?} did not finish within {timeout:?}\n{stderr}",
            bin.display()
        );
    };
    Run {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        elapsed: started.elapsed(),
    }
}

/// Reads the child's piped stdout and stderr to the end on threads of their
/// own, so neither pipe can fill and block the child while it is awaited.
pub(crate) fn drain_output(child: &mut Child) -> (JoinHandle<String>, JoinHandle<String>) {
    fn read_all(mut r: impl Read + Send + 'static) -> JoinHandle<String> {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    }
    let out = read_all(child.stdout.take().expect("piped stdout"));
    let err = read_all(child.stderr.take().expect("piped stderr"));
    (out, err)
}

/// The child's exit status, or `None` after killing and reaping it when it
/// has not exited within `timeout`.
pub(crate) fn wait_for(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}
