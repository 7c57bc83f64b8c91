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
use crate::core::event::{EntrySeal, LibraryInfo, LibraryRef, Order};
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
    /// A part that is not the master: the engine holds its slots and runs
    /// `companion_argv` (nothing when it is empty).
    pub companion: bool,
    /// On a companion part, the job's companion command; empty on other runs.
    pub companion_argv: Vec<String>,
}

impl Delivery {
    pub fn id_for(batch_seq: Seq, order_index: usize) -> String {
        format!("{}-{order_index}", batch_seq.0)
    }
}

pub fn encode_delivery(delivery: &Delivery) -> Vec<u8> {
    delivery_to_proto(delivery).encode_to_vec()
}

/// Most deliveries one message to an engine carries.
pub const DELIVERIES_PER_MESSAGE_MAX: usize = 256;
/// Most bytes of deliveries joined into one message (the broker takes 1 MiB).
pub const DELIVERY_MESSAGE_BYTES_MAX: usize = 256 * 1024;

/// One message on an engine's delivery subject: one delivery, or several joined.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryMessage {
    pub subject: String,
    /// Its `Nats-Msg-Id`: the delivery's id, or `<first id>+<count>` for several.
    pub id: String,
    pub payload: Vec<u8>,
}

/// What a message's seal signs before the message's own bytes: a delivery's
/// seal can never pass for an order batch's, nor one's for the other's.
pub const DELIVERY_SEAL_CONTEXT: &[u8] = b"gridfold.v1.Delivery\0";

/// The messages that carry `deliveries`, each sealed with `key` (see
/// [`DELIVERY_SEAL_CONTEXT`]): each engine's, in their order, joined
/// into as few messages as the limits allow ([`DELIVERIES_PER_MESSAGE_MAX`],
/// [`DELIVERY_MESSAGE_BYTES_MAX`]; a delivery larger than that alone goes
/// alone). Engines come in the order of their first delivery; the order
/// between engines does not matter, each reads its own subject.
pub fn delivery_messages(deliveries: &[Delivery], key: &ed25519_dalek::SigningKey) -> Vec<DeliveryMessage> {
    delivery_messages_within(deliveries, DELIVERY_MESSAGE_BYTES_MAX, key)
}

/// [`delivery_messages`], joining at most `joined_bytes_max` bytes of
/// deliveries into one message (a broker that takes less than
/// [`DELIVERY_MESSAGE_BYTES_MAX`] per message gets smaller ones): only a
/// delivery larger than that alone makes a larger message.
pub fn delivery_messages_within(
    deliveries: &[Delivery],
    joined_bytes_max: usize,
    key: &ed25519_dalek::SigningKey,
) -> Vec<DeliveryMessage> {
    let mut by_engine: Vec<(&EngineId, Vec<&Delivery>)> = Vec::new();
    for delivery in deliveries {
        match by_engine.iter_mut().find(|(engine, _)| **engine == delivery.engine) {
            Some((_, mine)) => mine.push(delivery),
            None => by_engine.push((&delivery.engine, vec![delivery])),
        }
    }
    let mut messages = Vec::new();
    for (engine, mine) in by_engine {
        let subject = order_subject(engine);
        let mut group: Vec<(&Delivery, proto::Delivery)> = Vec::new();
        let mut group_bytes = 0;
        for delivery in mine {
            let message = delivery_to_proto(delivery);
            let bytes = message.encoded_len();
            if !group.is_empty() && (group.len() == DELIVERIES_PER_MESSAGE_MAX || group_bytes + bytes > joined_bytes_max) {
                messages.push(joined(&subject, engine, std::mem::take(&mut group), key));
                group_bytes = 0;
            }
            group_bytes += bytes;
            group.push((delivery, message));
        }
        if !group.is_empty() {
            messages.push(joined(&subject, engine, group, key));
        }
    }
    messages
}

