//! The engine's load sensor (Grid Engine's `load_sensor`, sge_conf(5) and
//! sge_execd(8)): a program the engine starts once and keeps, which reports
//! site-defined load values that join each heartbeat's named load values.
//!
//! # Protocol (Grid Engine's)
//!
//! Before each heartbeat the engine writes an empty line to the sensor's
//! stdin; the sensor answers on its stdout with a line `begin` (or `start`),
//! one line per value, `host:name:value` (or `name:value`), and a line `end`.
//! The host part is not checked (the sensor runs on this engine's machine;
//! `global` is read like any host). At shutdown the engine writes `quit`.
//! Values are decimals with at most 3 places, kept in milli-units (`0.75` is
//! 750); names follow the heartbeat's rule (`[A-Za-z_][A-Za-z0-9_]*`, at most
//! 64 bytes). A sensor value replaces a measured one of the same name.
//!
//! # Invariants and limits
//!
//! - **Never a stopped engine.** Whatever the sensor does (answers late or
//!   never, dies, writes garbage), the heartbeat goes out, with the measured
//!   values and whatever the sensor answered well; problems are warnings.
//! - **Bounded wait.** The engine waits at most the reply timeout for a reply;
//!   a sensor that does not answer in time is skipped for that heartbeat (a
//!   reply arriving later is thrown away, never used for a later heartbeat).
//! - **Bounded input.** Lines of at most [`SENSOR_LINE_BYTES_MAX`] bytes (a
//!   longer one is skipped whole, with a warning); at most
//!   [`crate::core::load::LOAD_VALUES_MAX`] values per reply (the rest are
//!   dropped, with a warning); a malformed line is skipped with a warning
//!   naming it. At most [`REPLIES_QUEUED_MAX`] replies are held unread.
//! - **Restart with back-off.** A sensor that exits (or cannot be started, or
//!   closes its stdout) is started again after 1 heartbeat, then 2, 4, ... up
//!   to [`RESTART_BACKOFF_HEARTBEATS_MAX`] heartbeats between attempts; one
//!   that ran that many heartbeats before dying starts the back-off afresh.
//! - **Dies with the engine.** The sensor is killed when the engine drops it
//!   (`kill_on_drop`), and asked to `quit` (then killed after
//!   [`QUIT_GRACE`]) at a clean shutdown.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::mpsc;

use crate::core::load::{LOAD_VALUE_MILLI_MAX, LOAD_VALUES_MAX, check_name};

/// Longest line the sensor may write, newline excluded.
pub const SENSOR_LINE_BYTES_MAX: usize = 4 * 1024;
/// Most heartbeats between two attempts to start a sensor that died.
pub const RESTART_BACKOFF_HEARTBEATS_MAX: u64 = 32;
/// Replies read but not yet taken (late ones are thrown away before each question).
pub const REPLIES_QUEUED_MAX: usize = 4;
/// How long a sensor told to `quit` may take before it is killed.
pub const QUIT_GRACE: Duration = Duration::from_secs(1);
/// Shortest and longest reply timeout [`reply_timeout`] gives.
pub const REPLY_TIMEOUT_MIN: Duration = Duration::from_millis(100);
pub const REPLY_TIMEOUT_MAX: Duration = Duration::from_secs(5);
/// Characters of a bad line quoted in a warning.
const QUOTED_CHARS_MAX: usize = 80;

/// The reply timeout for a heartbeat interval: half of it, within
/// [`REPLY_TIMEOUT_MIN`]..=[`REPLY_TIMEOUT_MAX`].
pub fn reply_timeout(heartbeat_interval: Duration) -> Duration {
    (heartbeat_interval / 2).clamp(REPLY_TIMEOUT_MIN, REPLY_TIMEOUT_MAX)
}

/// Why one line of a reply was skipped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    #[error("not `host:name:value` or `name:value`")]
    Shape,
    #[error("the name is empty, longer than 64 bytes or not [A-Za-z_][A-Za-z0-9_]*")]
    Name,
    #[error("the value is not a decimal with at most 3 places within ±10^15")]
    Value,
}

