//! The subjects of the log: one per kind of event and publisher, and the
//! publisher ([`Origin`]) each subject implies.
//!
//! The broker's permissions (`gridfold broker-config`) give each principal its
//! own subjects, and the fold checks on replay, from the log alone, that every
//! event was stored on the subject its kind and its publisher have
//! ([`subject_for`]): neither is trusted without the other.
//!
//! | publisher | subjects |
//! |---|---|
//! | the projector | `gridfold.ev.orders` (sealed order batches) |
//! | the projector, a ticker | `gridfold.ev.tick` |
//! | an operator | `gridfold.ev.op.<kind>` (policy, drain, blacklists, libraries, override tickets, keys), and `gridfold.ev.op.job.<kind>` to act on any job |
//! | user `<name>` | `gridfold.ev.user.<name>.job.<kind>`: its own jobs only |
//! | engine `<id>` | `gridfold.ev.engine.<id>.<kind>` |
//!
//! User names and engine ids hold no `.`, so each is exactly one subject token.
//! Everything here is plain string work: no NATS, no IO.

use super::event::{Event, Origin};
use super::ids::{EngineId, UserName};

/// Every subject of the log stream starts with this.
pub const SUBJECT_PREFIX: &str = "gridfold.ev.";
/// What the log stream `GRIDFOLD_EVENTS` captures.
pub const STREAM_SUBJECTS: &str = "gridfold.ev.>";
/// The projector's order batches; only the fenced projector writes here.
pub const ORDERS_SUBJECT: &str = "gridfold.ev.orders";
/// The tickers' `Tick`s (the projector's own ticker, or another process with its rights).
pub const TICK_SUBJECT: &str = "gridfold.ev.tick";
/// Everything operators publish is under this prefix, and only operators may.
pub const OPERATOR_SUBJECT_PREFIX: &str = "gridfold.ev.op.";
/// Operators' `PolicySet`s.
pub const POLICY_SUBJECT: &str = "gridfold.ev.op.policy";
/// Operators' engine drains and resumes (`EngineDrainChanged`).
pub const DRAIN_SUBJECT: &str = "gridfold.ev.op.drain";
/// Projector keys registered and revoked: one subject for both, so an engine
/// can read every key event through one consumer the broker lets it make.
pub const KEYS_SUBJECT: &str = "gridfold.ev.op.keys";
/// `gridfold.ev.user.<name>.job.<kind>`: only that user (and operators, on
/// their own prefix) act on the user's jobs.
pub const USER_SUBJECT_PREFIX: &str = "gridfold.ev.user.";
/// `gridfold.ev.engine.<engine>.<kind>`: only that engine may publish there.
pub const ENGINE_SUBJECT_PREFIX: &str = "gridfold.ev.engine.";

/// Where `engine`'s logins are: the newest entry there is its newest login,
/// which an engine reads to learn whether a newer process took its name.
pub fn engine_login_subject(engine: &EngineId) -> String {
    format!("{ENGINE_SUBJECT_PREFIX}{engine}.login")
}

/// The prefix under which `user` publishes: `gridfold.ev.user.<user>.`.
pub fn user_subject_prefix(user: &UserName) -> String {
    format!("{USER_SUBJECT_PREFIX}{user}.")
}

/// What kind of writer an event needs: this decides which prefixes its
/// subject may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    /// Only the projector: order batches.
    Projector,
    /// The projector's ticker.
    Ticker,
    /// An engine, about itself: the event names it.
    Engine,
    /// Only an operator: it changes the grid, not one user's jobs.
    Operator,
    /// Aimed at one job: its owner, on the owner's prefix, or an operator.
    JobOwnerOrOperator,
}

/// Which writer `event` needs.
pub fn writer_of(event: &Event) -> Writer {
    match event {
        Event::OrderBatch(_) => Writer::Projector,
        Event::Tick => Writer::Ticker,
        Event::EngineLoggedIn { .. }
        | Event::EngineLoggedOut { .. }
        | Event::EngineHeartbeat { .. }
        | Event::TaskStarted { .. }
        | Event::TaskCompleted { .. }
        | Event::TaskFailed { .. }
        | Event::LibrarySynced { .. }
        | Event::LibrarySyncFailed { .. }
        | Event::EngineReports { .. } => Writer::Engine,
        Event::PolicySet(_)
        | Event::EngineDrainChanged { .. }
        | Event::BlacklistsCleared { .. }
        | Event::LibraryPublished(_)
        | Event::JobOverrideTicketsSet { .. }
        | Event::ProjectorKeyRegistered { .. }
        | Event::ProjectorKeyRevoked { .. } => Writer::Operator,
        Event::JobSubmitted(_)
        | Event::JobCancelled { .. }
        | Event::JobPriorityChanged { .. }
        | Event::ProjectPriorityChanged { .. }
        | Event::TasksAdded { .. }
        | Event::SuspendRequested(_)
        | Event::ResumeRequested(_)
        | Event::RescheduleRequested(_)
        | Event::JobHoldChanged { .. }
        | Event::TaskCancelled { .. } => Writer::JobOwnerOrOperator,
    }
}

