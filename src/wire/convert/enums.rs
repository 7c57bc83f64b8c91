//! Core enums and their protobuf twins, both ways from one list each.

use super::fields::{known_enum, unspecified};
use super::{proto, WireError};
use crate::core::event::{CancelReason, FailureKind, RequeueReason, RescheduleReason, Unschedulable};

/// Both directions of a core enum and the protobuf enum of the same variant names,
/// from one list: `$to` is total; `$from` refuses numbers this version does not know
/// and `Unspecified`. Both matches are exhaustive, so a variant added to either
/// enum and not listed here fails to compile.
macro_rules! enum_both_ways {
    ($to:ident, $from:ident: $core:ident <=> $proto:ident { $($variant:ident),+ $(,)? }) => {
        pub(super) fn $to(value: $core) -> proto::$proto {
            match value {
                $($core::$variant => proto::$proto::$variant,)+
            }
        }

        pub(super) fn $from(field: &str, value: i32) -> Result<$core, WireError> {
            match known_enum::<proto::$proto>(field, value)? {
                proto::$proto::Unspecified => Err(unspecified::<proto::$proto>(field)),
                $(proto::$proto::$variant => Ok($core::$variant),)+
            }
        }
    };
}

enum_both_ways!(failure_kind_to_proto, failure_kind: FailureKind <=> FailureKind {
    NonZeroExit,
    Signalled,
    WallTimeExceeded,
    LaunchFailed,
    EngineShutdown,
    Preempted,
    Undeliverable,
});
enum_both_ways!(cancel_reason_to_proto, cancel_reason: CancelReason <=> CancelReason {
    JobCancelled,
    RedundantCopy,
    Requeued,
    TaskCancelled,
    ParallelEnded,
});
enum_both_ways!(requeue_reason_to_proto, requeue_reason: RequeueReason <=> RequeueReason {
    DispatchTimeout,
    EngineRestarted,
    PartLost,
    FloodWithdrawn,
});
enum_both_ways!(unschedulable_to_proto, unschedulable: Unschedulable <=> Unschedulable {
    NoEngineMatchesRequirements,
    NoEngineHasEnoughSlots,
    LibraryNotPublished,
    NoSiteHasEnoughSlots,
});
enum_both_ways!(reschedule_reason_to_proto, reschedule_reason: RescheduleReason <=> RescheduleReason {
    TaskMaxTime,
    PercentCompleted,
    Average,
    StdDev,
    Expired,
    Finalize,
});
