//! Core types to protobuf and back.
//!
//! Core to protobuf is total: every core value has exactly one protobuf form.
//! Protobuf to core validates what the core's types promise (UUIDs, ids per
//! `core::ids`, library names and versions per `LibraryRef::validate`, a set
//! oneof, known enum values, a known algorithm name, engine tiers written
//! `property=value`) and nothing more: what an event *means* (an attempt of 0,
//! a result over 64 KiB, a batch over 8192 orders, a bad discriminator, a
//! condition on a task the job does not have) is for the fold to judge and
//! record as a rejection. A policy is the exception: its limits
//! (`core::policy_limits::check_policy`: durations, the share tree, the caps,
//! the families' sections) are one check the decoder, the policy file reader
//! and the fold all run, so a policy past one does not decode.
//! For every core envelope `e`, `from_proto(to_proto(&e)) == Ok(e)`.
//!
//! Messages added after the first version whose every field is zero
//! (`JobOptions`, `RedundancyPolicy`) are written absent, so an event that does
//! not use them encodes, and digests, exactly as before they existed.
//!
//! Layout: [`to_proto`] (core to protobuf), [`from_proto`] (protobuf to core,
//! events), [`orders`] (orders both ways), [`enums`] (core enums both ways),
//! [`fields`] (shared field readers: ids, references, repeated fields), [`tier`]
//! (engine tiers).

/// A `$ty` with every redundancy field of `$from`: the one field list both
/// directions share (`RedundancyPolicy` and its protobuf message have the same
/// fields, all plain numbers and flags). The literal names every field, so a field
/// added to either type and not here fails to compile.
macro_rules! redundancy_fields {
    ($ty:path, $from:expr) => {{
        let from = $from;
        $ty {
            strategy_effective_percent: from.strategy_effective_percent,
            poll_period_ms: from.poll_period_ms,
            percent_completed_strategy: from.percent_completed_strategy,
            remaining_task_percent: from.remaining_task_percent,
            average_strategy: from.average_strategy,
            average_limit_milli: from.average_limit_milli,
            std_dev_strategy: from.std_dev_strategy,
            std_dev_limit_milli: from.std_dev_limit_milli,
            reschedule_first: from.reschedule_first,
            copies_per_task_max: from.copies_per_task_max,
        }
    }};
}

mod caps;
mod cigri;
mod flood;
mod enums;
mod fbsng;
mod fields;
mod from_proto;
mod orders;
mod output;
mod sge;
pub use sge::{NAMED_AMOUNTS_MAX, SGE_NAME_BYTES_MAX, SHARE_TREE_NODES_MAX};
mod techila;
mod thresholds;
mod reservation;
mod tier;
mod to_proto;

use super::proto;
use crate::core::event::Algorithm;
use crate::core::ids::IdError;

pub use from_proto::envelope_from_proto;
pub use tier::{EngineTierError, check_engine_tier};
pub use to_proto::envelope_to_proto;
pub(super) use fields::{engine_id, library_ref, task_ref};
pub(super) use from_proto::library_info;
pub(super) use orders::{order_from_proto, order_to_proto, sync_library};
pub(super) use to_proto::{library_info_to_proto, library_to_proto, task_ref_to_proto};

