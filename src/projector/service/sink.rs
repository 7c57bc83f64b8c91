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
use crate::wire::delivery::{Delivery, DeliveryMessage};

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
    /// with `key`. On error some may have been stored; sending them all again is
    /// safe (the ids deduplicate).
    fn deliver(&self, deliveries: &[Delivery], key: &ProjectorKey)
    -> impl Future<Output = Result<(), LogError>> + Send;
}

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

    async fn deliver(&self, deliveries: &[Delivery], key: &ProjectorKey) -> Result<(), LogError> {
        if deliveries.is_empty() {
            return Ok(());
        }
        self.log
            .append_batch(key.delivery_messages(deliveries).into_iter().map(append_of).collect())
            .await
            .map(|_| ())
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

    async fn deliver(&self, deliveries: &[Delivery], key: &ProjectorKey) -> Result<(), LogError> {
        let messages = key.delivery_messages(deliveries);
        let window = DELIVERY_WINDOW_MAX.min(messages.len().max(1));
        let mut in_flight: VecDeque<(PublishAckFuture, &str)> = VecDeque::with_capacity(window);
        let mut first_error: Option<LogError> = None;
        for message in &messages {
            if in_flight.len() == window {
                let (ack, id) = in_flight.pop_front().expect("the window is full");
                if let Err(err) = self.complete(ack, id).await {
                    first_error = Some(err);
                    break;
                }
            }
            let publish = PublishMessage::build().payload(message.payload.clone().into()).message_id(&message.id);
            match self.context.send_publish(message.subject.clone(), publish).await {
                Ok(ack) => in_flight.push_back((ack, &message.id)),
                Err(err) => {
                    first_error = Some(self.unavailable(format!("delivery {}: {err}", message.id)));
                    break;
                }
            }
        }
        // Await every ack still in flight: a dropped one would lose its error unseen.
        for (ack, id) in in_flight {
            if let Err(err) = self.complete(ack, id).await {
                first_error.get_or_insert(err);
            }
        }
        match first_error {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }
}
