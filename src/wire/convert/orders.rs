//! Orders both ways: the kinds a batch may hold, as the log and deliveries carry them.

use super::enums::{cancel_reason, cancel_reason_to_proto, requeue_reason, requeue_reason_to_proto, reschedule_reason, reschedule_reason_to_proto, unschedulable, unschedulable_to_proto};
use super::fields::{each, engine_id, job_id, library_ref, task_ref};
use super::to_proto::{library_to_proto, task_ref_to_proto};
use super::{proto, FieldProblem, WireError, ORDER_KINDS};
use crate::core::event::{LibraryRef, Order, OrderBatch};
use crate::core::ids::{Attempt, EngineId, Seq, TaskRef};

pub(in crate::wire) fn order_to_proto(order: &Order) -> proto::Order {
    use proto::order::Kind as P;
    let kind = match order {
        Order::Undeliverable { task, attempt, engine, bytes, max } => P::Undeliverable(proto::Undeliverable {
            task: task_ref_to_proto(task),
            attempt: *attempt,
            engine: engine.to_string(),
            bytes: *bytes,
            max: *max,
        }),
        Order::Dispatch {
            task,
            attempt,
            engine,
            epoch,
        } => P::Dispatch(proto::Dispatch {
            task: task_ref_to_proto(task),
            attempt: *attempt,
            engine: engine.to_string(),
            epoch: *epoch,
        }),
        Order::Cancel {
            task,
            attempt,
            engine,
            reason,
        } => P::Cancel(proto::Cancel {
            task: task_ref_to_proto(task),
            attempt: *attempt,
            engine: engine.to_string(),
            reason: cancel_reason_to_proto(*reason) as i32,
        }),
        Order::EngineLost {
            engine,
            epoch,
            last_seen_ms,
        } => P::EngineLost(proto::EngineLost {
            engine: engine.to_string(),
            last_seen_ms: *last_seen_ms,
            epoch: *epoch,
        }),
        Order::Requeue {
            task,
            attempt,
            engine,
            reason,
        } => P::Requeue(proto::Requeue {
            task: task_ref_to_proto(task),
            attempt: *attempt,
            engine: engine.to_string(),
            reason: requeue_reason_to_proto(*reason) as i32,
        }),
        Order::MarkUnschedulable { job, reason } => {
            P::MarkUnschedulable(proto::MarkUnschedulable {
                job: job.to_string(),
                reason: unschedulable_to_proto(*reason) as i32,
            })
        }
        Order::SyncLibrary { engine, library } => P::SyncLibrary(proto::SyncLibrary {
            engine: engine.to_string(),
            library: Some(library_to_proto(library)),
        }),
        Order::Blacklist {
            job,
            engine,
            failures,
        } => P::Blacklist(proto::Blacklist {
            job: job.to_string(),
            engine: engine.to_string(),
            failures: *failures,
        }),
        Order::Reschedule {
            task,
            reason,
            elapsed_ms,
            limit_ms,
        } => P::Reschedule(proto::Reschedule {
            task: task_ref_to_proto(task),
            reason: reschedule_reason_to_proto(*reason) as i32,
            elapsed_ms: *elapsed_ms,
            limit_ms: *limit_ms,
        }),
        Order::FailDependent {
            job,
            task,
            dependency,
        } => P::FailDependent(proto::FailDependent {
            job: job.to_string(),
            task: *task,
            dependency: dependency.clone(),
        }),
        Order::Suspend { task, attempt, engine } => P::Suspend(attempt_order_to_proto(task, *attempt, engine)),
        Order::Resume { task, attempt, engine } => P::Resume(attempt_order_to_proto(task, *attempt, engine)),
        Order::Preempt { task, attempt, engine } => P::Preempt(attempt_order_to_proto(task, *attempt, engine)),
        Order::DispatchParallel { task, attempt, engine, epoch, parts } => P::DispatchParallel(proto::DispatchParallel {
            task: task_ref_to_proto(task),
            attempt: *attempt,
            engine: engine.to_string(),
            epoch: *epoch,
            parts: parts
                .iter()
                .map(|part| proto::ParallelPart { engine: part.engine.to_string(), epoch: part.epoch, slots: part.slots })
                .collect(),
        }),
        Order::EndTestCampaign { job, clusters } => {
            P::EndTestCampaign(proto::EndTestCampaign { job: job.to_string(), clusters: *clusters })
        }
        Order::FloodRatio { engine, ratio_milli, waiting, reason } => {
            P::FloodRatio(super::flood::flood_ratio_to_proto(engine.as_str(), *ratio_milli, *waiting, *reason))
        }
        Order::FlagSink { job, engine, cluster, median_ms, campaign_median_ms } => P::FlagSink(proto::FlagSink {
            job: job.to_string(),
            engine: engine.as_ref().map(ToString::to_string).unwrap_or_default(),
            cluster: cluster.clone(),
            median_ms: *median_ms,
            campaign_median_ms: *campaign_median_ms,
        }),
    };
    proto::Order { kind: Some(kind) }
}

