//! Who may write what, as the fold enforces it from the log alone: every event
//! on its own subject, users acting on their own jobs, priorities above the
//! default an operator's, the grid's settings an operator's. Each refusal
//! changes nothing but the rejection record (`fold_checked` asserts it).

use super::event::{Entry, Event, Origin, Policy, TaskSelector};
use super::fold::tests::fold_checked;
use super::ids::UserName;
use super::reject::Rejection;
use super::state::State;
use super::testkit::*;

fn user(name: &str) -> Origin {
    Origin::User(UserName::new(name).unwrap())
}

fn kinds(rejections: &[Rejection]) -> Vec<&'static str> {
    rejections.iter().map(Rejection::kind_name).collect()
}

/// Alice's job `a` (4 tasks) and bob's job `b`, both submitted on their owners' prefixes.
fn alice_and_bob() -> (LogBuilder, State) {
    let mut log = LogBuilder::new();
    let mut state = State::new();
    let mut bobs = job_spec("b", 4, "");
    bobs.owner = "bob".into();
    for entry in [
        log.login("e1", 2, linux_props("lyon", 8192)),
        log.push_from(user("alice"), Event::JobSubmitted(job_spec("a", 4, ""))),
        log.push_from(user("bob"), Event::JobSubmitted(bobs)),
    ] {
        assert_eq!(kinds(&fold_checked(&mut state, &entry)), Vec::<&str>::new());
    }
    (log, state)
}

/// Every write a user can aim at job `job`.
fn writes_at(job: &str) -> Vec<Event> {
    let selector = TaskSelector { job: job_id(job), task: None };
    vec![
        Event::JobCancelled { job: job_id(job), reason: "mine now".into() },
        Event::JobHoldChanged { job: job_id(job), held: true },
        Event::SuspendRequested(selector.clone()),
        Event::ResumeRequested(selector.clone()),
        Event::RescheduleRequested(selector),
        Event::JobPriorityChanged { job: job_id(job), priority: -5 },
        Event::ProjectPriorityChanged { job: job_id(job), priority: 7 },
        Event::TaskCancelled { task: task(job, 1) },
        Event::TasksAdded { job: job_id(job), tasks: vec![Default::default()], conditions: Default::default() },
    ]
}

#[test]
fn a_user_acting_on_another_users_job_is_refused_not_owner_each_time() {
    let (mut log, mut state) = alice_and_bob();
    for event in writes_at("b") {
        let what = event.kind_name();
        let entry = log.push_from(user("alice"), event);
        let rejections = fold_checked(&mut state, &entry);
        assert_eq!(kinds(&rejections), ["not-owner"], "{what}");
        assert_eq!(
            rejections[0].to_string(),
            "user alice may not act on job b, which user bob owns: only its owner or an operator may",
            "{what}"
        );
    }
    let b = state.job(state.job_idx(&job_id("b")).unwrap());
    assert_eq!((b.owner.as_str(), b.priority, b.is_active()), ("bob", 0, true), "bob's job is as bob left it");
    // A job of no owner (an operator's) is no user's either.
    let mut nobodys = job_spec("n", 1, "");
    nobodys.owner.clear();
    let submitted = log.push_from(Origin::Operator, Event::JobSubmitted(nobodys));
    assert!(fold_checked(&mut state, &submitted).is_empty());
    let cancel = log.push_from(user("alice"), Event::JobCancelled { job: job_id("n"), reason: String::new() });
    let rejections = fold_checked(&mut state, &cancel);
    assert_eq!(rejections[0].to_string(), "user alice may not act on job n: it has no owner, so only an operator may");
}

