//! Reading `/proc`, for the engine's own task processes: one process's `stat`
//! line, the members of a process group, whether a process's environment holds an
//! entry, and the machine's boot id.
//!
//! # Invariants
//!
//! - A process that cannot be read is not an error: it may have ended between
//!   listing `/proc` and opening its files. Readers answer `None`, and listings skip
//!   it. Only `/proc` itself being unreadable is an error.
//! - The command name (field 2 of `stat`) is in parentheses and may hold spaces and
//!   parentheses, so fields are counted after the *last* `)`.
//!
//! Linux only, like the rest of the engine's process handling. Nothing here sends a
//! signal: deciding what to kill is `groups`, killing is the caller's.

use std::io;
use std::path::Path;

/// What the engine needs of `/proc/<pid>/stat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: i32,
    /// Field 2, without its parentheses.
    pub command: String,
    /// Field 3: `R`, `S`, `D`, `Z` (zombie), `X` (dead)...
    pub state: char,
    /// Field 5.
    pub pgid: i32,
    /// utime + stime + cutime + cstime (fields 14 to 17), in clock ticks.
    pub cpu_ticks: u64,
    /// Field 22: when the process started, in clock ticks after boot. With the pid
    /// and the boot id it names one process for good: a pid reused later has a
    /// later start.
    pub start_ticks: u64,
}

impl ProcStat {
    /// Still running (or stopped), as opposed to exited and waiting to be reaped.
    pub fn is_live(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Parses one `/proc/<pid>/stat` line.
pub fn parse_stat(stat: &str) -> Option<ProcStat> {
    let (head, after_name) = stat.rsplit_once(')')?;
    let (pid, command) = head.split_once(" (")?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // after_name starts with field 3 (state): field n is at n - 3.
    let field = |n: usize| fields.get(n - 3).copied();
    let ticks = |n: usize| -> Option<u64> { Some(field(n)?.parse::<i64>().ok()?.max(0) as u64) };
    let cpu_ticks = (14..=17).try_fold(0u64, |sum, n| Some(sum.saturating_add(ticks(n)?)))?;
    Some(ProcStat {
        pid: pid.trim().parse().ok()?,
        command: command.to_string(),
        state: field(3)?.chars().next()?,
        pgid: field(5)?.parse().ok()?,
        cpu_ticks,
        start_ticks: ticks(22)?,
    })
}

/// `/proc/<pid>/stat`, or `None` if there is no such process (any more).
pub fn read_stat(pid: i32) -> Option<ProcStat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The live (not zombie) processes whose process group is `pgid`.
pub fn live_group_members(pgid: i32) -> io::Result<Vec<ProcStat>> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some(stat) = read_stat(pid)
            && stat.pgid == pgid
            && stat.is_live()
        {
            members.push(stat);
        }
    }
    Ok(members)
}

/// Whether the environment process `pid` was started with holds `entry`
/// (`NAME=value`, whole); `None` if it cannot be read (gone, or not ours to read).
pub fn environ_holds(pid: i32, entry: &str) -> Option<bool> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    Some(environ.split(|&b| b == 0).any(|e| e == entry.as_bytes()))
}

/// The kernel's id of this boot, which tells start times of two boots apart.
pub fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string(Path::new("/proc/sys/kernel/random/boot_id")).ok()?;
    let id = id.trim();
    (!id.is_empty()).then(|| id.to_string())
}

/// Clock ticks per second, the unit of [`ProcStat`]'s times.
pub fn ticks_per_second() -> Option<u64> {
    // SAFETY: sysconf has no preconditions.
    u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .ok()
        .filter(|&t| t > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fields_after_the_command_name() {
        let stat =
            "4242 (my (odd) prog) Z 1 4240 4240 0 -1 4194560 100 0 0 0 7 3 2 1 20 0 1 0 5123 0 0";
        let parsed = parse_stat(stat).unwrap();
        assert_eq!(
            parsed,
            ProcStat {
                pid: 4242,
                command: "my (odd) prog".to_string(),
                state: 'Z',
                pgid: 4240,
                cpu_ticks: 13,
                start_ticks: 5123,
            }
        );
        assert!(!parsed.is_live());
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (short) S 0 1"), None, "too few fields");
    }

    #[test]
    fn reads_this_process() {
        let me = read_stat(std::process::id() as i32).unwrap();
        assert!(me.is_live());
        assert!(me.start_ticks > 0);
        let members = live_group_members(me.pgid).unwrap();
        assert!(members.iter().any(|m| m.pid == me.pid), "{members:?}");
        assert!(boot_id().is_some_and(|id| id.len() >= 32));
        assert!(ticks_per_second().is_some());
    }

    #[test]
    fn finds_an_entry_of_a_process_environment() {
        let me = std::process::id() as i32;
        let path = std::env::var("PATH").unwrap_or_default();
        assert_eq!(environ_holds(me, &format!("PATH={path}")), Some(true));
        assert_eq!(environ_holds(me, "GRIDFOLD_NO_SUCH_ENTRY=1"), Some(false));
        assert_eq!(environ_holds(i32::MAX, "PATH=x"), None);
    }
}
