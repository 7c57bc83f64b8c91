//! A private nats-server on a loopback port: for integration tests and `gridfold demo`.
//!
//! [`NatsServer::start`] finds the executable ([`find_executable`]), checks its version
//! is at least [`VERSION_MIN`], starts it with JetStream on `127.0.0.1` and a free port,
//! with its store in a directory of its own and its output in a log file there, and
//! waits (at most [`NatsServerConfig::ready_timeout`]) until it accepts connections.
//! [`NatsServer::restart`] brings it back on the same port and store;
//! dropping the value kills it and removes the temporary directory.
//!
//! Invariants: it binds `127.0.0.1` only, never another address; it signals only the
//! process it started, by its id. It does not configure clustering, accounts or TLS
//! itself; [`NatsServerConfig::config_file`] hands it a configuration file that does
//! (such as `gridfold broker-config` writes), whose listen address and port the
//! command line overrides; its JetStream store directory is its own.
//! The calls block the calling thread (for at most the ready timeout).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Environment variable naming the nats-server executable to use.
pub const NATS_SERVER_ENV: &str = "GRIDFOLD_NATS_SERVER";
/// The oldest nats-server gridfold supports (NATS.md: 2.9 silently ignores 2.10+ features).
pub const VERSION_MIN: Version = Version {
    major: 2,
    minor: 11,
    patch: 0,
};
/// Where `.ci/install-nats-server` puts the pinned server, relative to the repository.
pub const VENV_EXECUTABLE: &str = ".venv/bin/nats-server";

const LOG_FILE_NAME: &str = "nats-server.log";
const STORE_DIR_NAME: &str = "store";
const LOG_TAIL_LINES: usize = 30;
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
const POLL_INTERVAL: Duration = Duration::from_millis(10);
const START_ATTEMPTS_MAX: usize = 3;

/// A nats-server version, `major.minor.patch` (pre-release suffixes are ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl Version {
    /// Parses the output of `nats-server --version`, e.g. `nats-server: v2.15.1`: the
    /// first number after the name.
    pub fn parse_version_output(output: &str) -> Option<Version> {
        let (_, after_name) = output.split_once("nats-server")?;
        let word = after_name.split_whitespace().find(|word| {
            word.trim_start_matches('v')
                .starts_with(|c: char| c.is_ascii_digit())
        })?;
        let mut numbers = word.trim_start_matches('v').splitn(3, '.').map(|part| {
            let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u32>().ok()
        });
        Some(Version {
            major: numbers.next()??,
            minor: numbers.next()??,
            patch: numbers.next().flatten().unwrap_or(0),
        })
    }
}

/// Why a nats-server could not be found or started.
#[derive(Debug, thiserror::Error)]
pub enum NatsServerError {
    #[error(
        "no usable nats-server (>= {VERSION_MIN}) found; tried:\n{}\n\
         Run .ci/install-nats-server, or set {NATS_SERVER_ENV} to a nats-server executable.",
        tried.join("\n")
    )]
    NotFound { tried: Vec<String> },
    #[error("could not start {executable}: {source}")]
    Spawn {
        executable: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "nats-server exited ({status}) before accepting connections; its log ends:\n{log_tail}"
    )]
    Exited {
        status: ExitStatus,
        log_tail: String,
    },
    #[error(
        "nats-server did not accept connections on {url} within {waited:?}; its log ends:\n{log_tail}"
    )]
    NotReady {
        url: String,
        waited: Duration,
        log_tail: String,
    },
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// How to start a [`NatsServer`]. The default finds the executable, picks a free port
/// and keeps the store in a temporary directory removed on drop.
#[derive(Debug, Clone)]
pub struct NatsServerConfig {
    /// The executable; `None`: [`find_executable`].
    pub executable: Option<PathBuf>,
    /// Directory for the store and the log file, kept on drop; `None`: a fresh
    /// temporary directory, removed on drop.
    pub dir: Option<PathBuf>,
    /// Loopback port; `None`: a free one.
    pub port: Option<u16>,
    /// How long to wait for the server to accept connections.
    pub ready_timeout: Duration,
    /// A configuration file (`-c`): accounts, users, TLS, JetStream. Its `listen` is
    /// overridden by the loopback port chosen here. Its JetStream `store_dir` is used
    /// as it is (nats-server refuses `-sd` beside it): set `dir` and put the store at
    /// `<dir>/store` in the file, so that [`NatsServer::store_dir`] names it.
    pub config_file: Option<PathBuf>,
}

impl Default for NatsServerConfig {
    fn default() -> Self {
        NatsServerConfig {
            executable: None,
            dir: None,
            port: None,
            ready_timeout: Duration::from_secs(10),
            config_file: None,
        }
    }
}

/// A running nats-server that this process started. Killed on drop.
#[derive(Debug)]
pub struct NatsServer {
    executable: PathBuf,
    version: Version,
    port: u16,
    dir: PathBuf,
    dir_is_temporary: bool,
    ready_timeout: Duration,
    config_file: Option<PathBuf>,
    child: Option<Child>,
}