/// Whether `origin` is a publisher `event`'s kind admits. An engine event's
/// engine is compared with the subject's by the fold, which names a forgery.
pub fn may_publish(origin: &Origin, event: &Event) -> bool {
    matches!(
        (writer_of(event), origin),
        (Writer::Projector, Origin::Projector)
            | (Writer::Ticker, Origin::Ticker)
            | (Writer::Engine, Origin::Engine(_))
            | (Writer::Operator, Origin::Operator)
            | (Writer::JobOwnerOrOperator, Origin::User(_) | Origin::Operator)
    )
}

/// A subject in three parts: a prefix, the owner's token (an engine's or a
/// user's) when the prefix has one, and the kind.
struct SubjectParts<'a> {
    prefix: &'static str,
    owner: Option<&'a str>,
    kind: &'static str,
}

/// The parts of the subject `event` has when `publisher` publishes it.
fn subject_parts<'a>(event: &'a Event, publisher: &'a Origin) -> SubjectParts<'a> {
    let engine = |engine: &'a EngineId, kind| SubjectParts { prefix: ENGINE_SUBJECT_PREFIX, owner: Some(engine.as_str()), kind };
    let operator = |kind| SubjectParts { prefix: OPERATOR_SUBJECT_PREFIX, owner: None, kind };
    let log = |kind| SubjectParts { prefix: SUBJECT_PREFIX, owner: None, kind };
    let job = |kind| match publisher {
        Origin::User(user) => SubjectParts { prefix: USER_SUBJECT_PREFIX, owner: Some(user.as_str()), kind },
        _ => operator(kind),
    };
    match event {
        Event::EngineLoggedIn { engine: id, .. } => engine(id, "login"),
        Event::EngineLoggedOut { engine: id } => engine(id, "logout"),
        Event::EngineHeartbeat { engine: id, .. } => engine(id, "heartbeat"),
        Event::TaskStarted { engine: id, .. } => engine(id, "started"),
        Event::TaskCompleted { engine: id, .. } => engine(id, "completed"),
        Event::TaskFailed { engine: id, .. } => engine(id, "failed"),
        Event::LibrarySynced { engine: id, .. } => engine(id, "library_synced"),
        Event::LibrarySyncFailed { engine: id, .. } => engine(id, "library_sync_failed"),
        Event::EngineReports { engine: id, .. } => engine(id, "reports"),
        Event::OrderBatch(_) => log("orders"),
        Event::Tick => log("tick"),
        Event::PolicySet(_) => operator("policy"),
        Event::EngineDrainChanged { .. } => operator("drain"),
        Event::ProjectorKeyRegistered { .. } | Event::ProjectorKeyRevoked { .. } => operator("keys"),
        Event::BlacklistsCleared { .. } => operator("blacklists_cleared"),
        Event::LibraryPublished(_) => operator("library_published"),
        Event::JobOverrideTicketsSet { .. } => operator("override_tickets"),
        Event::JobSubmitted(_) => job("job.submitted"),
        Event::JobCancelled { .. } => job("job.cancelled"),
        Event::JobPriorityChanged { .. } => job("job.priority"),
        Event::ProjectPriorityChanged { .. } => job("job.project_priority"),
        Event::TasksAdded { .. } => job("job.tasks_added"),
        Event::SuspendRequested(_) => job("job.suspend"),
        Event::ResumeRequested(_) => job("job.resume"),
        Event::RescheduleRequested(_) => job("job.reschedule"),
        Event::JobHoldChanged { .. } => job("job.hold"),
        Event::TaskCancelled { .. } => job("job.task_cancelled"),
    }
}

/// The subject `event` is published on by `publisher`.
///
/// Events with one writer have one subject whoever asks (an engine's carries
/// the engine it names). An event aimed at a job goes on its publisher's
/// prefix: a user's own (`gridfold.ev.user.<name>.job.<kind>`) or the
/// operators' (`gridfold.ev.op.job.<kind>`); any other publisher gets the
/// operators' subject, which the broker and the fold refuse it.
pub fn subject_for(event: &Event, publisher: &Origin) -> String {
    let SubjectParts { prefix, owner, kind } = subject_parts(event, publisher);
    match owner {
        Some(owner) => format!("{prefix}{owner}.{kind}"),
        None => format!("{prefix}{kind}"),
    }
}

