//! Which subject of the log each event is published on, and which publisher
//! class a subject implies. The table is written out at the top of
//! `schemas/gridfold/v1/events.proto`.

use crate::core::event::{Event, Origin};
use crate::core::ids::EngineId;

/// Every subject of the log stream starts with this.
pub const SUBJECT_PREFIX: &str = "gridfold.ev.";
/// What the log stream `GRIDFOLD_EVENTS` captures.
pub const STREAM_SUBJECTS: &str = "gridfold.ev.>";
/// The projector's order batches; only the fenced projector writes here.
pub const ORDERS_SUBJECT: &str = "gridfold.ev.orders";
/// The tickers' `Tick`s.
pub const TICK_SUBJECT: &str = "gridfold.ev.tick";
/// Operators' engine drains and resumes (`EngineDrainChanged`).
pub const DRAIN_SUBJECT: &str = "gridfold.ev.drain.changed";
/// Operators' `PolicySet`s.
pub const POLICY_SUBJECT: &str = "gridfold.ev.policy";
/// Where operators register and revoke projector keys (`ProjectorKeyRegistered`,
/// `ProjectorKeyRevoked`): only operators may publish here, and engines read
/// it to learn which keys seal deliveries (see `core::trust::KeyRing`).
pub const KEYS_SUBJECT: &str = "gridfold.ev.op.keys";
/// Where keys were registered before [`KEYS_SUBJECT`]: still an operator's, so
/// that logs written then fold alike; no principal may publish there any more.
const LEGACY_KEYS_SUBJECT_PREFIX: &str = "gridfold.ev.keys.";
/// `gridfold.ev.engine.<engine>.<kind>`: only that engine may publish there.
const ENGINE_SUBJECT_PREFIX: &str = "gridfold.ev.engine.";

/// Where `engine`'s logins are: the newest entry there is its newest login,
/// which an engine reads to learn whether a newer process took its name.
pub fn engine_login_subject(engine: &EngineId) -> String {
    format!("{ENGINE_SUBJECT_PREFIX}{engine}.login")
}

/// The subject `event` is published on.
/// Engine ids hold no `.`, so an engine's id is exactly one subject token.
pub fn subject_for(event: &Event) -> String {
    let engine = |engine: &EngineId, kind: &str| format!("{ENGINE_SUBJECT_PREFIX}{engine}.{kind}");
    match event {
        Event::JobSubmitted(_) => "gridfold.ev.job.submitted".to_string(),
        Event::JobCancelled { .. } => "gridfold.ev.job.cancelled".to_string(),
        Event::JobPriorityChanged { .. } => "gridfold.ev.job.priority".to_string(),
        Event::JobOverrideTicketsSet { .. } => "gridfold.ev.override.job".to_string(),
        Event::EngineLoggedIn { engine: id, .. } => engine_login_subject(id),
        Event::EngineLoggedOut { engine: id } => engine(id, "logout"),
        Event::EngineHeartbeat { engine: id, .. } => engine(id, "heartbeat"),
        Event::TaskStarted { engine: id, .. } => engine(id, "started"),
        Event::TaskCompleted { engine: id, .. } => engine(id, "completed"),
        Event::TaskFailed { engine: id, .. } => engine(id, "failed"),
        Event::PolicySet(_) => POLICY_SUBJECT.to_string(),
        Event::Tick => TICK_SUBJECT.to_string(),
        Event::OrderBatch(_) => ORDERS_SUBJECT.to_string(),
        Event::TasksAdded { .. } => "gridfold.ev.job.tasks_added".to_string(),
        Event::LibraryPublished(_) => "gridfold.ev.library.published".to_string(),
        Event::LibrarySynced { engine: id, .. } => engine(id, "library_synced"),
        Event::LibrarySyncFailed { engine: id, .. } => engine(id, "library_sync_failed"),
        Event::BlacklistsCleared { .. } => "gridfold.ev.blacklists.cleared".to_string(),
        Event::ProjectorKeyRegistered { .. } | Event::ProjectorKeyRevoked { .. } => KEYS_SUBJECT.to_string(),
        Event::SuspendRequested(_) => "gridfold.ev.job.suspend".to_string(),
        Event::ResumeRequested(_) => "gridfold.ev.job.resume".to_string(),
        Event::RescheduleRequested(_) => "gridfold.ev.job.reschedule".to_string(),
        Event::JobHoldChanged { .. } => "gridfold.ev.job.hold".to_string(),
        Event::TaskCancelled { .. } => "gridfold.ev.job.task_cancelled".to_string(),
        Event::EngineDrainChanged { .. } => DRAIN_SUBJECT.to_string(),
        Event::ProjectPriorityChanged { .. } => "gridfold.ev.job.project_priority".to_string(),
        Event::EngineReports { engine: id, .. } => engine(id, "reports"),
    }
}