impl NatsServer {
    /// Starts a server with the default [`NatsServerConfig`].
    pub fn start() -> Result<NatsServer, NatsServerError> {
        NatsServer::start_with(NatsServerConfig::default())
    }

    pub fn start_with(config: NatsServerConfig) -> Result<NatsServer, NatsServerError> {
        let (executable, version) = match config.executable {
            Some(path) => {
                let version = check_executable(&path).map_err(|why| NatsServerError::NotFound {
                    tried: vec![format!("  {}: {why}", path.display())],
                })?;
                (path, version)
            }
            None => find_executable()?,
        };
        let (dir, dir_is_temporary) = match config.dir {
            Some(dir) => {
                fs::create_dir_all(&dir).map_err(|source| NatsServerError::Io {
                    path: dir.clone(),
                    source,
                })?;
                (dir, false)
            }
            None => (make_temp_dir()?, true),
        };
        let mut server = NatsServer {
            executable,
            version,
            port: 0,
            dir,
            dir_is_temporary,
            ready_timeout: config.ready_timeout,
            config_file: config.config_file,
            child: None,
        };
        // A free port found by binding and releasing it may be taken again before the
        // server binds it: try another one a few times.
        let mut attempt = 0;
        loop {
            attempt += 1;
            server.port = match config.port {
                Some(port) => port,
                None => free_loopback_port().map_err(|source| NatsServerError::Io {
                    path: PathBuf::from("127.0.0.1:0"),
                    source,
                })?,
            };
            match server.spawn_and_wait() {
                Ok(()) => return Ok(server),
                Err(NatsServerError::Exited { .. })
                    if config.port.is_none()
                        && attempt < START_ATTEMPTS_MAX
                        && server
                            .log_tail(LOG_TAIL_LINES)
                            .contains("address already in use") =>
                {
                    continue;
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn version(&self) -> Version {
        self.version
    }

    pub fn executable(&self) -> &Path {
        &self.executable
    }

    /// The JetStream store directory (`-sd`).
    pub fn store_dir(&self) -> PathBuf {
        self.dir.join(STORE_DIR_NAME)
    }

    /// The file that receives the server's stdout and stderr.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join(LOG_FILE_NAME)
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log_path(), lines)
    }

    /// The server's process id while it runs (to measure its CPU time, for instance).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(Child::try_wait), Some(Ok(None)))
    }

    /// Stops the server gracefully (SIGINT, so JetStream flushes its store), killing it
    /// if it has not exited after 10 s. Does nothing if it is not running.
    pub fn stop(&mut self) -> Result<(), NatsServerError> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        if child.try_wait().ok().flatten().is_some() {
            return Ok(());
        }
        // Only our own child, by its id.
        let signalled = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if signalled {
            let deadline = Instant::now() + STOP_TIMEOUT;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return Ok(());
                }
                thread::sleep(POLL_INTERVAL);
            }
            tracing::warn!(
                pid = child.id(),
                "nats-server did not stop within {STOP_TIMEOUT:?}; killing it"
            );
        }
        kill_and_reap(&mut child);
        Ok(())
    }

    /// Kills the server at once (SIGKILL), as a crash would: what JetStream had not
    /// written to its files is lost.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child);
        }
    }

    /// Stops the server and starts it again on the same port and store.
    pub fn restart(&mut self) -> Result<(), NatsServerError> {
        self.stop()?;
        self.spawn_and_wait()
    }

    /// Starts the server if it is not running (after [`stop`](Self::stop) or [`kill`](Self::kill)).
    pub fn start_again(&mut self) -> Result<(), NatsServerError> {
        if self.is_running() {
            return Ok(());
        }
        self.spawn_and_wait()
    }

    fn spawn_and_wait(&mut self) -> Result<(), NatsServerError> {
        assert!(self.child.is_none(), "nats-server already running");
        let log_path = self.log_path();
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|source| NatsServerError::Io {
                path: log_path.clone(),
                source,
            })?;
        let log_err = log.try_clone().map_err(|source| NatsServerError::Io {
            path: log_path.clone(),
            source,
        })?;
        let store_dir = self.store_dir();
        let mut command = Command::new(&self.executable);
        command
            .arg("-a")
            .arg(Ipv4Addr::LOCALHOST.to_string())
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-js");
        match &self.config_file {
            Some(config_file) => command.arg("-c").arg(config_file),
            None => command.arg("-sd").arg(&store_dir),
        };
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .spawn()
            .map_err(|source| NatsServerError::Spawn {
                executable: self.executable.clone(),
                source,
            })?;
        self.child = Some(child);
        self.wait_until_ready()
    }

    fn wait_until_ready(&mut self) -> Result<(), NatsServerError> {
        let started = Instant::now();
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        loop {
            let child = self.child.as_mut().expect("spawned");
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Err(NatsServerError::Exited {
                    status,
                    log_tail: self.log_tail(LOG_TAIL_LINES),
                });
            }
            // nats-server enables JetStream (and recovers its store) before it starts
            // accepting clients, so an accepted connection means JetStream is up.
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if started.elapsed() > self.ready_timeout {
                let log_tail = self.log_tail(LOG_TAIL_LINES);
                self.kill();
                return Err(NatsServerError::NotReady {
                    url: self.url(),
                    waited: started.elapsed(),
                    log_tail,
                });
            }
            thread::sleep(POLL_INTERVAL);
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
        if self.dir_is_temporary {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

fn kill_and_reap(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Finds a nats-server of at least [`VERSION_MIN`]: the one named by
/// `$GRIDFOLD_NATS_SERVER` if set (and only that one), else the first usable one of
/// `nats-server` on the `PATH`, `./.venv/bin/nats-server` and the repository's
/// `.venv/bin/nats-server` (where `.ci/install-nats-server` puts it).
pub fn find_executable() -> Result<(PathBuf, Version), NatsServerError> {
    let mut tried = Vec::new();
    if let Some(path) = std::env::var_os(NATS_SERVER_ENV) {
        let path = PathBuf::from(path);
        return match check_executable(&path) {
            Ok(version) => Ok((path, version)),
            Err(why) => {
                tried.push(format!("  ${NATS_SERVER_ENV} = {}: {why}", path.display()));
                Err(NatsServerError::NotFound { tried })
            }
        };
    }
    let mut candidates: Vec<PathBuf> = Vec::new();
    match std::env::var_os("PATH") {
        Some(paths) => {
            candidates.extend(std::env::split_paths(&paths).map(|dir| dir.join("nats-server")))
        }
        None => tried.push("  PATH: not set".to_string()),
    }
    if let Ok(cwd) = std::env::current_dir() {
        candidates.push(cwd.join(VENV_EXECUTABLE));
    }
    candidates.push(Path::new(env!("CARGO_MANIFEST_DIR")).join(VENV_EXECUTABLE));
    let mut on_path_seen = false;
    for path in candidates {
        if !path.is_file() {
            continue;
        }
        on_path_seen = true;
        match check_executable(&path) {
            Ok(version) => return Ok((path, version)),
            Err(why) => tried.push(format!("  {}: {why}", path.display())),
        }
    }
    if !on_path_seen {
        tried.push(format!(
            "  nats-server on PATH, ./{VENV_EXECUTABLE}, {}/{VENV_EXECUTABLE}: none exists",
            env!("CARGO_MANIFEST_DIR")
        ));
    }
    Err(NatsServerError::NotFound { tried })
}

/// Runs `<path> --version` and checks the version is at least [`VERSION_MIN`].
fn check_executable(path: &Path) -> Result<Version, String> {
    let output = Command::new(path)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|err| format!("cannot run it: {err}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let version = Version::parse_version_output(&text)
        .ok_or_else(|| format!("cannot read a version in {:?}", text.trim()))?;
    if version < VERSION_MIN {
        return Err(format!("version {version} is older than {VERSION_MIN}"));
    }
    Ok(version)
}

fn free_loopback_port() -> io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

fn make_temp_dir() -> Result<PathBuf, NatsServerError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let base = std::env::temp_dir();
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("gridfold-nats-{}-{n}-{nanos}", std::process::id()));
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(source) => return Err(NatsServerError::Io { path: dir, source }),
        }
    }
}

