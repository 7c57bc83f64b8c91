//! Which engine hears of which order: the deliveries of a batch the projector has
//! read back and folded. Only orders the fold applied are delivered; a Dispatch
//! carries its task's command and its job's root library, resolved from the job.
//! Every `Cancel` is delivered whatever its reason (a cancelled job, a redundant
//! copy); a `Requeue` is delivered as a cancel of the attempt it gives up on; a
//! `SyncLibrary` to the engine that is to sync, with the size and blake3 the log
//! says the library was published with; `Suspend`, `Resume` and `Preempt` to
//! the engine holding the attempt. When a parallel attempt whose job names a
//! companion command ends, each companion engine hears a `Cancel` (reason
//! `parallel-ended`) derived from what the fold reports of the entry that
//! ended it ([`companion_stops`]), not from an order. Which engine an order
//! goes to, if any, is [`Order::addressee`]'s to say; orders it addresses to
//! no engine are not delivered.

use crate::core::event::{CancelReason, Entry, Envelope, Event, Order, OrderBatch, ParallelPart, Payload};
use crate::core::ids::{Attempt, EngineId, Seq, TaskRef};
use crate::core::reject::Rejection;
use crate::core::state::{CompanionEnd, State};
use crate::wire::delivery::{Delivery, DeliveryKind, RunTask};

/// The deliveries an entry makes, folded into `state` with these `rejections`:
/// a batch's orders, and the news of an accepted login to the engine (so that
/// an older process still running under the same name learns it was fenced out).
pub fn deliveries_of_entry(state: &State, entry: &Entry, rejections: &[Rejection]) -> Vec<Delivery> {
    let Payload::Event(Envelope { event, .. }) = &entry.payload else { return Vec::new() };
    match event {
        Event::OrderBatch(batch) => deliveries_of(state, entry.seq, batch, rejections),
        Event::EngineLoggedIn { engine, .. } if rejections.is_empty() => {
            let Some(e) = state.engine_idx(engine) else { return Vec::new() };
            vec![Delivery {
                id: format!("{}-login", entry.seq.0),
                batch_seq: entry.seq,
                engine: engine.clone(),
                epoch: state.engine(e).epoch,
                kind: DeliveryKind::LoggedIn,
            }]
        }
        _ => Vec::new(),
    }
}

/// The deliveries of `batch` (folded at `batch_seq`, with these `rejections`),
/// in order. `state` is the state just after folding the batch. A batch refused
/// whole (unsealed, badly sealed, too large, not the projector's) delivers nothing.
pub fn deliveries_of(state: &State, batch_seq: Seq, batch: &OrderBatch, rejections: &[Rejection]) -> Vec<Delivery> {
    let Some(rejected) = crate::core::reject::orders_not_applied(rejections) else { return Vec::new() };
    let mut deliveries = Vec::new();
    for (n, order) in batch.orders.iter().enumerate() {
        if rejected.binary_search(&(n as u32)).is_ok() {
            continue;
        }
        let id = Delivery::id_for(batch_seq, n);
        // Whom an order goes to is the order's to say ([`Order::addressee`]);
        // what the engine hears of it is said here.
        let Some(engine) = order.addressee().cloned() else { continue };
        let kind = match order {
            Order::Dispatch { task, attempt, .. } => {
                let Some(run) = run_task(state, task, *attempt, None) else { continue };
                DeliveryKind::Run(run)
            }
            Order::DispatchParallel { task, attempt, parts, .. } => {
                let Some(run) = run_task(state, task, *attempt, Some((&engine, parts))) else { continue };
                DeliveryKind::Run(run)
            }
            Order::Cancel { .. } => DeliveryKind::Cancel(order.clone()),
            Order::EngineLost { .. } => DeliveryKind::Lost(order.clone()),
            Order::Requeue { task, attempt, .. } => {
                let stop = Order::Cancel { task: task.clone(), attempt: *attempt, engine: engine.clone(), reason: CancelReason::Requeued };
                DeliveryKind::Cancel(stop)
            }
            Order::SyncLibrary { library, .. } => {
                let published = state.library(library).cloned();
                DeliveryKind::SyncLibrary { library: library.clone(), published }
            }
            Order::Suspend { .. } | Order::Resume { .. } | Order::Preempt { .. } => DeliveryKind::Control(order.clone()),
            // `addressee` names no engine for the other kinds.
            _ => continue,
        };
        // The engine's epoch as of this fold: an engine that sees a later one
        // than its own knows another login took its name.
        let epoch = state.engine_idx(&engine).map_or(0, |e| state.engine(e).epoch);
        deliveries.push(Delivery { id, batch_seq, engine, epoch, kind });
    }
    deliveries
}

