//! Attempt directories made ahead of need, off the engine's loop.
//!
//! Every attempt starts in a directory of its own, never used before: reusing an
//! emptied one could hand a task a directory that a process escaped from an
//! earlier task's group still works in. Making one is a `mkdir`, and on the
//! development machine's ext4 that `mkdir` cost 80-480 µs of CPU (the
//! allocator steps over the inodes recently deleted in the directory's block
//! group, see `work_root`), about two thirds of what the engine's loop spent
//! per task, all of it between a run's delivery and its start.
//!
//! So a thread of its own, `gridfold-fresh-dirs`, keeps a few empty
//! directories ready in `<work dir>/@fresh/ready` (numbered, never given to a
//! task while there), and a start renames one to the attempt's path: a rename
//! allocates no inode. The directory is as fresh as a `mkdir` would have made
//! it. When none is ready (a burst of starts past what the thread made), the
//! start makes its own, as before. The thread makes each one in
//! `@fresh/making` and moves it to `ready` once made: a `mkdir` holds its
//! parent's lock for as long as the allocation takes, and a start's rename out
//! of that same parent would wait for it (spinning, measured at 6 % of the
//! engine's CPU when both were in one directory).
//!
//! Made ahead, each directory costs a `mkdir` and two renames instead of one
//! `mkdir`, and the thread's CPU is the engine's all the same: it buys the
//! start's latency, not CPU. On 2 cores kept busy by 8 slots of `/bin/true`,
//! eleven alternating pairs of runs with and without it could not tell them
//! apart (docs/performance.md). `gridfold engine --dirs-ahead N` sets how many
//! wait (default twice the slots); 0 starts no thread, and each start makes
//! its own.
//!
//! # Invariants
//!
//! - A directory leaves `@fresh/ready` only by the rename to one attempt's path,
//!   so no two attempts get the same one, and none gets one a task used.
//! - At most [`FreshDirs::ahead`] directories wait; the thread blocks meanwhile.
//! - `@fresh` is emptied at each start of an engine (what a stopped engine left
//!   there was never used), and the sweep of old attempts does not look in it
//!   (it skips names starting with `@`).
//! - The thread ends when the engine drops its [`FreshDirs`]; the directory it
//!   had made for nobody is removed.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};

/// The directory under the engine's work directory that holds the ready ones.
pub const FRESH_DIR_NAME: &str = "@fresh";
const MAKING_DIR_NAME: &str = "making";
const READY_DIR_NAME: &str = "ready";
/// The nice value of the thread that makes them.
const FRESH_DIRS_NICE: libc::c_int = 10;
/// Most directories made ahead, whatever the engine's slots.
pub const AHEAD_MAX: usize = 256;

/// How an attempt's directory was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Made {
    /// A ready directory was renamed to it.
    Renamed,
    /// None was ready (or the rename failed): made or found by `create_dir_all`.
    Made,
}

/// The ready directories and the thread that makes them (none, if none are
/// made ahead).
pub struct FreshDirs {
    /// In a mutex only to be `Sync` (the engine's loop is the one taker).
    taker: Mutex<Taker>,
    ahead: usize,
}

/// What the one taker of directories holds.
struct Taker {
    /// `None`: nothing is made ahead, each start makes its own.
    ready: Option<Receiver<PathBuf>>,
    /// The parent of the last directory made (a job's directory): the next
    /// attempt of the same job needs no `create_dir_all` of it first. If it
    /// has gone since (the sweep of old attempts), the rename says so and the
    /// parent is made again.
    last_parent: Option<PathBuf>,
}

