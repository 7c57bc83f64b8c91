//! What engines say: the properties of a login, the load they report, and
//! the kinds of a task's failure.

use std::collections::BTreeMap;
use super::job::LibraryRef;

/// What an engine says of itself at login. Every field is usable in requirements.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct EngineProps {
    pub os: String,
    pub arch: String,
    pub cores: u32,
    pub memory_mb: u64,
    pub disk_mb: u64,
    /// Measured by the engine's built-in benchmark at login.
    pub mflops: u64,
    pub site: String,
    /// Operator-given properties (`--prop type=blade`).
    pub custom: BTreeMap<String, String>,
    /// Grid libraries the engine already holds, synced by an earlier session.
    pub libraries: Vec<LibraryRef>,
}

impl std::fmt::Display for EngineProps {
    /// The properties as requirements expressions name them, those set only:
    /// `os=linux arch=x86_64 site=lyon cores=8 memory_mb=16384 … rack=r12`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        for (name, value) in [("os", &self.os), ("arch", &self.arch), ("site", &self.site)] {
            if !value.is_empty() {
                parts.push(format!("{name}={value}"));
            }
        }
        let numbers = [("cores", u64::from(self.cores)), ("memory_mb", self.memory_mb), ("disk_mb", self.disk_mb), ("mflops", self.mflops)];
        parts.extend(numbers.iter().filter(|(_, value)| *value > 0).map(|(name, value)| format!("{name}={value}")));
        parts.extend(self.custom.iter().map(|(name, value)| format!("{name}={value}")));
        f.write_str(&parts.join(" "))
    }
}

/// The load figures an engine reports are the load formula's inputs, so they
/// are defined beside it.
pub use crate::core::load::EngineLoad;

/// Most bytes of a gateway's remote job id ([`Event::TaskStarted`]).
pub const REMOTE_JOB_BYTES_MAX: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum FailureKind {
    /// The process exited with a non-zero code.
    NonZeroExit,
    /// The process was killed by a signal it did not ask for.
    Signalled,
    /// The engine killed it at the job's wall-time limit.
    WallTimeExceeded,
    /// The engine could not start it (no such program, bad working directory).
    LaunchFailed,
    /// The engine was shutting down and its drain timeout ran out.
    EngineShutdown,
    /// A gateway's resource manager killed or preempted it, or someone cancelled
    /// it there: the task waits again without using an attempt (CiGri's
    /// best-effort jobs).
    Preempted,
    /// The projector could not deliver its run order: the broker refused it
    /// as too large ([`Order::Undeliverable`]). The engine never had it.
    Undeliverable,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::NonZeroExit => "non-zero-exit",
            FailureKind::Signalled => "signalled",
            FailureKind::WallTimeExceeded => "wall-time-exceeded",
            FailureKind::LaunchFailed => "launch-failed",
            FailureKind::EngineShutdown => "engine-shutdown",
            FailureKind::Preempted => "preempted",
            FailureKind::Undeliverable => "undeliverable",
        }
    }
}
