//! Python virtualenvs for the third-party programs the tests run (the
//! MongoDB stand-in, the gRPC client): one per [`PythonEnv`], built once per
//! version of its requirements file under
//! `<target dir>/tmp/<name>/venv-<hash of the requirements file>`.
//!
//! Test processes running at the same time (the daemon's tests, a bench)
//! coordinate through a lock file, and the venv is built in a temporary
//! directory that is then atomically renamed into place, so a half-built
//! venv is never used. The base interpreter is `python3`, or the one named
//! by `TALLY_PYTHON` (`TALLY_STANDIN_PYTHON` is read too, its older name).

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::bins::{target_dir, workspace_root};
use crate::process::{drain_output, wait_for};

/// One virtualenv: what it is called and what goes in it.
#[derive(Debug, Clone, Copy)]
pub struct PythonEnv {
    /// Directory name under `<target dir>/tmp`, e.g. `mongo-standin`.
    pub name: &'static str,
    /// The requirements file, relative to the workspace root.
    pub requirements: &'static str,
    /// Python modules that must import once it is built, comma-separated
    /// (`"grpc, grpc_tools"`).
    pub imports: &'static str,
}

impl PythonEnv {
    /// The venv's python, building the venv on first use.
    pub fn python(&self) -> Result<PathBuf, String> {
        static BUILT: OnceLock<Mutex<HashMap<&'static str, Result<PathBuf, String>>>> =
            OnceLock::new();
        let built = BUILT.get_or_init(Default::default);
        // Held while building, so one test process builds each venv once.
        let mut built = built.lock().unwrap_or_else(|p| p.into_inner());
        built
            .entry(self.name)
            .or_insert_with(|| ensure_venv(self))
            .clone()
    }
}

/// How long building the venv (including `pip install`) may take.
const VENV_TIMEOUT: Duration = Duration::from_secs(600);

/// Where Cargo keeps tests' scratch files (`CARGO_TARGET_TMPDIR`, which only
/// the test crate itself is compiled with): `<target dir>/tmp`.
fn target_tmp_dir() -> PathBuf {
    target_dir().join("tmp")
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

fn ensure_venv(env: &PythonEnv) -> Result<PathBuf, String> {
    let reqs = workspace_root().join(env.requirements);
    let content = fs::read(&reqs).map_err(|e| format!("cannot read {}: {e}", reqs.display()))?;
    let base = target_tmp_dir().join(env.name);
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
    build_into_place(&base, env, &reqs, &venv)?;
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
fn build_into_place(base: &Path, env: &PythonEnv, reqs: &Path, venv: &Path) -> Result<(), String> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let tmp = base.join(format!("building-{}-{nanos}", std::process::id()));
    let result = build_venv(&tmp, env, reqs).and_then(|()| {
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

fn build_venv(dir: &Path, env: &PythonEnv, reqs: &Path) -> Result<(), String> {
    let base_python = std::env::var("TALLY_PYTHON")
        .or_else(|_| std::env::var("TALLY_STANDIN_PYTHON"))
        .unwrap_or_else(|_| "python3".into());
    eprintln!(
        "{}: building a Python venv in {} (first run only)",
        env.name,
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
    .map_err(|e| format!("pip install of {} failed: {e}", reqs.display()))?;
    run(Command::new(&python).args(["-c", &format!("import {}", env.imports)]))
        .map_err(|e| format!("the {} venv cannot import {}: {e}", env.name, env.imports))?;
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
