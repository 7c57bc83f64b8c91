//! An engine's task processes die with it: what a dead engine's tasks leave behind,
//! and how the next engine on the same work directory finds and kills it.
//!
//! Three pieces make the guarantee:
//!
//! - **The parent-death signal** (`runner`): every task's leader is forked from one
//!   thread that lives as long as the process and asks for SIGKILL when it dies. It
//!   covers the leader only: the kernel clears it in the leader's own children.
//! - **Records** ([`GroupRecords`]): each running task's process group is recorded in
//!   the journal `<work_dir>/@groups/journal` from just after its fork until just
//!   before its leader is reaped.
//! - **The claim** ([`claim_work_dir`]): an engine locks `<work_dir>/@engine.lock`
//!   (`flock`, released by the kernel however the engine ends), so one engine at a
//!   time uses a work directory; then, before it logs in, it kills the groups its
//!   predecessor recorded, waits (at most [`LEFTOVERS_KILL_TIMEOUT`]) for them to be
//!   gone, and clears the records. A second engine on a locked directory is refused.
//!
//! `@` is not allowed in job ids, so these names never meet an attempt's directory.
//!
//! # Records
//!
//! One line, `gridfold-task-group/1 pgid=<pgid> start_ticks=<t> boot_id=<id>
//! token=<hex>`: the group (the leader's pid), the leader's start time as
//! `/proc/<pid>/stat` gives it (pinned by the boot-time clock read around the
//! start, see `spawn`, else read there), the boot it ran in, and a random token the task's processes
//! inherit in their environment ([`TOKEN_ENV`]).
//!
//! The journal holds `+ <record>` when a group starts and `- <pgid>` when it
//! ends, each appended in one `write` to a file opened once: a task costs two
//! small writes, not a file made and removed (the filesystem's inode work was
//! the largest single cost of a short task). The live groups are those added and
//! not removed since; when the journal holds [`JOURNAL_COMPACT_LINES`] lines and
//! four times more than live groups, it is replaced (written beside and renamed)
//! by their `+` lines alone, so it stays small however long the engine runs. A
//! line the engine was writing when it died is cut short, and read as not a
//! record. Not fsynced: records guard against the engine dying, not the machine,
//! and after a reboot the boot id tells them stale. A file of one record each
//! (`<pgid>`, what engines before the journal wrote) is still read at the claim.
//!
//! # Invariants
//!
//! - **Only what is provably the recorded group is killed.** A pid is not handed out
//!   again while any process still has it as its group id, so:
//!   - a record of another boot names nothing alive: dropped;
//!   - if process `pgid` exists, its start time must be the recorded one, or the pid
//!     was reused after the recorded group ended entirely: spared. If it matches, the
//!     group is the recorded one: SIGKILL to the group (and to the leader, if it left
//!     its group);
//!   - if process `pgid` is gone but its group has live members (the usual case after
//!     a `kill -9` of the engine: the leader died of its parent-death signal and its
//!     children stayed), every live member must carry the record's token in the
//!     environment it was started with, or the whole group is spared and the engine
//!     says which process failed the check. Sparing one of our processes that
//!     cleared its environment is the price of never killing someone else's.
//! - Every record found at the claim is cleared, whatever its fate, once the groups
//!   killed are gone or the timeout ran out (logged with what still lives: a
//!   process in uninterruptible sleep dies when it wakes, its SIGKILL pending).
//!
//! # Not here
//!
//! Processes that left their task's group (`setsid`, `setpgid`) are not found. A
//! group is recorded just after its fork: an engine killed in that window (a few
//! microseconds) leaves the leader to its parent-death signal and anything the leader
//! forked by then unrecorded. Between the check and the `killpg` the group could in
//! principle end and its id be reused; a pid is not reused within microseconds.

use std::fs::File;
use std::io::{self, Write as _};
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::EngineError;
use super::procfs::{self, ProcStat};

/// The lock file in the work directory; holds the pid of the engine holding it.
pub const LOCK_FILE_NAME: &str = "@engine.lock";
/// The directory of group records in the work directory.
pub const RECORDS_DIR_NAME: &str = "@groups";
/// The environment variable carrying a task's token (see the module docs).
pub const TOKEN_ENV: &str = "GRIDFOLD_GROUP_TOKEN";
/// The journal of group records in the records directory.
pub const JOURNAL_FILE_NAME: &str = "journal";
/// The journal is compacted once it holds this many lines (and four times more
/// than live groups).
pub const JOURNAL_COMPACT_LINES: u64 = 4_096;
/// How long a claiming engine waits for the groups it killed to be gone.
pub const LEFTOVERS_KILL_TIMEOUT: Duration = Duration::from_secs(5);
const LEFTOVERS_POLL: Duration = Duration::from_millis(20);
const RECORD_TAG: &str = "gridfold-task-group/1";