impl FreshDirs {
    /// Empties `<work_dir>/@fresh` and starts the thread that keeps `ahead`
    /// directories ready there (at most [`AHEAD_MAX`]); with `ahead` 0, no
    /// thread: each start makes its own directory.
    pub fn start(work_dir: &Path, ahead: usize) -> io::Result<FreshDirs> {
        let ahead = ahead.min(AHEAD_MAX);
        let pool = work_dir.join(FRESH_DIR_NAME);
        match std::fs::remove_dir_all(&pool) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(err),
        }
        if ahead == 0 {
            return Ok(FreshDirs { taker: Mutex::new(Taker { ready: None, last_parent: None }), ahead });
        }
        std::fs::create_dir(&pool)?;
        let (making, made) = (pool.join(MAKING_DIR_NAME), pool.join(READY_DIR_NAME));
        std::fs::create_dir(&making)?;
        std::fs::create_dir(&made)?;
        let (ready_tx, ready) = sync_channel(ahead);
        std::thread::Builder::new()
            .name("gridfold-fresh-dirs".to_string())
            .spawn(move || {
                lower_own_priority();
                make_ahead(&making, &made, &ready_tx)
            })?;
        Ok(FreshDirs { taker: Mutex::new(Taker { ready: Some(ready), last_parent: None }), ahead })
    }

    /// How many directories are kept ready.
    pub fn ahead(&self) -> usize {
        self.ahead
    }

    /// Makes `dir`, an attempt's directory (its parent is made if missing): a
    /// ready one renamed to it if there is one, else a `mkdir`. A `dir` that
    /// exists already (an attempt started again by a new engine process) is
    /// kept as it is, as `create_dir_all` would.
    pub fn make(&self, dir: &Path) -> io::Result<Made> {
        let mut taker = self.taker.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let parent = dir.parent();
        let parent_known = parent.is_some() && taker.last_parent.as_deref() == parent;
        if !parent_known && let Some(parent) = parent {
            std::fs::create_dir_all(parent)?;
            taker.last_parent = Some(parent.to_path_buf());
        }
        match taker.ready.as_ref().map_or(Err(TryRecvError::Empty), Receiver::try_recv) {
            Ok(fresh) => {
                // Fails when `dir` exists and is not empty; an empty one is replaced
                // by the ready one, which is the same thing.
                let renamed = match std::fs::rename(&fresh, dir) {
                    Err(err) if err.kind() == io::ErrorKind::NotFound && parent_known => {
                        // The job's directory was swept since its last attempt.
                        taker.last_parent = None;
                        match parent {
                            Some(parent) => std::fs::create_dir_all(parent).and_then(|()| std::fs::rename(&fresh, dir)),
                            None => Err(err),
                        }
                    }
                    renamed => renamed,
                };
                if renamed.is_ok() {
                    return Ok(Made::Renamed);
                }
                let _ = std::fs::remove_dir(&fresh);
            }
            Err(TryRecvError::Empty) => {}
            Err(TryRecvError::Disconnected) => {}
        }
        std::fs::create_dir_all(dir)?;
        Ok(Made::Made)
    }
}

/// The thread works ahead, never on the path of a start: on a busy machine
/// the spawner and the engine's loop should get the CPU first (measured on 2
/// cores, the spawner waited up to 0.46 ms for one while this thread's `mkdir`
/// ran). Nice 10 (Linux gives each thread its own nice value); a failure only
/// leaves it at the engine's priority.
fn lower_own_priority() {
    // SAFETY: gettid and setpriority have no memory preconditions.
    let failed = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, FRESH_DIRS_NICE) != 0
    };
    if failed {
        tracing::debug!("cannot lower the priority of the gridfold-fresh-dirs thread: {}", io::Error::last_os_error());
    }
}