/// The last part of an event's subject, after its publisher's prefix and
/// token: `job.submitted`, `policy`, `started`, `orders`.
pub fn kind_of(event: &Event) -> &'static str {
    subject_parts(event, &Origin::Operator).kind
}

/// Whether `subject` is [`subject_for`]`(event, publisher)`, without making it
/// (the fold asks this of every entry).
pub fn is_subject_for(subject: &str, event: &Event, publisher: &Origin) -> bool {
    let SubjectParts { prefix, owner, kind } = subject_parts(event, publisher);
    let Some(rest) = subject.strip_prefix(prefix) else { return false };
    let rest = match owner {
        Some(owner) => match rest.strip_prefix(owner).and_then(|rest| rest.strip_prefix('.')) {
            Some(rest) => rest,
            None => return false,
        },
        None => rest,
    };
    rest == kind
}

/// The publisher an event implies when nothing else says (a history line
/// without a subject, a test): its engine, the projector, the ticker, an
/// operator, and for a submission the owner it names when that is a user
/// name (every other job event: an operator, who may act on any job).
pub fn default_publisher(event: &Event) -> Origin {
    match writer_of(event) {
        Writer::Projector => Origin::Projector,
        Writer::Ticker => Origin::Ticker,
        Writer::Engine => event.reporting_engine().map_or(Origin::Unknown, |engine| Origin::Engine(engine.clone())),
        Writer::Operator => Origin::Operator,
        Writer::JobOwnerOrOperator => match event {
            Event::JobSubmitted(spec) => UserName::new(&spec.owner).map_or(Origin::Operator, Origin::User),
            _ => Origin::Operator,
        },
    }
}

/// The subject of the publisher `event` implies ([`default_publisher`]):
/// what an engine, the projector and a ticker publish on, and where a history
/// line or a test without a subject puts a client's event.
pub fn default_subject(event: &Event) -> String {
    subject_for(event, &default_publisher(event))
}

/// The publisher a subject implies. `gridfold.ev.engine.<engine>.<more>` is
/// that engine's and `gridfold.ev.user.<name>.<more>` that user's when the
/// token is a valid id and `<more>` is not empty (as NATS's `>` in their
/// permissions demands); every subject not otherwise known is
/// [`Origin::Unknown`], whose every event the fold refuses.
pub fn origin_of(subject: &str) -> Origin {
    match subject {
        ORDERS_SUBJECT => Origin::Projector,
        TICK_SUBJECT => Origin::Ticker,
        _ if subject.strip_prefix(OPERATOR_SUBJECT_PREFIX).is_some_and(|rest| !rest.is_empty()) => Origin::Operator,
        _ => {
            if let Some(engine) = owner_token(subject, ENGINE_SUBJECT_PREFIX) {
                return EngineId::new(engine).map_or(Origin::Unknown, Origin::Engine);
            }
            if let Some(user) = owner_token(subject, USER_SUBJECT_PREFIX) {
                return UserName::new(user).map_or(Origin::Unknown, Origin::User);
            }
            Origin::Unknown
        }
    }
}

/// The `<engine>` of `gridfold.ev.engine.<engine>.<more>` (`<more>` not empty), not
/// yet checked to be a valid engine id; `None` for every other subject.
pub fn engine_token(subject: &str) -> Option<&str> {
    owner_token(subject, ENGINE_SUBJECT_PREFIX)
}