pub(super) fn order_batch(m: proto::OrderBatch) -> Result<OrderBatch, WireError> {
    let orders = each("orders", m.orders, order_from_proto)?;
    Ok(OrderBatch {
        based_on_seq: Seq(m.based_on_seq),
        algorithm: m.algorithm,
        algorithm_version: m.algorithm_version,
        orders,
    })
}

/// Errors name the field from the order's oneof (`dispatch.engine`); the
/// order itself is transparent in JSON, so `orders[3].dispatch.engine` is
/// exactly where a person finds it.
pub(in crate::wire) fn order_from_proto(order: proto::Order) -> Result<Order, WireError> {
    use proto::order::Kind as P;
    let Some(kind) = order.kind else {
        // The order is transparent in JSON: say "missing" of the order itself.
        return Err(WireError::Field {
            field: String::new(),
            problem: FieldProblem::MissingOneof {
                expected: ORDER_KINDS,
            },
        });
    };
    let (name, order) = match kind {
        P::Dispatch(m) => ("dispatch", dispatch(m)),
        P::Cancel(m) => ("cancel", cancel(m)),
        P::EngineLost(m) => (
            "engine_lost",
            engine_id("engine", &m.engine).map(|engine| Order::EngineLost {
                engine,
                epoch: m.epoch,
                last_seen_ms: m.last_seen_ms,
            }),
        ),
        P::Requeue(m) => ("requeue", requeue(m)),
        P::MarkUnschedulable(m) => ("mark_unschedulable", mark_unschedulable(m)),
        P::SyncLibrary(m) => (
            "sync_library",
            sync_library(m).map(|(engine, library)| Order::SyncLibrary { engine, library }),
        ),
        P::Blacklist(m) => ("blacklist", blacklist(m)),
        P::Reschedule(m) => ("reschedule", reschedule(m)),
        P::FailDependent(m) => (
            "fail_dependent",
            job_id("job", &m.job).map(|job| Order::FailDependent {
                job,
                task: m.task,
                dependency: m.dependency,
            }),
        ),
        P::Suspend(m) => ("suspend", attempt_order(m).map(|(task, attempt, engine)| Order::Suspend { task, attempt, engine })),
        P::Resume(m) => ("resume", attempt_order(m).map(|(task, attempt, engine)| Order::Resume { task, attempt, engine })),
        P::Preempt(m) => ("preempt", attempt_order(m).map(|(task, attempt, engine)| Order::Preempt { task, attempt, engine })),
        P::DispatchParallel(m) => ("dispatch_parallel", dispatch_parallel(m)),
        P::EndTestCampaign(m) => (
            "end_test_campaign",
            job_id("job", &m.job).map(|job| Order::EndTestCampaign { job, clusters: m.clusters }),
        ),
        P::FloodRatio(m) => ("flood_ratio", super::flood::flood_ratio(m)),
        P::FlagSink(m) => ("flag_sink", flag_sink(m)),
        P::Undeliverable(m) => ("undeliverable", undeliverable(m)),
    };
    order.map_err(|e| e.within(name))
}

fn undeliverable(m: proto::Undeliverable) -> Result<Order, WireError> {
    Ok(Order::Undeliverable {
        task: task_ref(m.task)?,
        attempt: m.attempt,
        engine: engine_id("engine", &m.engine)?,
        bytes: m.bytes,
        max: m.max,
    })
}