#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error(
        "the work directory {} is in use by another engine{}: two engines cannot share a work directory (it holds the lock {})",
        work_dir.display(),
        holder.map(|pid| format!(" (process {pid})")).unwrap_or_default(),
        lock.display()
    )]
    InUse {
        work_dir: PathBuf,
        lock: PathBuf,
        /// The pid the holder wrote in the lock file, if it could be read.
        holder: Option<u32>,
    },
    #[error("cannot use {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// One running task's process group, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRecord {
    pub pgid: i32,
    /// The leader's start time, in clock ticks after boot.
    pub start_ticks: u64,
    /// Empty when the boot id could not be read.
    pub boot_id: String,
    pub token: String,
}

impl GroupRecord {
    pub fn to_line(&self) -> String {
        format!(
            "{RECORD_TAG} pgid={} start_ticks={} boot_id={} token={}\n",
            self.pgid, self.start_ticks, self.boot_id, self.token
        )
    }

    pub fn parse(text: &str) -> Result<GroupRecord, String> {
        let mut words = text.split_whitespace();
        if words.next() != Some(RECORD_TAG) {
            return Err(format!("it does not start with {RECORD_TAG}"));
        }
        let fields: Vec<(&str, &str)> = words.filter_map(|word| word.split_once('=')).collect();
        let field = |key: &str| {
            fields
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| *v)
                .ok_or_else(|| format!("it has no {key}"))
        };
        let number = |key: &str| -> Result<u64, String> {
            field(key)?
                .parse()
                .map_err(|err| format!("its {key} is not a number: {err}"))
        };
        let pgid = i32::try_from(number("pgid")?)
            .ok()
            .filter(|&pgid| pgid > 1)
            .ok_or("its pgid is not a process group id")?;
        Ok(GroupRecord {
            pgid,
            start_ticks: number("start_ticks")?,
            boot_id: field("boot_id")?.to_string(),
            token: field("token")?.to_string(),
        })
    }

    /// The environment entry the group's processes carry.
    pub fn token_entry(&self) -> String {
        token_entry(&self.token)
    }
}

/// `GRIDFOLD_GROUP_TOKEN=<token>`.
pub fn token_entry(token: &str) -> String {
    format!("{TOKEN_ENV}={token}")
}

/// A fresh random token for one task.
pub fn new_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Where a work directory's group records go. Cheap to clone; made by the claim.
#[derive(Debug, Clone)]
pub struct GroupRecords {
    dir: PathBuf,
    boot_id: String,
    journal: std::sync::Arc<std::sync::Mutex<Journal>>,
}

/// The open journal and what it says now.
#[derive(Debug)]
struct Journal {
    path: PathBuf,
    file: File,
    /// The live groups' `+` lines, by group.
    live: std::collections::BTreeMap<i32, String>,
    /// Lines in the file.
    lines: u64,
}

impl Journal {
    /// A fresh, empty journal at `path` (what was there is replaced).
    fn create(path: PathBuf) -> io::Result<Journal> {
        let file = File::options().create(true).truncate(true).write(true).open(&path)?;
        // Appends from here: every line goes to the end in one write.
        drop(file);
        let file = File::options().append(true).open(&path)?;
        Ok(Journal { path, file, live: std::collections::BTreeMap::new(), lines: 0 })
    }

    fn append(&mut self, line: &str) -> io::Result<()> {
        self.file.write_all(line.as_bytes())?;
        self.lines += 1;
        Ok(())
    }

    /// Replaces the file by the live groups' lines when it has grown far past them.
    fn compact_if_due(&mut self) -> io::Result<()> {
        let live = self.live.len() as u64;
        if self.lines < JOURNAL_COMPACT_LINES || self.lines < 4 * live {
            return Ok(());
        }
        let text: String = self.live.values().map(String::as_str).collect();
        crate::replace_file::replace_file(&self.path, text.as_bytes(), crate::replace_file::Durability::Cached)?;
        self.file = File::options().append(true).open(&self.path)?;
        self.lines = live;
        Ok(())
    }
}

