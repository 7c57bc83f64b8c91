//! No input stops the grid: the fold never panics on any entry a client can
//! publish, every invariant holds after it, and a rejection changes nothing but
//! the rejection record.
//!
//! The property test builds states from arbitrary histories (mostly plausible
//! events about a few engines and jobs, with the projector's real decisions
//! folded back, so attempts run, fail and complete) and folds arbitrary entries
//! into them: any event the schema can carry, from any publisher, forged and
//! badly sealed batches among them.

use proptest::prelude::*;

use super::*;
use crate::core::event::{EntrySeal, Envelope, Policy, TaskSet};
use crate::core::schedule::{decide, InFlight};
use crate::core::state::State;
use crate::core::testkit::*;
use crate::wire::testing::arb_envelope;

const ENGINES: [&str; 3] = ["e1", "e2", "e3"];
const JOBS: [&str; 3] = ["j1", "j2", "j3"];
const REQUIREMENTS: [&str; 4] = ["", "os == \"linux\"", "memory_mb >= 4096", "site == \"paris\""];

/// What the state would be had the entry been rejected whole: the bookkeeping
/// every entry does (sequence, time, chain, the entry count) and the rejection
/// record taken from `after`, everything else from `before`.
pub(crate) fn as_if_rejected(before: &State, after: &State) -> State {
    let mut expected = before.clone();
    expected.last_seq = after.last_seq;
    expected.now_ms = after.now_ms;
    expected.first_ms = after.first_ms;
    expected.chain = after.chain;
    expected.totals.entries = after.totals.entries;
    // Retirement is part of every entry's bookkeeping, as the clock is.
    expected.retire_due_jobs();
    expected.rejections = after.rejections.clone();
    expected
}

/// Folds one entry and checks the three promises. Returns the rejections.
pub(crate) fn fold_checked(state: &mut State, entry: &Entry) -> Vec<Rejection> {
    let before = state.clone();
    let Folded { rejections, applied, .. } = fold_events(state, entry);
    state.check_invariants();
    assert_eq!(applied.len(), if entry.seq > before.last_seq { entry.events().count() } else { 0 }, "one flag per event");
    let whole = rejections.iter().any(|r| !matches!(r, Rejection::OrderNotApplicable { .. }));
    if let (Some(Event::EngineReports { .. }), false) = (entry.payload_event(), rejections.is_empty()) {
        check_reports_rejected_alone(&before, state, entry, &applied);
    } else if whole {
        assert_eq!(
            as_if_rejected(&before, state).state_digest(),
            state.state_digest(),
            "entry {} was rejected ({:?}) but changed more than the rejection record",
            entry.seq,
            rejections
        );
    } else if !rejections.is_empty()
        && let Some(Event::OrderBatch(batch)) = entry.payload_event()
    {
        // A batch with some orders rejected: the same as the batch without them.
        let rejected: Vec<u32> = rejections
            .iter()
            .filter_map(|r| match r {
                Rejection::OrderNotApplicable { order, .. } => Some(*order),
                _ => None,
            })
            .collect();
        let applied = OrderBatch {
            orders: batch
                .orders
                .iter()
                .enumerate()
                .filter(|(n, _)| !rejected.contains(&(*n as u32)))
                .map(|(_, order)| order.clone())
                .collect(),
            ..batch.clone()
        };
        let mut without = before.clone();
        let clean = fold(&mut without, &sealed_batch_entry(entry.seq, entry.time_ms, applied));
        assert!(clean.is_empty(), "the applied orders apply alone: {clean:?}");
        let mut expected = as_if_rejected(&without, state);
        expected.totals = without.totals.clone();
        assert_eq!(expected.state_digest(), state.state_digest(), "rejected orders of batch {} changed the state", entry.seq);
    }
    rejections
}

/// An engine's batch with some reports refused: the same as applying only the
/// reports the fold says applied, one by one, at the batch's sequence; a batch
/// refused whole (forged, empty) changes nothing.
fn check_reports_rejected_alone(before: &State, after: &State, entry: &Entry, applied: &[bool]) {
    let Some(Event::EngineReports { reports, .. }) = entry.payload_event() else {
        panic!("entry {} is not an engine's batch", entry.seq)
    };
    let mut expected = as_if_rejected(before, after);
    for ((n, report), &applies) in reports.iter().enumerate().zip(applied) {
        if applies {
            // As the batch applies it: its subject is the batch's, checked once.
            let mut own = Vec::new();
            apply_event(&mut expected, entry, report, &mut own);
            assert!(own.is_empty(), "report {n} applies alone: {own:?}");
        }
        crate::core::family::on_event(&mut expected, entry.seq, entry.time_ms, &report.event, applies);
    }
    expected.rejections = after.rejections.clone();
    assert_eq!(expected.state_digest(), after.state_digest(), "the refused reports of batch {} changed the state", entry.seq);
}

/// The state of a fresh test log: its projector key registered.
fn registered(log: &LogBuilder) -> State {
    let mut state = State::new();
    fold_checked(&mut state, &log.entries[0]);
    state
}

/// A registered projector key, engine e1 of one slot logged in, job j of one task submitted.
fn one_engine_and_a_job_of_one_task() -> (LogBuilder, State) {
    let mut log = LogBuilder::new();
    let mut state = registered(&log);
    for entry in [log.login("e1", 1, linux_props("lyon", 8192)), log.submit(job_spec("j", 1, ""))] {
        fold_checked(&mut state, &entry);
    }
    (log, state)
}

