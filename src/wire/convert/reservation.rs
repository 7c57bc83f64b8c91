//! Resource reservation (`ReservationPolicy`, issue 10 item 4) to and from the
//! wire, with its limit: a `max_reservation` above [`MAX_RESERVATION_MAX`]
//! does not decode. 0 as `default_duration_ms` is read as the default; the
//! policy's own check holds it to a year (`core::policy_limits`).

use super::{proto, FieldProblem, WireError};
use crate::core::event::{ReservationPolicy, DEFAULT_DURATION_MS_DEFAULT, MAX_RESERVATION_MAX};

/// Nothing for the default (reservation off), so a policy without it encodes as before.
pub(super) fn reservation_to_proto(policy: &ReservationPolicy) -> Option<proto::ReservationPolicy> {
    let message = proto::ReservationPolicy {
        max_reservation: policy.max_reservation,
        default_duration_ms: (policy.default_duration_ms != DEFAULT_DURATION_MS_DEFAULT).then_some(policy.default_duration_ms),
    };
    (message != proto::ReservationPolicy::default()).then_some(message)
}

pub(super) fn reservation(m: Option<proto::ReservationPolicy>) -> Result<ReservationPolicy, WireError> {
    let m = m.unwrap_or_default();
    if m.max_reservation > MAX_RESERVATION_MAX {
        return Err(WireError::at(
            "max_reservation",
            FieldProblem::Inconsistent(format!("{}, more than {MAX_RESERVATION_MAX}", m.max_reservation)),
        ));
    }
    let default_duration_ms = match m.default_duration_ms {
        None | Some(0) => DEFAULT_DURATION_MS_DEFAULT,
        Some(ms) => ms,
    };
    Ok(ReservationPolicy { max_reservation: m.max_reservation, default_duration_ms })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_max_reservation_beyond_the_cap_does_not_decode_and_the_rest_round_trips() {
        let over = proto::ReservationPolicy { max_reservation: MAX_RESERVATION_MAX + 1, default_duration_ms: None };
        assert!(reservation(Some(over)).unwrap_err().to_string().contains("more than 1024"));
        let over = proto::ReservationPolicy { max_reservation: u32::MAX, default_duration_ms: Some(u64::MAX) };
        assert!(reservation(Some(over)).is_err());
        assert_eq!(reservation(None).unwrap(), ReservationPolicy::default());
        assert_eq!(reservation_to_proto(&ReservationPolicy::default()), None);
        for policy in [
            ReservationPolicy { max_reservation: MAX_RESERVATION_MAX, default_duration_ms: u64::MAX },
            ReservationPolicy { max_reservation: 1, default_duration_ms: 1 },
            ReservationPolicy { max_reservation: 0, default_duration_ms: 60_000 },
        ] {
            assert_eq!(reservation(reservation_to_proto(&policy)).unwrap(), policy);
        }
    }
}
