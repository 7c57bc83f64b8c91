//! Deliveries: the orders the projector sends one engine on
//! `gridfold.order.<engine>`, resolved into what the engine needs to act.
//! They are not log entries: the log already holds the batch they came from.

use std::collections::BTreeMap;

use prost::Message as _;

use super::convert::{engine_id, order_from_proto, order_to_proto, task_ref, task_ref_to_proto};
use super::{proto, WireError};
use crate::core::event::Order;
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
    pub kind: DeliveryKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum DeliveryKind {
    Run(RunTask),
    /// An `Order::Cancel` for this engine.
    Cancel(Order),
    /// An `Order::EngineLost` naming this engine.
    Lost(Order),
}

#[derive(Debug, Clone, PartialEq)]
pub struct RunTask {
    pub task: TaskRef,
    pub attempt: Attempt,
    pub argv: Vec<String>,
    pub params: BTreeMap<String, String>,
    pub wall_time_limit_ms: u64,
    pub slots: u32,
}

impl Delivery {
    pub fn id_for(batch_seq: Seq, order_index: usize) -> String {
        format!("{}-{order_index}", batch_seq.0)
    }
}

pub fn encode_delivery(delivery: &Delivery) -> Vec<u8> {
    use proto::delivery::Kind;
    let kind = match &delivery.kind {
        DeliveryKind::Run(run) => Kind::Run(proto::RunTask {
            task: task_ref_to_proto(&run.task),
            attempt: run.attempt,
            argv: run.argv.clone(),
            params: run.params.clone(),
            wall_time_limit_ms: run.wall_time_limit_ms,
            slots: run.slots,
        }),
        DeliveryKind::Cancel(order) | DeliveryKind::Lost(order) => match order_to_proto(order).kind {
            Some(proto::order::Kind::Cancel(cancel)) => Kind::Cancel(cancel),
            Some(proto::order::Kind::EngineLost(lost)) => Kind::Lost(lost),
            _ => unreachable!("deliveries carry only Cancel and EngineLost orders"),
        },
    };
    proto::Delivery { id: delivery.id.clone(), batch_seq: delivery.batch_seq.0, kind: Some(kind) }.encode_to_vec()
}

/// Decodes a delivery addressed to `engine` (the subject's engine).
pub fn decode_delivery(engine: &EngineId, bytes: &[u8]) -> Result<Delivery, WireError> {
    use proto::delivery::Kind;
    let message = proto::Delivery::decode(bytes).map_err(|e| WireError::NotProtobuf(e.to_string()))?;
    let kind = match message.kind {
        Some(Kind::Run(run)) => DeliveryKind::Run(RunTask {
            task: task_ref(run.task)?,
            attempt: run.attempt,
            argv: run.argv,
            params: run.params,
            wall_time_limit_ms: run.wall_time_limit_ms,
            slots: run.slots,
        }),
        Some(Kind::Cancel(cancel)) => {
            DeliveryKind::Cancel(order_from_proto(proto::Order { kind: Some(proto::order::Kind::Cancel(cancel)) })?)
        }
        Some(Kind::Lost(lost)) => {
            engine_id("engine", &lost.engine)?;
            DeliveryKind::Lost(order_from_proto(proto::Order { kind: Some(proto::order::Kind::EngineLost(lost)) })?)
        }
        None => {
            return Err(WireError::Field {
                field: "kind".into(),
                problem: super::FieldProblem::MissingOneof { expected: "run, cancel or lost" },
            })
        }
    };
    Ok(Delivery { id: message.id, batch_seq: Seq(message.batch_seq), engine: engine.clone(), kind })
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
            }),
            DeliveryKind::Cancel(Order::Cancel { task: task("render", 3), attempt: 2, engine: e1.clone(), reason: CancelReason::JobCancelled }),
            DeliveryKind::Lost(Order::EngineLost { engine: e1.clone(), last_seen_ms: 99 }),
        ];
        for (n, kind) in cases.into_iter().enumerate() {
            let delivery = Delivery { id: Delivery::id_for(Seq(7), n), batch_seq: Seq(7), engine: e1.clone(), kind };
            assert_eq!(decode_delivery(&e1, &encode_delivery(&delivery)).unwrap(), delivery);
        }
        assert!(decode_delivery(&e1, b"\xff\xff").is_err());
    }
}