#[test]
fn the_owner_and_an_operator_act_on_the_job() {
    let (mut log, mut state) = alice_and_bob();
    let hold = log.push_from(user("bob"), Event::JobHoldChanged { job: job_id("b"), held: true });
    assert_eq!(kinds(&fold_checked(&mut state, &hold)), Vec::<&str>::new());
    let lower = log.push_from(user("bob"), Event::JobPriorityChanged { job: job_id("b"), priority: -10 });
    assert_eq!(kinds(&fold_checked(&mut state, &lower)), Vec::<&str>::new());
    let raise = log.push_from(Origin::Operator, Event::JobPriorityChanged { job: job_id("a"), priority: 50 });
    assert_eq!(kinds(&fold_checked(&mut state, &raise)), Vec::<&str>::new());
    let cancel = log.push_from(Origin::Operator, Event::JobCancelled { job: job_id("b"), reason: "operator".into() });
    assert_eq!(kinds(&fold_checked(&mut state, &cancel)), Vec::<&str>::new());
    let (a, b) = (state.job(state.job_idx(&job_id("a")).unwrap()), state.job(state.job_idx(&job_id("b")).unwrap()));
    assert_eq!((a.priority, b.priority, b.is_active()), (50, -10, false));
}

#[test]
fn a_user_may_lower_a_priority_but_not_raise_it_above_the_default() {
    let (mut log, mut state) = alice_and_bob();
    let raise = log.push_from(user("alice"), Event::JobPriorityChanged { job: job_id("a"), priority: 1 });
    let rejections = fold_checked(&mut state, &raise);
    assert_eq!(kinds(&rejections), ["priority-above-default"]);
    assert_eq!(
        rejections[0].to_string(),
        "job a: a user may set a priority up to the default 0, not 1; only an operator may raise it above"
    );
    let back_to_default = log.push_from(user("alice"), Event::JobPriorityChanged { job: job_id("a"), priority: 0 });
    assert!(fold_checked(&mut state, &back_to_default).is_empty());
    // Techila's project priority counts down: 1 (Highest) to 3 (High) are above Normal (4).
    for (priority, refused) in [(1, true), (3, true), (4, false), (7, false)] {
        let entry = log.push_from(user("alice"), Event::ProjectPriorityChanged { job: job_id("a"), priority });
        assert_eq!(kinds(&fold_checked(&mut state, &entry)).len(), usize::from(refused), "project priority {priority}");
    }
    let entry = log.push_from(user("alice"), Event::ProjectPriorityChanged { job: job_id("a"), priority: 2 });
    assert_eq!(
        fold_checked(&mut state, &entry)[0].to_string(),
        "job a: a user may set a project priority from the default 4 down to 7 (Lowest), not 2; only an operator may raise it above"
    );
    // At submission too.
    let mut eager = job_spec("eager", 1, "");
    eager.priority = 10;
    let entry = log.push_from(user("alice"), Event::JobSubmitted(eager.clone()));
    assert_eq!(kinds(&fold_checked(&mut state, &entry)), ["priority-above-default"]);
    let entry = log.push_from(Origin::Operator, Event::JobSubmitted(eager));
    assert!(fold_checked(&mut state, &entry).is_empty(), "an operator submits it");
    assert_eq!(state.job(state.job_idx(&job_id("eager")).unwrap()).owner, "alice", "for the owner it names");
}

#[test]
fn a_users_job_is_the_user_its_subject_names() {
    let (mut log, mut state) = alice_and_bob();
    // Naming another owner: refused, and no job is made.
    let mut posing = job_spec("posing", 1, "");
    posing.owner = "bob".into();
    let entry = log.push_from(user("alice"), Event::JobSubmitted(posing));
    let rejections = fold_checked(&mut state, &entry);
    assert_eq!(kinds(&rejections), ["not-owner"]);
    assert!(state.job_idx(&job_id("posing")).is_none());
    // Naming none: the user's.
    let mut anonymous = job_spec("anonymous", 1, "");
    anonymous.owner.clear();
    let entry = log.push_from(user("carol"), Event::JobSubmitted(anonymous));
    assert!(fold_checked(&mut state, &entry).is_empty());
    assert_eq!(state.job(state.job_idx(&job_id("anonymous")).unwrap()).owner, "carol");
    // An operator's submission names an owner that must be a user name.
    let mut escaping = job_spec("escaping", 1, "");
    escaping.owner = "\u{1b}[2Jroot".into();
    let entry = log.push_from(Origin::Operator, Event::JobSubmitted(escaping));
    assert_eq!(kinds(&fold_checked(&mut state, &entry)), ["invalid-job"]);
}

