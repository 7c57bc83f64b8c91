//! Where an engine's orders come from: [`OrderFeed`], with one implementation per
//! log backend.
//!
//! - [`JetStreamOrderFeed`]: a **durable** pull consumer named
//!   `gridfold-engine-<engine>` on stream `GRIDFOLD_ORDERS`, filtered to
//!   `gridfold.order.<engine>`, with explicit acks. The broker keeps its position,
//!   so an engine that was away (restarted, cut off, or the broker restarted) gets
//!   what was delivered meanwhile; a message not acked within the consumer's ack
//!   wait (30 s) is delivered again.
//!
//!   The consumer carries the mark of the process that reads it (metadata
//!   [`READER_KEY`]). A process opening the feed **takes the consumer over**: if
//!   another process's mark is on it, it deletes it and makes it again from the
//!   old one's ack floor, under its own mark. Deleting it ends every pull the
//!   older process left waiting at the broker, so nothing published from then on
//!   can go to the older process and come back only after the ack wait (a message
//!   sent to a pull whose reader has gone is lost until then). The older process,
//!   pulling again, finds the newer mark and stops reading
//!   ([`FeedError::TakenOver`]): two live engines never share a name.
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
//! - [`OrderFeed::catch_up`] reads ahead to the end of the engine's order subject
//!   as it is now (JetStream: the consumer has nothing undelivered and every
//!   message delivered and not acknowledged is in hand; a log: its last entry is
//!   read), holding at most [`HELD_MAX`] messages for `next`, which returns them
//!   first, in order. It is cancel-safe too: what it read stays held. It lets an
//!   engine that stalled see everything the projector told it meanwhile before
//!   acting on any of it (a `Lost` behind runs decided before the loss).
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
pub const FEED_RETRY_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Messages one pull request of the durable consumer asks for.
pub const PULL_BATCH: usize = 64;
/// Entries one read of a [`LogOrderFeed`] takes from its log.
pub const LOG_READ_BATCH: usize = 1_000;
/// Most messages [`OrderFeed::catch_up`] holds; beyond them it stops, not caught up.
pub const HELD_MAX: usize = 10_000;
/// While catching up, how long one wait for a message that may still be on its way lasts.
const CATCH_UP_POLL: Duration = Duration::from_millis(50);
/// Most messages [`OrderFeed::release`] hands back, and how long it may take.
pub const RELEASE_MAX: usize = 1_000;
pub const RELEASE_WAIT: Duration = Duration::from_secs(2);
const PULL_EXPIRES: Duration = Duration::from_secs(10);
const PULL_HEARTBEAT: Duration = Duration::from_secs(1);
/// Missed heartbeats in a row (each two [`PULL_HEARTBEAT`]s of silence) after which
/// the feed drops its pull and asks the consumer again: the pull waited on a
/// consumer leader that died with its node, and async-nats would pull again only
/// when the pull expires ([`PULL_EXPIRES`] plus 5 s), 13 to 15 s after the kill.
const PULL_MISSED_HEARTBEATS_MAX: u32 = 2;
/// Bound on one look-up of the consumer: while its Raft group elects a leader the
/// look-up gets no answer, and the next one, [`FEED_RETRY_BACKOFF_MAX`] later at
/// most, may find the new leader, rather than the client's 5 s request timeout later.
const CONSUMER_LOOKUP_TIMEOUT: Duration = Duration::from_secs(1);
const LOG_READ_WAIT: Duration = Duration::from_secs(5);

/// One message on the engine's order subject, with what acknowledges it.
#[derive(Debug)]
pub struct OrderMessage<A> {
    pub subject: String,
    /// An encoded `Delivery` (decode with `wire::delivery::decode_delivery`).
    pub payload: Bytes,
    pub ack: A,
}

/// Acknowledges one message: it has been handled and must not be delivered again;
/// or hands it back, unhandled, to be delivered again at once.
pub trait OrderAck: Send + 'static {
    fn ack(self) -> impl Future<Output = Result<(), FeedError>> + Send;
    /// Not handled here: deliver it again now (to whichever reader of the feed asks next).
    fn nak(self) -> impl Future<Output = Result<(), FeedError>> + Send;
}

