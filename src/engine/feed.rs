//! Where an engine's orders come from: [`OrderFeed`], with one implementation per
//! log backend.
//!
//! - [`JetStreamOrderFeed`]: a **durable** pull consumer named
//!   `gridfold-engine-<engine>` on stream `GRIDFOLD_ORDERS`, filtered to
//!   `gridfold.order.<engine>`, with explicit acks. The broker keeps its position,
//!   so an engine that was away (restarted, cut off, or the broker restarted) gets
//!   what was delivered meanwhile; a message not acked within the consumer's ack
//!   wait (30 s) is delivered again.
//! - [`LogOrderFeed`] (alias [`EmbeddedOrderFeed`]): a reader over a second log,
//!   the embedded one at `<dir>/orders` in practice, keeping only the entries on
//!   this engine's subject. Its position lives in memory: a new feed reads the
//!   engine's deliveries from the first, and the engine skips what is stale
//!   (see `engine` module docs). Acks do nothing.
//!
//! Either way an engine's deliveries are on `gridfold.order.<engine>`.
//!
//! # Invariants
//!
//! - [`OrderFeed::next`] is cancel-safe: dropping its future before it completes
//!   loses no message (the engine polls it in a `select!`).
//! - A feed rides out a broker that is away: it retries with backoff and returns an
//!   error only for what retrying cannot fix (a misconfigured consumer or a corrupt log).
//! - Messages come in the order the projector published them on the subject.

use std::collections::VecDeque;
use std::future::Future;
use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use async_nats::jetstream::stream::Stream as JsStream;
use bytes::Bytes;
use futures::StreamExt as _;

use crate::core::ids::EngineId;
use crate::log::embedded::EmbeddedReader;
use crate::log::jetstream::{JetStreamLog, STREAM_ORDERS};
use crate::log::{EventLog, LogError, LogReader, RawEntry};
use crate::wire::delivery::order_subject;

/// Backoff between attempts to reach a broker that is away.
pub const FEED_RETRY_BACKOFF_MIN: Duration = Duration::from_millis(100);
pub const FEED_RETRY_BACKOFF_MAX: Duration = Duration::from_secs(2);
/// Messages one pull request of the durable consumer asks for.
pub const PULL_BATCH: usize = 64;
/// Entries one read of a [`LogOrderFeed`] takes from its log.
pub const LOG_READ_BATCH: usize = 1_000;
const PULL_EXPIRES: Duration = Duration::from_secs(10);
const PULL_HEARTBEAT: Duration = Duration::from_secs(2);
const LOG_READ_WAIT: Duration = Duration::from_secs(5);

/// One message on the engine's order subject, with what acknowledges it.
#[derive(Debug)]
pub struct OrderMessage<A> {
    pub subject: String,
    /// An encoded `Delivery` (decode with `wire::delivery::decode_delivery`).
    pub payload: Bytes,
    pub ack: A,
}

/// Acknowledges one message: it has been handled and must not be delivered again.
pub trait OrderAck: Send + 'static {
    fn ack(self) -> impl Future<Output = Result<(), FeedError>> + Send;
}

/// Nothing to acknowledge (a feed whose position is kept in memory).
impl OrderAck for () {
    async fn ack(self) -> Result<(), FeedError> {
        Ok(())
    }
}

/// The engine's source of deliveries. See the module docs for the invariants.
pub trait OrderFeed: Send {
    type Ack: OrderAck;

    /// Where the feed reads from, for messages.
    fn location(&self) -> String;

    /// The next message for this engine, waiting as long as it takes (and through
    /// broker outages). An error is fatal. Cancel-safe.
    fn next(&mut self) -> impl Future<Output = Result<OrderMessage<Self::Ack>, FeedError>> + Send;
}

#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    /// The feed cannot work as configured (a consumer of the same name with another
    /// filter, the orders stream missing and not creatable).
    #[error("the order feed at {location} cannot be used: {detail}")]
    Misconfigured { location: String, detail: String },
    /// The log the feed reads is unusable (corrupt, local storage failing).
    #[error("the order feed at {location} failed: {source}")]
    Log {
        location: String,
        #[source]
        source: LogError,
    },
    /// An acknowledgement could not be sent; the message will come again.
    #[error("cannot acknowledge an order at {location}: {detail}")]
    Ack { location: String, detail: String },
}