fn log_tail(path: &Path, lines: usize) -> String {
    const TAIL_BYTES_MAX: u64 = 64 * 1024;
    let read = || -> io::Result<String> {
        let mut file = File::open(path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(TAIL_BYTES_MAX)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(err) => format!("(cannot read {}: {err})", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        let parse = Version::parse_version_output;
        assert_eq!(
            parse("nats-server: v2.15.1\n"),
            Some(Version {
                major: 2,
                minor: 15,
                patch: 1
            })
        );
        assert_eq!(
            parse("nats-server: v2.9.10"),
            Some(Version {
                major: 2,
                minor: 9,
                patch: 10
            })
        );
        assert_eq!(
            parse("nats-server: v2.11.0-RC.3"),
            Some(Version {
                major: 2,
                minor: 11,
                patch: 0
            })
        );
        assert_eq!(
            parse("nats-server version 2.12"),
            Some(Version {
                major: 2,
                minor: 12,
                patch: 0
            })
        );
        assert_eq!(parse("garbage"), None);
        assert_eq!(parse("true (GNU coreutils) 9.1"), None, "not a nats-server");
        assert!(parse("nats-server: v2.9.10").unwrap() < VERSION_MIN);
        assert!(parse("nats-server: v2.11.0").unwrap() >= VERSION_MIN);
        assert!(parse("nats-server: v3.0.0").unwrap() >= VERSION_MIN);
    }

    #[test]
    fn temp_dirs_are_distinct() {
        let a = make_temp_dir().unwrap();
        let b = make_temp_dir().unwrap();
        assert_ne!(a, b);
        fs::remove_dir(a).unwrap();
        fs::remove_dir(b).unwrap();
    }
}
