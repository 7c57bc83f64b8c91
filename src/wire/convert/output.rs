//! The output bounds (`OutputPolicy`) to and from the wire, with their limits:
//! a value outside them does not decode, so a policy the engines could not obey
//! is refused before it reaches the fold.

use super::{proto, FieldProblem, WireError};
use crate::core::event::{
    OutputPolicy, StoredOutput, StoredStreams, OUTPUT_JOB_BYTES_MAX_LIMIT, OUTPUT_TASK_BYTES_MAX_LIMIT,
    WORK_DIR_RETENTION_MS_LIMIT,
};

/// Nothing for the defaults, so a policy that does not touch them encodes as before.
pub(super) fn output_to_proto(output: &OutputPolicy) -> Option<proto::OutputPolicy> {
    let defaults = OutputPolicy::default();
    let differs = |value: u64, default: u64| (value != default).then_some(value);
    let message = proto::OutputPolicy {
        task_bytes_max: differs(output.task_bytes_max, defaults.task_bytes_max),
        job_bytes_max: differs(output.job_bytes_max, defaults.job_bytes_max),
        work_dir_retention_ms: differs(output.work_dir_retention_ms, defaults.work_dir_retention_ms),
    };
    (message != proto::OutputPolicy::default()).then_some(message)
}

pub(super) fn output(m: Option<proto::OutputPolicy>) -> Result<OutputPolicy, WireError> {
    let m = m.unwrap_or_default();
    let defaults = OutputPolicy::default();
    let within = |field: &'static str, value: Option<u64>, least: u64, most: u64, default: u64| match value {
        None => Ok(default),
        Some(v) if (least..=most).contains(&v) => Ok(v),
        Some(v) => Err(WireError::at(field, FieldProblem::Inconsistent(format!("{v}, not within {least}..={most}")))),
    };
    Ok(OutputPolicy {
        task_bytes_max: within("task_bytes_max", m.task_bytes_max, 0, OUTPUT_TASK_BYTES_MAX_LIMIT, defaults.task_bytes_max)?,
        job_bytes_max: within("job_bytes_max", m.job_bytes_max, 0, OUTPUT_JOB_BYTES_MAX_LIMIT, defaults.job_bytes_max)?,
        work_dir_retention_ms: within(
            "work_dir_retention_ms",
            m.work_dir_retention_ms,
            1,
            WORK_DIR_RETENTION_MS_LIMIT,
            defaults.work_dir_retention_ms,
        )?,
    })
}

/// An end report's stored streams: (stdout, stderr).
pub(super) fn stored_to_proto(stored: &StoredStreams) -> (Option<proto::StoredOutput>, Option<proto::StoredOutput>) {
    let one = |stream: &Option<StoredOutput>| {
        stream.map(|stream| proto::StoredOutput { bytes: stream.bytes, blake3: stream.blake3.to_vec() })
    };
    (one(&stored.stdout), one(&stored.stderr))
}

pub(super) fn stored(stdout: Option<proto::StoredOutput>, stderr: Option<proto::StoredOutput>) -> Result<StoredStreams, WireError> {
    let one = |field: &'static str, m: Option<proto::StoredOutput>| {
        m.map(|m| {
            let blake3: [u8; 32] = m.blake3.as_slice().try_into().map_err(|_| {
                WireError::at(field, FieldProblem::Inconsistent(format!("a blake3 hash is 32 bytes, not {}", m.blake3.len())))
            })?;
            Ok(StoredOutput { bytes: m.bytes, blake3 })
        })
        .transpose()
    };
    Ok(StoredStreams { stdout: one("stdout_stored.blake3", stdout)?, stderr: one("stderr_stored.blake3", stderr)? })
}