fn sealed_batch_entry(seq: Seq, time_ms: u64, batch: OrderBatch) -> Entry {
    let event = Event::OrderBatch(batch);
    let stored = format!("{event:?}").into_bytes();
    Entry {
        seq,
        time_ms,
        origin: Origin::Projector,
        subject: "gridfold.ev.orders".into(),
        payload: Payload::Event(Envelope { id: [9; 16], source: "test".into(), event }),
        seal: Some(test_seal(&stored)),
        stored,
    }
}

/// One step of an arbitrary history.
#[derive(Debug, Clone)]
enum Step {
    Login { engine: usize, slots: u32, linux: bool },
    Logout { engine: usize },
    Submit { job: usize, tasks: u32, requirements: usize, discriminator: Option<usize>, max_attempts: u32 },
    Report { job: usize, index: u32, attempt: u32, engine: usize, kind: u8 },
    /// An engine's batch of reports (job, index, attempt, kind 0-2 as `Report`'s,
    /// 3 a heartbeat, which a batch may not carry), each naming `named`, from
    /// `engine`'s subject; `repeat_id`: the last report reuses the first's id.
    Reports { engine: usize, named: usize, reports: Vec<(usize, u32, u32, u8)>, repeat_id: bool },
    Cancel { job: usize },
    Time { ms: u64 },
    /// The projector decides and its sealed batch is folded back.
    Decide,
    /// A batch that is not the projector's: unsealed, sealed by an unknown key,
    /// badly signed, or with its seal not last.
    Forged { how: u8 },
    /// Anything the schema can carry, from any publisher.
    Arbitrary { envelope: Box<Envelope>, origin: u8 },
    /// An operator's request to suspend (0), resume (1) or reschedule (2).
    Control { job: usize, task: Option<u32>, kind: u8 },
    /// A sealed Suspend (0), Resume (1) or Preempt (2) that may answer no request.
    ControlOrder { job: usize, index: u32, attempt: u32, engine: usize, kind: u8 },
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..3usize, 0..4u32, any::<bool>()).prop_map(|(engine, slots, linux)| Step::Login { engine, slots, linux }),
        1 => (0..3usize).prop_map(|engine| Step::Logout { engine }),
        3 => (0..3usize, 0..5u32, 0..4usize, prop::option::of(0..4usize), prop_oneof![0..4u32, Just(70_000u32)])
            .prop_map(|(job, tasks, requirements, discriminator, max_attempts)| Step::Submit {
                job,
                tasks,
                requirements,
                discriminator,
                max_attempts
            }),
        6 => (0..3usize, 0..5u32, 0..4u32, 0..3usize, 0..3u8)
            .prop_map(|(job, index, attempt, engine, kind)| Step::Report { job, index, attempt, engine, kind }),
        4 => (0..3usize, prop_oneof![9 => Just(None), 1 => (0..3usize).prop_map(Some)], prop::collection::vec((0..3usize, 0..5u32, 0..4u32, 0..4u8), 0..5), any::<bool>())
            .prop_map(|(engine, named, reports, repeat_id)| Step::Reports { engine, named: named.unwrap_or(engine), reports, repeat_id }),
        1 => (0..3usize).prop_map(|job| Step::Cancel { job }),
        2 => prop_oneof![Just(10u64), Just(40_000), Just(120_000)].prop_map(|ms| Step::Time { ms }),
        5 => Just(Step::Decide),
        1 => (0..4u8).prop_map(|how| Step::Forged { how }),
        2 => (arb_envelope(), 0..5u8).prop_map(|(envelope, origin)| Step::Arbitrary { envelope: Box::new(envelope), origin }),
        3 => (0..3usize, prop::option::of(0..5u32), 0..3u8).prop_map(|(job, task, kind)| Step::Control { job, task, kind }),
        1 => (0..3usize, 0..5u32, 0..4u32, 0..3usize, 0..3u8)
            .prop_map(|(job, index, attempt, engine, kind)| Step::ControlOrder { job, index, attempt, engine, kind }),
    ]
}

fn linux_or_not(linux: bool) -> crate::core::event::EngineProps {
    let mut props = linux_props("lyon", 8192);
    if !linux {
        props.os = "windows".into();
    }
    props
}

