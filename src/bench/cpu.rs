//! CPU time of the bench process, the engines' thread and the broker, from
//! `/proc` and `clock_gettime`.

use super::CpuFigures;

/// CPU time (user + system, µs) of the bench process and the broker at one moment.
#[derive(Debug, Clone, Copy)]
pub(super) struct CpuSample {
    process: f64,
    broker: Option<f64>,
}

impl CpuSample {
    pub(super) fn take(broker_pid: Option<u32>) -> CpuSample {
        CpuSample {
            process: process_cpu_us(),
            broker: broker_pid.and_then(cpu_ticks_of_pid).map(ticks_to_us),
        }
    }

    /// The figures since `before`; `engines_us` is the engines' thread's own measure.
    pub(super) fn since(
        &self,
        before: &CpuSample,
        seconds: f64,
        lifecycles: u64,
        engines_us: f64,
    ) -> CpuFigures {
        let process = self.process - before.process;
        let broker = match (self.broker, before.broker) {
            (Some(after), Some(before)) => Some(after - before),
            _ => None,
        };
        let per = |us: f64| us / lifecycles.max(1) as f64;
        CpuFigures {
            cores_busy: broker.map(|broker| (process + broker) / 1e6 / seconds.max(1e-9)),
            projector_us_per_lifecycle: per(process - engines_us),
            engines_us_per_lifecycle: per(engines_us),
            broker_us_per_lifecycle: broker.map(per),
        }
    }
}

/// utime + stime, in clock ticks, of the threads of `pid` whose name starts
/// with `name` (`/proc/<pid>/task/*/stat`; names are cut to 15 bytes there).
/// 0 when none is found.
pub(super) fn cpu_ticks_of_threads(pid: u32, name: &str) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0 };
    tasks
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm")).is_ok_and(|comm| comm.trim_end().starts_with(name))
        })
        .filter_map(|task| cpu_ticks_of(&task.path().join("stat").to_string_lossy()))
        .sum()
}

pub(super) fn cpu_ticks_of_pid(pid: u32) -> Option<u64> {
    cpu_ticks_of(&format!("/proc/{pid}/stat"))
}

/// utime + stime of a `/proc/.../stat` file, in clock ticks.
fn cpu_ticks_of(path: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    // The command name is in parentheses and may hold spaces: count fields after it.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of the line (utime, stime) are the 12th and 13th after the name.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// The whole machine's busy CPU time, in clock ticks summed over every core,
/// from the first line of `/proc/stat`: every state but idle and waiting for IO
/// (a guest's time is already in user). `None` where there is no `/proc/stat`.
///
/// The real bench compares it between the spawn limit's measurement and the
/// grid's run: when both keep every core busy, the ratio of the grid's rate to
/// the spawn limit can be no better than the ratio of their CPU per run.
pub(super) fn machine_busy_ticks() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().next()?;
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let ticks: Vec<u64> = fields.map(str::parse).collect::<Result<_, _>>().ok()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice]
    let [user, nice, system, _idle, _iowait, irq, softirq, steal, ..] = ticks[..] else { return None };
    Some(user + nice + system + irq + softirq + steal)
}

pub(super) fn ticks_to_us(ticks: u64) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1);
    ticks as f64 * 1e6 / per_second as f64
}

fn clock_us(clock: libc::clockid_t) -> f64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to write to.
    if unsafe { libc::clock_gettime(clock, &mut now) } != 0 {
        return 0.0;
    }
    now.tv_sec as f64 * 1e6 + now.tv_nsec as f64 / 1e3
}

/// CPU time of the whole process, threads that ended included.
fn process_cpu_us() -> f64 {
    clock_us(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// CPU time of the calling thread.
pub(super) fn thread_cpu_us() -> f64 {
    clock_us(libc::CLOCK_THREAD_CPUTIME_ID)
}
