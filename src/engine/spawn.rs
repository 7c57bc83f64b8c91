//! Starting a task's process without copying the engine: `clone(CLONE_VM |
//! CLONE_VFORK)`, the child running a few system calls on a stack of its own
//! and then `execve`.
//!
//! # Why not `fork`, and why not `posix_spawn`
//!
//! The leader must die with the engine: its child side asks for
//! `PR_SET_PDEATHSIG` and checks that its parent is still the engine (see
//! `runner`'s module doc). std's `Command` can only do that in a `pre_exec` hook,
//! and a hook rules out `posix_spawn` and `vfork`: std then `fork`s, and a fork
//! of the engine copies its page tables (tens of MB mapped, a tokio runtime's
//! threads) and makes every page it writes next a copy-on-write fault, each with
//! a TLB shoot-down to the other cores. A profile of `gridfold bench --real` put
//! that at about 40 % of the engine's CPU per `/bin/true` task. `posix_spawn`
//! has no hook for `prctl`. So this module does what glibc's `posix_spawn` does
//! inside, with the two extra calls:
//!
//! - Everything the child needs is made before the clone, by the parent: the
//!   argument and environment arrays (the engine's environment with the task's
//!   entries over it), the candidate paths of the program (each directory of the
//!   child's `PATH`, as `execvp` would try them), the work directory's path, the
//!   pipes. The child allocates nothing, takes no lock and runs no Rust code that
//!   could panic.
//! - The child shares the engine's memory (`CLONE_VM`) and runs on a stack
//!   reserved for it (with a guard page), and the cloning thread is suspended
//!   until the child has called `execve` or `_exit` (`CLONE_VFORK`): nothing is
//!   copied, nothing faults after. Only the spawner thread clones (the death
//!   signal follows the thread that forked), one child at a time, so one stack
//!   serves every spawn.
//! - All signals are blocked in the cloning thread across the clone, so no
//!   handler of the engine runs on the child's side of the shared memory; the
//!   child sets every caught signal (and `SIGPIPE`, which Rust ignores) back to
//!   its default, then clears its signal mask just before `execve`, as std's
//!   children have it.
//! - The child's system calls, in order: `sigaction` (the reset),
//!   `prctl(PR_SET_PDEATHSIG, SIGKILL)`, `getppid` (not the engine any more: the
//!   engine died during the clone, nothing runs), `setpgid(0, 0)`, `dup2` of
//!   `/dev/null` and the two pipes onto 0, 1 and 2, `chdir`, `sigprocmask`,
//!   `execve` (each candidate path in turn). It reports a failure as its errno
//!   and the step in memory the parent reads once the clone returns (shared by
//!   `CLONE_VM`), then `_exit(127)`; the parent reaps it and says why.
//!
//! Linux only, like the rest of the engine's process handling.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, OnceLock};

/// The child's stack. Its calls are a handful of libc wrappers: 64 KiB is ample
/// (glibc's `posix_spawn` uses about 32 KiB plus the argument count).
const CHILD_STACK_BYTES: usize = 64 * 1024;
/// At most this many candidate paths for a program looked up on `PATH`.
const PATH_CANDIDATES_MAX: usize = 256;
/// Pids of leaders dropped unreaped (killed), reaped at the next spawns. Each was
/// sent SIGKILL, so they are reaped at once; the bound only guards the engine.
const ORPHANS_MAX: usize = 100_000;

/// What to start; the process gets the engine's environment with `env` over it
/// (later entries win), `/dev/null` as stdin and a pipe each for stdout and
/// stderr, in a process group of its own, in `work_dir`.
pub struct SpawnSpec<'a> {
    pub program: &'a str,
    pub args: &'a [String],
    pub env: &'a [(String, String)],
    pub work_dir: &'a Path,
}