/// Nothing to acknowledge (a feed whose position is kept in memory).
impl OrderAck for () {
    async fn ack(self) -> Result<(), FeedError> {
        Ok(())
    }

    async fn nak(self) -> Result<(), FeedError> {
        Ok(())
    }
}

/// The engine's source of deliveries. See the module docs for the invariants.
pub trait OrderFeed: Send {
    type Ack: OrderAck;

    /// Where the feed reads from, for messages.
    fn location(&self) -> String;

    /// The next message for this engine, waiting as long as it takes (and through
    /// broker outages). Messages held by [`catch_up`](OrderFeed::catch_up) come
    /// first. An error is fatal. Cancel-safe.
    fn next(&mut self) -> impl Future<Output = Result<OrderMessage<Self::Ack>, FeedError>> + Send;

    /// Reads ahead until the feed holds every message on the engine's subject not
    /// yet acknowledged (see the module docs), or `wait` runs out, or it holds
    /// [`HELD_MAX`]. `in_hand` counts the messages the caller took from `next` and
    /// has not acknowledged yet. True if it caught up. An error is fatal. Cancel-safe.
    fn catch_up(
        &mut self,
        wait: Duration,
        in_hand: usize,
    ) -> impl Future<Output = Result<bool, FeedError>> + Send;

    /// The payloads of the messages held (read ahead, not yet returned by `next`), in order.
    fn held(&self) -> Vec<Bytes>;

    /// Stops reading and hands back, unhandled, `in_hand` (a message taken from
    /// `next` and not acknowledged), what the feed holds, and what has reached it
    /// and not been taken (at most [`RELEASE_MAX`] messages, for at most
    /// [`RELEASE_WAIT`]), so that another reader of the same feed gets them at once:
    /// for an engine that stops because a newer process took its name. Best effort.
    fn release(&mut self, in_hand: Option<Self::Ack>) -> impl Future<Output = ()> + Send;
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
    /// A newer process under this engine's name took the feed over: this one
    /// reads nothing more from it.
    #[error(
        "the order feed at {location} was taken over by another process under the same engine name \
         (consumer {consumer}); this process reads no more orders from it"
    )]
    TakenOver { location: String, consumer: String },
}

/// The metadata key of an engine's consumer naming the process that reads it.
pub const READER_KEY: &str = "gridfold-reader";
/// Most rounds of [`JetStreamOrderFeed::open`]'s take-over: another process
/// making the consumer between its delete and its create costs one round.
const TAKE_OVER_ROUNDS_MAX: u32 = 5;

/// What a process does finding another process's mark on the engine's consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ForeignMark {
    /// Opening the feed: the newest process takes the consumer over.
    TakeOver,
    /// Pulling again: a newer process took it; this one stops reading.
    Yield,
}

/// The names of an engine's consumers: the log's (the broker holds each
/// engine to its own).
pub use crate::log::jetstream::{consumer_name, keys_reader_name};

// ---- JetStream ----

/// An engine's durable pull consumer on `GRIDFOLD_ORDERS`.
pub struct JetStreamOrderFeed {
    location: String,
    stream: JsStream,
    consumer_name: String,
    filter_subject: String,
    /// This process's mark on the consumer (see the module docs).
    reader: String,
    messages: Option<pull::Stream>,
    /// Heartbeats missed in a row by `messages`.
    missed_heartbeats: u32,
    /// Read ahead by `catch_up`, returned by `next` first.
    held: VecDeque<async_nats::jetstream::Message>,
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