impl GroupRecords {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Records the group of `pgid`, a leader just started and not yet reaped, whose
    /// processes carry `token`, and whose start time is `start_ticks` (read from
    /// `/proc/<pid>/stat` when `None`).
    pub fn record(&self, pgid: i32, token: &str, start_ticks: Option<u64>) -> io::Result<()> {
        let start_ticks = match start_ticks {
            Some(ticks) => ticks,
            None => procfs::read_stat(pgid)
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("cannot read /proc/{pgid}/stat")))?
                .start_ticks,
        };
        let record = GroupRecord {
            pgid,
            start_ticks,
            boot_id: self.boot_id.clone(),
            token: token.to_string(),
        };
        let line = format!("+ {}", record.to_line());
        let mut journal = self.journal.lock().unwrap_or_else(|e| e.into_inner());
        journal.append(&line)?;
        journal.live.insert(pgid, line);
        Ok(())
    }

    /// Forgets the group of `pgid` (its leader about to be reaped).
    pub fn remove(&self, pgid: i32) {
        let mut journal = self.journal.lock().unwrap_or_else(|e| e.into_inner());
        if journal.live.remove(&pgid).is_none() {
            return;
        }
        if let Err(err) = journal.append(&format!("- {pgid}\n")).and_then(|()| journal.compact_if_due()) {
            tracing::warn!(pgid, "cannot forget the group record in {}: {err}", journal.path.display());
        }
    }
}

/// What a records directory holds: the records of live groups (the journal's,
/// and any file of one record), the files read, and how many lines or files
/// were not records.
#[derive(Debug, Default)]
pub struct FoundRecords {
    pub records: Vec<GroupRecord>,
    pub files: Vec<PathBuf>,
    pub unreadable: usize,
}

/// Reads the group records of a records directory (see the module docs).
pub fn read_records(dir: &Path) -> io::Result<FoundRecords> {
    let mut found = FoundRecords::default();
    let mut live: std::collections::BTreeMap<i32, GroupRecord> = std::collections::BTreeMap::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?.map(|entry| entry.map(|e| e.path())).collect::<io::Result<_>>()?;
    entries.sort();
    for path in entries {
        if !path.is_file() {
            continue;
        }
        found.files.push(path.clone());
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(err) => {
                tracing::warn!("ignoring {}: {err}", path.display());
                found.unreadable += 1;
                continue;
            }
        };
        if path.file_name().is_some_and(|name| name == JOURNAL_FILE_NAME) {
            for line in text.lines() {
                let change = match line.split_once(' ') {
                    Some(("+", record)) => GroupRecord::parse(record).map(|record| {
                        live.insert(record.pgid, record);
                    }),
                    Some(("-", pgid)) => pgid.trim().parse::<i32>().map(|pgid| {
                        live.remove(&pgid);
                    }).map_err(|err| err.to_string()),
                    _ => Err("it is neither `+ <record>` nor `- <pgid>`".to_string()),
                };
                if let Err(err) = change {
                    tracing::warn!("ignoring a line of {}: not a group record: {err}", path.display());
                    found.unreadable += 1;
                }
            }
            continue;
        }
        match GroupRecord::parse(&text) {
            Ok(record) => {
                live.insert(record.pgid, record);
            }
            Err(err) => {
                tracing::warn!("ignoring {}: not a group record: {err}", path.display());
                found.unreadable += 1;
            }
        }
    }
    found.records = live.into_values().collect();
    Ok(found)
}

/// An engine's hold on its work directory: the lock, kept until dropped.
#[derive(Debug)]
pub struct WorkDirClaim {
    _lock: File,
    records: GroupRecords,
}

impl WorkDirClaim {
    pub fn records(&self) -> &GroupRecords {
        &self.records
    }
}

/// What the claim did with the records a previous engine left.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leftovers {
    /// Groups killed.
    pub killed: Vec<i32>,
    /// Groups left alone: not provably the recorded ones.
    pub spared: Vec<i32>,
    /// Records whose groups had already ended.
    pub gone: usize,
    /// Files in the records directory that were not records.
    pub unreadable: usize,
    /// Processes of killed groups still alive when the timeout ran out.
    pub surviving: Vec<i32>,
}