/// The token after `prefix` when more follows it.
fn owner_token<'s>(subject: &'s str, prefix: &str) -> Option<&'s str> {
    subject
        .strip_prefix(prefix)
        .and_then(|rest| rest.split_once('.'))
        .filter(|(_, kind)| !kind.is_empty())
        .map(|(owner, _)| owner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::event::TaskSelector;
    use crate::core::ids::JobId;

    fn engine(id: &str) -> Origin {
        Origin::Engine(EngineId::new(id).unwrap())
    }
    fn user(name: &str) -> Origin {
        Origin::User(UserName::new(name).unwrap())
    }

    #[test]
    fn subjects_imply_their_publishers() {
        assert_eq!(origin_of("gridfold.ev.orders"), Origin::Projector);
        assert_eq!(origin_of("gridfold.ev.tick"), Origin::Ticker);
        assert_eq!(origin_of("gridfold.ev.engine.e1.completed"), engine("e1"));
        assert_eq!(origin_of("gridfold.ev.engine.e1.anything.else"), engine("e1"));
        assert_eq!(origin_of("gridfold.ev.user.alice.job.submitted"), user("alice"));
        assert_eq!(origin_of("gridfold.ev.op.policy"), Origin::Operator);
        assert_eq!(origin_of("gridfold.ev.op.job.cancelled"), Origin::Operator);
        assert_eq!(origin_of("gridfold.ev.op."), Origin::Unknown, "no kind token");
        assert_eq!(origin_of("gridfold.ev.job.submitted"), Origin::Unknown, "the old shared subject is no one's");
        assert_eq!(origin_of("gridfold.ev.policy"), Origin::Unknown);
        assert_eq!(origin_of("gridfold.ev.orders.extra"), Origin::Unknown);
        assert_eq!(origin_of(""), Origin::Unknown);
    }

    #[test]
    fn malformed_owner_tokens_are_no_ones() {
        for subject in [
            "gridfold.ev.engine.e1",
            "gridfold.ev.engine.e1.",
            "gridfold.ev.engine..login",
            "gridfold.ev.engine.e 1.login",
            "gridfold.ev.engine.*.login",
            "gridfold.ev.user.alice",
            "gridfold.ev.user..job.submitted",
            "gridfold.ev.user.*.job.submitted",
            "gridfold.ev.user.>",
        ] {
            assert_eq!(origin_of(subject), Origin::Unknown, "{subject}");
        }
        let long = format!("gridfold.ev.engine.{}.login", "x".repeat(65));
        assert_eq!(origin_of(&long), Origin::Unknown, "too long");
        // A subject with more tokens still names only its first as the engine.
        assert_eq!(origin_of("gridfold.ev.engine.a.b.login"), engine("a"));
    }

    #[test]
    fn every_subject_for_implies_the_publisher_it_was_made_for() {
        let job = JobId::new("j").unwrap();
        let events = [
            Event::JobCancelled { job: job.clone(), reason: String::new() },
            Event::JobHoldChanged { job: job.clone(), held: true },
            Event::SuspendRequested(TaskSelector { job: job.clone(), task: None }),
            Event::PolicySet(Default::default()),
            Event::ProjectorKeyRevoked { key: [0; 32] },
            Event::Tick,
            Event::EngineLoggedOut { engine: EngineId::new("e1").unwrap() },
        ];
        for event in &events {
            for publisher in [user("alice"), Origin::Operator] {
                let subject = subject_for(event, &publisher);
                let implied = origin_of(&subject);
                if may_publish(&publisher, event) {
                    assert_eq!(implied, publisher, "{subject}");
                } else {
                    assert!(!may_publish(&implied, event) || implied != publisher, "{subject}");
                }
            }
        }
        assert_eq!(subject_for(&events[0], &user("alice")), "gridfold.ev.user.alice.job.cancelled");
        assert_eq!(subject_for(&events[0], &Origin::Operator), "gridfold.ev.op.job.cancelled");
        assert_eq!(subject_for(&events[3], &user("alice")), POLICY_SUBJECT, "a policy is an operator's whoever asks");
        for event in &events {
            for publisher in [user("alice"), user("bob"), Origin::Operator, Origin::Ticker] {
                let subject = subject_for(event, &publisher);
                assert!(is_subject_for(&subject, event, &publisher), "{subject}");
                for other in ["gridfold.ev.op.job", "gridfold.ev.user.alice.job", "gridfold.ev.user.alic.job.hold", "gridfold.ev.tick.x", ""] {
                    assert!(!is_subject_for(other, event, &publisher), "{other} for {subject}");
                }
            }
        }
        assert!(!is_subject_for("gridfold.ev.user.bob.job.cancelled", &events[0], &user("alice")));
        assert!(!is_subject_for("gridfold.ev.op.job.hold", &events[0], &Origin::Operator), "another kind's subject");
    }

    #[test]
    fn users_may_act_on_jobs_and_nothing_else() {
        let alice = user("alice");
        let job = JobId::new("j").unwrap();
        assert!(may_publish(&alice, &Event::JobCancelled { job: job.clone(), reason: String::new() }));
        assert!(may_publish(&Origin::Operator, &Event::JobCancelled { job, reason: String::new() }));
        for event in [
            Event::PolicySet(Default::default()),
            Event::Tick,
            Event::BlacklistsCleared { engine: None },
            Event::EngineDrainChanged { engine: EngineId::new("e1").unwrap(), drained: true },
            Event::ProjectorKeyRevoked { key: [0; 32] },
        ] {
            assert!(!may_publish(&alice, &event), "{}", event.kind_name());
            assert!(!may_publish(&Origin::Unknown, &event), "{}", event.kind_name());
        }
    }
}