/// Why bytes or a protobuf message are not a valid envelope.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The bytes are not protobuf of an `Envelope` at all.
    #[error("not a gridfold.v1.Envelope: {0}")]
    NotProtobuf(String),
    /// The message parsed, but one field is wrong. `field` is the path from the
    /// envelope, as in the JSON of history files: `event.task_started.task.job`,
    /// `event.order_batch.orders[3].dispatch.engine`.
    #[error("{field}: {problem}")]
    Field {
        field: String,
        problem: FieldProblem,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldProblem {
    #[error("not a UUID in its 36-character hyphenated form: {0}")]
    BadUuid(String),
    #[error("{0}")]
    BadId(IdError),
    /// A oneof holds nothing, or a kind this version of the schema does not know.
    #[error("missing, or a kind this version does not know; expected one of {expected}")]
    MissingOneof { expected: &'static str },
    #[error("{enum_name} value {value} is unknown to this version")]
    UnknownEnumValue { enum_name: &'static str, value: i32 },
    #[error("must be set: {enum_name} 0 (UNSPECIFIED) is not a value")]
    Unspecified { enum_name: &'static str },
    #[error("unknown algorithm {name}; known: {known}")]
    UnknownAlgorithm { name: String, known: String },
    #[error("{0}")]
    BadEngineTier(EngineTierError),
    /// Two fields of one message disagree.
    #[error("{0}")]
    Inconsistent(String),
    /// A load formula or named load values beyond their grammar or limits.
    #[error("{0}")]
    BadLoad(crate::core::load::LoadError),
    /// A name or label longer than its limit.
    #[error("{bytes} bytes, more than {max}")]
    TooLong { bytes: usize, max: usize },
}

/// Most bytes of a job's owner, project or queue: names people read in tables,
/// which no client may make the state carry by the megabyte.
pub const JOB_LABEL_BYTES_MAX: usize = 256;

/// `value`, if it is at most [`JOB_LABEL_BYTES_MAX`] bytes.
fn job_label(field: &str, value: String) -> Result<String, WireError> {
    if value.len() > JOB_LABEL_BYTES_MAX {
        return Err(WireError::at(field, FieldProblem::TooLong { bytes: value.len(), max: JOB_LABEL_BYTES_MAX }));
    }
    Ok(value)
}

impl WireError {
    fn at(field: &str, problem: FieldProblem) -> Self {
        WireError::Field {
            field: field.to_string(),
            problem,
        }
    }

    /// Prefixes the field path with the name of the message that holds it.
    fn within(self, outer: &str) -> Self {
        match self {
            WireError::Field { field, problem } if field.is_empty() => WireError::Field {
                field: outer.to_string(),
                problem,
            },
            WireError::Field { field, problem } => WireError::Field {
                field: format!("{outer}.{field}"),
                problem,
            },
            other => other,
        }
    }

    /// The path of the wrong field, if the error is about one.
    pub fn field(&self) -> Option<&str> {
        match self {
            WireError::Field { field, .. } => Some(field),
            WireError::NotProtobuf(_) => None,
        }
    }
}

/// Echoes at most this many characters of bad input in an error, so that a
/// hostile megabyte-long "id" does not become a megabyte-long rejection.
const ECHO_CHARS_MAX: usize = 40;

fn echo(text: &str) -> String {
    if text.chars().count() <= ECHO_CHARS_MAX {
        format!("{text:?}")
    } else {
        let head: String = text.chars().take(ECHO_CHARS_MAX).collect();
        format!("{head:?}…")
    }
}

const EVENT_KINDS: &str = "job_submitted, job_cancelled, job_priority_changed, tasks_added, \
    engine_logged_in, engine_logged_out, engine_heartbeat, library_synced, library_sync_failed, \
    task_started, task_completed, task_failed, policy_set, blacklists_cleared, tick, order_batch, \
    library_published, projector_key_registered, projector_key_revoked, suspend_requested, resume_requested, \
    reschedule_requested, job_override_tickets_set, job_hold_changed, task_cancelled, engine_drain_changed, project_priority_changed, engine_reports";
const ORDER_KINDS: &str = "dispatch, cancel, engine_lost, requeue, mark_unschedulable, \
    sync_library, blacklist, reschedule, fail_dependent, suspend, resume, preempt, dispatch_parallel, \
    end_test_campaign, flood_ratio, flag_sink, undeliverable";
const TASK_SET_KINDS: &str = "count, list";

/// Every algorithm, for error messages. The match below fails to compile when
/// one is added and not listed here.
const ALGORITHMS: &[Algorithm] = &[Algorithm::SgePlain, Algorithm::Sgeee, Algorithm::Techila, Algorithm::Fbsng, Algorithm::Cigri];
const _: fn(Algorithm) = |algorithm| match algorithm {
    Algorithm::SgePlain | Algorithm::Sgeee | Algorithm::Techila | Algorithm::Fbsng | Algorithm::Cigri => {}
};
