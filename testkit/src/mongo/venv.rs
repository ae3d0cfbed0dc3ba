//! The Python virtualenv the stand-in runs in: built once per version of
//! `tests/mongo-standin/requirements.txt`, under
//! `<target dir>/tmp/mongo-standin/venv-<hash of requirements.txt>`.
//!
//! Test processes running at the same time (the daemon's tests, a bench)
//! coordinate through a lock file, and the venv is built in a temporary
//! directory that is then atomically renamed into place, so a half-built
//! venv is never used.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::bins::{target_dir, workspace_root};
use crate::process::{drain_output, wait_for};

/// How long building the venv (including `pip install`) may take.
const VENV_TIMEOUT: Duration = Duration::from_secs(600);

/// `tests/mongo-standin` in the workspace.
pub(super) fn standin_dir() -> PathBuf {
    workspace_root().join("tests").join("mongo-standin")
}

/// Where Cargo keeps tests' scratch files (`CARGO_TARGET_TMPDIR`, which only
/// the test crate itself is compiled with): `<target dir>/tmp`.
fn target_tmp_dir() -> PathBuf {
    target_dir().join("tmp")
}

/// The venv's python, building the venv once per requirements file.
pub(super) fn venv_python() -> Result<PathBuf, String> {
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    VENV.get_or_init(ensure_venv).clone()
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Removes the lock file when dropped.
struct LockGuard(PathBuf);

impl Drop for LockGuard {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

fn venv_ready(venv: &Path) -> bool {
    venv.join(".ready").exists() && venv.join("bin").join("python").exists()
}

fn ensure_venv() -> Result<PathBuf, String> {
    let reqs = standin_dir().join("requirements.txt");
    let content = fs::read(&reqs).map_err(|e| format!("cannot read {}: {e}", reqs.display()))?;
    let base = target_tmp_dir().join("mongo-standin");
    fs::create_dir_all(&base).map_err(|e| format!("cannot create {}: {e}", base.display()))?;
    let tag = format!("{:016x}", fnv1a64(&content));
    let venv = base.join(format!("venv-{tag}"));
    let python = venv.join("bin").join("python");
    if venv_ready(&venv) {
        return Ok(python);
    }
    let Some(_guard) = lock(&base.join(format!("venv-{tag}.lock")), &venv)? else {
        // Another process built it while this one waited.
        return Ok(python);
    };
    if venv_ready(&venv) {
        return Ok(python);
    }
    if venv.exists() {
        // A broken venv (e.g. its base python is gone): rebuild it.
        fs::remove_dir_all(&venv)
            .map_err(|e| format!("cannot remove broken {}: {e}", venv.display()))?;
    }
    build_into_place(&base, &reqs, &venv)?;
    if venv_ready(&venv) {
        Ok(python)
    } else {
        Err(format!(
            "{} is not usable after building it",
            venv.display()
        ))
    }
}

/// One builder at a time across test processes: takes the exclusive lock
/// file `lock_path`, waiting (bounded) while another process holds it.
/// `None` when `venv` became ready in the meantime.
fn lock(lock_path: &Path, venv: &Path) -> Result<Option<LockGuard>, String> {
    let deadline = Instant::now() + VENV_TIMEOUT;
    loop {
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(lock_path)
        {
            Ok(mut f) => {
                let _ = writeln!(f, "{}", std::process::id());
                return Ok(Some(LockGuard(lock_path.to_path_buf())));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if venv_ready(venv) {
                    return Ok(None);
                }
                let stale = fs::metadata(lock_path)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > VENV_TIMEOUT + Duration::from_secs(60));
                if stale {
                    let _ = fs::remove_file(lock_path);
                    continue;
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "timed out waiting for another test process to build {} (lock {})",
                        venv.display(),
                        lock_path.display()
                    ));
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            Err(e) => return Err(format!("cannot create {}: {e}", lock_path.display())),
        }
    }
}

/// Builds the venv in a temporary directory under `base`, then renames it
/// to `venv`.
fn build_into_place(base: &Path, reqs: &Path, venv: &Path) -> Result<(), String> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let tmp = base.join(format!("building-{}-{nanos}", std::process::id()));
    let result = build_venv(&tmp, reqs).and_then(|()| {
        fs::rename(&tmp, venv).or_else(|e| {
            if venv_ready(venv) {
                Ok(())
            } else {
                Err(format!("cannot move the venv into {}: {e}", venv.display()))
            }
        })
    });
    let _ = fs::remove_dir_all(&tmp);
    result
}

fn build_venv(dir: &Path, reqs: &Path) -> Result<(), String> {
    let base_python = std::env::var("TALLY_STANDIN_PYTHON").unwrap_or_else(|_| "python3".into());
    eprintln!(
        "MongoDB stand-in: building a Python venv in {} (first run only)",
        dir.display()
    );
    run(Command::new(&base_python).args(["-m", "venv"]).arg(dir)).map_err(|e| {
        format!("`{base_python} -m venv` failed (is Python 3 with venv installed?): {e}")
    })?;
    let python = dir.join("bin").join("python");
    run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "--quiet",
            "--timeout",
            "60",
            "-r",
        ])
        .arg(reqs))
    .map_err(|e| format!("pip install of the stand-in's requirements failed: {e}"))?;
    run(Command::new(&python).args(["-c", "import mongomock, bson, pymongo"]))
        .map_err(|e| format!("the stand-in's venv cannot import its modules: {e}"))?;
    fs::write(dir.join(".ready"), b"ok\n").map_err(|e| e.to_string())?;
    Ok(())
}

/// Runs a command to completion, returning its output on failure.
fn run(cmd: &mut Command) -> Result<(), String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("PYTHONPATH")
        .env_remove("PYTHONHOME")
        .env("PIP_NO_INPUT", "1")
        .spawn()
        .map_err(|e| e.to_string())?;
    let (out, err) = drain_output(&mut child);
    let Some(status) = wait_for(&mut child, VENV_TIMEOUT) else {
        return Err(format!("timed out after {VENV_TIMEOUT:?}"));
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    if status.success() {
        Ok(())
    } else {
        Err(format!("{status}\n{out}{err}"))
    }
}