impl Leftovers {
    /// No record was found.
    pub fn is_empty(&self) -> bool {
        self.killed.is_empty() && self.spared.is_empty() && self.gone == 0 && self.unreadable == 0
    }
}

/// Locks `work_dir` (an existing directory) for this engine, then kills what the
/// previous engine's tasks left (see the module docs). Blocks, for up to
/// [`LEFTOVERS_KILL_TIMEOUT`] and a little more.
pub fn claim_work_dir(work_dir: &Path) -> Result<(WorkDirClaim, Leftovers), ClaimError> {
    let lock = lock(work_dir)?;
    let dir = work_dir.join(RECORDS_DIR_NAME);
    std::fs::create_dir_all(&dir).map_err(|source| ClaimError::Io {
        path: dir.clone(),
        source,
    })?;
    let boot_id = procfs::boot_id().unwrap_or_else(|| {
        tracing::warn!("cannot read the boot id; records will be judged by start times alone");
        String::new()
    });
    let leftovers = kill_leftovers(&dir, &boot_id)?;
    let journal_path = dir.join(JOURNAL_FILE_NAME);
    let journal = Journal::create(journal_path.clone()).map_err(|source| ClaimError::Io { path: journal_path, source })?;
    let records = GroupRecords { dir, boot_id, journal: std::sync::Arc::new(std::sync::Mutex::new(journal)) };
    Ok((
        WorkDirClaim {
            _lock: lock,
            records,
        },
        leftovers,
    ))
}

/// [`claim_work_dir`] for an engine, on a blocking thread (it may wait for the
/// killed processes to go), logging in the caller's span.
pub async fn claim(work_dir: &Path) -> Result<WorkDirClaim, EngineError> {
    let work_dir = work_dir.to_path_buf();
    let span = tracing::Span::current();
    let claimed = tokio::task::spawn_blocking(move || span.in_scope(|| claim_work_dir(&work_dir)))
        .await
        .map_err(|err| {
            EngineError::Internal(format!("claiming the work directory panicked: {err}"))
        })?;
    Ok(claimed?.0)
}

fn lock(work_dir: &Path) -> Result<File, ClaimError> {
    let path = work_dir.join(LOCK_FILE_NAME);
    let io = |source| ClaimError::Io {
        path: path.clone(),
        source,
    };
    // std opens with O_CLOEXEC: task processes never inherit the lock.
    let mut file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io)?;
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
            let holder = std::fs::read_to_string(&path)
                .ok()
                .and_then(|text| text.trim().parse().ok());
            return Err(ClaimError::InUse {
                work_dir: work_dir.to_path_buf(),
                lock: path,
                holder,
            });
        }
        return Err(io(err));
    }
    // Who holds it, for the message a refused engine gives.
    file.set_len(0)
        .and_then(|()| file.write_all(format!("{}\n", std::process::id()).as_bytes()))
        .map_err(io)?;
    Ok(file)
}

/// What a record names now.
#[derive(Debug)]
enum Verdict {
    /// Nothing of it lives.
    Gone,
    /// Not provably the recorded group, for this reason.
    NotOurs(String),
    /// The recorded group, with its live members, and its leader's pid if the leader
    /// lives outside it.
    Ours {
        members: Vec<ProcStat>,
        leader_outside: Option<i32>,
    },
}

fn judge(record: &GroupRecord, boot_id: &str) -> io::Result<Verdict> {
    if !record.boot_id.is_empty() && !boot_id.is_empty() && record.boot_id != boot_id {
        return Ok(Verdict::Gone);
    }
    // SAFETY: getpgrp has no preconditions.
    if record.pgid == unsafe { libc::getpgrp() } {
        return Ok(Verdict::NotOurs(
            "it is this engine's own process group".to_string(),
        ));
    }
    let members = procfs::live_group_members(record.pgid)?;
    Ok(match procfs::read_stat(record.pgid) {
        Some(leader) if leader.start_ticks != record.start_ticks => Verdict::NotOurs(format!(
            "pid {} now belongs to another process ({}, started {} ticks after boot, not {})",
            record.pgid, leader.command, leader.start_ticks, record.start_ticks
        )),
        Some(leader) => {
            let leader_outside =
                (leader.is_live() && leader.pgid != record.pgid).then_some(leader.pid);
            if members.is_empty() && leader_outside.is_none() {
                Verdict::Gone
            } else {
                Verdict::Ours {
                    members,
                    leader_outside,
                }
            }
        }
        None if members.is_empty() => Verdict::Gone,
        None => {
            let entry = record.token_entry();
            match members
                .iter()
                .find(|member| procfs::environ_holds(member.pid, &entry) != Some(true))
            {
                Some(stranger) => Verdict::NotOurs(format!(
                    "its leader is gone and process {} ({}) in the group does not carry the task's {TOKEN_ENV}",
                    stranger.pid, stranger.command
                )),
                None => Verdict::Ours {
                    members,
                    leader_outside: None,
                },
            }
        }
    })
}