/// A started process: its pid (unreaped: the caller reaps it) and the read ends
/// of its stdout and stderr, non-blocking.
pub struct Spawned {
    pub pid: libc::pid_t,
    /// The leader's start time as `/proc/<pid>/stat` gives it (clock ticks after
    /// boot), when the boot-time clock read around the clone pins it: both reads
    /// fell in the same tick, and the kernel stamps the child between them. `None`
    /// otherwise (a tick boundary fell inside the clone): read it from `/proc`.
    pub start_ticks: Option<u64>,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

/// Everything the child reads, made by the parent before the clone.
pub struct Prepared {
    argv: Vec<CString>,
    /// The engine's entries the task does not set, then the task's own.
    envp_engine: Vec<&'static CStr>,
    envp_task: Vec<CString>,
    /// Where `execve` is tried, in order.
    paths: Vec<CString>,
    work_dir: CString,
}

impl Prepared {
    /// Builds the child's arrays; allocates, so never in the child. Fails on a NUL
    /// byte in anything, or a program with too many candidate paths.
    pub fn new(spec: &SpawnSpec<'_>) -> io::Result<Prepared> {
        let argv = std::iter::once(spec.program.as_bytes())
            .chain(spec.args.iter().map(|a| a.as_bytes()))
            .map(cstring)
            .collect::<io::Result<Vec<_>>>()?;
        // The task's entries, the last of each name winning (a task sets a few).
        let mut task: Vec<&(String, String)> = Vec::with_capacity(spec.env.len());
        for entry in spec.env.iter().rev() {
            if !task.iter().any(|(k, _)| *k == entry.0) {
                task.push(entry);
            }
        }
        task.reverse();
        let engine = engine_environment();
        let path = match task.iter().find(|(k, _)| k == "PATH") {
            Some((_, v)) => Some(v.as_bytes()),
            None => engine.iter().find(|(k, _)| k == b"PATH").map(|(_, entry)| &entry.to_bytes()[5..]),
        };
        let paths = candidate_paths(spec.program.as_bytes(), path)?;
        let envp_engine = engine
            .iter()
            .filter(|(k, _)| !task.iter().any(|(name, _)| name.as_bytes() == k.as_slice()))
            .map(|(_, entry)| entry.as_c_str())
            .collect();
        let envp_task = task
            .iter()
            .map(|(k, v)| cstring(format!("{k}={v}").as_bytes()))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Prepared { argv, envp_engine, envp_task, paths, work_dir: cstring(spec.work_dir.as_os_str().as_bytes())? })
    }
}

/// The engine's own environment, read once at the first start (the engine never
/// changes it): each entry's name and its `name=value` string.
fn engine_environment() -> &'static [(Vec<u8>, CString)] {
    static ENGINE: OnceLock<Vec<(Vec<u8>, CString)>> = OnceLock::new();
    ENGINE.get_or_init(|| {
        std::env::vars_os()
            .filter_map(|(k, v)| {
                let mut entry = k.as_bytes().to_vec();
                entry.push(b'=');
                entry.extend_from_slice(v.as_bytes());
                Some((k.as_bytes().to_vec(), CString::new(entry).ok()?))
            })
            .collect()
    })
}

fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the command, its environment or its work directory"))
}

/// The paths `execvp` would try for `program`: itself when it holds a `/`,
/// else `dir/program` for each directory of `path` (an empty one is the
/// current directory, the child's work directory), `/bin:/usr/bin` when unset.
fn candidate_paths(program: &[u8], path: Option<&[u8]>) -> io::Result<Vec<CString>> {
    if program.is_empty() {
        return Err(io::Error::new(io::ErrorKind::NotFound, "the program's name is empty"));
    }
    if program.contains(&b'/') {
        return Ok(vec![cstring(program)?]);
    }
    let path = path.unwrap_or(b"/bin:/usr/bin");
    let mut paths = Vec::new();
    for dir in path.split(|b| *b == b':') {
        if paths.len() == PATH_CANDIDATES_MAX {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "PATH holds too many directories"));
        }
        let mut full = if dir.is_empty() { b".".to_vec() } else { dir.to_vec() };
        full.push(b'/');
        full.extend_from_slice(program);
        paths.push(cstring(&full)?);
    }
    Ok(paths)
}

