//! Where deliveries go: the [`OrderSink`] a projector hands each engine's orders to.
//!
//! The contract with the engine agent, per backend:
//!
//! - **JetStream** ([`JetStreamOrderSink`]): stream `GRIDFOLD_ORDERS` over
//!   `gridfold.order.>` (made by `JetStreamLog::ensure_order_stream`); on
//!   `gridfold.order.<engine>` one message per delivery, its `Nats-Msg-Id` the
//!   delivery id (`<batch seq>-<order index>`), or, for the deliveries to one
//!   engine sent at once, one message joining them (`DeliveryBatch`, id
//!   `<first id>+<count>`, see `wire::delivery::delivery_messages`), so a
//!   message sent again within the stream's duplicate window is stored once. An engine reads with a durable consumer filtered
//!   on its subject and acks each message.
//! - **Embedded** ([`EmbeddedOrderSink`]): a second embedded log at
//!   `<state dir>/orders` ([`order_log_dir`]) whose subjects are `gridfold.order.<engine>`
//!   ([`open_order_log`]); the same messages and ids. An engine in the same process
//!   reads it with a reader from its own position, keeping the entries on its subject.
//!
//! Either way every message is sealed with the projector's key (see
//! `projector::key`), and a delivery may arrive more than once (a restarted or new leader delivers
//! the recent batches again): an engine ignores a delivery id it has seen.
//!
//! A sink sends many deliveries at once with their acks pipelined, never one round
//! trip per message, and reports an error only after every message sent was answered.
//!
//! A message the broker refuses as it is (larger than its `max_payload`, or
//! refused by the stream) is not an error of the send: it is reported as
//! [`Refused`], the others go on, and the projector never sends it again (it
//! fails the attempt of a refused run through the log). Only a broker that
//! cannot be reached fails the send, and then everything is sent again.

use std::collections::VecDeque;
use std::future::{Future, IntoFuture as _};
use std::path::{Path, PathBuf};

use async_nats::jetstream::context::{PublishAckFuture, PublishErrorKind};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self as js};

use crate::log::embedded::{EmbeddedConfig, EmbeddedLog};
use crate::log::jetstream::{JetStreamLog, STREAM_ORDERS};
use crate::log::{Append, EventLog, LogError};
use crate::projector::key::ProjectorKey;
use crate::wire::delivery::{DELIVERY_MESSAGE_BYTES_MAX, Delivery, DeliveryMessage};

/// Every delivery subject starts with this; the engine id follows.
pub const ORDER_SUBJECT_PREFIX: &str = "gridfold.order.";
/// The embedded delivery log's directory inside the projector's state directory.
pub const ORDER_LOG_DIR_NAME: &str = "orders";
/// Most publishes a [`JetStreamOrderSink`] keeps in flight.
pub const DELIVERY_WINDOW_MAX: usize = 1_024;

/// Where deliveries to engines go.
pub trait OrderSink: Send + Sync + 'static {
    /// Where the deliveries go, for messages.
    fn location(&self) -> String;

    /// Stores every delivery, in order, each under its id, in messages sealed
    /// with `key`, but for the messages the broker refuses as they are, which
    /// it returns. On error some may have been stored; sending them all again
    /// is safe (the ids deduplicate).
    fn deliver(&self, deliveries: &[Delivery], key: &ProjectorKey)
    -> impl Future<Output = Result<Vec<Refused>, LogError>> + Send;
}

/// A message the broker refused as it is: sending it again would not help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The message's `Nats-Msg-Id`: the delivery's id when it carried one alone.
    pub message_id: String,
    /// Its size, and the most the broker takes.
    pub bytes: u64,
    pub max: u64,
    /// What the broker said.
    pub detail: String,
}

/// What a message's headers (its `Nats-Msg-Id`) and the protocol line may take
/// beside its payload, kept free under the broker's `max_payload`.
const MESSAGE_OVERHEAD_BYTES: usize = 512;

/// The embedded delivery log of a projector whose state directory is `state_dir`.
pub fn order_log_dir(state_dir: &Path) -> PathBuf {
    state_dir.join(ORDER_LOG_DIR_NAME)
}

/// Opens (creating if missing) an embedded delivery log in `dir`: subjects `gridfold.order.<engine>`.
pub fn open_order_log(dir: &Path) -> Result<EmbeddedLog, LogError> {
    EmbeddedLog::open(
        dir,
        EmbeddedConfig {
            subject_prefix: ORDER_SUBJECT_PREFIX.to_string(),
            ..EmbeddedConfig::default()
        },
    )
}

fn append_of(message: DeliveryMessage) -> Append {
    Append::new(message.subject, message.payload).with_msg_id(message.id)
}

/// Deliveries into an embedded log (see the module docs).
#[derive(Debug, Clone)]
pub struct EmbeddedOrderSink {
    log: EmbeddedLog,
}

impl EmbeddedOrderSink {
    /// Delivers into `log`, which must accept `gridfold.order.` subjects ([`open_order_log`]).
    pub fn new(log: EmbeddedLog) -> Self {
        EmbeddedOrderSink { log }
    }

    /// Opens the delivery log at `<state dir>/orders`.
    pub fn open_in(state_dir: &Path) -> Result<Self, LogError> {
        Ok(Self::new(open_order_log(&order_log_dir(state_dir))?))
    }