/// One sealed message of a group of one engine's deliveries (not empty).
fn joined(
    subject: &str,
    engine: &EngineId,
    mut group: Vec<(&Delivery, proto::Delivery)>,
    key: &ed25519_dalek::SigningKey,
) -> DeliveryMessage {
    let (id, message) = if group.len() == 1 {
        let (delivery, message) = group.pop().expect("one delivery");
        (delivery.id.clone(), message)
    } else {
        let id = format!("{}+{}", group[0].0.id, group.len());
        let batch = proto::Delivery {
            id: id.clone(),
            engine: engine.to_string(),
            kind: Some(proto::delivery::Kind::Batch(proto::DeliveryBatch {
                deliveries: group.into_iter().map(|(_, message)| message).collect(),
            })),
            ..Default::default()
        };
        (id, batch)
    };
    DeliveryMessage { subject: subject.to_string(), id, payload: sealed(&message, key) }
}

/// A message's bytes and its seal after them (see [`DELIVERY_SEAL_CONTEXT`]).
fn sealed(message: &proto::Delivery, key: &ed25519_dalek::SigningKey) -> Vec<u8> {
    use ed25519_dalek::Signer as _;
    let context = DELIVERY_SEAL_CONTEXT.len();
    let mut bytes = Vec::with_capacity(context + message.encoded_len() + 110);
    bytes.extend_from_slice(DELIVERY_SEAL_CONTEXT);
    message.encode(&mut bytes).expect("a Vec grows as needed");
    let signature = key.sign(&bytes);
    bytes.drain(..context);
    let seal = super::seal_of(key, signature);
    proto::Delivery { seal: Some(seal), ..Default::default() }.encode(&mut bytes).expect("a Vec grows as needed");
    bytes
}

/// What a seal found at the end of a message's `bytes` signs; `None` when it
/// is not the last field (it signs nothing then).
pub fn delivery_signed_message(bytes: &[u8], seal: &EntrySeal) -> Option<Vec<u8>> {
    let signed = bytes.get(..seal.signed_len?)?;
    Some([DELIVERY_SEAL_CONTEXT, signed].concat())
}

fn delivery_to_proto(delivery: &Delivery) -> proto::Delivery {
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
            companion_argv: run.companion_argv.clone(),
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
        engine: delivery.engine.to_string(),
        seal: None,
        kind: Some(kind),
    }
}

/// Decodes a delivery addressed to `engine` (the subject's engine), whatever
/// its seal; several joined in one message are refused here (see
/// [`decode_deliveries`]).
pub fn decode_delivery(engine: &EngineId, bytes: &[u8]) -> Result<Delivery, WireError> {
    let mut message = proto::Delivery::decode(bytes).map_err(|e| WireError::NotProtobuf(e.to_string()))?;
    // Not looked at here (see `decode_sealed_deliveries`).
    message.seal = None;
    delivery_from_proto(engine, message)
}

/// Decodes the deliveries of one message addressed to `engine`: one alone, or
/// several joined ([`delivery_messages`]), at most
/// [`DELIVERIES_PER_MESSAGE_MAX`], none of them joined again. One bad delivery
/// makes the whole message undecodable: the projector never sends one. Its
/// seal is not looked at (see [`decode_sealed_deliveries`]).
pub fn decode_deliveries(engine: &EngineId, bytes: &[u8]) -> Result<Vec<Delivery>, WireError> {
    decode_sealed_deliveries(engine, bytes).map(|(deliveries, _)| deliveries)
}

