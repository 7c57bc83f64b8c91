//! Deliveries: the orders the projector sends one engine on
//! `gridfold.order.<engine>`, resolved into what the engine needs to act.
//! They are not log entries: the log already holds the batch they came from.
//!
//! Only orders an engine must act on become deliveries: runs, cancels (a
//! cancelled job, a requeue, a redundant copy no longer needed), suspends,
//! resumes and preemptions, library syncs and the news that the engine was
//! declared lost. Orders with no engine to
//! tell (`MarkUnschedulable`, `Blacklist`, `Reschedule`, `FailDependent`) are
//! not delivered.

use std::collections::BTreeMap;

use prost::Message as _;

use super::convert::{
    engine_id, library_info, library_info_to_proto, library_ref, library_to_proto, order_from_proto,
    order_to_proto, sync_library, task_ref, task_ref_to_proto,
};
use super::{proto, WireError};
use crate::core::event::{LibraryInfo, LibraryRef, Order};
use crate::core::ids::{Attempt, EngineId, Seq, TaskRef};

/// Subjects of the order-delivery stream.
pub const ORDER_STREAM_SUBJECTS: &str = "gridfold.order.>";

/// The subject one engine reads its deliveries from.
pub fn order_subject(engine: &EngineId) -> String {
    format!("gridfold.order.{engine}")
}

#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// `<batch seq>-<order index>`; the `Nats-Msg-Id`.
    pub id: String,
    pub batch_seq: Seq,
    pub engine: EngineId,
    /// The engine's login epoch when the order was folded (see `Epoch`).
    pub epoch: u64,
    pub kind: DeliveryKind,
}