/// The publisher class a subject implies. `gridfold.ev.engine.<engine>.<more>`
/// is that engine's when `<engine>` is a valid engine id (and `<more>` is not
/// empty, as NATS's `>` in the engine's permission demands); an engine subject
/// with a bad id, and every subject not otherwise known, is a client's.
pub fn origin_of(subject: &str) -> Origin {
    match subject {
        ORDERS_SUBJECT => Origin::Projector,
        TICK_SUBJECT => Origin::Ticker,
        KEYS_SUBJECT => Origin::Operator,
        _ if subject.starts_with(LEGACY_KEYS_SUBJECT_PREFIX) => Origin::Operator,
        _ => engine_token(subject)
            .and_then(|engine| EngineId::new(engine).ok())
            .map_or(Origin::Client, Origin::Engine),
    }
}

/// The `<engine>` of `gridfold.ev.engine.<engine>.<more>` (`<more>` not empty), not
/// yet checked to be a valid engine id; `None` for every other subject.
pub(super) fn engine_token(subject: &str) -> Option<&str> {
    subject
        .strip_prefix(ENGINE_SUBJECT_PREFIX)
        .and_then(|rest| rest.split_once('.'))
        .filter(|(_, kind)| !kind.is_empty())
        .map(|(engine, _)| engine)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(id: &str) -> Origin {
        Origin::Engine(EngineId::new(id).unwrap())
    }

    #[test]
    fn subjects_imply_their_publishers() {
        assert_eq!(origin_of("gridfold.ev.orders"), Origin::Projector);
        assert_eq!(origin_of("gridfold.ev.tick"), Origin::Ticker);
        assert_eq!(origin_of(KEYS_SUBJECT), Origin::Operator);
        assert_eq!(origin_of("gridfold.ev.keys.registered"), Origin::Operator, "as logs written before hold them");
        assert_eq!(origin_of("gridfold.ev.op.keys.more"), Origin::Client);
        assert_eq!(origin_of("gridfold.ev.engine.e1.completed"), engine("e1"));
        assert_eq!(
            origin_of("gridfold.ev.engine.e1.anything.else"),
            engine("e1")
        );
        assert_eq!(origin_of("gridfold.ev.job.submitted"), Origin::Client);
        assert_eq!(origin_of("gridfold.ev.policy"), Origin::Client);
        assert_eq!(origin_of("gridfold.ev.orders.extra"), Origin::Client);
        assert_eq!(origin_of("gridfold.ev.tickets"), Origin::Client);
        assert_eq!(origin_of(""), Origin::Client);
    }

    #[test]
    fn malformed_engine_subjects_are_clients() {
        assert_eq!(
            origin_of("gridfold.ev.engine.e1"),
            Origin::Client,
            "no kind token"
        );
        assert_eq!(
            origin_of("gridfold.ev.engine.e1."),
            Origin::Client,
            "empty kind token"
        );
        assert_eq!(
            origin_of("gridfold.ev.engine..login"),
            Origin::Client,
            "empty engine"
        );
        assert_eq!(
            origin_of("gridfold.ev.engine.e 1.login"),
            Origin::Client,
            "bad character"
        );
        assert_eq!(
            origin_of("gridfold.ev.engine.*.login"),
            Origin::Client,
            "wildcard"
        );
        let long = format!("gridfold.ev.engine.{}.login", "x".repeat(65));
        assert_eq!(origin_of(&long), Origin::Client, "too long");
    }

    #[test]
    fn an_engine_id_cannot_hold_the_token_separator() {
        assert!(crate::core::ids::EngineId::new("a.b").is_err());
        // A subject with more tokens still names only its first as the engine.
        assert_eq!(origin_of("gridfold.ev.engine.a.b.login"), engine("a"));
    }
}