/// The name of an engine's durable consumer on `GRIDFOLD_ORDERS`.
pub fn consumer_name(engine: &EngineId) -> String {
    format!("gridfold-engine-{engine}")
}

// ---- JetStream ----

/// An engine's durable pull consumer on `GRIDFOLD_ORDERS`.
pub struct JetStreamOrderFeed {
    location: String,
    stream: JsStream,
    consumer_name: String,
    filter_subject: String,
    messages: Option<pull::Stream>,
    backoff: Duration,
}

impl std::fmt::Debug for JetStreamOrderFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JetStreamOrderFeed")
            .field("location", &self.location)
            .field("consumer", &self.consumer_name)
            .finish_non_exhaustive()
    }
}

/// Acks one JetStream message.
pub struct JetStreamAck(async_nats::jetstream::Message);

impl std::fmt::Debug for JetStreamAck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("JetStreamAck")
            .field(&self.0.subject)
            .finish()
    }
}

impl OrderAck for JetStreamAck {
    async fn ack(self) -> Result<(), FeedError> {
        self.0.ack().await.map_err(|err| FeedError::Ack {
            location: self.0.subject.to_string(),
            detail: err.to_string(),
        })
    }
}

impl JetStreamOrderFeed {
    /// Creates the orders stream if missing and the engine's durable consumer if
    /// missing (delivering from the stream's start), or checks the existing one.
    pub async fn open(
        log: &JetStreamLog,
        engine: &EngineId,
    ) -> Result<JetStreamOrderFeed, FeedError> {
        let location = format!("{} stream {STREAM_ORDERS}", log.url());
        log.ensure_order_stream()
            .await
            .map_err(|source| FeedError::Log {
                location: location.clone(),
                source,
            })?;
        let stream = log
            .context()
            .get_stream(STREAM_ORDERS)
            .await
            .map_err(|err| FeedError::Log {
                location: location.clone(),
                source: LogError::Unavailable {
                    url: log.url().to_string(),
                    detail: format!("cannot get stream {STREAM_ORDERS}: {err}"),
                },
            })?;
        let feed = JetStreamOrderFeed {
            location,
            stream,
            consumer_name: consumer_name(engine),
            filter_subject: order_subject(engine),
            messages: None,
            backoff: FEED_RETRY_BACKOFF_MIN,
        };
        // Create the consumer now, so deliveries published from here on are kept for
        // this engine even before it first reads.
        let consumer = feed.consumer().await.map_err(|detail| FeedError::Log {
            location: feed.location.clone(),
            source: LogError::Unavailable {
                url: log.url().to_string(),
                detail,
            },
        })?;
        feed.check(&consumer)?;
        Ok(feed)
    }

    async fn consumer(&self) -> Result<PullConsumer, String> {
        let config = pull::Config {
            durable_name: Some(self.consumer_name.clone()),
            name: Some(self.consumer_name.clone()),
            description: Some(format!("gridfold orders for {}", self.filter_subject)),
            filter_subject: self.filter_subject.clone(),
            ack_policy: AckPolicy::Explicit,
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        };
        self.stream
            .get_or_create_consumer(&self.consumer_name, config)
            .await
            .map_err(|err| {
                format!(
                    "cannot get or create consumer {}: {err}",
                    self.consumer_name
                )
            })
    }

    fn check(&self, consumer: &PullConsumer) -> Result<(), FeedError> {
        let config = &consumer.cached_info().config;
        let filters_ok = config.filter_subject == self.filter_subject
            || (config.filter_subject.is_empty()
                && config.filter_subjects == [self.filter_subject.clone()]);
        if !filters_ok || config.ack_policy != AckPolicy::Explicit {
            return Err(FeedError::Misconfigured {
                location: self.location.clone(),
                detail: format!(
                    "consumer {} exists with filter {:?} {:?} and ack policy {:?}; it must filter {} with explicit acks \
                     (delete it to let the engine create it)",
                    self.consumer_name,
                    config.filter_subject,
                    config.filter_subjects,
                    config.ack_policy,
                    self.filter_subject
                ),
            });
        }
        Ok(())
    }

    /// Opens the message stream of the consumer (creating the consumer if it was lost).
    async fn open_messages(&mut self) -> Result<(), FeedError> {
        while self.messages.is_none() {
            match self.consumer().await {
                Ok(consumer) => {
                    self.check(&consumer)?;
                    match consumer
                        .stream()
                        .max_messages_per_batch(PULL_BATCH)
                        .expires(PULL_EXPIRES)
                        .heartbeat(PULL_HEARTBEAT)
                        .messages()
                        .await
                    {
                        Ok(messages) => self.messages = Some(messages),
                        Err(err) => {
                            self.wait_before_retry(format!("cannot start pulling: {err}"))
                                .await
                        }
                    }
                }
                Err(detail) => self.wait_before_retry(detail).await,
            }
        }
        Ok(())
    }