/// Turns a step into entries of the log (none for a decision with nothing to decide).
fn entries_of(step: &Step, log: &mut LogBuilder, state: &State) -> Vec<Entry> {
    match step {
        Step::Login { engine, slots, linux } => {
            vec![log.push(Event::EngineLoggedIn { engine: engine_id(ENGINES[*engine]), slots: *slots, props: linux_or_not(*linux) })]
        }
        Step::Logout { engine } => vec![log.push(Event::EngineLoggedOut { engine: engine_id(ENGINES[*engine]) })],
        Step::Submit { job, tasks, requirements, discriminator, max_attempts } => {
            let mut spec = job_spec(JOBS[*job], *tasks, REQUIREMENTS[*requirements]);
            spec.max_attempts = *max_attempts;
            spec.tasks = TaskSet::Count(*tasks);
            if let Some(discriminator) = discriminator {
                spec.task_conditions.insert(
                    0,
                    crate::core::event::TaskConditions {
                        discriminator: REQUIREMENTS[*discriminator].to_string(),
                        ..Default::default()
                    },
                );
            }
            vec![log.submit(spec)]
        }
        Step::Report { job, index, attempt, engine, kind } => {
            let (job, engine) = (JOBS[*job], ENGINES[*engine]);
            vec![match kind {
                0 => log.started(job, *index, *attempt, engine),
                1 => log.completed(job, *index, *attempt, engine),
                _ => log.failed(job, *index, *attempt, engine),
            }]
        }
        Step::Reports { engine, named, reports, repeat_id } => {
            let named = ENGINES[*named];
            let events = reports
                .iter()
                .map(|&(job, index, attempt, kind)| match kind {
                    0 => started_event(JOBS[job], index, attempt, named),
                    1 => completed_event(JOBS[job], index, attempt, named),
                    2 => failed_event(JOBS[job], index, attempt, named),
                    _ => Event::EngineHeartbeat { engine: engine_id(named), load: Default::default() },
                })
                .collect::<Vec<_>>();
            let mut ids: Vec<u8> = (1..=events.len() as u8).collect();
            if let (true, [first, .., last]) = (*repeat_id, &mut ids[..]) {
                *last = *first;
            }
            vec![log.reports(ENGINES[*engine], events, &ids)]
        }
        Step::Cancel { job } => vec![log.push(Event::JobCancelled { job: job_id(JOBS[*job]), reason: "test".into() })],
        Step::Time { ms } => {
            log.time_ms += ms;
            vec![log.push(Event::Tick)]
        }
        Step::Decide => decide(state, &InFlight::new()).map(|batch| vec![log.orders(batch)]).unwrap_or_default(),
        Step::Forged { how } => {
            let batch = decide(state, &InFlight::new()).unwrap_or(OrderBatch {
                based_on_seq: state.last_seq,
                algorithm: "sge-plain".into(),
                algorithm_version: 3,
                orders: vec![Order::EngineLost { engine: engine_id("e1"), epoch: 1, last_seen_ms: 0 }],
            });
            let mut entry = log.orders(batch);
            let seal = entry.seal.take().expect("the builder seals batches");
            entry.seal = match how {
                0 => None,
                1 => {
                    use ed25519_dalek::Signer as _;
                    let stranger = ed25519_dalek::SigningKey::from_bytes(&[42; 32]);
                    Some(EntrySeal {
                        signer: stranger.verifying_key().to_bytes(),
                        signature: stranger.sign(&entry.stored).to_bytes(),
                        signed_len: Some(entry.stored.len()),
                        sealed_here: false,
                    })
                }
                2 => Some(EntrySeal { signature: [1; 64], ..seal }),
                _ => Some(EntrySeal { signed_len: None, ..seal }),
            };
            *log.entries.last_mut().expect("just pushed") = entry.clone();
            vec![entry]
        }
        Step::Arbitrary { envelope, origin } => {
            let origin = match origin {
                0 => Origin::User(crate::core::ids::UserName::new("mallory").unwrap()),
                1 => Origin::Projector,
                2 => Origin::Ticker,
                3 => Origin::Operator,
                _ => Origin::Engine(engine_id("e1")),
            };
            vec![log.push_from(origin, envelope.event.clone())]
        }
        Step::Control { job, task, kind } => vec![log.push(control_request(JOBS[*job], *task, *kind))],
        Step::ControlOrder { job, index, attempt, engine, kind } => {
            let (task, attempt, engine) = (task(JOBS[*job], *index), *attempt, engine_id(ENGINES[*engine]));
            let order = match kind {
                0 => Order::Suspend { task, attempt, engine },
                1 => Order::Resume { task, attempt, engine },
                _ => Order::Preempt { task, attempt, engine },
            };
            vec![log.orders(batch_of(state, order))]
        }
    }
}

/// A batch of one order, as if the projector had decided it now.
fn batch_of(state: &State, order: Order) -> OrderBatch {
    OrderBatch { based_on_seq: state.last_seq, algorithm: "sge-plain".into(), algorithm_version: 4, orders: vec![order] }
}

/// `SuspendRequested` (0), `ResumeRequested` (1) or `RescheduleRequested` (2) of `job[/task]`.
fn control_request(job: &str, task: Option<u32>, kind: u8) -> Event {
    let target = crate::core::event::TaskSelector { job: job_id(job), task };
    match kind {
        0 => Event::SuspendRequested(target),
        1 => Event::ResumeRequested(target),
        _ => Event::RescheduleRequested(target),
    }
}