fn kill_leftovers(dir: &Path, boot_id: &str) -> Result<Leftovers, ClaimError> {
    let io = |source| ClaimError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut leftovers = Leftovers::default();
    // (pgid, leader outside its group) of the groups killed.
    let mut killed: Vec<(i32, Option<i32>)> = Vec::new();
    let FoundRecords { records, files, unreadable } = read_records(dir).map_err(io)?;
    leftovers.unreadable = unreadable;
    // One record per group: `read_records` keeps the last word on each.
    for record in records {
        let pgid = record.pgid;
        match judge(&record, boot_id).map_err(|source| ClaimError::Io {
            path: PathBuf::from("/proc"),
            source,
        })? {
            Verdict::Gone => {
                tracing::debug!(
                    pgid,
                    "a task group of the previous engine had already ended"
                );
                leftovers.gone += 1;
            }
            Verdict::NotOurs(reason) => {
                tracing::warn!(
                    pgid,
                    "not killing a process group the previous engine recorded: {reason}"
                );
                leftovers.spared.push(pgid);
            }
            Verdict::Ours {
                members,
                leader_outside,
            } => {
                signal_group(pgid, leader_outside);
                let processes: Vec<String> = members
                    .iter()
                    .map(|m| format!("{} {}", m.pid, m.command))
                    .collect();
                tracing::warn!(
                    pgid,
                    processes = %processes.join(", "),
                    "killed a task process group left by the previous engine on this work directory"
                );
                killed.push((pgid, leader_outside));
                leftovers.killed.push(pgid);
            }
        }
    }
    leftovers.surviving =
        wait_until_gone(&killed, LEFTOVERS_KILL_TIMEOUT).map_err(|source| ClaimError::Io {
            path: PathBuf::from("/proc"),
            source,
        })?;
    if !leftovers.surviving.is_empty() {
        tracing::warn!(
            pids = ?leftovers.surviving,
            "processes of killed groups still live after {LEFTOVERS_KILL_TIMEOUT:?}; going on (their SIGKILL is pending)"
        );
    }
    for path in files {
        std::fs::remove_file(&path).map_err(|source| ClaimError::Io { path, source })?;
    }
    if !leftovers.is_empty() {
        tracing::info!(
            killed = leftovers.killed.len(),
            spared = leftovers.spared.len(),
            gone = leftovers.gone,
            unreadable = leftovers.unreadable,
            "cleared the group records of the previous engine on this work directory"
        );
    }
    Ok(leftovers)
}

fn signal_group(pgid: i32, leader_outside: Option<i32>) {
    // SAFETY: killpg only sends a signal, to a group judged ours.
    report_kill_error(pgid, unsafe { libc::killpg(pgid, libc::SIGKILL) });
    if let Some(pid) = leader_outside {
        // SAFETY: kill only sends a signal, to a leader judged ours.
        report_kill_error(pgid, unsafe { libc::kill(pid, libc::SIGKILL) });
    }
}

fn report_kill_error(pgid: i32, rc: libc::c_int) {
    if rc != 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::ESRCH) {
            tracing::warn!(pgid, "cannot kill a leftover process group: {err}");
        }
    }
}