/// [`decode_deliveries`], with the seal the message ends with, if any:
/// whether it holds is for its reader to check, over
/// [`delivery_signed_message`].
pub fn decode_sealed_deliveries(engine: &EngineId, bytes: &[u8]) -> Result<(Vec<Delivery>, Option<EntrySeal>), WireError> {
    let mut message = proto::Delivery::decode(bytes).map_err(|e| WireError::NotProtobuf(e.to_string()))?;
    let seal = match message.seal.take() {
        Some(seal) => {
            let trailer = proto::Delivery { seal: Some(seal.clone()), ..Default::default() }.encode_to_vec();
            Some(super::found_seal(bytes, &seal, &trailer)?)
        }
        None => None,
    };
    check_addressee(engine, &message.engine)?;
    let Some(proto::delivery::Kind::Batch(batch)) = message.kind else {
        return Ok((vec![delivery_from_proto(engine, message)?], seal));
    };
    if batch.deliveries.len() > DELIVERIES_PER_MESSAGE_MAX {
        let problem = format!("{} deliveries, more than {DELIVERIES_PER_MESSAGE_MAX}", batch.deliveries.len());
        return Err(WireError::Field { field: "batch.deliveries".into(), problem: super::FieldProblem::Inconsistent(problem) });
    }
    let deliveries = batch
        .deliveries
        .into_iter()
        .enumerate()
        .map(|(n, delivery)| {
            delivery_from_proto(engine, delivery).map_err(|err| match err {
                WireError::Field { field, problem } => WireError::Field { field: format!("batch.deliveries[{n}].{field}"), problem },
                other => other,
            })
        })
        .collect::<Result<_, _>>()?;
    Ok((deliveries, seal))
}

/// A delivery names the engine it is for, which must be the one reading it.
fn check_addressee(engine: &EngineId, named: &str) -> Result<(), WireError> {
    if named == engine.as_str() {
        return Ok(());
    }
    let problem = match named {
        "" => super::FieldProblem::Inconsistent("missing: a delivery names the engine it is for".into()),
        other => super::FieldProblem::Inconsistent(format!("the delivery is for engine {other:?}, read by engine {engine}")),
    };
    Err(WireError::Field { field: "engine".into(), problem })
}