/// A stack for the child, with a guard page below it; one per spawner thread.
pub struct ChildStack {
    base: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is owned by the ChildStack and used only by the thread that
// holds it (and by the child while that thread is suspended in the clone).
unsafe impl Send for ChildStack {}

impl ChildStack {
    pub fn new() -> io::Result<ChildStack> {
        let page = page_size();
        let len = CHILD_STACK_BYTES + page;
        // SAFETY: an anonymous private mapping of fresh memory; checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = ChildStack { base, len };
        // SAFETY: the lowest page of our own mapping; the stack grows down onto it.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The highest address, 16-byte aligned: where the child's stack starts.
    fn top(&mut self) -> *mut libc::c_void {
        let top = self.base as usize + self.len;
        (top & !15) as *mut libc::c_void
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: our own mapping, no longer used by anyone.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page).ok().filter(|p| *p >= 4096).unwrap_or(4096)
}

/// The steps of the child, for the parent's error message.
#[derive(Clone, Copy)]
#[repr(i32)]
enum Step {
    DeathSignal = 1,
    EngineGone = 2,
    ProcessGroup = 3,
    Streams = 4,
    WorkDir = 5,
    Exec = 6,
}

impl Step {
    fn from_i32(n: i32) -> Option<Step> {
        [Step::DeathSignal, Step::EngineGone, Step::ProcessGroup, Step::Streams, Step::WorkDir, Step::Exec]
            .into_iter()
            .find(|s| *s as i32 == n)
    }

    fn describe(self) -> &'static str {
        match self {
            Step::DeathSignal => "cannot ask for the parent-death signal",
            Step::EngineGone => "the engine ended while the process started",
            Step::ProcessGroup => "cannot make the process group",
            Step::Streams => "cannot set up stdin, stdout and stderr",
            Step::WorkDir => "cannot enter the work directory",
            Step::Exec => "cannot execute the program",
        }
    }
}

/// What the child reads (through raw pointers into `Prepared`) and writes back.
struct ChildArgs {
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    paths: *const *const libc::c_char,
    paths_len: usize,
    work_dir: *const libc::c_char,
    stdin: RawFd,
    stdout: RawFd,
    stderr: RawFd,
    engine_pid: libc::pid_t,
    /// The highest signal number (`SIGRTMAX`), read by the parent.
    signal_max: libc::c_int,
    /// Set by the child when a step fails: the step and its errno.
    failed_step: AtomicI32,
    failed_errno: AtomicI32,
}

/// `/dev/null`, opened once (close-on-exec, above 2), the stdin of every task.
fn dev_null() -> io::Result<RawFd> {
    static NULL: OnceLock<OwnedFd> = OnceLock::new();
    if let Some(fd) = NULL.get() {
        return Ok(fd.as_raw_fd());
    }
    let file = std::fs::File::open("/dev/null")?;
    let fd = above_stdio(OwnedFd::from(file))?;
    Ok(NULL.get_or_init(|| fd).as_raw_fd())
}

/// `fd`, or a close-on-exec duplicate of it numbered 3 or more: the child's
/// `dup2`s onto 0, 1 and 2 must not overwrite one another's sources.
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: fcntl duplicates a descriptor we own.
    let dup = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if dup < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(dup) })
}

/// A pipe, both ends close-on-exec and numbered 3 or more: (read, write).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just opened and are owned by nothing else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((above_stdio(read)?, above_stdio(write)?))
}

fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 || unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Starts `prepared` from the calling thread (the spawner: the death signal
/// follows it), on `stack`. Returns once the child has called `execve`
/// successfully, or with the reason it could not (the child then reaped).
pub fn spawn(prepared: &Prepared, engine_pid: libc::pid_t, stack: &mut ChildStack) -> io::Result<Spawned> {
    reap_orphans();
    let stdin = dev_null()?;
    let (out_read, out_write) = pipe()?;
    let (err_read, err_write) = pipe()?;
    let argv = null_terminated(&prepared.argv);
    let envp: Vec<*const libc::c_char> = prepared
        .envp_engine
        .iter()
        .map(|e| e.as_ptr())
        .chain(prepared.envp_task.iter().map(|e| e.as_ptr()))
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let paths = null_terminated(&prepared.paths);
    let args = ChildArgs {
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        paths: paths.as_ptr(),
        paths_len: prepared.paths.len(),
        work_dir: prepared.work_dir.as_ptr(),
        stdin,
        stdout: out_write.as_raw_fd(),
        stderr: err_write.as_raw_fd(),
        engine_pid,
        signal_max: libc::SIGRTMAX(),
        failed_step: AtomicI32::new(0),
        failed_errno: AtomicI32::new(0),
    };
    // SAFETY: sigfillset and pthread_sigmask write only into sets we own; all
    // signals stay blocked in this thread until the child has exec'd or exited.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    // SAFETY: the child runs `child_main` on its own stack, reads `args` and the
    // arrays it points into (alive until after the clone returns: this thread is
    // suspended until the child exec'd or exited, CLONE_VFORK), and makes only
    // async-signal-safe system calls, allocating nothing.
    let before = boottime_ns();
    let pid = unsafe {
        libc::clone(
            child_main,
            stack.top(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            std::ptr::addr_of!(args) as *mut libc::c_void,
        )
    };
    let clone_error = io::Error::last_os_error();
    let after = boottime_ns();
    // SAFETY: restores this thread's mask from the set saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    drop((out_write, err_write));
    if pid < 0 {
        return Err(clone_error);
    }
    let step = args.failed_step.load(Ordering::Acquire);
    if step != 0 {
        let errno = args.failed_errno.load(Ordering::Acquire);
        reap_now(pid);
        let cause = io::Error::from_raw_os_error(errno);
        return Err(match Step::from_i32(step) {
            Some(Step::Exec) => cause,
            Some(step) => io::Error::new(cause.kind(), format!("{}: {cause}", step.describe())),
            None => cause,
        });
    }
    set_nonblocking(&out_read)?;
    set_nonblocking(&err_read)?;
    Ok(Spawned { pid, stdout: out_read, stderr: err_read, start_ticks: same_tick(before, after) })
}

/// `CLOCK_BOOTTIME` in ns: the clock the kernel stamps a process's start with.
fn boottime_ns() -> Option<u64> {
    let mut now: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: clock_gettime writes only into the timespec we own.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now) } != 0 {
        return None;
    }
    u64::try_from(now.tv_sec).ok()?.checked_mul(1_000_000_000)?.checked_add(u64::try_from(now.tv_nsec).ok()?)
}

/// The clock tick (`/proc`'s unit) of both instants, if they share one.
fn same_tick(before: Option<u64>, after: Option<u64>) -> Option<u64> {
    let ns_per_tick = 1_000_000_000 / super::procfs::ticks_per_second()?;
    let (before, after) = (before? / ns_per_tick, after? / ns_per_tick);
    (before == after).then_some(before)
}

fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings.iter().map(|s| s.as_ptr()).chain(std::iter::once(std::ptr::null())).collect()
}

/// The child's side of the clone: async-signal-safe calls only, no allocation,
/// no panic; never returns but through `execve` or `_exit`.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `ChildArgs`, alive and unchanged while the
    // parent is suspended in the clone; the pointers in it are to arrays alive
    // as long, NULL-terminated.
    unsafe {
        let args = &*(arg as *const ChildArgs);
        let fail = |step: Step| -> ! {
            args.failed_errno.store(*libc::__errno_location(), Ordering::Release);
            args.failed_step.store(step as i32, Ordering::Release);
            libc::_exit(127)
        };
        // No handler of the engine may run here: caught signals to their
        // default, and SIGPIPE (Rust ignores it) too; ignored ones stay ignored.
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        for signal in 1..=args.signal_max {
            if signal == libc::SIGKILL || signal == libc::SIGSTOP {
                continue;
            }
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut current) != 0 {
                continue;
            }
            if signal == libc::SIGPIPE || (current.sa_sigaction != libc::SIG_DFL && current.sa_sigaction != libc::SIG_IGN) {
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
            fail(Step::DeathSignal);
        }
        if libc::getppid() != args.engine_pid {
            // Reparented: the engine died before the prctl, and no signal will come.
            *libc::__errno_location() = libc::ESRCH;
            fail(Step::EngineGone);
        }
        if libc::setpgid(0, 0) != 0 {
            fail(Step::ProcessGroup);
        }
        for (from, to) in [(args.stdin, 0), (args.stdout, 1), (args.stderr, 2)] {
            // The sources are all above 2 (see `above_stdio`): dup2 clears close-on-exec.
            if libc::dup2(from, to) < 0 {
                fail(Step::Streams);
            }
        }
        if libc::chdir(args.work_dir) != 0 {
            fail(Step::WorkDir);
        }
        let empty: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        // As execvp: the first candidate that runs wins; EACCES is reported if no
        // candidate ran and one was found but not executable.
        let mut denied = false;
        for i in 0..args.paths_len {
            libc::execve(*args.paths.add(i), args.argv, args.envp);
            match *libc::__errno_location() {
                libc::EACCES => denied = true,
                libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
                _ => fail(Step::Exec),
            }
        }
        if denied {
            *libc::__errno_location() = libc::EACCES;
        }
        fail(Step::Exec)
    }
}