/// What an engine needs to run `attempt` of `task`, resolved from its job; for
/// one part of a parallel task (`part`: this engine and every part), its own
/// slots, the node list and whether it is a companion. `None` when the job is gone.
fn run_task(state: &State, task: &TaskRef, attempt: Attempt, part: Option<(&EngineId, &[ParallelPart])>) -> Option<RunTask> {
    let job = state.job(state.job_idx(&task.job)?);
    let (argv, params) = job.task_command(task.index);
    let (slots, nodes, companion) = match part {
        None => (job.slots_per_task, Vec::new(), false),
        Some((engine, parts)) => (
            parts.iter().find(|part| part.engine == *engine).map_or(0, |part| part.slots),
            parts.iter().map(|part| (part.engine.clone(), part.slots)).collect(),
            parts.first().is_none_or(|master| master.engine != *engine),
        ),
    };
    let companion_argv = if companion { job.companion_command(task.index, &params) } else { Vec::new() };
    Some(RunTask {
        task: task.clone(),
        attempt,
        argv,
        params,
        wall_time_limit_ms: job.wall_time_limit_ms,
        slots,
        root_library: job.options.root_library.clone(),
        output_bytes_max: job.attempt_log.record(task.index, attempt).map_or(0, |r| r.output_bytes_max),
        work_dir_retention_ms: state.policy.output.work_dir_retention_ms,
        companion_argv,
        nodes,
        companion,
    })
}