/// The thread's loop: make the next numbered directory in `making`, move it to
/// `made` and hand it over (waiting while `ahead` are ready), until the engine
/// drops its side or a `mkdir` or the move fails.
fn make_ahead(making: &Path, made: &Path, ready: &SyncSender<PathBuf>) {
    for n in 0u64.. {
        let name = n.to_string();
        let (new, path) = (making.join(&name), made.join(&name));
        if let Err(err) = std::fs::create_dir(&new).and_then(|()| std::fs::rename(&new, &path)) {
            // The starts make their own from now on, as without this thread.
            tracing::warn!("cannot make {} ahead of need, so each start makes its own: {err}", path.display());
            return;
        }
        if let Err(unsent) = ready.send(path) {
            let _ = std::fs::remove_dir(unsent.0);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn wait_for_ready(work: &Path, count: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while entries(&work.join(FRESH_DIR_NAME).join(READY_DIR_NAME)).len() < count {
            assert!(Instant::now() < deadline, "the thread did not make {count} directories in 10 s");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn attempts_get_ready_directories_renamed_each_one_once_and_at_most_ahead_wait() {
        let work = tempfile::tempdir().unwrap();
        let fresh = FreshDirs::start(work.path(), 3).unwrap();
        wait_for_ready(work.path(), 3);
        // Three ready, one more made and blocked on the full channel: 4 at most.
        std::thread::sleep(Duration::from_millis(50));
        assert!(entries(&work.path().join(FRESH_DIR_NAME).join(READY_DIR_NAME)).len() <= 4);
        let mut made = Vec::new();
        for index in 0..3 {
            let dir = work.path().join("job").join(format!("{index}-1"));
            made.push(fresh.make(&dir).unwrap());
            assert!(dir.is_dir(), "{} made", dir.display());
            assert!(entries(&dir).is_empty(), "a fresh directory is empty");
        }
        assert_eq!(made, vec![Made::Renamed; 3]);
        assert_eq!(entries(&work.path().join("job")), vec!["0-1", "1-1", "2-1"]);
    }

    #[test]
    fn an_existing_attempt_directory_is_kept_with_what_it_holds() {
        let work = tempfile::tempdir().unwrap();
        let fresh = FreshDirs::start(work.path(), 2).unwrap();
        wait_for_ready(work.path(), 2);
        let dir = work.path().join("job").join("7-2");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("kept"), b"x").unwrap();
        assert_eq!(fresh.make(&dir).unwrap(), Made::Made);
        assert_eq!(entries(&dir), vec!["kept"]);
    }

    #[test]
    fn a_restart_empties_what_the_last_engine_left_ready_and_a_drop_ends_the_thread() {
        let work = tempfile::tempdir().unwrap();
        let first = FreshDirs::start(work.path(), 4).unwrap();
        wait_for_ready(work.path(), 4);
        std::fs::write(work.path().join(FRESH_DIR_NAME).join("stray"), b"x").unwrap();
        drop(first);
        let second = FreshDirs::start(work.path(), 2).unwrap();
        assert!(!work.path().join(FRESH_DIR_NAME).join("stray").exists(), "emptied at start");
        wait_for_ready(work.path(), 2);
        let dir = work.path().join("j").join("0-1");
        assert_eq!(second.make(&dir).unwrap(), Made::Renamed);
        // Dropped, the thread's blocked hand-over fails and it removes what it made.
        drop(second);
        let deadline = Instant::now() + Duration::from_secs(10);
        while entries(&work.path().join(FRESH_DIR_NAME).join(READY_DIR_NAME)).len() > 2 {
            assert!(Instant::now() < deadline, "the thread did not end");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_job_directory_swept_between_two_attempts_is_made_again() {
        let work = tempfile::tempdir().unwrap();
        let fresh = FreshDirs::start(work.path(), 2).unwrap();
        wait_for_ready(work.path(), 2);
        let job = work.path().join("job");
        assert_eq!(fresh.make(&job.join("0-1")).unwrap(), Made::Renamed);
        // The sweep removes the job's directory; the next attempt's parent is
        // the one made last, and is gone.
        std::fs::remove_dir_all(&job).unwrap();
        wait_for_ready(work.path(), 2);
        assert_eq!(fresh.make(&job.join("1-1")).unwrap(), Made::Renamed);
        assert_eq!(entries(&job), vec!["1-1"]);
        // And with no ready one left, a start after another sweep makes its own.
        // First the thread at rest: two handed over and a third made, its
        // hand-over blocked, so that nothing is being made while `@fresh` goes.
        wait_for_ready(work.path(), 3);
        std::fs::remove_dir_all(&job).unwrap();
        std::fs::remove_dir_all(work.path().join(FRESH_DIR_NAME)).unwrap();
        assert_eq!(fresh.make(&job.join("2-1")).unwrap(), Made::Made);
        assert_eq!(entries(&job), vec!["2-1"]);
    }

    #[test]
    fn with_none_made_ahead_each_start_makes_its_own_and_no_pool_is_kept() {
        let work = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(work.path().join(FRESH_DIR_NAME).join(READY_DIR_NAME).join("0")).unwrap();
        let fresh = FreshDirs::start(work.path(), 0).unwrap();
        assert_eq!(fresh.ahead(), 0);
        assert!(!work.path().join(FRESH_DIR_NAME).exists(), "what an earlier engine left ready is removed");
        let made: Vec<Made> =
            (0..3).map(|index| fresh.make(&work.path().join("job").join(format!("{index}-1"))).unwrap()).collect();
        assert_eq!(made, vec![Made::Made; 3]);
        assert_eq!(entries(&work.path().join("job")), vec!["0-1", "1-1", "2-1"]);
        assert!(!work.path().join(FRESH_DIR_NAME).exists(), "no pool is made");
    }

    #[test]
    fn when_the_ready_directories_are_gone_each_start_makes_its_own() {
        let work = tempfile::tempdir().unwrap();
        let fresh = FreshDirs::start(work.path(), 1).unwrap();
        wait_for_ready(work.path(), 1);
        // Someone removed `@fresh`: the ready one cannot be renamed, and the
        // thread's next mkdir fails, which ends it.
        std::fs::remove_dir_all(work.path().join(FRESH_DIR_NAME)).unwrap();
        let made: Vec<Made> =
            (0..5).map(|index| fresh.make(&work.path().join("job").join(format!("{index}-1"))).unwrap()).collect();
        assert_eq!(made, vec![Made::Made; 5]);
        assert_eq!(entries(&work.path().join("job")), vec!["0-1", "1-1", "2-1", "3-1", "4-1"]);
    }
}