    /// Waits for the server to confirm it, so that a process about to exit knows
    /// the message goes to another reader now.
    async fn nak(self) -> Result<(), FeedError> {
        use async_nats::jetstream::AckKind;
        self.0
            .double_ack_with(AckKind::Nak(None))
            .await
            .map_err(|err| FeedError::Ack {
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
            reader: uuid::Uuid::new_v4().simple().to_string(),
            messages: None,
            missed_heartbeats: 0,
            held: VecDeque::new(),
            backoff: FEED_RETRY_BACKOFF_MIN,
        };
        // Take the consumer now, so deliveries published from here on are kept for
        // this process even before it first reads, and none goes to an older one.
        feed.marked_consumer(ForeignMark::TakeOver).await.map_err(|detail| FeedError::Log {
            location: feed.location.clone(),
            source: LogError::Unavailable {
                url: log.url().to_string(),
                detail,
            },
        })??;
        Ok(feed)
    }

    /// The consumer's config under this process's mark, delivering from `from`.
    fn consumer_config(&self, from: DeliverPolicy) -> pull::Config {
        pull::Config {
            durable_name: Some(self.consumer_name.clone()),
            name: Some(self.consumer_name.clone()),
            description: Some(format!("gridfold orders for {}", self.filter_subject)),
            filter_subject: self.filter_subject.clone(),
            ack_policy: AckPolicy::Explicit,
            deliver_policy: from,
            metadata: [(READER_KEY.to_string(), self.reader.clone())].into(),
            ..Default::default()
        }
    }

    fn is_ours(&self, consumer: &PullConsumer) -> bool {
        consumer.cached_info().config.metadata.get(READER_KEY) == Some(&self.reader)
    }

    /// The engine's consumer as it is now; `None` if there is none. The outer
    /// error is the broker's (retrying may help).
    async fn lookup(&self) -> Result<Option<PullConsumer>, String> {
        let lookup = self.stream.get_consumer::<pull::Config>(&self.consumer_name);
        match tokio::time::timeout(CONSUMER_LOOKUP_TIMEOUT, lookup).await {
            Ok(Ok(consumer)) => Ok(Some(consumer)),
            Ok(Err(err)) if is_not_found(&*err) => Ok(None),
            Ok(Err(err)) => Err(format!("cannot look up consumer {}: {err}", self.consumer_name)),
            Err(_) => Err(format!(
                "no answer about consumer {} within {CONSUMER_LOOKUP_TIMEOUT:?} (its leader is being elected?)",
                self.consumer_name
            )),
        }
    }

    /// Makes the consumer under this process's mark if no consumer of that name
    /// exists. `Ok(None)`: one does (made meanwhile by another process).
    async fn create(&self, from: DeliverPolicy) -> Result<Option<PullConsumer>, String> {
        use async_nats::jetstream::stream::ConsumerCreateStrictErrorKind;
        let create = self.stream.create_consumer_strict(self.consumer_config(from));
        match tokio::time::timeout(CONSUMER_LOOKUP_TIMEOUT, create).await {
            Ok(Ok(consumer)) => Ok(Some(consumer)),
            Ok(Err(err)) if err.kind() == ConsumerCreateStrictErrorKind::AlreadyExists => Ok(None),
            Ok(Err(err)) => Err(format!("cannot create consumer {}: {err}", self.consumer_name)),
            Err(_) => Err(format!(
                "no answer to creating consumer {} within {CONSUMER_LOOKUP_TIMEOUT:?}",
                self.consumer_name
            )),
        }
    }

    /// Puts this process's mark on the engine's consumer (see the module docs):
    /// keeps it if it is there, makes the consumer if there is none (delivering
    /// from the start), and otherwise, as `foreign` says, takes it over (deletes
    /// the consumer another process reads and makes it again from that one's ack
    /// floor, so that what the older process left unacknowledged comes here) or
    /// yields it ([`FeedError::TakenOver`]). The outer error is the broker's
    /// (retrying may help); the inner one, a consumer this process cannot use.
    async fn marked_consumer(&self, foreign: ForeignMark) -> Result<Result<PullConsumer, FeedError>, String> {
        for _ in 0..TAKE_OVER_ROUNDS_MAX {
            let from = match self.lookup().await? {
                Some(consumer) if self.is_ours(&consumer) => return Ok(self.check(&consumer).map(|()| consumer)),
                Some(_) if foreign == ForeignMark::Yield => {
                    return Ok(Err(FeedError::TakenOver {
                        location: self.location.clone(),
                        consumer: self.consumer_name.clone(),
                    }));
                }
                Some(consumer) => self.delete_to_take_over(&consumer).await?,
                None => DeliverPolicy::All,
            };
            if let Some(consumer) = self.create(from).await? {
                return Ok(Ok(consumer));
            }
        }
        match foreign {
            ForeignMark::TakeOver => Ok(Err(FeedError::Misconfigured {
                location: self.location.clone(),
                detail: format!(
                    "consumer {} was made by another process each time this one tried to take it over ({TAKE_OVER_ROUNDS_MAX} rounds): \
                     more than one process runs under this engine's name",
                    self.consumer_name
                ),
            })),
            ForeignMark::Yield => Err(format!("consumer {} keeps appearing and vanishing", self.consumer_name)),
        }
    }

    /// Deletes `consumer`, another process's, and says where its successor
    /// starts: after the older one's ack floor.
    async fn delete_to_take_over(&self, consumer: &PullConsumer) -> Result<DeliverPolicy, String> {
        let info = consumer.cached_info();
        tracing::info!(
            consumer = %self.consumer_name,
            older_reader = info.config.metadata.get(READER_KEY).map_or("none", String::as_str),
            ack_floor = info.ack_floor.stream_sequence,
            "order feed: taking the consumer over from an older process under this engine's name"
        );
        match self.stream.delete_consumer(&self.consumer_name).await {
            Ok(_) => {}
            Err(err) if is_consumer_not_found(&err) => {}
            Err(err) => return Err(format!("cannot delete consumer {} to take it over: {err}", self.consumer_name)),
        }
        Ok(match info.ack_floor.stream_sequence {
            0 => DeliverPolicy::All,
            floor => DeliverPolicy::ByStartSequence { start_sequence: floor + 1 },
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
                    "consumer {} exists with filter {} and ack policy {}; it must filter {} with explicit acks \
                     (delete it to let the engine create it)",
                    self.consumer_name,
                    [config.filter_subject.clone()].into_iter().chain(config.filter_subjects.iter().cloned()).filter(|s| !s.is_empty()).collect::<Vec<_>>().join(", "),
                    if config.ack_policy == AckPolicy::Explicit { "explicit" } else { "not explicit" },
                    self.filter_subject
                ),
            });
        }
        Ok(())
    }

    /// Opens the message stream of the consumer (creating the consumer if it was lost).
    async fn open_messages(&mut self) -> Result<(), FeedError> {
        while self.messages.is_none() {
            match self.marked_consumer(ForeignMark::Yield).await {
                Ok(consumer) => {
                    let consumer = consumer?;
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
        tracing::warn!(consumer = %self.consumer_name, "order feed: {detail}; retrying in {}", crate::human::duration(self.backoff));
        tokio::time::sleep(self.backoff).await;
        self.backoff = (self.backoff * 2).min(FEED_RETRY_BACKOFF_MAX);
    }
}

impl JetStreamOrderFeed {
    /// The next message from the broker (not from `held`). Cancel-safe: the only
    /// awaits that may be dropped are the consumer's creation (done again) and the
    /// message stream's `next`, which loses nothing.
    async fn receive(&mut self) -> Result<async_nats::jetstream::Message, FeedError> {
        use async_nats::jetstream::consumer::pull::MessagesErrorKind;
        loop {
            self.open_messages().await?;
            let Some(messages) = self.messages.as_mut() else {
                continue;
            };
            match messages.next().await {
                Some(Ok(message)) => {
                    self.backoff = FEED_RETRY_BACKOFF_MIN;
                    self.missed_heartbeats = 0;
                    return Ok(message);
                }
                // A heartbeat is late under load now and then: the pull stays. Two in
                // a row: the pull is gone with a consumer leader (see
                // [`PULL_MISSED_HEARTBEATS_MAX`]); pull again. A message that was on
                // its way to the dropped pull comes back after the consumer's ack wait.
                Some(Err(err)) if err.kind() == MessagesErrorKind::MissingHeartbeat => {
                    self.missed_heartbeats += 1;
                    if self.missed_heartbeats >= PULL_MISSED_HEARTBEATS_MAX {
                        tracing::info!(consumer = %self.consumer_name, "order feed: {} heartbeats missed; pulling again", self.missed_heartbeats);
                        self.missed_heartbeats = 0;
                        self.messages = None;
                    } else {
                        tracing::debug!(consumer = %self.consumer_name, "order feed: {err}");
                    }
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

    /// Moves what has reached the client into `held`, waiting [`CATCH_UP_POLL`] for
    /// each next one, up to [`HELD_MAX`] held.
    async fn take_arrived(&mut self) -> Result<(), FeedError> {
        while self.held.len() < HELD_MAX {
            match tokio::time::timeout(CATCH_UP_POLL, self.receive()).await {
                Ok(message) => self.held.push_back(message?),
                Err(_) => break,
            }
        }
        Ok(())
    }
}

/// The consumer (or its stream) does not exist, from a look-up's error.
fn is_not_found(err: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    use async_nats::jetstream::context::{ConsumerInfoError, ConsumerInfoErrorKind};
    err.downcast_ref::<ConsumerInfoError>()
        .is_some_and(|err| matches!(err.kind(), ConsumerInfoErrorKind::NotFound))
}

/// The consumer to delete was not there (deleted meanwhile).
fn is_consumer_not_found(err: &async_nats::jetstream::stream::ConsumerError) -> bool {
    use async_nats::jetstream::ErrorCode;
    use async_nats::jetstream::stream::ConsumerErrorKind;
    matches!(err.kind(), ConsumerErrorKind::JetStream(err) if err.error_code() == ErrorCode::CONSUMER_NOT_FOUND)
}

fn order_message(message: async_nats::jetstream::Message) -> OrderMessage<JetStreamAck> {
    OrderMessage {
        subject: message.subject.to_string(),
        payload: message.payload.clone(),
        ack: JetStreamAck(message),
    }
}

impl OrderFeed for JetStreamOrderFeed {
    type Ack = JetStreamAck;

    fn location(&self) -> String {
        self.location.clone()
    }

    async fn next(&mut self) -> Result<OrderMessage<JetStreamAck>, FeedError> {
        if let Some(message) = self.held.pop_front() {
            return Ok(order_message(message));
        }
        self.receive().await.map(order_message)
    }

    /// Caught up when the consumer has nothing undelivered and no more messages
    /// delivered and unacknowledged than the feed holds: a message delivered to
    /// an earlier pull of this process and lost with it comes back only after the
    /// consumer's ack wait, so then `wait` runs out.
    async fn catch_up(&mut self, wait: Duration, in_hand: usize) -> Result<bool, FeedError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            self.take_arrived().await?;
            if self.held.len() >= HELD_MAX {
                tracing::warn!(consumer = %self.consumer_name, held = self.held.len(), "order feed: catching up stopped at the most it holds");
                return Ok(false);
            }
            let asked = tokio::time::timeout_at(deadline, self.stream.consumer_info(&self.consumer_name)).await;
            match asked {
                Ok(Ok(info))
                    if info.num_pending == 0 && info.num_ack_pending <= self.held.len() + in_hand =>
                {
                    return Ok(true);
                }
                Ok(Ok(info)) => tracing::debug!(
                    consumer = %self.consumer_name,
                    pending = info.num_pending,
                    ack_pending = info.num_ack_pending,
                    held = self.held.len(),
                    "order feed: catching up"
                ),
                Ok(Err(err)) => tracing::warn!(consumer = %self.consumer_name, "order feed: cannot read the consumer's state while catching up: {err}"),
                Err(_) => {}
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(false);
            }
        }
    }

    fn held(&self) -> Vec<Bytes> {
        self.held.iter().map(|message| message.payload.clone()).collect()
    }

    /// Takes what has reached the client without waiting, stops pulling (so what
    /// it hands back goes to the other reader, not here again: the broker drops a
    /// pull request nobody listens to any more), then hands back everything. A
    /// message still on its way to the dropped pull comes back after the
    /// consumer's ack wait.
    async fn release(&mut self, in_hand: Option<JetStreamAck>) {
        use futures::FutureExt as _;
        if let Some(messages) = self.messages.as_mut() {
            while self.held.len() < RELEASE_MAX {
                match messages.next().now_or_never() {
                    Some(Some(Ok(message))) => self.held.push_back(message),
                    _ => break,
                }
            }
        }
        self.messages = None;
        let held = std::mem::take(&mut self.held);
        let all: Vec<JetStreamAck> =
            in_hand.into_iter().chain(held.into_iter().map(JetStreamAck)).take(RELEASE_MAX).collect();
        let count = all.len();
        let handed_back = tokio::time::timeout(RELEASE_WAIT, async {
            for ack in all {
                if let Err(err) = ack.nak().await {
                    tracing::warn!("{err}; it comes again after the consumer's ack wait");
                }
            }
        })
        .await;
        match handed_back {
            Ok(()) => tracing::info!(consumer = %self.consumer_name, count, "order feed: handed back what it held"),
            Err(_) => tracing::warn!(consumer = %self.consumer_name, count, "order feed: not all it held was handed back within {RELEASE_WAIT:?}"),
        }
    }
}


// ---- any EventLog, the embedded one in practice ----

/// A reader over an orders log, keeping only one engine's deliveries.
#[derive(Debug)]
pub struct LogOrderFeed<R> {
    reader: R,
    subject: String,
    /// This engine's entries read and not yet returned, in order.
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
        self.buffered
            .front()
            .map_or(self.reader.position(), |entry| entry.seq)
    }

    /// Reads one batch, waiting up to `wait` for its first entry, and keeps this
    /// engine's entries. `Some(true)` when the log held nothing more; `None` when
    /// it is unavailable (said in the log; the caller waits and tries again).
    /// Cancel-safe: the buffer is filled after the only await returns.
    async fn read_batch(&mut self, wait: Duration) -> Result<Option<bool>, FeedError> {
        match self.reader.next_batch(LOG_READ_BATCH, wait).await {
            Ok(batch) => {
                let subject = &self.subject;
                self.buffered.extend(
                    batch
                        .entries
                        .into_iter()
                        .filter(|entry| entry.subject == *subject),
                );
                Ok(Some(batch.caught_up))
            }
            Err(LogError::Unavailable { url, detail }) => {
                tracing::warn!("order feed at {url}: {detail}");
                Ok(None)
            }
            Err(source) => Err(FeedError::Log {
                location: self.reader.location(),
                source,
            }),
        }
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
            if let Some(entry) = self.buffered.pop_front() {
                return Ok(OrderMessage {
                    subject: entry.subject,
                    payload: entry.payload,
                    ack: (),
                });
            }
            match self.read_batch(LOG_READ_WAIT).await? {
                Some(_) => backoff = FEED_RETRY_BACKOFF_MIN,
                None => {
                    tracing::warn!("order feed: retrying in {}", crate::human::duration(backoff));
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(FEED_RETRY_BACKOFF_MAX);
                }
            }
        }
    }

    /// Caught up once a read finds nothing after what it returned: the log's end.
    async fn catch_up(&mut self, wait: Duration, _in_hand: usize) -> Result<bool, FeedError> {
        let deadline = tokio::time::Instant::now() + wait;
        while self.buffered.len() < HELD_MAX {
            match tokio::time::timeout_at(deadline, self.read_batch(Duration::ZERO)).await {
                Ok(Ok(Some(true))) => return Ok(true),
                Ok(Ok(Some(false))) => {}
                Ok(Ok(None)) => {
                    let retry_at = tokio::time::Instant::now() + FEED_RETRY_BACKOFF_MIN;
                    tokio::time::sleep_until(retry_at.min(deadline)).await;
                }
                Ok(Err(err)) => return Err(err),
                Err(_) => return Ok(false),
            }
        }
        tracing::warn!(held = self.buffered.len(), "order feed: catching up stopped at the most it holds");
        Ok(false)
    }

    fn held(&self) -> Vec<Bytes> {
        self.buffered
            .iter()
            .map(|entry| entry.payload.clone())
            .collect()
    }

    /// Nothing to hand back: every reader of a log reads all of it.
    async fn release(&mut self, _in_hand: Option<()>) {}
}