    /// The delivery log, for engines in the same process to read.
    pub fn log(&self) -> &EmbeddedLog {
        &self.log
    }
}

impl OrderSink for EmbeddedOrderSink {
    fn location(&self) -> String {
        self.log.location()
    }

    async fn deliver(&self, deliveries: &[Delivery], key: &ProjectorKey) -> Result<Vec<Refused>, LogError> {
        if deliveries.is_empty() {
            return Ok(Vec::new());
        }
        self.log
            .append_batch(key.delivery_messages(deliveries).into_iter().map(append_of).collect())
            .await
            .map(|_| Vec::new())
    }
}

/// Deliveries into JetStream's `GRIDFOLD_ORDERS` (see the module docs).
#[derive(Debug, Clone)]
pub struct JetStreamOrderSink {
    url: String,
    context: js::Context,
    /// How long one delivery's ack is waited for (the log's, 1 s): an ack lost with a
    /// node fails the send after that, and the outbox sends again (same ids).
    ack_timeout: std::time::Duration,
}

impl JetStreamOrderSink {
    /// Creates the orders stream if it is missing and delivers into it over `log`'s connection.
    pub async fn connect(log: &JetStreamLog) -> Result<Self, LogError> {
        log.ensure_order_stream().await?;
        Ok(JetStreamOrderSink {
            url: log.url().to_string(),
            context: log.context().clone(),
            ack_timeout: log.ack_timeout(),
        })
    }

    fn unavailable(&self, detail: String) -> LogError {
        LogError::Unavailable {
            url: self.url.clone(),
            detail,
        }
    }

    async fn complete(&self, ack: PublishAckFuture, id: &str) -> Result<(), LogError> {
        let ack = tokio::time::timeout(self.ack_timeout, ack.into_future())
            .await
            .map_err(|_| self.unavailable(format!("delivery {id}: no ack within {}", crate::human::duration(self.ack_timeout))))?;
        let ack = ack.map_err(|err| match err.kind() {
            PublishErrorKind::TimedOut
            | PublishErrorKind::BrokenPipe
            | PublishErrorKind::MaxAckPending => self.unavailable(format!("delivery {id}: {err}")),
            PublishErrorKind::StreamNotFound => self.unavailable(format!(
                "delivery {id}: no stream {STREAM_ORDERS} answered: {err}"
            )),
            _ => LogError::Rejected {
                detail: format!("delivery {id}: {err}"),
            },
        })?;
        if ack.stream != STREAM_ORDERS {
            return Err(LogError::Misconfigured {
                location: self.url.clone(),
                detail: format!(
                    "delivery {id} was stored in stream {}, not {STREAM_ORDERS}",
                    ack.stream
                ),
            });
        }
        Ok(())
    }
}

impl OrderSink for JetStreamOrderSink {
    fn location(&self) -> String {
        format!("{} stream {STREAM_ORDERS}", self.url)
    }

    async fn deliver(&self, deliveries: &[Delivery], key: &ProjectorKey) -> Result<Vec<Refused>, LogError> {
        let max = self.context.client().max_payload();
        let joined_max = DELIVERY_MESSAGE_BYTES_MAX.min(max.saturating_sub(MESSAGE_OVERHEAD_BYTES));
        let messages = key.delivery_messages_within(deliveries, joined_max);
        let window = DELIVERY_WINDOW_MAX.min(messages.len().max(1));
        let mut in_flight: VecDeque<(PublishAckFuture, &DeliveryMessage)> = VecDeque::with_capacity(window);
        let mut refused = Vec::new();
        let refusal = |message: &DeliveryMessage, detail: String| Refused {
            message_id: message.id.clone(),
            bytes: message.payload.len() as u64,
            max: max as u64,
            detail,
        };
        let mut first_error: Option<LogError> = None;
        for message in &messages {
            if in_flight.len() == window {
                let (ack, message) = in_flight.pop_front().expect("the window is full");
                match self.complete(ack, &message.id).await {
                    Ok(()) => {}
                    Err(LogError::Rejected { detail }) => refused.push(refusal(message, detail)),
                    Err(err) => {
                        first_error = Some(err);
                        break;
                    }
                }
            }
            if message.payload.len() + MESSAGE_OVERHEAD_BYTES > max {
                let detail = format!("{} bytes, more than the broker's max_payload of {max}", message.payload.len());
                refused.push(refusal(message, detail));
                continue;
            }
            let publish = PublishMessage::build().payload(message.payload.clone().into()).message_id(&message.id);
            match self.context.send_publish(message.subject.clone(), publish).await {
                Ok(ack) => in_flight.push_back((ack, message)),
                Err(err) if err.kind() == PublishErrorKind::MaxPayloadExceeded => refused.push(refusal(message, err.to_string())),
                Err(err) => {
                    first_error = Some(self.unavailable(format!("delivery {}: {err}", message.id)));
                    break;
                }
            }
        }
        // Await every ack still in flight: a dropped one would lose its error unseen.
        for (ack, message) in in_flight {
            match self.complete(ack, &message.id).await {
                Ok(()) => {}
                Err(LogError::Rejected { detail }) => refused.push(refusal(message, detail)),
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        match first_error {
            Some(err) => Err(err),
            None => Ok(refused),
        }
    }
}