#[test]
fn a_users_subject_carries_no_operators_event_and_no_ticks_or_orders() {
    let (mut log, mut state) = alice_and_bob();
    let operators_events = [
        Event::PolicySet(Policy { dispatches_per_run_max: 1, ..Policy::default() }),
        Event::EngineDrainChanged { engine: engine_id("e1"), drained: true },
        Event::BlacklistsCleared { engine: None },
        Event::JobOverrideTicketsSet { job: job_id("a"), tickets: 1_000 },
        Event::ProjectorKeyRegistered { key: [9; 32], name: "mine".into() },
        Event::Tick,
    ];
    for event in operators_events {
        let what = event.kind_name();
        // Stored on the user's own prefix, as its credentials allow.
        let subject = format!("gridfold.ev.user.alice.{}", super::subject::kind_of(&event));
        let entry = log.push_on(&subject, user("alice"), event);
        assert_eq!(kinds(&fold_checked(&mut state, &entry)), ["wrong-publisher"], "{what} on {subject}");
    }
    assert_eq!(state.policy.dispatches_per_run_max, Policy::default().dispatches_per_run_max);
    assert!(!state.engine(state.engine_idx(&engine_id("e1")).unwrap()).drained);
}

#[test]
fn an_event_off_its_own_subject_is_refused_wrong_subject() {
    let (mut log, mut state) = alice_and_bob();
    let cancel = Event::JobCancelled { job: job_id("a"), reason: String::new() };
    for (subject, origin) in [
        // Another kind's subject on the right prefix.
        ("gridfold.ev.user.alice.job.submitted", user("alice")),
        ("gridfold.ev.op.job.hold", Origin::Operator),
        // The old shared subject, and subjects no one's.
        ("gridfold.ev.job.cancelled", Origin::Unknown),
        ("gridfold.ev.cancelled", Origin::Unknown),
    ] {
        let entry = log.push_on(subject, origin, cancel.clone());
        assert_eq!(kinds(&fold_checked(&mut state, &entry)), ["wrong-subject"], "{subject}");
    }
    let policy = log.push_on("gridfold.ev.op.drain", Origin::Operator, Event::PolicySet(Policy::default()));
    assert_eq!(kinds(&fold_checked(&mut state, &policy)), ["wrong-subject"]);
    assert!(state.job(state.job_idx(&job_id("a")).unwrap()).is_active(), "alice's job is not cancelled");
}

#[test]
fn a_users_writes_on_its_own_prefix_reach_the_wire_as_they_fold() {
    // The subject the wire gives a user's event implies that user, and the fold takes it.
    let event = Event::JobCancelled { job: job_id("a"), reason: String::new() };
    let subject = super::subject::subject_for(&event, &user("alice"));
    assert_eq!(subject, "gridfold.ev.user.alice.job.cancelled");
    assert_eq!(super::subject::origin_of(&subject), user("alice"));
    let entry: Entry = {
        let (mut log, _) = alice_and_bob();
        log.push_from(user("alice"), event)
    };
    assert_eq!(entry.subject, subject);
}

#[test]
fn why_names_who_was_refused_on_the_job_and_why() {
    let (mut log, mut state) = alice_and_bob();
    let cancel = log.push_from(user("alice"), Event::JobCancelled { job: job_id("b"), reason: String::new() });
    let seq = cancel.seq.0;
    fold_checked(&mut state, &cancel);
    let explanation = super::explain::explain(&state, &task("b", 0)).unwrap();
    assert_eq!(explanation.refused_writes.len(), 1);
    let refused = &explanation.refused_writes[0];
    assert_eq!((refused.seq, refused.by.as_str(), refused.kind), (seq, "user alice", "not-owner"));
    let text = explanation.to_string();
    assert!(
        text.contains(&format!("refused at seq {seq}: user alice (not-owner): user alice may not act on job b")),
        "{text}"
    );
    let own = super::explain::explain(&state, &task("a", 0)).unwrap();
    assert!(own.refused_writes.is_empty(), "nothing was refused on alice's job");
}
