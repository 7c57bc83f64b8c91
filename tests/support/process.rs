//! A `gridfold` child process for integration tests: its stdout and stderr go to
//! files in a directory of the test's, and it is killed (SIGKILL) and reaped when
//! dropped, a failing test included.
//!
//! (`tests/grid.rs` and `tests/projector.rs` each have a richer process type of their
//! own; this one is what a test needs to start, read and `kill -9` processes.)

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::SystemTime;

pub struct Gridfold {
    pub name: String,
    /// `None` once killed and reaped.
    child: Option<Child>,
    stderr: PathBuf,
    /// When it was reaped after [`Gridfold::kill9`]: it was dead by then.
    pub killed_at: Option<SystemTime>,
}

impl Gridfold {
    /// Starts `gridfold <args>` in `dir`, logging by `rust_log`, without colours, its
    /// output in `<dir>/<name>.stdout` and `.stderr`.
    pub fn spawn(dir: &Path, name: &str, args: &[&str], rust_log: &str) -> Gridfold {
        let file = |ext: &str| {
            let path = dir.join(format!("{name}.{ext}"));
            let file = File::create(&path)
                .unwrap_or_else(|err| panic!("creating {}: {err}", path.display()));
            (path, file)
        };
        let (_, stdout) = file("stdout");
        let (stderr_path, stderr) = file("stderr");
        let child = Command::new(env!("CARGO_BIN_EXE_gridfold"))
            .args(args)
            .current_dir(dir)
            .env("RUST_LOG", rust_log)
            .env("NO_COLOR", "1")
            .env_remove("NATS_URL")
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start gridfold {name}: {err}"));
        Gridfold {
            name: name.to_string(),
            child: Some(child),
            stderr: stderr_path,
            killed_at: None,
        }
    }

    /// What it has written on stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Still running (not killed, not exited)?
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// SIGKILL (std's `Child::kill`), then reap; records when it was surely dead.
    pub fn kill9(&mut self) -> SystemTime {
        let mut child = self
            .child
            .take()
            .unwrap_or_else(|| panic!("{} was killed already", self.name));
        child
            .kill()
            .unwrap_or_else(|err| panic!("kill -9 {}: {err}", self.name));
        child
            .wait()
            .unwrap_or_else(|err| panic!("reaping {}: {err}", self.name));
        let now = SystemTime::now();
        self.killed_at = Some(now);
        now
    }
}

impl Drop for Gridfold {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