/// One value line, `host:name:value` or `name:value`, into its name and milli-units.
pub fn parse_value_line(line: &str) -> Result<(String, i64), LineError> {
    let parts: Vec<&str> = line.splitn(4, ':').collect();
    let (name, value) = match parts[..] {
        [_host, name, value] => (name, value),
        [name, value] => (name, value),
        _ => return Err(LineError::Shape),
    };
    check_name(name).map_err(|_| LineError::Name)?;
    let milli = crate::files::policyfile::decimal_milli(value)
        .filter(|milli| milli.unsigned_abs() <= LOAD_VALUE_MILLI_MAX as u64)
        .ok_or(LineError::Value)?;
    Ok((name.to_string(), milli))
}

/// Puts the sensor's values into the measured ones, each replacing a measured
/// value of its name. Should the union exceed the heartbeat's cap, measured
/// values the sensor did not name are dropped, the last names first.
pub fn merge(measured: &mut BTreeMap<String, i64>, sensed: BTreeMap<String, i64>) {
    assert!(sensed.len() <= LOAD_VALUES_MAX, "a reply holds at most {LOAD_VALUES_MAX} values");
    let union = measured.len() + sensed.iter().filter(|(name, _)| !measured.contains_key(*name)).count();
    let overflow = union.saturating_sub(LOAD_VALUES_MAX);
    let dropped: Vec<String> =
        measured.keys().rev().filter(|name| !sensed.contains_key(*name)).take(overflow).cloned().collect();
    for name in dropped {
        measured.remove(&name);
    }
    measured.extend(sensed);
    assert!(measured.len() <= LOAD_VALUES_MAX, "a heartbeat holds at most {LOAD_VALUES_MAX} values");
}

/// A line quoted in a warning: at most [`QUOTED_CHARS_MAX`] characters, escaped.
fn quoted(line: &str) -> String {
    let mut text: String = line.chars().take(QUOTED_CHARS_MAX).flat_map(char::escape_default).collect();
    if line.chars().count() > QUOTED_CHARS_MAX {
        text.push_str("...");
    }
    text
}

/// Reads the sensor's stdout, one bounded line at a time, and sends each
/// complete reply (`begin` ... `end`). Ends at end of file or a read error.
async fn read_replies(path: PathBuf, stdout: ChildStdout, replies: mpsc::Sender<BTreeMap<String, i64>>) {
    let path = path.display().to_string();
    let mut reader = BufReader::new(stdout);
    let mut current: Option<BTreeMap<String, i64>> = None;
    let mut beyond_cap = 0usize;
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        let limit = SENSOR_LINE_BYTES_MAX as u64 + 1;
        match (&mut reader).take(limit).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line.last() != Some(&b'\n') && line.len() as u64 == limit {
            // Too long: skip the rest of it.
            tracing::warn!(sensor = %path, "load sensor line longer than {SENSOR_LINE_BYTES_MAX} bytes skipped");
            loop {
                let mut rest = Vec::new();
                match (&mut reader).take(64 * 1024).read_until(b'\n', &mut rest).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) if rest.last() == Some(&b'\n') => break,
                    Ok(_) => {}
                }
            }
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']).trim();
        match (text, current.as_mut()) {
            ("begin" | "start", _) => {
                if current.is_some() {
                    tracing::warn!(sensor = %path, "load sensor began a reply before ending the last: the last dropped");
                }
                current = Some(BTreeMap::new());
                beyond_cap = 0;
            }
            ("end", Some(_)) => {
                if beyond_cap > 0 {
                    tracing::warn!(sensor = %path, "load sensor reported {beyond_cap} value(s) beyond {LOAD_VALUES_MAX}: dropped");
                }
                let reply = current.take().unwrap_or_default();
                if replies.try_send(reply).is_err() && replies.is_closed() {
                    return;
                }
            }
            ("", _) => {}
            (_, None) => tracing::warn!(sensor = %path, line = %quoted(text), "load sensor line outside a begin/end reply skipped"),
            (_, Some(values)) => match parse_value_line(text) {
                Ok((name, milli)) => {
                    if values.len() < LOAD_VALUES_MAX || values.contains_key(&name) {
                        values.insert(name, milli);
                    } else {
                        beyond_cap += 1;
                    }
                }
                Err(err) => tracing::warn!(sensor = %path, line = %quoted(text), "load sensor line skipped: {err}"),
            },
        }
    }
}

struct Running {
    child: Child,
    stdin: ChildStdin,
    replies: mpsc::Receiver<BTreeMap<String, i64>>,
}