fn delivery_from_proto(engine: &EngineId, message: proto::Delivery) -> Result<Delivery, WireError> {
    use proto::delivery::Kind;
    check_addressee(engine, &message.engine)?;
    if message.seal.is_some() {
        return Err(WireError::Field {
            field: "seal".into(),
            problem: super::FieldProblem::Inconsistent("a seal ends a message, not a delivery inside a batch".into()),
        });
    }
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
            companion_argv: {
                crate::core::event::check_companion_argv(&run.companion_argv).map_err(|problem| WireError::Field {
                    field: "run.companion_argv".into(),
                    problem: super::convert::FieldProblem::Inconsistent(problem),
                })?;
                run.companion_argv
            },
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
        Some(Kind::Batch(_)) => {
            return Err(WireError::Field {
                field: "batch".into(),
                problem: super::FieldProblem::Inconsistent("deliveries joined where one delivery belongs".into()),
            })
        }
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
                companion_argv: Vec::new(),
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
                companion_argv: Vec::new(),
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
            engine: "e1".into(),
            seal: None,
            kind: Some(proto::delivery::Kind::SyncLibrary(proto::SyncLibrary {
                engine: "e1".into(),
                library: Some(proto::LibraryRef { name: "lib".into(), version: "1/2".into() }),
            })),
        };
        let error = decode_delivery(&e1, &sync.encode_to_vec()).unwrap_err();
        expect_test::expect![[r#"library.version: an id may hold only letters, digits, '_' and '-' (and '.' in job ids); found '/' at byte 1"#]]
            .assert_eq(&error.to_string());
    }

    fn run_delivery(engine: &EngineId, n: usize, argv_bytes: usize) -> Delivery {
        Delivery {
            id: Delivery::id_for(Seq(9), n),
            batch_seq: Seq(9),
            engine: engine.clone(),
            epoch: 3,
            kind: DeliveryKind::Run(RunTask {
                task: task("j", n as u32),
                attempt: 1,
                argv: vec!["x".repeat(argv_bytes)],
                params: BTreeMap::new(),
                wall_time_limit_ms: 0,
                slots: 1,
                root_library: None,
                output_bytes_max: 0,
                work_dir_retention_ms: 0,
                nodes: Vec::new(),
                companion: false,
                companion_argv: Vec::new(),
            }),
        }
    }

    #[test]
    fn deliveries_sent_at_once_join_per_engine_in_order_within_their_limits() {
        let (e1, e2) = (engine("e1"), engine("e2"));
        let mut deliveries: Vec<Delivery> = (0..300).map(|n| run_delivery(if n % 3 == 0 { &e2 } else { &e1 }, n, 8)).collect();
        // Three large ones for e2 at the end: 100 kB each, two fit the byte budget together.
        deliveries.extend((300..303).map(|n| run_delivery(&e2, n, 100_000)));
        let messages = delivery_messages(&deliveries, &test_key());
        let subjects: Vec<&str> = messages.iter().map(|m| m.subject.as_str()).collect();
        assert_eq!(subjects, ["gridfold.order.e2", "gridfold.order.e2", "gridfold.order.e1"]);
        let decoded: Vec<Vec<Delivery>> = messages
            .iter()
            .map(|m| decode_deliveries(&engine(m.subject.trim_start_matches("gridfold.order.")), &m.payload).unwrap())
            .collect();
        assert_eq!(decoded.iter().map(Vec::len).collect::<Vec<_>>(), [102, 1, 200]);
        assert_eq!(messages[0].id, "9-0+102");
        assert_eq!(messages[1].id, "9-302", "a delivery alone keeps its own id and form");
        assert_eq!(decode_delivery(&e2, &messages[1].payload).unwrap(), deliveries[302]);
        // Every delivery once, each engine's in the order given.
        for engine_id in [&e1, &e2] {
            let sent: Vec<&Delivery> = deliveries.iter().filter(|d| d.engine == *engine_id).collect();
            let got: Vec<&Delivery> = decoded.iter().flatten().filter(|d| d.engine == *engine_id).collect();
            assert_eq!(got, sent);
        }
        // The 256 cap: 300 small deliveries to one engine make two messages.
        let many: Vec<Delivery> = (0..300).map(|n| run_delivery(&e1, n, 8)).collect();
        let counts: Vec<usize> =
            delivery_messages(&many, &test_key()).iter().map(|m| decode_deliveries(&e1, &m.payload).unwrap().len()).collect();
        assert_eq!(counts, [DELIVERIES_PER_MESSAGE_MAX, 300 - DELIVERIES_PER_MESSAGE_MAX]);
    }

    #[test]
    fn a_joined_message_too_large_nested_or_with_a_bad_delivery_does_not_decode() {
        let e1 = engine("e1");
        let joined = |deliveries: Vec<proto::Delivery>| {
            proto::Delivery {
                id: "1-0+2".into(),
                engine: "e1".into(),
                kind: Some(proto::delivery::Kind::Batch(proto::DeliveryBatch { deliveries })),
                ..Default::default()
            }
        };
        let one = || delivery_to_proto(&run_delivery(&e1, 0, 1));
        let over = joined((0..=DELIVERIES_PER_MESSAGE_MAX).map(|_| one()).collect()).encode_to_vec();
        assert_eq!(decode_deliveries(&e1, &over).unwrap_err().to_string(), "batch.deliveries: 257 deliveries, more than 256");
        let nested = joined(vec![one(), joined(vec![one(), one()])]).encode_to_vec();
        assert_eq!(
            decode_deliveries(&e1, &nested).unwrap_err().to_string(),
            "batch.deliveries[1].batch: deliveries joined where one delivery belongs"
        );
        let mut bad = one();
        bad.kind = None;
        let with_bad = joined(vec![one(), bad]).encode_to_vec();
        assert!(decode_deliveries(&e1, &with_bad).unwrap_err().to_string().starts_with("batch.deliveries[1].kind: missing"));
        assert!(decode_delivery(&e1, &joined(vec![one(), one()]).encode_to_vec()).is_err(), "one delivery expected, several found");
        let mut sealed_inside = one();
        sealed_inside.seal = Some(proto::Seal { signer: vec![0; 32], signature: vec![0; 64] });
        assert_eq!(
            decode_deliveries(&e1, &joined(vec![one(), sealed_inside]).encode_to_vec()).unwrap_err().to_string(),
            "batch.deliveries[1].seal: a seal ends a message, not a delivery inside a batch"
        );
    }

    fn test_key() -> ed25519_dalek::SigningKey {
        ed25519_dalek::SigningKey::from_bytes(&[7; 32])
    }

    /// The ring of keys an engine would learn with `key` registered.
    fn ring_of(key: &ed25519_dalek::SigningKey) -> crate::core::trust::KeyRing {
        let mut ring = crate::core::trust::KeyRing::new();
        ring.register(&key.verifying_key().to_bytes(), "test").unwrap();
        ring
    }

    /// Whether a key of `ring` sealed `bytes`, as read by `engine`.
    fn check(ring: &crate::core::trust::KeyRing, engine: &EngineId, bytes: &[u8]) -> Result<Vec<Delivery>, String> {
        let (deliveries, seal) = decode_sealed_deliveries(engine, bytes).map_err(|e| e.to_string())?;
        let seal = seal.ok_or("unsealed")?;
        let message = delivery_signed_message(bytes, &seal).ok_or("the seal is not last")?;
        ring.check(&seal, &message).map_err(|problem| problem.as_str().to_string())?;
        Ok(deliveries)
    }

    #[test]
    fn a_message_is_sealed_for_its_engine_and_the_seal_signs_every_byte_before_it() {
        let (e1, e2) = (engine("e1"), engine("e2"));
        let key = test_key();
        let ring = ring_of(&key);
        let deliveries: Vec<Delivery> = (0..3).map(|n| run_delivery(&e1, n, 8)).chain([run_delivery(&e2, 3, 8)]).collect();
        let messages = delivery_messages(&deliveries, &key);
        assert_eq!(messages.len(), 2);
        let (joined, alone) = (&messages[0].payload, &messages[1].payload);
        assert_eq!(check(&ring, &e1, joined).unwrap(), deliveries[..3]);
        assert_eq!(check(&ring, &e2, alone).unwrap(), deliveries[3..]);
        // Copied onto another engine's subject: refused there, before any seal is looked at.
        assert_eq!(
            check(&ring, &e2, joined).unwrap_err(),
            "engine: the delivery is for engine \"e1\", read by engine e2"
        );
        // One byte changed anywhere before the seal: the seal does not hold.
        for at in [0, joined.len() / 2, joined.len() - 100] {
            let mut changed = joined.clone();
            changed[at] ^= 1;
            assert!(check(&ring, &e1, &changed).is_err(), "byte {at} changed");
        }
        // Another key's seal, and none.
        let other = ed25519_dalek::SigningKey::from_bytes(&[8; 32]);
        let forged = delivery_messages(&deliveries[..1], &other);
        assert_eq!(check(&ring, &e1, &forged[0].payload).unwrap_err(), "the key is not registered");
        assert_eq!(check(&ring, &e1, &encode_delivery(&deliveries[0])).unwrap_err(), "unsealed");
        // The seal signs the context too: the same key's signature of the bare bytes is no seal.
        use ed25519_dalek::Signer as _;
        let bare = delivery_to_proto(&deliveries[0]).encode_to_vec();
        let mut resealed = bare.clone();
        let seal = super::super::seal_of(&key, key.sign(&bare));
        proto::Delivery { seal: Some(seal), ..Default::default() }.encode(&mut resealed).unwrap();
        assert_eq!(check(&ring, &e1, &resealed).unwrap_err(), "the signature does not verify");
        // A seal that is not last signs nothing.
        let mut trailing = alone.clone();
        trailing.extend(proto::Delivery { id: "x".into(), ..Default::default() }.encode_to_vec());
        assert!(check(&ring, &e2, &trailing).is_err());
    }

}