impl std::fmt::Display for DeliveryKind {
    /// One line a person can read: `run job/3 #2`, `cancel job/3 #2 on e1 (…)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeliveryKind::Run(run) => write!(f, "run {} #{}", run.task, run.attempt),
            DeliveryKind::Cancel(order) | DeliveryKind::Lost(order) | DeliveryKind::Control(order) => write!(f, "{order}"),
            DeliveryKind::SyncLibrary { library, .. } => write!(f, "sync {library}"),
            DeliveryKind::LoggedIn => f.write_str("login"),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum DeliveryKind {
    Run(RunTask),
    /// An `Order::Cancel` for this engine.
    Cancel(Order),
    /// An `Order::EngineLost` naming this engine.
    Lost(Order),
    /// An `Order::SyncLibrary` for this engine: fetch and unpack the library.
    /// `published` is what the log says was stored (size, blake3), for the
    /// engine to check what it fetched.
    SyncLibrary { library: LibraryRef, published: Option<LibraryInfo> },
    /// A login of this engine was folded; it opened the delivery's epoch.
    LoggedIn,
    /// An `Order::Suspend`, `Order::Resume` or `Order::Preempt` for this engine.
    Control(Order),
}

#[derive(Debug, Clone, PartialEq)]
pub struct RunTask {
    pub task: TaskRef,
    pub attempt: Attempt,
    pub argv: Vec<String>,
    pub params: BTreeMap<String, String>,
    pub wall_time_limit_ms: u64,
    pub slots: u32,
    /// The job's root library: the engine runs the task with
    /// `GRIDFOLD_LIBRARY_DIR` set to where it unpacked it.
    pub root_library: Option<LibraryRef>,
    /// Most bytes of stdout, and as many of stderr, to store (0: none).
    pub output_bytes_max: u64,
    /// How long to keep the attempt's work directory after it ends.
    pub work_dir_retention_ms: u64,
    /// A parallel task: every engine of the attempt with its slots, the
    /// master first (`GRIDFOLD_NODEFILE`); empty for other tasks.
    pub nodes: Vec<(EngineId, u32)>,
    /// A part that is not the master: the engine holds its slots, runs nothing.
    pub companion: bool,
}

impl Delivery {
    pub fn id_for(batch_seq: Seq, order_index: usize) -> String {
        format!("{}-{order_index}", batch_seq.0)
    }
}

pub fn encode_delivery(delivery: &Delivery) -> Vec<u8> {
    use proto::delivery::Kind;
    let mut published_library = None;
    let kind = match &delivery.kind {
        DeliveryKind::Run(run) => Kind::Run(proto::RunTask {
            task: task_ref_to_proto(&run.task),
            attempt: run.attempt,
            argv: run.argv.clone(),
            params: run.params.clone(),
            wall_time_limit_ms: run.wall_time_limit_ms,
            slots: run.slots,
            root_library: run.root_library.as_ref().map(library_to_proto),
            output_bytes_max: run.output_bytes_max,
            work_dir_retention_ms: run.work_dir_retention_ms,
            nodes: run.nodes.iter().map(|(engine, slots)| proto::NodeSlots { engine: engine.to_string(), slots: *slots }).collect(),
            companion: run.companion,
        }),
        DeliveryKind::Cancel(order) | DeliveryKind::Lost(order) | DeliveryKind::Control(order) => {
            match order_to_proto(order).kind {
                Some(proto::order::Kind::Cancel(cancel)) => Kind::Cancel(cancel),
                Some(proto::order::Kind::EngineLost(lost)) => Kind::Lost(lost),
                Some(proto::order::Kind::Suspend(suspend)) => Kind::Suspend(suspend),
                Some(proto::order::Kind::Resume(resume)) => Kind::Resume(resume),
                Some(proto::order::Kind::Preempt(preempt)) => Kind::Preempt(preempt),
                _ => unreachable!("deliveries carry only Cancel, EngineLost, Suspend, Resume and Preempt orders"),
            }
        }
        DeliveryKind::LoggedIn => Kind::LoggedIn(proto::LoggedIn {}),
        DeliveryKind::SyncLibrary { library, published } => {
            published_library = published.as_ref().map(library_info_to_proto);
            Kind::SyncLibrary(proto::SyncLibrary {
                engine: delivery.engine.to_string(),
                library: Some(library_to_proto(library)),
            })
        }
    };
    proto::Delivery {
        id: delivery.id.clone(),
        batch_seq: delivery.batch_seq.0,
        published_library,
        epoch: delivery.epoch,
        kind: Some(kind),
    }
    .encode_to_vec()
}

/// Decodes a delivery addressed to `engine` (the subject's engine).
pub fn decode_delivery(engine: &EngineId, bytes: &[u8]) -> Result<Delivery, WireError> {
    use proto::delivery::Kind;
    let message = proto::Delivery::decode(bytes).map_err(|e| WireError::NotProtobuf(e.to_string()))?;
    let kind = match message.kind {
        Some(Kind::Run(run)) if run.nodes.len() > crate::core::event::PARALLEL_PARTS_MAX => {
            let problem = format!("{} nodes, more than {}", run.nodes.len(), crate::core::event::PARALLEL_PARTS_MAX);
            return Err(WireError::Field { field: "run.nodes".into(), problem: super::convert::FieldProblem::Inconsistent(problem) });
        }
        Some(Kind::Run(run)) => DeliveryKind::Run(RunTask {
            nodes: run
                .nodes
                .iter()
                .map(|node| Ok((engine_id("nodes.engine", &node.engine)?, node.slots)))
                .collect::<Result<_, WireError>>()?,
            companion: run.companion,
            task: task_ref(run.task)?,
            attempt: run.attempt,
            argv: run.argv,
            params: run.params,
            wall_time_limit_ms: run.wall_time_limit_ms,
            slots: run.slots,
            root_library: run
                .root_library
                .map(|library| library_ref("root_library", Some(library)))
                .transpose()?,
            output_bytes_max: run.output_bytes_max,
            work_dir_retention_ms: run.work_dir_retention_ms,
        }),
        Some(Kind::Cancel(cancel)) => {
            DeliveryKind::Cancel(order_from_proto(proto::Order { kind: Some(proto::order::Kind::Cancel(cancel)) })?)
        }
        Some(Kind::Lost(lost)) => {
            engine_id("engine", &lost.engine)?;
            DeliveryKind::Lost(order_from_proto(proto::Order { kind: Some(proto::order::Kind::EngineLost(lost)) })?)
        }
        Some(Kind::SyncLibrary(sync)) => {
            let library = sync_library(sync)?.1;
            let published = message.published_library.map(library_info).transpose()?;
            if let Some(info) = published.as_ref().filter(|info| info.library != library) {
                return Err(WireError::Field {
                    field: "published_library.library".into(),
                    problem: super::FieldProblem::Inconsistent(format!("names {}, the sync names {library}", info.library)),
                });
            }
            DeliveryKind::SyncLibrary { library, published }
        }
        Some(Kind::LoggedIn(_)) => DeliveryKind::LoggedIn,
        Some(Kind::Suspend(m)) => DeliveryKind::Control(order_from_proto(proto::Order { kind: Some(proto::order::Kind::Suspend(m)) })?),
        Some(Kind::Resume(m)) => DeliveryKind::Control(order_from_proto(proto::Order { kind: Some(proto::order::Kind::Resume(m)) })?),
        Some(Kind::Preempt(m)) => DeliveryKind::Control(order_from_proto(proto::Order { kind: Some(proto::order::Kind::Preempt(m)) })?),
        None => {
            return Err(WireError::Field {
                field: "kind".into(),
                problem: super::FieldProblem::MissingOneof { expected: "run, cancel, lost, sync_library, logged_in, suspend, resume or preempt" },
            })
        }
    };
    Ok(Delivery { id: message.id, batch_seq: Seq(message.batch_seq), engine: engine.clone(), epoch: message.epoch, kind })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::event::CancelReason;
    use crate::core::testkit::{engine_id as engine, task};

    #[test]
    fn deliveries_round_trip() {
        let e1 = engine("e1");
        let cases = [
            DeliveryKind::Run(RunTask {
                task: task("render", 3),
                attempt: 2,
                argv: vec!["render".into(), "--frame=3".into()],
                params: [("scene".to_string(), "intro".to_string())].into(),
                wall_time_limit_ms: 60_000,
                slots: 1,
                root_library: None,
                output_bytes_max: 1 << 20,
                work_dir_retention_ms: 60_000,
                nodes: Vec::new(),
                companion: false,
            }),
            DeliveryKind::Run(RunTask {
                task: task("render", 4),
                attempt: 1,
                argv: vec!["render".into()],
                params: BTreeMap::new(),
                wall_time_limit_ms: 0,
                slots: 2,
                root_library: Some(LibraryRef::new("render-lib", "2.1.0")),
                output_bytes_max: crate::core::event::OutputPolicy::default().task_bytes_max,
                work_dir_retention_ms: crate::core::event::OutputPolicy::default().work_dir_retention_ms,
                nodes: Vec::new(),
                companion: false,
            }),
            DeliveryKind::Cancel(Order::Cancel { task: task("render", 3), attempt: 2, engine: e1.clone(), reason: CancelReason::JobCancelled }),
            DeliveryKind::Cancel(Order::Cancel { task: task("render", 3), attempt: 3, engine: e1.clone(), reason: CancelReason::RedundantCopy }),
            DeliveryKind::Lost(Order::EngineLost { engine: e1.clone(), epoch: 4, last_seen_ms: 99 }),
            DeliveryKind::Control(Order::Suspend { task: task("render", 3), attempt: 2, engine: e1.clone() }),
            DeliveryKind::Control(Order::Resume { task: task("render", 3), attempt: 2, engine: e1.clone() }),
            DeliveryKind::Control(Order::Preempt { task: task("render", 3), attempt: 2, engine: e1.clone() }),
            DeliveryKind::SyncLibrary { library: LibraryRef::new("render-lib", "2.1.0"), published: None },
            DeliveryKind::SyncLibrary {
                library: LibraryRef::new("render-lib", "2.1.0"),
                published: Some(LibraryInfo {
                    library: LibraryRef::new("render-lib", "2.1.0"),
                    size_bytes: 1234,
                    digest_hex: "ab".repeat(32),
                }),
            },
        ];
        for (n, kind) in cases.into_iter().enumerate() {
            let delivery = Delivery { id: Delivery::id_for(Seq(7), n), batch_seq: Seq(7), engine: e1.clone(), epoch: 4, kind };
            assert_eq!(decode_delivery(&e1, &encode_delivery(&delivery)).unwrap(), delivery);
        }
        assert!(decode_delivery(&e1, b"\xff\xff").is_err());
    }

    #[test]
    fn a_delivery_with_a_bad_library_names_the_field() {
        let e1 = engine("e1");
        let sync = proto::Delivery {
            id: "7-0".into(),
            batch_seq: 7,
            published_library: None,
            epoch: 4,
            kind: Some(proto::delivery::Kind::SyncLibrary(proto::SyncLibrary {
                engine: "e1".into(),
                library: Some(proto::LibraryRef { name: "lib".into(), version: "1/2".into() }),
            })),
        };
        let error = decode_delivery(&e1, &sync.encode_to_vec()).unwrap_err();
        expect_test::expect![[r#"library.version: an id may hold only letters, digits, '_' and '-' (and '.' in job ids); found '/' at byte 1"#]]
            .assert_eq(&error.to_string());
    }
}
