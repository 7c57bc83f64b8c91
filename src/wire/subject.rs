//! The log's subjects, as the wire names them. Their one home is
//! [`crate::core::subject`] (the fold checks every event against them); this
//! re-exports them for the adapters. The table is written out at the top of
//! `schemas/gridfold/v1/events.proto`.

pub use crate::core::subject::{
    DRAIN_SUBJECT, ENGINE_SUBJECT_PREFIX, KEYS_SUBJECT, OPERATOR_SUBJECT_PREFIX, ORDERS_SUBJECT, POLICY_SUBJECT,
    STREAM_SUBJECTS, SUBJECT_PREFIX, TICK_SUBJECT, USER_SUBJECT_PREFIX, default_publisher, default_subject, engine_login_subject,
    engine_token, origin_of, subject_for, user_subject_prefix,
};