/// The stops of the companion commands of the parallel attempts an entry
/// ended (the fold's [`crate::core::fold::Folded::companion_ends`]), one
/// `Cancel` (reason `parallel-ended`) to each companion engine. Not an order:
/// the log holds the end that freed the booking, and the companion engines
/// act on nothing else. `state` is the state after the entry at `seq`.
pub fn companion_stops(ends: &[CompanionEnd], state: &State, seq: Seq) -> Vec<Delivery> {
    let mut stops = Vec::new();
    for end in ends {
        let task = state.task_ref(end.key);
        for &e in &end.companions {
            let engine = state.engine(e);
            let order = Order::Cancel { task: task.clone(), attempt: end.attempt, engine: engine.id.clone(), reason: CancelReason::ParallelEnded };
            stops.push(Delivery {
                id: format!("{}-end-{}", seq.0, stops.len()),
                batch_seq: seq,
                engine: engine.id.clone(),
                epoch: engine.epoch,
                kind: DeliveryKind::Cancel(order),
            });
        }
    }
    stops
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::event::{LibraryRef, RescheduleReason, Unschedulable};
    use crate::core::fold::fold;
    use crate::core::schedule::{decide, InFlight};
    use crate::core::testkit::*;

    #[test]
    fn applied_dispatches_are_delivered_with_their_command() {
        let mut log = LogBuilder::new();
        log.login("e1", 1, linux_props("lyon", 8192));
        log.submit(job_spec("j", 2, ""));
        let mut state = State::new();
        for entry in &log.entries {
            fold(&mut state, entry);
        }
        let mut batch = decide(&state, &InFlight::new()).unwrap();
        // A second dispatch to the full engine: the fold rejects it, so it is not delivered.
        batch.orders.push(Order::Dispatch { task: task("j", 1), attempt: 1, engine: engine_id("e1"), epoch: 1 });
        let entry = log.orders(batch.clone());
        let rejections = fold(&mut state, &entry);
        assert_eq!(rejections.len(), 1);
        let deliveries = deliveries_of(&state, entry.seq, &batch, &rejections);
        assert_eq!(deliveries.len(), 1);
        let DeliveryKind::Run(run) = &deliveries[0].kind else { panic!("a run") };
        assert_eq!(run.argv, vec!["run".to_string(), "0".to_string()]);
        assert_eq!(run.root_library, None);
        assert_eq!(deliveries[0].id, format!("{}-0", entry.seq.0));
    }

    #[test]
    fn a_run_names_its_jobs_root_library() {
        let mut log = LogBuilder::new();
        let mut spec = job_spec("j", 1, "");
        spec.options.root_library = Some(LibraryRef::new("render-lib", "2.1.0"));
        log.submit(spec);
        let mut state = State::new();
        for entry in &log.entries {
            fold(&mut state, entry);
        }
        let batch = OrderBatch {
            based_on_seq: Seq(1),
            algorithm: "sge-plain".into(),
            algorithm_version: 1,
            orders: vec![Order::Dispatch { task: task("j", 0), attempt: 1, engine: engine_id("e1"), epoch: 1 }],
        };
        let deliveries = deliveries_of(&state, Seq(2), &batch, &[]);
        let [Delivery { kind: DeliveryKind::Run(run), .. }] = deliveries.as_slice() else { panic!("{deliveries:?}") };
        assert_eq!(run.root_library, Some(LibraryRef::new("render-lib", "2.1.0")));
    }

    #[test]
    fn syncs_and_every_cancel_are_delivered_and_orders_for_no_engine_are_not() {
        let e1 = engine_id("e1");
        let redundant = Order::Cancel { task: task("j", 0), attempt: 2, engine: e1.clone(), reason: CancelReason::RedundantCopy };
        let batch = OrderBatch {
            based_on_seq: Seq(1),
            algorithm: "sge-plain".into(),
            algorithm_version: 1,
            orders: vec![
                Order::Blacklist { job: job_id("j"), engine: e1.clone(), failures: 1 },
                Order::SyncLibrary { engine: e1.clone(), library: LibraryRef::new("lib", "1") },
                Order::Reschedule { task: task("j", 0), reason: RescheduleReason::Average, elapsed_ms: 9, limit_ms: 8 },
                redundant.clone(),
                Order::FailDependent { job: job_id("k"), task: None, dependency: "j".into() },
                Order::MarkUnschedulable { job: job_id("k"), reason: Unschedulable::LibraryNotPublished },
            ],
        };
        let deliveries = deliveries_of(&State::new(), Seq(5), &batch, &[]);
        assert_eq!(
            deliveries,
            vec![
                Delivery { id: "5-1".into(), batch_seq: Seq(5), engine: e1.clone(), epoch: 0, kind: DeliveryKind::SyncLibrary { library: LibraryRef::new("lib", "1"), published: None } },
                Delivery { id: "5-3".into(), batch_seq: Seq(5), engine: e1, epoch: 0, kind: DeliveryKind::Cancel(redundant) },
            ]
        );
    }

    #[test]
    fn a_companion_part_carries_the_companion_command_and_hears_a_stop_when_the_master_ends() {
        let mut log = LogBuilder::new();
        log.login("a1", 2, linux_props("lyon", 8192));
        log.login("a2", 2, linux_props("lyon", 8192));
        let mut spec = job_spec("mpi", 1, "");
        spec.slots_per_task = 4;
        spec.options.span = crate::core::event::Span::Site;
        spec.options.companion_argv = vec!["hold".into(), "--part={index}".into()];
        log.submit(spec);
        log.submit(job_spec("plain", 1, ""));
        let mut state = State::new();
        for entry in &log.entries {
            fold(&mut state, entry);
        }
        let batch = decide(&state, &InFlight::new()).unwrap();
        let entry = log.orders(batch.clone());
        let rejections = fold(&mut state, &entry);
        assert!(rejections.is_empty(), "{rejections:?}");
        let runs: Vec<(String, bool, Vec<String>)> = deliveries_of(&state, entry.seq, &batch, &rejections)
            .into_iter()
            .map(|delivery| match delivery.kind {
                DeliveryKind::Run(run) => (delivery.engine.to_string(), run.companion, run.companion_argv),
                other => panic!("a run, not {other}"),
            })
            .collect();
        assert_eq!(
            runs,
            vec![("a1".into(), false, vec![]), ("a2".into(), true, vec!["hold".to_string(), "--part=0".to_string()])]
        );

        // Entries that do not end the master's part stop nothing.
        log.started("mpi", 0, 1, "a1");
        let started = log.entries.last().unwrap().clone();
        let folded = crate::core::fold::fold_events(&mut state, &started);
        assert_eq!(folded.companion_ends, vec![]);
        assert_eq!(companion_stops(&folded.companion_ends, &state, started.seq), vec![]);

        // The master's end stops the companion command on a2.
        log.completed("mpi", 0, 1, "a1");
        let completed = log.entries.last().unwrap().clone();
        let folded = crate::core::fold::fold_events(&mut state, &completed);
        assert_eq!(folded.companion_ends.len(), 1, "the fold reports the companion run the completion ended");
        let stops = companion_stops(&folded.companion_ends, &state, completed.seq);
        let epoch = state.engine(state.engine_idx(&engine_id("a2")).unwrap()).epoch;
        assert_eq!(
            stops,
            vec![Delivery {
                id: format!("{}-end-0", completed.seq.0),
                batch_seq: completed.seq,
                engine: engine_id("a2"),
                epoch,
                kind: DeliveryKind::Cancel(Order::Cancel {
                    task: task("mpi", 0),
                    attempt: 1,
                    engine: engine_id("a2"),
                    reason: CancelReason::ParallelEnded
                }),
            }]
        );
        assert!(state.parallel().is_empty(), "the completion freed every part");
    }

    proptest::proptest! {
        /// Deliveries follow [`Order::addressee`]: an order it addresses to
        /// no engine is never delivered, and every other is delivered to its
        /// addressee, but for a dispatch whose job the state does not hold.
        #[test]
        fn every_order_is_delivered_to_its_addressee_and_no_other(event in crate::wire::testing::arb_event()) {
            let Event::OrderBatch(batch) = event else { return Ok(()) };
            let deliveries = deliveries_of(&State::new(), Seq(7), &batch, &[]);
            let mut delivered = deliveries.iter();
            for (n, order) in batch.orders.iter().enumerate() {
                let runs = matches!(order, Order::Dispatch { .. } | Order::DispatchParallel { .. });
                match order.addressee() {
                    Some(engine) if !runs => {
                        let delivery = delivered.next().expect("an addressed order is delivered");
                        proptest::prop_assert_eq!(&delivery.id, &Delivery::id_for(Seq(7), n));
                        proptest::prop_assert_eq!(&delivery.engine, engine);
                    }
                    _ => {}
                }
            }
            proptest::prop_assert!(delivered.next().is_none(), "only addressed orders are delivered");
        }
    }
}