/// Waits until no process of the groups (nor their leaders outside them) lives, for
/// at most `timeout`; answers the pids still alive then.
fn wait_until_gone(groups: &[(i32, Option<i32>)], timeout: Duration) -> io::Result<Vec<i32>> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut alive = Vec::new();
        for &(pgid, leader_outside) in groups {
            alive.extend(procfs::live_group_members(pgid)?.iter().map(|m| m.pid));
            alive.extend(
                leader_outside.filter(|&pid| procfs::read_stat(pid).is_some_and(|s| s.is_live())),
            );
        }
        if alive.is_empty() || Instant::now() >= deadline {
            return Ok(alive);
        }
        std::thread::sleep(LEFTOVERS_POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_and_refuse_what_they_are_not() {
        let record = GroupRecord {
            pgid: 4242,
            start_ticks: 98_765,
            boot_id: "0f1e2d3c-aaaa-bbbb-cccc-0123456789ab".to_string(),
            token: new_token(),
        };
        assert_eq!(GroupRecord::parse(&record.to_line()), Ok(record.clone()));
        let unknown_boot = GroupRecord {
            boot_id: String::new(),
            ..record
        };
        assert_eq!(
            GroupRecord::parse(&unknown_boot.to_line()),
            Ok(unknown_boot)
        );
        for (text, why) in [
            ("", "does not start"),
            (
                "gridfold-task-group/1 pgid=12 start_ticks=3 boot_id=b",
                "no token",
            ),
            (
                "gridfold-task-group/1 pgid=x start_ticks=3 boot_id=b token=t",
                "not a number",
            ),
            (
                "gridfold-task-group/1 pgid=1 start_ticks=3 boot_id=b token=t",
                "not a process group",
            ),
            ("gridfold-task-group/1 pgid=4", "no start_ticks"),
        ] {
            let err = GroupRecord::parse(text).unwrap_err();
            assert!(err.contains(why), "{text:?}: {err}");
        }
    }

    #[test]
    fn a_work_dir_is_claimed_once_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let (claim, leftovers) = claim_work_dir(dir.path()).unwrap();
        assert_eq!(leftovers, Leftovers::default());
        assert!(claim.records().dir().is_dir());
        let err = claim_work_dir(dir.path()).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("in use by another engine")
                && message.contains(&format!("(process {})", std::process::id())),
            "{message}"
        );
        drop(claim);
        claim_work_dir(dir.path()).unwrap();
    }

    #[test]
    fn records_of_another_boot_or_of_ended_groups_are_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let records = dir.path().join(RECORDS_DIR_NAME);
        std::fs::create_dir_all(&records).unwrap();
        let me = procfs::read_stat(std::process::id() as i32).unwrap();
        // Our own group, but recorded in another boot: never touched.
        let other_boot = GroupRecord {
            pgid: me.pgid,
            start_ticks: 1,
            boot_id: "another-boot".to_string(),
            token: new_token(),
        };
        std::fs::write(records.join("a"), other_boot.to_line()).unwrap();
        std::fs::write(records.join("b.tmp"), "half a rec").unwrap();
        let (_claim, leftovers) = claim_work_dir(dir.path()).unwrap();
        assert_eq!(
            leftovers,
            Leftovers {
                gone: 1,
                unreadable: 1,
                ..Leftovers::default()
            }
        );
        let left: Vec<_> = std::fs::read_dir(&records).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, [JOURNAL_FILE_NAME], "only the new, empty journal is left");
        assert_eq!(std::fs::read(records.join(JOURNAL_FILE_NAME)).unwrap(), b"");
    }

    /// A group is a line added and a line removed in the journal; the journal
    /// reads back as the live groups, is compacted once long, and a line cut
    /// short by a dying engine is not a record.
    #[test]
    fn the_journal_holds_the_live_groups_and_stays_small_however_many_tasks_ran() {
        let dir = tempfile::tempdir().unwrap();
        let (claim, _) = claim_work_dir(dir.path()).unwrap();
        let records = claim.records();
        let journal = records.dir().join(JOURNAL_FILE_NAME);
        // Our own pid stands for a task leader: record reads its start time.
        let me = std::process::id() as i32;
        for _ in 0..5_000 {
            records.record(me, "t", None).unwrap();
            records.remove(me);
        }
        let lines = std::fs::read_to_string(&journal).unwrap().lines().count() as u64;
        assert!(lines < JOURNAL_COMPACT_LINES, "10,000 lines written, {lines} kept");
        assert!(read_records(records.dir()).unwrap().records.is_empty());
        records.record(me, "live", None).unwrap();
        let found = read_records(records.dir()).unwrap();
        assert_eq!((found.records.len(), found.records[0].token.as_str(), found.unreadable), (1, "live", 0));
        // An engine dying in the middle of a line leaves half of it.
        std::fs::OpenOptions::new().append(true).open(&journal).unwrap().write_all(b"+ gridfold-task-group/1 pgid=77 sta").unwrap();
        let found = read_records(records.dir()).unwrap();
        assert_eq!((found.records.len(), found.unreadable), (1, 1));
    }
}