/// One engine's load sensor: started at once, asked before each heartbeat.
pub struct LoadSensor {
    path: PathBuf,
    reply_timeout: Duration,
    running: Option<Running>,
    /// Questions asked (heartbeats) so far.
    polls: u64,
    /// The poll at which a dead sensor may be started again.
    restart_at_poll: u64,
    /// Heartbeats to wait after the next death.
    backoff_heartbeats: u64,
    /// The poll at which the current (or last) sensor process was started.
    started_at_poll: u64,
}

impl LoadSensor {
    /// Starts the program at `path` (no arguments, stdin and stdout piped,
    /// stderr the engine's). One that cannot start is tried again later.
    pub fn start(path: &Path, reply_timeout: Duration) -> LoadSensor {
        let mut sensor = LoadSensor {
            path: path.to_path_buf(),
            reply_timeout,
            running: None,
            polls: 0,
            restart_at_poll: 0,
            backoff_heartbeats: 1,
            started_at_poll: 0,
        };
        sensor.spawn();
        sensor
    }

    fn spawn(&mut self) {
        let spawned = Command::new(&self.path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(err) => {
                tracing::warn!(sensor = %self.path.display(), "cannot start the load sensor: {err}");
                self.back_off();
                return;
            }
        };
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            tracing::warn!(sensor = %self.path.display(), "the load sensor's pipes were not opened");
            self.back_off();
            return;
        };
        let (tx, rx) = mpsc::channel(REPLIES_QUEUED_MAX);
        tokio::spawn(read_replies(self.path.clone(), stdout, tx));
        tracing::info!(sensor = %self.path.display(), pid = child.id().unwrap_or(0), "load sensor started");
        self.started_at_poll = self.polls;
        self.running = Some(Running { child, stdin, replies: rx });
    }

    fn back_off(&mut self) {
        self.running = None;
        // One that ran long enough starts the back-off afresh.
        if self.polls.saturating_sub(self.started_at_poll) >= RESTART_BACKOFF_HEARTBEATS_MAX {
            self.backoff_heartbeats = 1;
        }
        self.restart_at_poll = self.polls.saturating_add(self.backoff_heartbeats);
        self.backoff_heartbeats = (self.backoff_heartbeats * 2).min(RESTART_BACKOFF_HEARTBEATS_MAX);
    }

    /// The sensor died (or closed its pipes): killed if it still runs, started
    /// again after the back-off.
    fn died(&mut self, what: &str) {
        if let Some(mut running) = self.running.take() {
            let status = running.child.try_wait().ok().flatten();
            let _ = running.child.start_kill();
            match status {
                Some(status) => tracing::warn!(sensor = %self.path.display(), "load sensor {what} ({status}); restarting it after {} heartbeat(s)", self.backoff_heartbeats),
                None => tracing::warn!(sensor = %self.path.display(), "load sensor {what}; restarting it after {} heartbeat(s)", self.backoff_heartbeats),
            }
        }
        self.back_off();
    }

    /// Asks for one reply and waits for it at most the reply timeout. `None`
    /// when the sensor is not running (waiting to restart), did not answer in
    /// time, or died; each said in a warning.
    pub async fn poll(&mut self) -> Option<BTreeMap<String, i64>> {
        self.polls += 1;
        if self.running.is_none() {
            if self.polls < self.restart_at_poll {
                return None;
            }
            self.spawn();
        }
        let timeout = self.reply_timeout;
        let running = self.running.as_mut()?;
        // A late reply to an earlier question is not this heartbeat's.
        while running.replies.try_recv().is_ok() {}
        let asked = tokio::time::timeout(timeout, async {
            running.stdin.write_all(b"\n").await?;
            running.stdin.flush().await
        })
        .await;
        match asked {
            Ok(Ok(())) => {}
            Ok(Err(_)) => {
                self.died("closed its input");
                return None;
            }
            Err(_) => {
                tracing::warn!(sensor = %self.path.display(), "load sensor does not read its input: skipped this heartbeat");
                return None;
            }
        }
        match tokio::time::timeout(timeout, running.replies.recv()).await {
            Ok(Some(values)) => Some(values),
            Ok(None) => {
                self.died("exited");
                None
            }
            Err(_) => {
                tracing::warn!(
                    sensor = %self.path.display(),
                    "load sensor did not answer within {}: skipped this heartbeat",
                    crate::human::duration(timeout)
                );
                None
            }
        }
    }

    /// Tells the sensor to `quit` and waits for it up to [`QUIT_GRACE`], then kills it.
    pub async fn quit(mut self) {
        let Some(mut running) = self.running.take() else { return };
        let _ = tokio::time::timeout(QUIT_GRACE, running.stdin.write_all(b"quit\n")).await;
        drop(running.stdin);
        if tokio::time::timeout(QUIT_GRACE, running.child.wait()).await.is_err() {
            tracing::warn!(sensor = %self.path.display(), "load sensor did not quit within {}: killed", crate::human::duration(QUIT_GRACE));
            let _ = running.child.kill().await;
        }
    }

    /// The running sensor's process id, if one runs.
    pub fn pid(&self) -> Option<u32> {
        self.running.as_ref().and_then(|running| running.child.id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// A sensor running `body` for each line it reads, quitting on `quit`.
    fn looping(dir: &Path, name: &str, body: &str) -> PathBuf {
        script(dir, name, &format!("while read line; do\n  [ \"$line\" = quit ] && exit 0\n{body}\ndone\n"))
    }

    /// A sensor answering each line with `reply` (a shell `printf` format's output).
    fn answering(dir: &Path, name: &str, reply: &str) -> PathBuf {
        looping(dir, name, &format!("  printf '{reply}'"))
    }

    fn values(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
        pairs.iter().map(|&(name, milli)| (name.to_string(), milli)).collect()
    }

    #[test]
    fn value_lines_with_or_without_host_read_into_milli_units_and_bad_ones_say_why() {
        assert_eq!(parse_value_line("node1:np_load_avg:1.25"), Ok(("np_load_avg".to_string(), 1_250)));
        assert_eq!(parse_value_line("global:scratch:-3"), Ok(("scratch".to_string(), -3_000)));
        assert_eq!(parse_value_line("logins:7"), Ok(("logins".to_string(), 7_000)));
        assert_eq!(parse_value_line("a:b:c:1"), Err(LineError::Shape));
        assert_eq!(parse_value_line("nothing"), Err(LineError::Shape));
        assert_eq!(parse_value_line("h:9lives:1"), Err(LineError::Name));
        assert_eq!(parse_value_line(&format!("h:{}:1", "n".repeat(65))), Err(LineError::Name));
        assert_eq!(parse_value_line("h:x:1.2345"), Err(LineError::Value));
        assert_eq!(parse_value_line("h:x:lots"), Err(LineError::Value));
        assert_eq!(parse_value_line("h:x:10000000000000000"), Err(LineError::Value));
    }

    #[test]
    fn merged_values_replace_measured_ones_and_stay_within_the_heartbeats_cap() {
        let mut measured = values(&[("load_avg", 500), ("np_load_avg", 250)]);
        merge(&mut measured, values(&[("np_load_avg", 1_000), ("logins", 3_000)]));
        assert_eq!(measured, values(&[("load_avg", 500), ("logins", 3_000), ("np_load_avg", 1_000)]));
        let mut measured: BTreeMap<String, i64> = (0..14).map(|i| (format!("m{i:02}"), i)).collect();
        let sensed: BTreeMap<String, i64> = (0..64).map(|i| (format!("s{i:02}"), i)).collect();
        merge(&mut measured, sensed.clone());
        assert_eq!(measured, sensed, "every measured value gives way to the sensor's 64");
    }

    #[tokio::test]
    async fn a_normal_sensor_answers_every_heartbeat_and_quits() {
        let dir = tempfile::tempdir().unwrap();
        let path = answering(dir.path(), "normal", "begin\\nhost1:np_load_avg:1.5\\nlogins:2\\nend\\n");
        let mut sensor = LoadSensor::start(&path, Duration::from_secs(5));
        for _ in 0..3 {
            assert_eq!(sensor.poll().await, Some(values(&[("logins", 2_000), ("np_load_avg", 1_500)])));
        }
        let pid = sensor.pid().expect("it runs");
        sensor.quit().await;
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "it quit and was reaped");
    }

    #[tokio::test]
    async fn a_slow_sensor_is_skipped_and_its_late_reply_never_used() {
        let dir = tempfile::tempdir().unwrap();
        // Answers the first question after 1.5 s, then at once, with the count of questions.
        let path = looping(dir.path(), "slow", "  n=$((n+1))\n  [ $n = 1 ] && sleep 1.5\n  printf 'begin\\nasked:%s\\nend\\n' $n");
        let mut sensor = LoadSensor::start(&path, Duration::from_millis(300));
        assert_eq!(sensor.poll().await, None, "no answer within 300 ms");
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        // The late answer to question 1 is thrown away: this heartbeat gets question 2's.
        assert_eq!(sensor.poll().await, Some(values(&[("asked", 2_000)])));
        sensor.quit().await;
    }

    #[tokio::test]
    async fn a_dying_sensor_is_restarted_with_back_off() {
        let dir = tempfile::tempdir().unwrap();
        // Answers once, then exits.
        let path = script(dir.path(), "dying", "read line\nprintf 'begin\\nx:1\\nend\\n'\nexit 3\n");
        let mut sensor = LoadSensor::start(&path, Duration::from_secs(2));
        assert_eq!(sensor.poll().await, Some(values(&[("x", 1_000)])));
        // Dead now: found dead on the next question, then back-off.
        assert_eq!(sensor.poll().await, None);
        let mut answered_at = Vec::new();
        for poll in 0..8 {
            if sensor.poll().await.is_some() {
                answered_at.push(poll);
            }
        }
        // Found dead at a heartbeat, it is started again 1 heartbeat later, then
        // 2, then 4: of these eight, polls 0 and 3 answer (each then dies again).
        assert_eq!(answered_at, vec![0, 3]);
        assert_eq!(sensor.backoff_heartbeats, 8);
    }

    #[tokio::test]
    async fn a_sensor_that_cannot_start_gives_no_values_and_no_panic() {
        let dir = tempfile::tempdir().unwrap();
        let mut sensor = LoadSensor::start(&dir.path().join("missing"), Duration::from_millis(100));
        for _ in 0..4 {
            assert_eq!(sensor.poll().await, None);
        }
        assert_eq!(sensor.backoff_heartbeats, 8, "1, 2, 4, then 8 heartbeats between attempts");
    }

    #[tokio::test]
    async fn garbage_lines_are_skipped_and_good_values_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = answering(
            dir.path(),
            "garbage",
            "outside:1\\nbegin\\nh:good:0.5\\nno colon\\nh:bad name:1\\nh:x:1.0001\\n\\377\\376:1\\nh:also_good:2\\nend\\nend\\n",
        );
        let mut sensor = LoadSensor::start(&path, Duration::from_secs(5));
        assert_eq!(sensor.poll().await, Some(values(&[("also_good", 2_000), ("good", 500)])));
        assert_eq!(sensor.poll().await, Some(values(&[("also_good", 2_000), ("good", 500)])));
        sensor.quit().await;
    }

    #[tokio::test]
    async fn too_many_values_are_cut_at_the_heartbeats_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = looping(
            dir.path(),
            "many",
            "  echo begin\n  i=0\n  while [ $i -lt 100 ]; do echo \"h:v$((1000+i)):$i\"; i=$((i+1)); done\n  echo end",
        );
        let mut sensor = LoadSensor::start(&path, Duration::from_secs(5));
        let got = sensor.poll().await.expect("a reply");
        assert_eq!(got.len(), LOAD_VALUES_MAX);
        assert_eq!(got.get("v1000"), Some(&0));
        assert_eq!(got.get("v1063"), Some(&63_000));
        assert_eq!(got.get("v1064"), None);
        sensor.quit().await;
    }

    #[tokio::test]
    async fn a_line_too_long_is_skipped_whole_and_the_reply_kept() {
        let dir = tempfile::tempdir().unwrap();
        let long = "x".repeat(SENSOR_LINE_BYTES_MAX * 3);
        let path = looping(dir.path(), "long", &format!("  echo begin\n  echo 'h:{long}:1'\n  echo 'h:after:4'\n  echo end"));
        let mut sensor = LoadSensor::start(&path, Duration::from_secs(5));
        assert_eq!(sensor.poll().await, Some(values(&[("after", 4_000)])));
        sensor.quit().await;
    }
}