/// Reaps `pid`, blocking: for a child known to have exited (or to be exiting).
fn reap_now(pid: libc::pid_t) {
    loop {
        // SAFETY: waitpid writes only into the status we own.
        let mut status = 0;
        if unsafe { libc::waitpid(pid, &mut status, 0) } >= 0 {
            return;
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// Leaders dropped unreaped (and killed): reaped at the next spawns.
static ORPHANS: Mutex<Vec<libc::pid_t>> = Mutex::new(Vec::new());

/// Kills an unreaped leader that nobody will wait for (its supervisor was
/// dropped with the runtime) and reaps it now or at a later spawn.
pub fn kill_and_forget(pid: libc::pid_t) {
    // SAFETY: the pid is our unreaped child: it cannot have been reused.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    if !try_reap(pid) {
        let mut orphans = ORPHANS.lock().unwrap_or_else(|e| e.into_inner());
        if orphans.len() < ORPHANS_MAX {
            orphans.push(pid);
        }
    }
}

fn reap_orphans() {
    let mut orphans = ORPHANS.lock().unwrap_or_else(|e| e.into_inner());
    orphans.retain(|pid| !try_reap(*pid));
}

/// Whether `pid` is reaped now (or not ours to reap any more).
fn try_reap(pid: libc::pid_t) -> bool {
    let mut status = 0;
    // SAFETY: waitpid writes only into the status we own.
    let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    rc != 0
}

/// Reaps the exited child `pid` (blocking until it has exited) and answers its
/// wait status and its CPU time (user and system, its own and its reaped
/// children's) in µs.
pub fn reap_with_usage(pid: libc::pid_t) -> io::Result<(libc::c_int, u64)> {
    loop {
        let mut status = 0;
        // SAFETY: wait4 writes only into the status and rusage we own.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if rc == pid {
            let us = |t: libc::timeval| (t.tv_sec.max(0) as u64).saturating_mul(1_000_000).saturating_add(t.tv_usec.max(0) as u64);
            return Ok((status, us(usage.ru_utime).saturating_add(us(usage.ru_stime))));
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_with_a_slash_is_its_only_candidate_and_others_follow_path() {
        let only = candidate_paths(b"./x", Some(b"/a:/b")).unwrap();
        assert_eq!(only, [CString::new("./x").unwrap()]);
        let each = candidate_paths(b"true", Some(b"/a::/b")).unwrap();
        assert_eq!(each, ["/a/true", "./true", "/b/true"].map(|p| CString::new(p).unwrap()));
        let default = candidate_paths(b"true", None).unwrap();
        assert_eq!(default, ["/bin/true", "/usr/bin/true"].map(|p| CString::new(p).unwrap()));
    }

    /// The start time taken from the clock is the one `/proc` gives, every time.
    #[test]
    fn the_start_ticks_from_the_clock_are_those_of_proc() {
        let dir = std::env::temp_dir();
        let prepared = Prepared::new(&SpawnSpec { program: "true", args: &[], env: &[], work_dir: &dir }).unwrap();
        let mut stack = ChildStack::new().unwrap();
        // SAFETY: getpid has no preconditions.
        let engine_pid = unsafe { libc::getpid() };
        let mut pinned = 0;
        for _ in 0..50 {
            let spawned = spawn(&prepared, engine_pid, &mut stack).unwrap();
            let from_proc = super::super::procfs::read_stat(spawned.pid).map(|stat| stat.start_ticks);
            if let Some(ticks) = spawned.start_ticks {
                assert_eq!(Some(ticks), from_proc);
                pinned += 1;
            }
            reap_with_usage(spawned.pid).unwrap();
        }
        assert!(pinned >= 25, "the clock pinned {pinned} of 50 starts");
    }

    #[test]
    fn too_many_path_directories_or_a_nul_are_refused() {
        let long = vec![&b"/d"[..]; PATH_CANDIDATES_MAX + 1].join(&b':');
        assert!(candidate_paths(b"true", Some(&long)).is_err());
        assert!(candidate_paths(b"", Some(b"/bin")).is_err());
        assert!(candidate_paths(b"tr\0ue", Some(b"/bin")).is_err());
    }
}
