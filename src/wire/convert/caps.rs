//! The caps on held jobs and tasks (`CapsPolicy`) to and from the wire. Their
//! limits are the policy's ([`crate::core::policy_limits::check_policy`]),
//! which the decoder runs on the whole policy.

use super::proto;
use crate::core::event::CapsPolicy;

/// Nothing for the defaults, so a policy that does not touch them encodes as before.
pub(super) fn caps_to_proto(caps: &CapsPolicy) -> Option<proto::CapsPolicy> {
    let defaults = CapsPolicy::default();
    let message = proto::CapsPolicy {
        max_jobs_per_user: (caps.max_jobs_per_user != defaults.max_jobs_per_user).then_some(caps.max_jobs_per_user),
        max_jobs: (caps.max_jobs != defaults.max_jobs).then_some(caps.max_jobs),
        max_tasks_per_user: (caps.max_tasks_per_user != defaults.max_tasks_per_user).then_some(caps.max_tasks_per_user),
        max_tasks: (caps.max_tasks != defaults.max_tasks).then_some(caps.max_tasks),
    };
    (message != proto::CapsPolicy::default()).then_some(message)
}

pub(super) fn caps(m: Option<proto::CapsPolicy>) -> CapsPolicy {
    let m = m.unwrap_or_default();
    let defaults = CapsPolicy::default();
    CapsPolicy {
        max_jobs_per_user: m.max_jobs_per_user.unwrap_or(defaults.max_jobs_per_user),
        max_jobs: m.max_jobs.unwrap_or(defaults.max_jobs),
        max_tasks_per_user: m.max_tasks_per_user.unwrap_or(defaults.max_tasks_per_user),
        max_tasks: m.max_tasks.unwrap_or(defaults.max_tasks),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_encode_as_nothing_and_every_cap_round_trips() {
        assert_eq!(caps_to_proto(&CapsPolicy::default()), None);
        assert_eq!(caps(None), CapsPolicy::default());
        let set = CapsPolicy { max_jobs_per_user: 3, max_jobs: 7, max_tasks_per_user: 11, max_tasks: 13 };
        assert_eq!(caps(caps_to_proto(&set)), set);
        let one = CapsPolicy { max_tasks: 5, ..CapsPolicy::default() };
        assert_eq!(caps_to_proto(&one), Some(proto::CapsPolicy { max_tasks: Some(5), ..Default::default() }));
        assert_eq!(caps(caps_to_proto(&one)), one);
    }
}