fn run_history(steps: &[Step]) {
    let mut log = LogBuilder::new();
    let mut state = registered(&log);
    // A retention short enough that histories retire jobs (and resubmit their ids).
    let policy =
        Policy { engine_timeout_ms: 30_000, dispatch_timeout_ms: 60_000, job_retention_ms: 30_000, ..Policy::default() };
    log.push(Event::PolicySet(policy));
    for entry in log.entries.clone() {
        fold_checked(&mut state, &entry);
    }
    for step in steps {
        for entry in entries_of(step, &mut log, &state) {
            fold_checked(&mut state, &entry);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_entries_never_panic_keep_the_invariants_and_rejections_change_nothing_else(
        steps in prop::collection::vec(arb_step(), 1..60)
    ) {
        run_history(&steps);
    }
}

/// The poison pill seen on main: requirements of 200 `||` conditions and a
/// discriminator of 100, each within the limits alone, over them together.
pub(crate) fn poison_pill_spec() -> JobSpec {
    let requirements = (0..200).map(|n| format!("site == \"s{n:03}\"")).collect::<Vec<_>>().join(" || ");
    let discriminator = (0..100).map(|n| format!("cores >= {n}")).collect::<Vec<_>>().join(" || ");
    assert!(crate::core::expr::parse(&requirements).is_ok() && crate::core::expr::parse(&discriminator).is_ok());
    assert!(crate::core::expr::parse(&format!("({requirements}) && ({discriminator})")).is_err());
    let mut spec = job_spec("poison", 2, &requirements);
    spec.task_conditions.insert(
        1,
        crate::core::event::TaskConditions { discriminator, ..Default::default() },
    );
    spec
}

#[test]
fn the_poison_pill_is_rejected_and_leaves_no_category_behind() {
    let mut log = LogBuilder::new();
    let mut state = registered(&log);
    fold_checked(&mut state, &log.login("e1", 2, linux_props("lyon", 8192)));
    let categories = state.categories().len();
    let rejections = fold_checked(&mut state, &log.submit(poison_pill_spec()));
    let [Rejection::InvalidJob { problem: JobProblem::BadCondition { task: Some(1), field, message, .. }, .. }] =
        rejections.as_slice()
    else {
        panic!("{rejections:?}")
    };
    assert_eq!(field, "discriminator");
    assert!(message.starts_with("joined with the job's requirements"), "{message}");
    assert_eq!(state.categories().len(), categories, "a rejected job makes no category");
    assert!(state.job_idx(&job_id("poison")).is_none());
}

#[test]
fn a_rejected_job_makes_no_category_even_when_its_discriminators_parse() {
    let mut log = LogBuilder::new();
    let mut state = registered(&log);
    let mut spec = job_spec("late-fail", 3, "os == \"linux\"");
    spec.task_conditions.insert(0, crate::core::event::TaskConditions { discriminator: "cores >= 2".into(), ..Default::default() });
    // Task 2's dependency is unknown: refused after task 0's discriminator was resolved.
    spec.task_conditions.insert(
        2,
        crate::core::event::TaskConditions { depends_on: vec![task("nowhere", 0)], ..Default::default() },
    );
    let rejections = fold_checked(&mut state, &log.submit(spec));
    assert!(matches!(rejections.as_slice(), [Rejection::InvalidJob { problem: JobProblem::UnknownDependency { .. }, .. }]));
    assert_eq!(state.categories().len(), 0);
}

#[test]
fn max_attempts_beyond_the_failure_counter_is_refused() {
    let mut log = LogBuilder::new();
    let mut state = registered(&log);
    let mut spec = job_spec("forever", 1, "");
    spec.max_attempts = 70_000;
    let rejections = fold_checked(&mut state, &log.submit(spec));
    assert!(
        matches!(rejections.as_slice(), [Rejection::InvalidJob { problem: JobProblem::TooManyAttempts { max_attempts: 70_000, max: MAX_ATTEMPTS_MAX }, .. }]),
        "{rejections:?}"
    );
    assert!(MAX_ATTEMPTS_MAX <= u32::from(u16::MAX));
}

#[test]
fn an_unsealed_or_badly_sealed_batch_is_refused_whole() {
    for how in 0..4 {
        let mut log = LogBuilder::new();
        let mut state = State::new();
        for entry in [log.login("e1", 1, linux_props("lyon", 8192)), log.submit(job_spec("j", 1, ""))] {
            fold_checked(&mut state, &entry);
        }
        let [entry] = entries_of(&Step::Forged { how }, &mut log, &state).try_into().unwrap();
        let rejections = fold_checked(&mut state, &entry);
        let expected = ["unsealed-batch", "bad-seal", "bad-seal", "bad-seal"][how as usize];
        assert_eq!(rejections.iter().map(Rejection::kind_name).collect::<Vec<_>>(), [expected], "forgery {how}");
        assert_eq!(state.totals.dispatches, 0);
    }
}

#[test]
fn a_revoked_key_seals_nothing_the_fold_accepts() {
    let (mut log, mut state) = one_engine_and_a_job_of_one_task();
    let key = test_projector_key().verifying_key().to_bytes();
    fold_checked(&mut state, &log.push(Event::ProjectorKeyRevoked { key }));
    let batch = decide(&state, &InFlight::new()).unwrap();
    let rejections = fold_checked(&mut state, &log.orders(batch));
    assert!(
        matches!(rejections.as_slice(), [Rejection::BadSeal { problem: crate::core::reject::SealProblem::UnregisteredKey, .. }]),
        "{rejections:?}"
    );
    // Key events come from operators only.
    let from_client = log.push_from(Origin::User(crate::core::ids::UserName::new("mallory").unwrap()), Event::ProjectorKeyRegistered { key, name: "me".into() });
    assert_eq!(fold_checked(&mut state, &from_client).iter().map(Rejection::kind_name).collect::<Vec<_>>(), ["wrong-publisher"]);
}

#[test]
fn a_batch_sealed_here_skips_only_the_signature_check_and_still_needs_a_registered_key() {
    let (mut log, mut state) = one_engine_and_a_job_of_one_task();
    let sealed_here = |mut entry: Entry| {
        entry.seal.as_mut().expect("the builder seals batches").sealed_here = true;
        entry
    };
    // Vouched for by the projector that sealed it: applied as when checked.
    let batch = decide(&state, &InFlight::new()).unwrap();
    assert_eq!(fold_checked(&mut state, &sealed_here(log.orders(batch))), []);
    assert_eq!(state.totals.dispatches, 1);
    // The key revoked since: refused all the same.
    let key = test_projector_key().verifying_key().to_bytes();
    fold_checked(&mut state, &log.push(Event::ProjectorKeyRevoked { key }));
    let batch = batch_of(&state, Order::EngineLost { engine: engine_id("e1"), epoch: 1, last_seen_ms: 0 });
    let rejections = fold_checked(&mut state, &sealed_here(log.orders(batch)));
    assert!(
        matches!(rejections.as_slice(), [Rejection::BadSeal { problem: crate::core::reject::SealProblem::UnregisteredKey, .. }]),
        "{rejections:?}"
    );
}

#[test]
fn a_dispatch_decided_before_a_new_login_does_not_apply_and_an_ineligible_engine_is_refused() {
    let mut log = LogBuilder::new();
    let mut state = registered(&log);
    for entry in [log.login("e1", 1, linux_props("lyon", 8192)), log.submit(job_spec("j", 2, "os == \"linux\""))] {
        fold_checked(&mut state, &entry);
    }
    let decided = decide(&state, &InFlight::new()).unwrap();
    // Between the decision and its fold, e1 logs in again, no longer linux.
    fold_checked(&mut state, &log.login("e1", 1, linux_or_not(false)));
    let rejections = fold_checked(&mut state, &log.orders(decided));
    assert!(
        matches!(rejections.as_slice(), [Rejection::OrderNotApplicable { problem: OrderProblem::EpochClosed { .. }, .. }]),
        "{rejections:?}"
    );
    // The same dispatch for the current epoch: the task's category decides.
    let epoch = state.engine(state.engine_idx(&engine_id("e1")).unwrap()).epoch;
    let forged = OrderBatch {
        based_on_seq: state.last_seq,
        algorithm: "sge-plain".into(),
        algorithm_version: 3,
        orders: vec![Order::Dispatch { task: task("j", 0), attempt: 1, engine: engine_id("e1"), epoch }],
    };
    let rejections = fold_checked(&mut state, &log.orders(forged));
    assert!(
        matches!(rejections.as_slice(), [Rejection::OrderNotApplicable { problem: OrderProblem::EngineNotEligible, .. }]),
        "{rejections:?}"
    );
}

#[test]
fn attempts_of_an_earlier_login_are_requeued_by_an_order_with_its_reason() {
    let mut log = LogBuilder::new();
    let mut state = registered(&log);
    for entry in [log.login("e1", 2, linux_props("lyon", 8192)), log.submit(job_spec("j", 2, ""))] {
        fold_checked(&mut state, &entry);
    }
    let batch = decide(&state, &InFlight::new()).unwrap();
    fold_checked(&mut state, &log.orders(batch));
    fold_checked(&mut state, &log.started("j", 0, 1, "e1"));
    // e1 restarts with one slot: its two attempts are of a closed epoch now.
    fold_checked(&mut state, &log.login("e1", 1, linux_props("lyon", 8192)));
    let e1 = state.engine_idx(&engine_id("e1")).unwrap();
    assert_eq!(state.engine(e1).closed_epoch_live, 2);
    assert_eq!(state.engine(e1).free_slots(), 0, "nothing new lands on slots the closed epoch still holds");
    // A late report of the closed epoch is refused.
    let late = fold_checked(&mut state, &log.completed("j", 0, 1, "e1"));
    assert_eq!(late.iter().map(Rejection::kind_name).collect::<Vec<_>>(), ["epoch-closed"]);
    let batch = decide(&state, &InFlight::new()).unwrap();
    let rendered: Vec<String> = batch.orders.iter().map(ToString::to_string).collect();
    assert_eq!(rendered, ["requeue j/0 #1 from e1 (engine-restarted)", "requeue j/1 #1 from e1 (engine-restarted)"]);
    fold_checked(&mut state, &log.orders(batch));
    assert_eq!(state.engine(e1).closed_epoch_live, 0);
    let batch = decide(&state, &InFlight::new()).unwrap();
    assert_eq!(batch.orders.iter().map(ToString::to_string).collect::<Vec<_>>(), ["dispatch j/0 #2 -> e1"]);
}

/// Folds the projector's next batch (which must exist) and returns its orders as text.
fn decide_and_fold(log: &mut LogBuilder, state: &mut State) -> Vec<String> {
    let batch = decide(state, &InFlight::new()).expect("something to decide");
    let rendered = batch.orders.iter().map(ToString::to_string).collect();
    let rejections = fold_checked(state, &log.orders(batch));
    assert!(rejections.is_empty(), "{rejections:?}");
    rendered
}

fn kinds(rejections: &[Rejection]) -> Vec<String> {
    rejections.iter().map(ToString::to_string).collect()
}

#[test]
fn a_suspended_attempt_keeps_its_slot_is_not_timed_out_and_is_resumed_then_preempted_without_using_an_attempt() {
    let mut log = LogBuilder::new();
    let mut state = registered(&log);
    let mut spec = job_spec("j", 2, "");
    spec.max_attempts = 1;
    for entry in [log.login("e1", 1, linux_props("lyon", 8192)), log.submit(spec)] {
        fold_checked(&mut state, &entry);
    }
    assert_eq!(decide_and_fold(&mut log, &mut state), ["dispatch j/0 #1 -> e1"]);
    let key = state.task_key(&task("j", 0)).unwrap();
    // Suspended before it starts: the dispatch timeout passes it by.
    fold_checked(&mut state, &log.push(control_request("j", Some(0), 0)));
    assert_eq!(decide_and_fold(&mut log, &mut state), ["suspend j/0 #1 on e1"]);
    assert!(state.suspended_since(key, 1).is_some());
    let again = fold_checked(&mut state, &log.push(control_request("j", None, 0)));
    assert_eq!(kinds(&again), ["suspend j refused: already-suspended"]);
    log.time_ms += 120_000;
    fold_checked(&mut state, &log.push(Event::Tick));
    fold_checked(&mut state, &log.push(Event::EngineHeartbeat { engine: engine_id("e1"), load: Default::default() }));
    assert!(decide(&state, &InFlight::new()).is_none(), "no requeue of a suspended dispatch, nothing else to run");
    let e1 = state.engine_idx(&engine_id("e1")).unwrap();
    assert_eq!(state.engine(e1).free_slots(), 0, "a suspended attempt keeps its slot");
    fold_checked(&mut state, &log.started("j", 0, 1, "e1"));
    // Resumed.
    fold_checked(&mut state, &log.push(control_request("j", Some(0), 1)));
    assert_eq!(decide_and_fold(&mut log, &mut state), ["resume j/0 #1 on e1"]);
    assert!(state.suspended_since(key, 1).is_none());
    let again = fold_checked(&mut state, &log.push(control_request("j", Some(0), 1)));
    assert_eq!(kinds(&again), ["resume j/0 refused: not-suspended"]);
    // Preempted: back to the queue, first, its attempt not used and no failure counted.
    fold_checked(&mut state, &log.push(control_request("j", Some(0), 2)));
    let again = fold_checked(&mut state, &log.push(control_request("j", Some(0), 2)));
    assert_eq!(kinds(&again), ["reschedule j/0 refused: already-requested"]);
    assert_eq!(decide_and_fold(&mut log, &mut state), ["preempt j/0 #1 on e1", ]);
    let preempted = state.task(key);
    assert_eq!((preempted.status, preempted.attempts, preempted.failures), (TaskStatus::Waiting, 0, 0));
    assert_eq!(state.n_preempted(), 1);
    // A late report of the preempted attempt is stale, as after a cancel.
    let late = fold_checked(&mut state, &log.failed("j", 0, 1, "e1"));
    assert_eq!(late.iter().map(Rejection::kind_name).collect::<Vec<_>>(), ["stale-attempt"]);
    // It runs again first, as attempt 1 again; the job has not failed.
    assert_eq!(decide_and_fold(&mut log, &mut state), ["dispatch j/0 #1 -> e1"]);
    fold_checked(&mut state, &log.completed("j", 0, 1, "e1"));
    assert_eq!(decide_and_fold(&mut log, &mut state), ["dispatch j/1 #1 -> e1"]);
}

#[test]
fn requests_naming_nothing_they_can_act_on_are_refused_with_their_reason() {
    let mut log = LogBuilder::new();
    let mut state = registered(&log);
    for entry in [log.login("e1", 1, linux_props("lyon", 8192)), log.submit(job_spec("j", 2, ""))] {
        fold_checked(&mut state, &entry);
    }
    decide_and_fold(&mut log, &mut state);
    let refused = [
        control_request("nope", None, 0),
        control_request("j", Some(7), 0),
        control_request("j", Some(1), 0),
        control_request("j", Some(0), 1),
    ]
    .map(|event| kinds(&fold_checked(&mut state, &log.push(event))));
    assert_eq!(
        refused,
        [
            ["no job nope"],
            ["no task j/7"],
            ["suspend j/1 refused: task-not-live"],
            ["resume j/0 refused: not-suspended"],
        ]
    );
    // An order no request awaits does not apply.
    let batch = batch_of(&state, Order::Preempt { task: task("j", 0), attempt: 1, engine: engine_id("e1") });
    let forged = fold_checked(&mut state, &log.orders(batch));
    assert_eq!(kinds(&forged), ["order 0 of the batch does not apply: not-requested"]);
    // Nor one for an engine that does not hold the attempt.
    fold_checked(&mut state, &log.push(control_request("j", None, 0)));
    let batch = batch_of(&state, Order::Suspend { task: task("j", 0), attempt: 1, engine: engine_id("e2") });
    let wrong_engine = fold_checked(&mut state, &log.orders(batch));
    assert_eq!(kinds(&wrong_engine), ["order 0 of the batch does not apply: not-requested"]);
    fold_checked(&mut state, &log.push(Event::JobCancelled { job: job_id("j"), reason: "test".into() }));
    let ended = fold_checked(&mut state, &log.push(control_request("j", None, 2)));
    assert_eq!(kinds(&ended), ["job j has already ended"]);
    // The cancel ends the attempt, and its request with it.
    assert_eq!(decide_and_fold(&mut log, &mut state), ["cancel j/0 #1 on e1 (job-cancelled)"]);
    assert_eq!(state.control_requests().count(), 0);
}

#[test]
fn suspensions_are_in_the_snapshot_and_absent_from_it_when_unused() {
    let (mut log, mut state) = one_engine_and_a_job_of_one_task();
    decide_and_fold(&mut log, &mut state);
    assert_eq!(state.to_snapshot(), postcard::to_stdvec(&state).unwrap(), "nothing suspended: the snapshot of before");
    fold_checked(&mut state, &log.push(control_request("j", None, 0)));
    decide_and_fold(&mut log, &mut state);
    let key = state.task_key(&task("j", 0)).unwrap();
    let restored = State::from_snapshot(&state.to_snapshot()).unwrap();
    assert!(restored.suspended_since(key, 1).is_some());
    assert_eq!(restored.state_digest(), state.state_digest());
    assert_ne!(state.to_snapshot(), postcard::to_stdvec(&state).unwrap(), "the suspension is in the snapshot and its digest");
}

/// Two engines of two slots with job `j` of four tasks dispatched over them, as
/// a log and the state it folds to.
fn four_tasks_dispatched() -> (LogBuilder, State) {
    let mut log = LogBuilder::new();
    let mut state = registered(&log);
    for entry in [
        log.login("e1", 2, linux_props("lyon", 8192)),
        log.login("e2", 2, linux_props("lyon", 8192)),
        log.submit(job_spec("j", 4, "")),
    ] {
        fold_checked(&mut state, &entry);
    }
    assert_eq!(decide_and_fold(&mut log, &mut state).len(), 4);
    (log, state)
}

/// The engine of task `j/index` in [`four_tasks_dispatched`].
fn engine_of(state: &State, index: u32) -> String {
    let key = state.task_key(&task("j", index)).unwrap();
    let live = state.live_attempts_of(key);
    state.engine(live[0].engine).id.to_string()
}

#[test]
fn a_batch_of_reports_folds_to_the_scheduling_state_its_reports_published_alone_fold_to() {
    let (mut alone_log, mut alone) = four_tasks_dispatched();
    let (mut batch_log, mut batched) = four_tasks_dispatched();
    let e = engine_of(&alone, 0);
    let mine: Vec<u32> = (0..4).filter(|&i| engine_of(&alone, i) == e).collect();
    assert_eq!(mine.len(), 2);
    let events: Vec<Event> = mine
        .iter()
        .flat_map(|&i| [started_event("j", i, 1, &e), completed_event("j", i, 1, &e)])
        .collect();
    for event in &events {
        assert!(fold_checked(&mut alone, &alone_log.push(event.clone())).is_empty());
    }
    let rejections = fold_checked(&mut batched, &batch_log.reports(&e, events, &[1, 2, 3, 4]));
    assert!(rejections.is_empty(), "{rejections:?}");
    assert_eq!(batched.totals.tasks_done, 2);
    // The same scheduling state (what the reports record of themselves, their
    // log sequence, differs): the same tasks ended, the same slots free, and
    // the same next decision.
    for index in 0..4 {
        let key = alone.task_key(&task("j", index)).unwrap();
        assert_eq!(alone.job(key.job).tasks[index as usize].status, batched.job(key.job).tasks[index as usize].status);
        assert_eq!(alone.live_attempts_of(key), batched.live_attempts_of(key));
    }
    for engine in ["e1", "e2"] {
        let e = alone.engine_idx(&engine_id(engine)).unwrap();
        assert_eq!(alone.engine(e).free_slots(), batched.engine(e).free_slots());
    }
    assert_eq!(alone.totals.tasks_done, batched.totals.tasks_done);
    let next = |state: &State| decide(state, &InFlight::new()).map(|b| b.orders.iter().map(ToString::to_string).collect::<Vec<_>>());
    assert_eq!(next(&alone), next(&batched));
    let ended: Vec<bool> = (0..4).map(|i| state_task_done(&batched, i)).collect();
    assert_eq!(ended, (0..4).map(|i| mine.contains(&i)).collect::<Vec<_>>());
}

fn state_task_done(state: &State, index: u32) -> bool {
    let key = state.task_key(&task("j", index)).unwrap();
    state.job(key.job).tasks[key.index as usize].status == TaskStatus::Done
}

#[test]
fn a_batch_refuses_heartbeats_repeated_ids_and_other_engines_reports_alone_and_applies_the_rest() {
    let (mut log, mut state) = four_tasks_dispatched();
    let e = engine_of(&state, 0);
    let other = if e == "e1" { "e2" } else { "e1" };
    let theirs = (0..4).find(|&i| engine_of(&state, i) == other).unwrap();
    let events = vec![
        started_event("j", 0, 1, &e),
        Event::EngineHeartbeat { engine: engine_id(&e), load: Default::default() },
        started_event("j", theirs, 1, other),
        completed_event("j", 0, 1, &e),
        completed_event("j", 0, 1, &e),
    ];
    // The last report repeats the fourth's id.
    let batch = log.reports(&e, events, &[1, 2, 3, 4, 4]);
    let flags = fold_events(&mut state.clone(), &batch).applied;
    assert_eq!(flags, [true, false, false, true, false], "which reports applied");
    let rejections = fold_checked(&mut state, &batch);
    assert_eq!(
        kinds(&rejections),
        [
            "report 1 of the batch refused: EngineHeartbeat is published alone, never in a batch",
            &format!("engine {e} published an event naming engine {other}"),
            "report 4 of the batch refused: an earlier report of the batch has the same id",
        ]
    );
    assert!(state_task_done(&state, 0), "the batch's own reports applied");
    assert_eq!(state.totals.tasks_done, 1);
    assert_eq!(state.rejections.by_kind.get("invalid-report-batch"), Some(&2));
}

#[test]
fn a_batch_on_another_engines_subject_or_empty_is_refused_whole() {
    let (mut log, mut state) = four_tasks_dispatched();
    let e = engine_of(&state, 0);
    let other = if e == "e1" { "e2" } else { "e1" };
    // The batch says it is e's, the subject is the other engine's.
    let reports = vec![Envelope { id: [1; 16], source: "test".into(), event: started_event("j", 0, 1, &e) }];
    let forged = log.push_from(Origin::Engine(engine_id(other)), Event::EngineReports { engine: engine_id(&e), reports });
    assert_eq!(kinds(&fold_checked(&mut state, &forged)), [format!("engine {other} published an event naming engine {e}")]);
    let from_client = log.push_from(Origin::User(crate::core::ids::UserName::new("mallory").unwrap()), Event::EngineReports { engine: engine_id(&e), reports: Vec::new() });
    assert_eq!(kinds(&fold_checked(&mut state, &from_client)), [format!("an event naming engine {e} arrived on a non-engine subject")]);
    let empty = fold_checked(&mut state, &log.reports(&e, Vec::new(), &[]));
    assert_eq!(kinds(&empty), ["report 0 of the batch refused: the batch holds no report"]);
    let key = state.task_key(&task("j", 0)).unwrap();
    assert_eq!(state.live_attempts_of(key)[0].started_ms, None, "nothing started it");
}

#[test]
fn a_report_sent_alone_and_again_in_a_batch_counts_once() {
    let (mut log, mut state) = four_tasks_dispatched();
    let e = engine_of(&state, 0);
    assert!(fold_checked(&mut state, &log.completed("j", 0, 1, &e)).is_empty());
    // A lost acknowledgement: the engine sends the report again, in a batch with a new one.
    let index = (1..4).find(|&i| engine_of(&state, i) == e).unwrap();
    let rejections = fold_checked(
        &mut state,
        &log.reports(&e, vec![completed_event("j", 0, 1, &e), completed_event("j", index, 1, &e)], &[1, 2]),
    );
    assert_eq!(rejections.len(), 1, "{rejections:?}");
    assert_eq!(state.totals.tasks_done, 2, "j/0 once and the new report");
}

/// A `PolicySet` built in the core (so no decoder or file reader checked it)
/// whose family section is past a limit is refused by the fold's policy step,
/// which asks the same check (`policy_limits::check_policy`, the families'
/// sections through the seam): the rejection names the field, and the state
/// keeps the policy in force; within the limit, the same policy applies.
#[test]
fn a_policy_with_a_family_section_over_its_limits_is_refused_by_the_fold_naming_the_limit() {
    use crate::core::event::Algorithm;
    let over_and_within: [(&str, Policy, Policy); 3] = {
        let mut fbsng = Policy { algorithm: Algorithm::Fbsng, ..Policy::default() };
        fbsng.fbsng.min_run_interval_ms = u64::MAX;
        let mut fbsng_ok = fbsng.clone();
        fbsng_ok.fbsng.min_run_interval_ms = 1_000;
        let mut cigri = Policy { algorithm: Algorithm::Cigri, ..Policy::default() };
        cigri.cigri.predictor_window_ms = 0;
        let mut cigri_ok = cigri.clone();
        cigri_ok.cigri.predictor_window_ms = 60_000;
        let mut techila = Policy { algorithm: Algorithm::Techila, ..Policy::default() };
        techila.techila.cycle_interval_ms = u64::MAX;
        let mut techila_ok = techila.clone();
        techila_ok.techila.cycle_interval_ms = 10_000;
        [
            ("fbsng.min_run_interval_ms", fbsng, fbsng_ok),
            ("cigri.predictor_window_ms", cigri, cigri_ok),
            ("techila.cycle_interval_ms", techila, techila_ok),
        ]
    };
    for (field, over, within) in over_and_within {
        let mut log = LogBuilder::new();
        let mut state = registered(&log);
        let algorithm_before = state.policy.algorithm;
        let rejections = fold_checked(&mut state, &log.push(Event::PolicySet(over)));
        let [Rejection::InvalidPolicy { problem }] = rejections.as_slice() else {
            panic!("{field}: the policy is refused: {rejections:?}")
        };
        assert!(problem.starts_with(&format!("{field}: ")), "{field}: the rejection names the limit: {problem}");
        assert_eq!(state.policy.algorithm, algorithm_before, "{field}: the policy in force stays");
        let rejections = fold_checked(&mut state, &log.push(Event::PolicySet(within.clone())));
        assert!(rejections.is_empty(), "{field}: within the limit it applies: {rejections:?}");
        assert_eq!(state.policy.algorithm, within.algorithm, "{field}: and is in force");
    }
}