/// A CiGri `FlagSink`: an engine id when one is named, a cluster name of at most 64 bytes.
fn flag_sink(m: proto::FlagSink) -> Result<Order, WireError> {
    let job = job_id("job", &m.job)?;
    let engine = if m.engine.is_empty() { None } else { Some(engine_id("engine", &m.engine)?) };
    if m.cluster.len() > crate::core::family::cigri::NAME_BYTES_MAX {
        let (bytes, max) = (m.cluster.len(), crate::core::family::cigri::NAME_BYTES_MAX);
        return Err(WireError::Field { field: "cluster".into(), problem: FieldProblem::TooLong { bytes, max } });
    }
    Ok(Order::FlagSink { job, engine, cluster: m.cluster, median_ms: m.median_ms, campaign_median_ms: m.campaign_median_ms })
}

/// The task, attempt and engine of a Suspend, Resume or Preempt.
fn attempt_order(m: proto::AttemptOrder) -> Result<(TaskRef, Attempt, EngineId), WireError> {
    Ok((task_ref(m.task)?, m.attempt, engine_id("engine", &m.engine)?))
}

fn attempt_order_to_proto(task: &TaskRef, attempt: Attempt, engine: &EngineId) -> proto::AttemptOrder {
    proto::AttemptOrder { task: task_ref_to_proto(task), attempt, engine: engine.to_string() }
}

fn dispatch(m: proto::Dispatch) -> Result<Order, WireError> {
    Ok(Order::Dispatch {
        task: task_ref(m.task)?,
        attempt: m.attempt,
        engine: engine_id("engine", &m.engine)?,
        epoch: m.epoch,
    })
}

fn cancel(m: proto::Cancel) -> Result<Order, WireError> {
    let task = task_ref(m.task)?;
    let engine = engine_id("engine", &m.engine)?;
    let reason = cancel_reason("reason", m.reason)?;
    Ok(Order::Cancel {
        task,
        attempt: m.attempt,
        engine,
        reason,
    })
}

fn requeue(m: proto::Requeue) -> Result<Order, WireError> {
    let task = task_ref(m.task)?;
    let reason = requeue_reason("reason", m.reason)?;
    Ok(Order::Requeue {
        task,
        attempt: m.attempt,
        engine: engine_id("engine", &m.engine)?,
        reason,
    })
}

fn mark_unschedulable(m: proto::MarkUnschedulable) -> Result<Order, WireError> {
    let job = job_id("job", &m.job)?;
    let reason = unschedulable("reason", m.reason)?;
    Ok(Order::MarkUnschedulable { job, reason })
}

/// The engine and library of a `SyncLibrary`, as an order or a delivery.
pub(in crate::wire) fn sync_library(m: proto::SyncLibrary) -> Result<(EngineId, LibraryRef), WireError> {
    Ok((engine_id("engine", &m.engine)?, library_ref("library", m.library)?))
}

fn blacklist(m: proto::Blacklist) -> Result<Order, WireError> {
    Ok(Order::Blacklist {
        job: job_id("job", &m.job)?,
        engine: engine_id("engine", &m.engine)?,
        failures: m.failures,
    })
}

fn reschedule(m: proto::Reschedule) -> Result<Order, WireError> {
    let task = task_ref(m.task)?;
    let reason = reschedule_reason("reason", m.reason)?;
    Ok(Order::Reschedule {
        task,
        reason,
        elapsed_ms: m.elapsed_ms,
        limit_ms: m.limit_ms,
    })
}

/// At most `PARALLEL_PARTS_MAX` parts decode; what they mean is the fold's to judge.
fn dispatch_parallel(m: proto::DispatchParallel) -> Result<Order, WireError> {
    use crate::core::event::{ParallelPart, PARALLEL_PARTS_MAX};
    if m.parts.len() > PARALLEL_PARTS_MAX {
        let problem = format!("{} parts, more than {PARALLEL_PARTS_MAX}", m.parts.len());
        return Err(WireError::Field { field: "parts".into(), problem: FieldProblem::Inconsistent(problem) });
    }
    let parts = each("parts", m.parts, |part| {
        Ok(ParallelPart { engine: engine_id("engine", &part.engine)?, epoch: part.epoch, slots: part.slots })
    })?;
    Ok(Order::DispatchParallel {
        task: task_ref(m.task)?,
        attempt: m.attempt,
        engine: engine_id("engine", &m.engine)?,
        epoch: m.epoch,
        parts,
    })
}