    async fn wait_before_retry(&mut self, detail: String) {
        tracing::warn!(consumer = %self.consumer_name, "order feed: {detail}; retrying in {:?}", self.backoff);
        tokio::time::sleep(self.backoff).await;
        self.backoff = (self.backoff * 2).min(FEED_RETRY_BACKOFF_MAX);
    }
}

impl OrderFeed for JetStreamOrderFeed {
    type Ack = JetStreamAck;

    fn location(&self) -> String {
        self.location.clone()
    }

    async fn next(&mut self) -> Result<OrderMessage<JetStreamAck>, FeedError> {
        use async_nats::jetstream::consumer::pull::MessagesErrorKind;
        loop {
            self.open_messages().await?;
            let messages = self.messages.as_mut().expect("opened just above");
            match messages.next().await {
                Some(Ok(message)) => {
                    self.backoff = FEED_RETRY_BACKOFF_MIN;
                    return Ok(OrderMessage {
                        subject: message.subject.to_string(),
                        payload: message.payload.clone(),
                        ack: JetStreamAck(message),
                    });
                }
                // The client re-pulls by itself once it has reconnected.
                Some(Err(err)) if err.kind() == MessagesErrorKind::MissingHeartbeat => {
                    tracing::debug!(consumer = %self.consumer_name, "order feed: {err}");
                }
                Some(Err(err)) => {
                    self.messages = None;
                    self.wait_before_retry(format!("pulling orders: {err}"))
                        .await;
                }
                None => {
                    self.messages = None;
                    self.wait_before_retry("the consumer's message stream ended".to_string())
                        .await;
                }
            }
        }
    }
}

// ---- any EventLog, the embedded one in practice ----

/// A reader over an orders log, keeping only one engine's deliveries.
#[derive(Debug)]
pub struct LogOrderFeed<R> {
    reader: R,
    subject: String,
    buffered: VecDeque<RawEntry>,
}

/// The feed `gridfold demo` gives each in-process engine: the embedded orders log.
pub type EmbeddedOrderFeed = LogOrderFeed<EmbeddedReader>;

impl<R: LogReader + 'static> LogOrderFeed<R> {
    /// A feed over `log` from its first entry.
    pub async fn open<L: EventLog<Reader = R>>(
        log: &L,
        engine: &EngineId,
    ) -> Result<Self, FeedError> {
        let reader = log.reader(1).await.map_err(|source| FeedError::Log {
            location: log.location(),
            source,
        })?;
        Ok(LogOrderFeed {
            reader,
            subject: order_subject(engine),
            buffered: VecDeque::new(),
        })
    }

    /// The sequence of the next entry the feed will look at.
    pub fn position(&self) -> u64 {
        self.reader.position() - self.buffered.len() as u64
    }
}

impl<R: LogReader + 'static> OrderFeed for LogOrderFeed<R> {
    type Ack = ();

    fn location(&self) -> String {
        self.reader.location()
    }

    async fn next(&mut self) -> Result<OrderMessage<()>, FeedError> {
        let mut backoff = FEED_RETRY_BACKOFF_MIN;
        loop {
            while let Some(entry) = self.buffered.pop_front() {
                if entry.subject == self.subject {
                    return Ok(OrderMessage {
                        subject: entry.subject,
                        payload: entry.payload,
                        ack: (),
                    });
                }
            }
            // The only await: the buffer is filled after it returns, so a cancelled
            // call loses nothing.
            match self.reader.next_batch(LOG_READ_BATCH, LOG_READ_WAIT).await {
                Ok(batch) => {
                    self.buffered.extend(batch.entries);
                    backoff = FEED_RETRY_BACKOFF_MIN;
                }
                Err(LogError::Unavailable { url, detail }) => {
                    tracing::warn!("order feed at {url}: {detail}; retrying in {backoff:?}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(FEED_RETRY_BACKOFF_MAX);
                }
                Err(source) => {
                    return Err(FeedError::Log {
                        location: self.reader.location(),
                        source,
                    });
                }
            }
        }
    }
}
