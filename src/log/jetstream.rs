//! The log on NATS JetStream (async-nats 0.51): one stream, `GRIDFOLD_EVENTS`, over
//! `gridfold.ev.>`, whose stream sequence is the total order and whose stored
//! timestamp is the log time.
//!
//! - [`JetStreamLog::connect`] creates the stream if it is missing (file storage,
//!   no limits, `deny_delete`/`deny_purge`: append-only, `allow_direct`) and otherwise
//!   checks that it can serve as the log: a stream with limits that delete entries,
//!   memory storage, another retention policy or another duplicate window is refused.
//!   [`JetStreamLog::open`] connects with a [`BrokerAccess`] (credentials, TLS); with
//!   [`StreamSetup::Bind`] it never creates a stream and answers
//!   [`LogError::StreamMissing`] for one that is not there: on a broker with
//!   permissions, only the projector and the operator may create streams.
//! - Appends set `Nats-Msg-Id` and `Nats-Expected-Last-Subject-Sequence`; a refusal of
//!   the latter (error 10071) becomes [`LogError::WrongLastSequence`].
//!   [`EventLog::append_batch`] keeps up to [`LogConfig::publish_window`] publishes
//!   in flight and awaits every ack, never dropping one unseen.
//! - A [`JetStreamReader`] is an ephemeral pull consumer with no acks, reading batches
//!   of up to [`READ_PULL_BATCH`] messages. Like the client's ordered consumer it checks
//!   each message's consumer sequence and recreates itself from its position on a gap,
//!   a missed heartbeat or a lost consumer (broker restart); unlike it, it asks for
//!   batches of 10,000 rather than 500 (NATS.md: about twice as fast).
//!
//! - An append that carries a message id waits [`LogConfig::ack_timeout`] (1 s) for
//!   its ack and is sent again, with the same id, while the broker is away (an ack
//!   lost with a node, a stream electing its leader), for up to
//!   [`LogConfig::publish_retry_window`]: the broker's dedupe stores it once and
//!   answers a second copy with the first one's sequence (`duplicate`). So an ack
//!   lost with a node costs about a second, not the whole request timeout. An append
//!   without a message id is sent once and waits the request timeout.
//!
//! It does not create durable consumers, and knows nothing of the payloads.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, ReplayPolicy, pull};
use async_nats::jetstream::context::{
    GetStreamErrorKind, PublishAckFuture, PublishError, PublishErrorKind,
};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::{
    self, DirectGetErrorKind, DiscardPolicy, RetentionPolicy, StorageType,
};
use async_nats::jetstream::{self as js, ErrorCode};
use futures::{FutureExt, StreamExt};
use tokio::sync::Semaphore;

use super::connect::{BrokerAccess, ConnectFailure, Refusals};
use crate::core::ids::EngineId;

use super::{
    Append, Appended, DUPLICATE_WINDOW_DEFAULT, EventLog, LogError, LogReader,
    PAYLOAD_BYTES_MAX_DEFAULT, READ_BATCH_MAX, RawEntry, ReadBatch, SUBJECTS_ALL,
};

/// The name of the log's stream.
pub const STREAM_EVENTS: &str = "GRIDFOLD_EVENTS";
/// The stream that delivers orders to engines, and its subjects.
pub const STREAM_ORDERS: &str = "GRIDFOLD_ORDERS";
pub const SUBJECTS_ORDERS: &str = "gridfold.order.>";
/// The key-value bucket of the projector's leader lease.
pub const LEASE_BUCKET: &str = "GRIDFOLD_LEADER";

/// The name of an engine's durable consumer on `GRIDFOLD_ORDERS`: the broker
/// lets each engine make and read this one only.
pub fn consumer_name(engine: &EngineId) -> String {
    format!("gridfold-engine-{engine}")
}

/// The name of the consumer an engine reads the keys' subject with
/// (`wire::KEYS_SUBJECT` on `GRIDFOLD_EVENTS`, made and deleted per reading).
pub fn keys_reader_name(engine: &EngineId) -> String {
    format!("gridfold-keys-{engine}")
}
/// Messages asked for per pull request when reading.
pub const READ_PULL_BATCH: usize = 10_000;
/// Bytes asked for per pull request when reading, so that a batch of large payloads
/// stays bounded in memory.
pub const READ_PULL_BYTES_MAX: usize = 64 * 1024 * 1024;
/// The server drops a reader's consumer after this long without a pull.
const READER_INACTIVE_THRESHOLD: Duration = Duration::from_secs(60);
/// A reader whose consumer went with a lost node notices after two missed heartbeats.
const READER_HEARTBEAT: Duration = Duration::from_secs(1);
const READER_EXPIRES: Duration = Duration::from_secs(10);
/// The default [`LogConfig::ack_timeout`]: a publish round trip is about 0.2 ms
/// here (NATS.md), so a second is an ack lost, not a slow one.
pub const PUBLISH_ACK_TIMEOUT: Duration = Duration::from_secs(1);
/// The default [`LogConfig::publish_retry_window`]: more than nats-server's Raft
/// election timeout (4 to 9 s), so that a publish outlasts an election.
pub const PUBLISH_RETRY_WINDOW: Duration = Duration::from_secs(12);
/// Shortest time one send of a retried append takes, so that a broker answering at
/// once "no responders" is not asked in a busy loop.
const PUBLISH_ATTEMPT_MIN: Duration = Duration::from_millis(250);

#[derive(Debug, Clone)]
pub struct LogConfig {
    /// Stream name.
    pub stream: String,
    /// Subjects of the stream; must include `gridfold.ev.>`.
    pub subjects: Vec<String>,
    /// Stream replicas (1 for a single server; 3 for a cluster).
    pub replicas: usize,
    /// How long the broker remembers a `Nats-Msg-Id`.
    pub duplicate_window: Duration,
    /// Largest payload; also the stream's `max_msg_size`.
    pub payload_bytes_max: usize,
    /// Publishes in flight per [`EventLog::append_batch`].
    pub publish_window: usize,
    /// Publishes in flight over all appends of this log (the context's `max_ack_inflight`);
    /// at least `publish_window`.
    pub ack_inflight_max: usize,
    /// Bound on each API request and publish ack.
    pub request_timeout: Duration,
    /// Bound on establishing the connection.
    pub connect_timeout: Duration,
    /// How long an append with a message id waits for its ack before sending it again
    /// (at most `request_timeout`).
    pub ack_timeout: Duration,
    /// How long one append with a message id is sent again while the broker is away
    /// (zero: sent once). Each send takes at least 250 ms, so at most
    /// `publish_retry_window / 250 ms + 1` sends.
    pub publish_retry_window: Duration,
    /// Whether this client creates the streams it uses or only binds to them.
    pub streams: StreamSetup,
}

/// Who makes the streams: on a broker with permissions only the projector and the
/// operator may (`gridfold broker-config`), so every other command binds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StreamSetup {
    /// Create a missing stream; check an existing one.
    #[default]
    CreateOrCheck,
    /// Use the streams as they are; a missing one is [`LogError::StreamMissing`].
    Bind,
}

/// What to do when a stream is missing, for [`LogError::StreamMissing`].
const EVENTS_STREAM_HINT: &str =
    "the projector creates it when it starts, or an operator with `gridfold setup`: start one of them";
const ORDERS_STREAM_HINT: &str = EVENTS_STREAM_HINT;

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            stream: STREAM_EVENTS.to_string(),
            subjects: vec![SUBJECTS_ALL.to_string()],
            replicas: 1,
            duplicate_window: DUPLICATE_WINDOW_DEFAULT,
            payload_bytes_max: PAYLOAD_BYTES_MAX_DEFAULT,
            publish_window: 4_096,
            ack_inflight_max: 16_384,
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            ack_timeout: PUBLISH_ACK_TIMEOUT,
            publish_retry_window: PUBLISH_RETRY_WINDOW,
            streams: StreamSetup::CreateOrCheck,
        }
    }
}

/// A connection made by [`JetStreamLog::connect_client`], not yet bound to a stream.
pub struct Connected {
    client: async_nats::Client,
    refusals: Refusals,
}

impl std::fmt::Debug for Connected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connected").field("server", &connected_server(&self.client)).finish_non_exhaustive()
    }
}

/// The log in a JetStream stream. Cheap to clone: clones share one connection.
#[derive(Debug, Clone)]
pub struct JetStreamLog {
    url: String,
    config: Arc<LogConfig>,
    client: async_nats::Client,
    context: js::Context,
    stream: stream::Stream,
    /// Permits for publishes in flight, taken before publishing so that no caller
    /// ever waits for a permit while holding un-awaited acks (NATS.md: that never returns).
    inflight: Arc<Semaphore>,
    /// What the broker refused this connection (permissions), to tell a refusal
    /// from a broker that is slow or away.
    refusals: Refusals,
}

impl JetStreamLog {
    /// Connects to the broker at `url` without credentials or TLS, and creates or
    /// checks the stream as `config.streams` says.
    pub async fn connect(url: &str, config: LogConfig) -> Result<JetStreamLog, LogError> {
        JetStreamLog::open(&BrokerAccess::anonymous(url), config).await
    }

    /// Connects to the broker as `access` says (credentials, TLS) and creates, checks
    /// or binds to the stream as `config.streams` says.
    pub async fn open(access: &BrokerAccess, config: LogConfig) -> Result<JetStreamLog, LogError> {
        let connected = JetStreamLog::connect_client(access, &config).await?;
        JetStreamLog::open_connected(access, connected, config).await
    }

    /// The first half of [`JetStreamLog::open`]: connects to one of the servers of
    /// `access` (an error here is a broker that is not there or refuses this
    /// client, never one that is busy electing leaders).
    pub async fn connect_client(access: &BrokerAccess, config: &LogConfig) -> Result<Connected, LogError> {
        let url = access.url.as_str();
        if !config
            .subjects
            .iter()
            .any(|subject| subject == SUBJECTS_ALL)
        {
            return Err(LogError::Misconfigured {
                location: url.to_string(),
                detail: format!(
                    "the stream's subjects ({}) must include {SUBJECTS_ALL}",
                    config.subjects.join(", ")
                ),
            });
        }
        let refusals = Refusals::default();
        let options = access
            .connect_options("gridfold", &refusals)
            .map_err(|err| LogError::Refused {
                url: url.to_string(),
                detail: err.to_string(),
            })?;
        let client = options
            .connection_timeout(config.connect_timeout)
            .request_timeout(Some(config.request_timeout))
            .connect(crate::log::connect::server_urls(url))
            .await
            .map_err(|err| match access.classify(&err) {
                ConnectFailure::Refused(detail) => LogError::Refused {
                    url: url.to_string(),
                    detail,
                },
                ConnectFailure::Unreachable(detail) => LogError::Unavailable {
                    url: url.to_string(),
                    detail,
                },
            })?;
        tracing::info!("connected to {} (of {url})", connected_server(&client));
        Ok(Connected { client, refusals })
    }

    /// The second half of [`JetStreamLog::open`], over a connection made by
    /// [`JetStreamLog::connect_client`]: creates, checks or binds to the stream. An
    /// [`LogError::Unavailable`] here is a broker connected that did not answer in
    /// time (a stream or the cluster electing its leader, a node lost).
    pub async fn open_connected(access: &BrokerAccess, connected: Connected, config: LogConfig) -> Result<JetStreamLog, LogError> {
        let url = access.url.as_str();
        let Connected { client, refusals } = connected;
        let publish_window = config.publish_window.max(1);
        let ack_inflight_max = config.ack_inflight_max.max(publish_window);
        let context = js::ContextBuilder::new()
            .timeout(config.request_timeout)
            .max_ack_inflight(ack_inflight_max)
            .backpressure_on_inflight(true)
            .build(client.clone());
        let config = LogConfig {
            publish_window,
            ack_inflight_max,
            ..config
        };
        let stream = ensure_events_stream(url, &context, &config)
            .await
            .map_err(|err| refused_instead(err, &refusals))?;
        Ok(JetStreamLog {
            url: url.to_string(),
            client,
            context,
            stream,
            inflight: Arc::new(Semaphore::new(ack_inflight_max)),
            refusals,
            config: Arc::new(config),
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The JetStream context, for the parts of gridfold that use JetStream directly
    /// (order delivery, object store).
    pub fn context(&self) -> &js::Context {
        &self.context
    }

    /// Creates the stream that delivers orders to engines (`GRIDFOLD_ORDERS` over
    /// `gridfold.order.>`, file storage, the log's duplicate window) if it is missing;
    /// with [`StreamSetup::Bind`], checks only that it exists.
    pub async fn ensure_order_stream(&self) -> Result<(), LogError> {
        self.ensure_order_stream_unexplained()
            .await
            .map_err(|err| refused_instead(err, &self.refusals))
    }

    async fn ensure_order_stream_unexplained(&self) -> Result<(), LogError> {
        if self.config.streams == StreamSetup::Bind {
            return match self.context.get_stream(STREAM_ORDERS).await {
                Ok(stream) => self.check_order_stream(&stream),
                Err(err) if is_stream_not_found(&err) => Err(LogError::StreamMissing {
                    url: self.url.clone(),
                    stream: STREAM_ORDERS.to_string(),
                    hint: ORDERS_STREAM_HINT.to_string(),
                }),
                Err(err) => {
                    Err(self.unavailable(format!("cannot get stream {STREAM_ORDERS}: {err}")))
                }
            };
        }
        let config = stream::Config {
            name: STREAM_ORDERS.to_string(),
            description: Some("gridfold orders for engines, one subject per engine".to_string()),
            subjects: vec![SUBJECTS_ORDERS.to_string()],
            storage: StorageType::File,
            num_replicas: self.config.replicas,
            duplicate_window: self.config.duplicate_window,
            allow_direct: true,
            ..Default::default()
        };
        let stream = self
            .context
            .get_or_create_stream(config)
            .await
            .map_err(|err| {
                self.unavailable(format!(
                    "cannot create or get stream {STREAM_ORDERS}: {err}"
                ))
            })?;
        self.check_order_stream(&stream)?;
        raise_replicas(&self.context, STREAM_ORDERS, self.config.replicas)
            .await
            .map_err(|detail| LogError::Misconfigured { location: self.url.clone(), detail })?;
        Ok(())
    }

    /// The order stream found is one of gridfold's own making: nothing copies
    /// engines' deliveries elsewhere ([`super::stream_check`]).
    fn check_order_stream(&self, stream: &stream::Stream) -> Result<(), LogError> {
        super::stream_check::check_fit(&stream.cached_info().config, &[SUBJECTS_ORDERS])
            .map_err(|unfit| LogError::Misconfigured { location: self.url.clone(), detail: unfit.to_string() })
    }

    fn unavailable(&self, detail: String) -> LogError {
        unavailable(&self.url, &self.client, detail)
    }

    fn validate(&self, msg: &Append) -> Result<(), LogError> {
        super::validate_append(msg, self.config.payload_bytes_max)
    }

    /// Sends one publish; the caller holds an in-flight permit for it.
    async fn send(&self, msg: Append) -> Result<InFlight, LogError> {
        let mut publish = PublishMessage::build().payload(msg.payload);
        if let Some(msg_id) = &msg.msg_id {
            publish = publish.message_id(msg_id);
        }
        if let Some(expected) = msg.expected_last_subject_seq {
            publish = publish.expected_last_subject_sequence(expected);
        }
        let ack = self
            .context
            .send_publish(msg.subject.clone(), publish)
            .await
            .map_err(|err| self.publish_error(&msg.subject, msg.expected_last_subject_seq, err))?;
        Ok(InFlight {
            ack,
            subject: msg.subject,
            expected: msg.expected_last_subject_seq,
        })
    }

    async fn complete(&self, in_flight: InFlight) -> Result<Appended, LogError> {
        let ack = in_flight
            .ack
            .await
            .map_err(|err| self.publish_error(&in_flight.subject, in_flight.expected, err))?;
        if ack.stream != self.config.stream {
            return Err(LogError::Misconfigured {
                location: self.url.clone(),
                detail: format!(
                    "{} was stored in stream {}, not {}: another stream overlaps the log's subjects",
                    in_flight.subject, ack.stream, self.config.stream
                ),
            });
        }
        Ok(Appended {
            seq: ack.sequence,
            duplicate: ack.duplicate,
        })
    }

    /// The ack timeout of an append with a message id (see the module docs).
    pub fn ack_timeout(&self) -> Duration {
        self.config.ack_timeout.min(self.config.request_timeout)
    }

    /// Sends `msg` and waits for its ack; with a message id, sends it again while the
    /// broker is away (see the module docs). The caller holds an in-flight permit.
    async fn append_retrying(&self, msg: Append) -> Result<Appended, LogError> {
        let (ack_timeout, window) = match msg.msg_id {
            Some(_) => (self.ack_timeout(), self.config.publish_retry_window),
            None => (self.config.request_timeout, Duration::ZERO),
        };
        let give_up_at = tokio::time::Instant::now() + window;
        let attempts_max = u32::try_from(window.as_millis() / PUBLISH_ATTEMPT_MIN.as_millis()).unwrap_or(u32::MAX).saturating_add(1);
        let mut attempt: u32 = 1;
        loop {
            let started = tokio::time::Instant::now();
            let answer = match self.send(msg.clone()).await {
                Ok(in_flight) => {
                    let (subject, expected) = (in_flight.subject.clone(), in_flight.expected);
                    match tokio::time::timeout(ack_timeout, self.complete(in_flight)).await {
                        Ok(answer) => answer,
                        Err(_) => Err(self.publish_error(
                            &subject,
                            expected,
                            PublishError::new(PublishErrorKind::TimedOut),
                        )),
                    }
                }
                Err(err) => Err(err),
            };
            match answer {
                Err(err @ LogError::Unavailable { .. })
                    if attempt < attempts_max && started + PUBLISH_ATTEMPT_MIN < give_up_at =>
                {
                    tracing::debug!(
                        attempt,
                        attempts_max,
                        "publish on {}: {err}; sending it again with the same message id",
                        msg.subject
                    );
                    tokio::time::sleep_until(started + PUBLISH_ATTEMPT_MIN).await;
                    attempt += 1;
                }
                Ok(appended) if attempt > 1 => {
                    tracing::info!(attempt, seq = appended.seq, duplicate = appended.duplicate, "publish on {} stored after {attempt} sends", msg.subject);
                    return Ok(appended);
                }
                answer => return answer,
            }
        }
    }

    fn publish_error(&self, subject: &str, expected: Option<u64>, err: PublishError) -> LogError {
        match err.kind() {
            PublishErrorKind::WrongLastSequence => LogError::WrongLastSequence {
                subject: subject.to_string(),
                expected: expected.unwrap_or_default(),
                actual: parse_actual_last_sequence(&err.to_string()),
            },
            PublishErrorKind::MaxPayloadExceeded | PublishErrorKind::WrongLastMessageId => {
                LogError::Rejected { detail: format!("{subject}: {err}") }
            }
            PublishErrorKind::StreamNotFound => self.unavailable(format!(
                "no stream answered for {subject} (JetStream not ready, or stream {} deleted): {err}",
                self.config.stream
            )),
            // The broker drops a publish it refuses by permission and says so aside;
            // the ack then never comes.
            PublishErrorKind::TimedOut if self.refusals.about(subject).is_some() => LogError::Rejected {
                detail: format!(
                    "{subject}: {}",
                    self.refusals.about(subject).unwrap_or_default()
                ),
            },
            PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe | PublishErrorKind::MaxAckPending => {
                self.unavailable(format!("publish on {subject}: {err}"))
            }
            PublishErrorKind::Other => {
                // A reply from the server refusing the message, or a failure to send it.
                let server_refused = std::error::Error::source(&err)
                    .is_some_and(|source| source.downcast_ref::<js::Error>().is_some());
                if server_refused {
                    LogError::Rejected { detail: format!("{subject}: {err}") }
                } else {
                    self.unavailable(format!("publish on {subject}: {err}"))
                }
            }
        }
    }
}

struct InFlight {
    ack: PublishAckFuture,
    subject: String,
    expected: Option<u64>,
}

impl EventLog for JetStreamLog {
    type Reader = JetStreamReader;

    fn location(&self) -> String {
        self.url.clone()
    }

    async fn append(&self, msg: Append) -> Result<Appended, LogError> {
        self.validate(&msg)?;
        let _permit = self
            .inflight
            .acquire()
            .await
            .expect("the semaphore is never closed");
        self.append_retrying(msg).await
    }

    async fn append_batch(&self, msgs: Vec<Append>) -> Result<Vec<Appended>, LogError> {
        for msg in &msgs {
            self.validate(msg)?;
        }
        if msgs.is_empty() {
            return Ok(Vec::new());
        }
        let window = self.config.publish_window.min(msgs.len());
        // All permits of the window at once: holding some while waiting for more could
        // deadlock against another batch doing the same.
        let _permits = self
            .inflight
            .acquire_many(u32::try_from(window).expect("window fits u32"))
            .await
            .expect("the semaphore is never closed");
        let mut answers = Vec::with_capacity(msgs.len());
        let mut in_flight: VecDeque<InFlight> = VecDeque::with_capacity(window);
        let mut first_error: Option<LogError> = None;
        for msg in msgs {
            if in_flight.len() == window {
                let oldest = in_flight.pop_front().expect("window is not empty");
                match self.complete(oldest).await {
                    Ok(answer) => answers.push(answer),
                    Err(err) => {
                        first_error = Some(err);
                        break;
                    }
                }
            }
            match self.send(msg).await {
                Ok(sent) => in_flight.push_back(sent),
                Err(err) => {
                    first_error = Some(err);
                    break;
                }
            }
        }
        // Await every ack still in flight: a dropped one would lose its error unseen.
        for sent in in_flight {
            let result = self.complete(sent).await;
            match (result, &first_error) {
                (Ok(answer), None) => answers.push(answer),
                (Ok(_), Some(_)) => {}
                (Err(err), None) => first_error = Some(err),
                (Err(err), Some(_)) => {
                    tracing::debug!("append_batch: a later publish failed too: {err}")
                }
            }
        }
        match first_error {
            Some(err) => Err(err),
            None => Ok(answers),
        }
    }

    /// Bounded by the ack timeout (1 s), not the request timeout: while the stream
    /// elects its leader the question goes unanswered, and the projector, which
    /// asks before deciding, would wait out the whole 5 s after the election was over.
    async fn last_seq(&self) -> Result<u64, LogError> {
        let bound = self.ack_timeout();
        let info = tokio::time::timeout(bound, self.stream.get_info())
            .await
            .map_err(|_| self.unavailable(format!("no answer about stream {} within {}", self.config.stream, crate::human::duration(bound))))?
            .map_err(|err| {
                self.unavailable(format!("cannot read stream {}: {err}", self.config.stream))
            })?;
        Ok(info.state.last_sequence)
    }

    /// A direct get with the subject in the request's own subject
    /// (`$JS.API.DIRECT.GET.<stream>.<subject>`), so that a broker's permissions
    /// can allow one subject's reads and no other's: an engine reads its own
    /// login subject and nothing else of the log. Any replica may answer, so on a
    /// cluster the value may trail the leader's by a moment; an append expecting
    /// it is then refused, never misplaced.
    async fn last_seq_for_subject(&self, subject: &str) -> Result<u64, LogError> {
        super::validate_subject(subject)?;
        match self.stream.direct_get_last_for_subject(subject).await {
            Ok(message) => Ok(message.sequence),
            Err(err) if err.kind() == DirectGetErrorKind::NotFound => Ok(0),
            Err(err) => {
                Err(self.unavailable(format!("cannot read the last entry on {subject}: {err}")))
            }
        }
    }

    async fn last_entry_for_subject(&self, subject: &str) -> Result<Option<RawEntry>, LogError> {
        super::validate_subject(subject)?;
        match self.stream.direct_get_last_for_subject(subject).await {
            Ok(message) => Ok(Some(RawEntry {
                seq: message.sequence,
                time_ms: u64::try_from(message.time.unix_timestamp_nanos() / 1_000_000).unwrap_or_default(),
                subject: message.subject.to_string(),
                payload: message.payload,
            })),
            Err(err) if err.kind() == DirectGetErrorKind::NotFound => Ok(None),
            Err(err) => Err(self.unavailable(format!("cannot read the last entry on {subject}: {err}"))),
        }
    }

    /// A pull consumer named `reader`, filtered to `subject` from `after + 1`
    /// without acks, made with the name and filter in the request's subject
    /// (`$JS.API.CONSUMER.CREATE.<stream>.<reader>.<subject>`), read for as many
    /// messages as it had pending when made, then deleted. One left behind by
    /// a process that died (it lives a minute unread) is deleted and made again.
    async fn read_subject(&self, subject: &str, after: u64, reader: &str, max: usize) -> Result<Vec<RawEntry>, LogError> {
        super::validate_subject(subject)?;
        let config = pull::Config {
            name: Some(reader.to_string()),
            filter_subject: subject.to_string(),
            deliver_policy: match after {
                0 => DeliverPolicy::All,
                after => DeliverPolicy::ByStartSequence { start_sequence: after + 1 },
            },
            ack_policy: AckPolicy::None,
            replay_policy: ReplayPolicy::Instant,
            inactive_threshold: READER_INACTIVE_THRESHOLD,
            memory_storage: true,
            num_replicas: 1,
            description: Some(format!("gridfold reader of {subject}")),
            ..Default::default()
        };
        let consumer = match self.stream.create_consumer(config.clone()).await {
            Ok(consumer) => consumer,
            Err(first) => {
                // One of that name with another start (a process that died reading).
                let _ = self.stream.delete_consumer(reader).await;
                self.stream.create_consumer(config).await.map_err(|err| {
                    self.unavailable(format!("cannot make the reader {reader} of {subject}: {err} (first: {first})"))
                })?
            }
        };
        let pending = consumer.cached_info().num_pending;
        let read = async {
            if pending > max as u64 {
                return Err(LogError::Rejected { detail: format!("{pending} entries on {subject}, more than {max}") });
            }
            let mut found: Vec<RawEntry> = Vec::with_capacity(pending as usize);
            while (found.len() as u64) < pending {
                let want = (pending as usize - found.len()).min(READ_PULL_BATCH);
                let mut batch = consumer
                    .batch()
                    .max_messages(want)
                    .expires(READER_EXPIRES)
                    .messages()
                    .await
                    .map_err(|err| self.unavailable(format!("cannot read {subject}: {err}")))?;
                let before = found.len();
                while let Some(message) = batch.next().await {
                    let message = message.map_err(|err| self.unavailable(format!("reading {subject}: {err}")))?;
                    let info = message.info().map_err(|err| LogError::Corrupt {
                        location: self.url.clone(),
                        detail: format!("bad message metadata: {err}"),
                    })?;
                    let (seq, time_ms) = (
                        info.stream_sequence,
                        u64::try_from(info.published.unix_timestamp_nanos() / 1_000_000).unwrap_or_default(),
                    );
                    found.push(RawEntry { seq, time_ms, subject: message.subject.to_string(), payload: message.payload.clone() });
                }
                if found.len() == before {
                    return Err(self.unavailable(format!("no entry of {subject} came within {}", crate::human::duration(READER_EXPIRES))));
                }
            }
            Ok(found)
        }
        .await;
        if let Err(err) = self.stream.delete_consumer(reader).await {
            tracing::debug!(reader, "deleting the reader of {subject}: {err} (the broker drops it after a minute)");
        }
        read
    }

    async fn reader(&self, from_seq: u64) -> Result<JetStreamReader, LogError> {
        let mut reader = JetStreamReader {
            url: self.url.clone(),
            client: self.client.clone(),
            stream: self.stream.clone(),
            position: super::first_seq(from_seq),
            cursor: None,
            known_pending: None,
        };
        reader.cursor = Some(reader.open_cursor().await?);
        Ok(reader)
    }
}

/// A cursor over a [`JetStreamLog`]: an ephemeral pull consumer from its position.
pub struct JetStreamReader {
    url: String,
    client: async_nats::Client,
    stream: stream::Stream,
    position: u64,
    cursor: Option<Cursor>,
    /// How many entries the server had after the last one delivered (or after the
    /// start, for a fresh consumer). `None`: unknown.
    known_pending: Option<u64>,
}

struct Cursor {
    consumer_name: String,
    messages: pull::Stream,
    /// The consumer sequence of the last message taken: the next must be one more.
    consumer_seq: u64,
}

impl std::fmt::Debug for JetStreamReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JetStreamReader")
            .field("url", &self.url)
            .field("position", &self.position)
            .field(
                "consumer",
                &self.cursor.as_ref().map(|cursor| &cursor.consumer_name),
            )
            .finish_non_exhaustive()
    }
}

/// What one message did to a batch being read.
enum Taken {
    Entry(RawEntry),
    /// The cursor is broken (gap, lost consumer, broker away): drop it.
    Broken(LogError),
}

impl JetStreamReader {
    async fn open_cursor(&mut self) -> Result<Cursor, LogError> {
        let deliver_policy = if self.position <= 1 {
            DeliverPolicy::All
        } else {
            DeliverPolicy::ByStartSequence {
                start_sequence: self.position,
            }
        };
        let config = pull::Config {
            deliver_policy,
            ack_policy: AckPolicy::None,
            replay_policy: ReplayPolicy::Instant,
            inactive_threshold: READER_INACTIVE_THRESHOLD,
            memory_storage: true,
            num_replicas: 1,
            description: Some("gridfold log reader".to_string()),
            ..Default::default()
        };
        let consumer = self.stream.create_consumer(config).await.map_err(|err| {
            unavailable(
                &self.url,
                &self.client,
                format!("cannot create a reader from {}: {err}", self.position),
            )
        })?;
        let info = consumer.cached_info();
        self.known_pending = Some(info.num_pending);
        let consumer_name = info.name.clone();
        let messages = consumer
            .stream()
            .max_messages_per_batch(READ_PULL_BATCH)
            .max_bytes_per_batch(READ_PULL_BYTES_MAX)
            .expires(READER_EXPIRES)
            .heartbeat(READER_HEARTBEAT)
            .messages()
            .await
            .map_err(|err| {
                unavailable(
                    &self.url,
                    &self.client,
                    format!("cannot start reading: {err}"),
                )
            })?;
        Ok(Cursor {
            consumer_name,
            messages,
            consumer_seq: 0,
        })
    }

    fn take(
        &self,
        cursor: &mut Cursor,
        next_seq: u64,
        message: Option<Result<js::Message, pull::MessagesError>>,
    ) -> Result<(Taken, u64), LogError> {
        let message = match message {
            Some(Ok(message)) => message,
            Some(Err(err)) => {
                return Ok((
                    Taken::Broken(unavailable(
                        &self.url,
                        &self.client,
                        format!("reading: {err}"),
                    )),
                    0,
                ));
            }
            None => {
                return Ok((
                    Taken::Broken(unavailable(
                        &self.url,
                        &self.client,
                        "the reader's consumer ended".into(),
                    )),
                    0,
                ));
            }
        };
        let info = message.info().map_err(|err| LogError::Corrupt {
            location: self.url.clone(),
            detail: format!("bad message metadata: {err}"),
        })?;
        if info.consumer_sequence != cursor.consumer_seq + 1 {
            // A message was lost between server and client (or the consumer was reset).
            return Ok((
                Taken::Broken(unavailable(
                    &self.url,
                    &self.client,
                    format!(
                        "reader's consumer skipped from {} to {}; reading again from {next_seq}",
                        cursor.consumer_seq, info.consumer_sequence
                    ),
                )),
                0,
            ));
        }
        cursor.consumer_seq = info.consumer_sequence;
        if info.stream_sequence != next_seq {
            return Err(LogError::Corrupt {
                location: self.url.clone(),
                detail: format!(
                    "expected entry {next_seq} of stream {}, got {}: entries are missing",
                    info.stream, info.stream_sequence
                ),
            });
        }
        let time_ms =
            u64::try_from(info.published.unix_timestamp_nanos() / 1_000_000).unwrap_or_default();
        let pending = info.pending;
        let message = message.message;
        let entry = RawEntry {
            seq: next_seq,
            time_ms,
            subject: message.subject.to_string(),
            payload: message.payload,
        };
        Ok((Taken::Entry(entry), pending))
    }
}

impl LogReader for JetStreamReader {
    fn position(&self) -> u64 {
        self.position
    }

    fn location(&self) -> String {
        self.url.clone()
    }

    async fn next_batch(&mut self, max: usize, wait: Duration) -> Result<ReadBatch, LogError> {
        let max = max.clamp(1, READ_BATCH_MAX);
        let mut cursor = match self.cursor.take() {
            Some(cursor) => cursor,
            None => self.open_cursor().await?,
        };
        let mut entries: Vec<RawEntry> = Vec::new();
        let mut broken: Option<LogError> = None;
        let mut pending = self.known_pending;
        while entries.len() < max {
            let message = if entries.is_empty() && !wait.is_zero() {
                match tokio::time::timeout(wait, cursor.messages.next()).await {
                    Ok(message) => message,
                    Err(_elapsed) => break,
                }
            } else {
                // Take only what has already arrived.
                match cursor.messages.next().now_or_never() {
                    Some(message) => message,
                    None => break,
                }
            };
            let next_seq = self.position + entries.len() as u64;
            match self.take(&mut cursor, next_seq, message)? {
                (Taken::Entry(entry), entry_pending) => {
                    entries.push(entry);
                    pending = Some(entry_pending);
                }
                (Taken::Broken(err), _) => {
                    broken = Some(err);
                    break;
                }
            }
        }
        self.position += entries.len() as u64;
        match broken {
            Some(err) => {
                // Drop the consumer; the next call makes a new one from the position.
                self.known_pending = None;
                delete_consumer_later(&self.stream, cursor.consumer_name);
                if entries.is_empty() {
                    return Err(err);
                }
                tracing::debug!("log reader: {err}");
            }
            None => {
                self.known_pending = pending;
                self.cursor = Some(cursor);
            }
        }
        Ok(ReadBatch {
            caught_up: self.known_pending == Some(0),
            entries,
        })
    }
}

impl Drop for JetStreamReader {
    fn drop(&mut self) {
        if let Some(cursor) = self.cursor.take() {
            delete_consumer_later(&self.stream, cursor.consumer_name);
        }
    }
}

/// Deletes a reader's consumer in the background if a runtime is at hand; otherwise
/// the server drops it after [`READER_INACTIVE_THRESHOLD`].
fn delete_consumer_later(stream: &stream::Stream, consumer_name: String) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        let stream = stream.clone();
        runtime.spawn(async move {
            let _ = stream.delete_consumer(&consumer_name).await;
        });
    }
}

fn unavailable(url: &str, client: &async_nats::Client, detail: String) -> LogError {
    let state = client.connection_state();
    LogError::Unavailable {
        url: url.to_string(),
        detail: format!("{detail} (connection {})", format!("{state:?}").to_lowercase()),
    }
}

/// Raises the replicas of stream `name` to `wanted` when it has fewer (a command
/// or an engine started before the projector made it on one node): JetStream
/// copies it onto the new peers. Never lowers them. The replicas it had, if raised.
pub async fn raise_replicas(context: &js::Context, name: &str, wanted: usize) -> Result<Option<usize>, String> {
    let mut stream = context.get_stream(name).await.map_err(|err| format!("cannot get stream {name}: {err}"))?;
    let info = stream.info().await.map_err(|err| format!("cannot read stream {name}: {err}"))?;
    let had = info.config.num_replicas;
    if had >= wanted {
        return Ok(None);
    }
    let config = stream::Config { num_replicas: wanted, ..info.config.clone() };
    context.update_stream(config).await.map_err(|err| {
        format!(
            "stream {name} has {had} replica(s), configured {wanted}, and cannot be given more ({err}); \
             where the broker refuses stream updates, an operator raises them (`nats stream edit {name} --replicas {wanted}`)"
        )
    })?;
    // Worth a warning: until now the stream would not have survived the loss of its node.
    tracing::warn!(stream = %name, "raised the stream's replicas from {had} to {wanted}");
    Ok(Some(had))
}

/// Gets the log's stream, creating it if missing, and checks its configuration.
async fn ensure_events_stream(
    url: &str,
    context: &js::Context,
    config: &LogConfig,
) -> Result<stream::Stream, LogError> {
    let misconfigured = |detail: String| LogError::Misconfigured {
        location: url.to_string(),
        detail,
    };
    let unavailable = |detail: String| LogError::Unavailable {
        url: url.to_string(),
        detail,
    };
    let wanted = stream::Config {
        name: config.stream.clone(),
        description: Some("gridfold event log: append-only, entries are never deleted".to_string()),
        subjects: config.subjects.clone(),
        retention: RetentionPolicy::Limits,
        discard: DiscardPolicy::Old,
        storage: StorageType::File,
        num_replicas: config.replicas,
        duplicate_window: config.duplicate_window,
        max_message_size: i32::try_from(config.payload_bytes_max).unwrap_or(i32::MAX),
        max_messages: -1,
        max_bytes: -1,
        max_messages_per_subject: -1,
        allow_direct: true,
        deny_delete: true,
        deny_purge: true,
        ..Default::default()
    };
    let stream = match context.get_stream(&config.stream).await {
        Ok(stream) => stream,
        Err(err) if config.streams == StreamSetup::Bind && is_stream_not_found(&err) => {
            return Err(LogError::StreamMissing {
                url: url.to_string(),
                stream: config.stream.clone(),
                hint: EVENTS_STREAM_HINT.to_string(),
            });
        }
        Err(err) => match err.kind() {
            GetStreamErrorKind::JetStream(js_err)
                if js_err.error_code() == ErrorCode::STREAM_NOT_FOUND =>
            {
                match context.create_stream(wanted.clone()).await {
                    Ok(stream) => stream,
                    // Another process may have created it meanwhile.
                    Err(create_err) => context.get_stream(&config.stream).await.map_err(|_| {
                        unavailable(format!(
                            "cannot create stream {}: {create_err}",
                            config.stream
                        ))
                    })?,
                }
            }
            // A cluster still electing its JetStream leaders (starting, or a node lost).
            GetStreamErrorKind::JetStream(js_err) if is_cluster_transient(js_err.error_code()) => {
                return Err(unavailable(format!(
                    "cannot get stream {} (the cluster is electing its leaders): {js_err}",
                    config.stream
                )));
            }
            GetStreamErrorKind::JetStream(js_err) => {
                return Err(misconfigured(format!(
                    "cannot get stream {} (is JetStream enabled?): {js_err}",
                    config.stream
                )));
            }
            _ => {
                return Err(unavailable(format!(
                    "cannot get stream {}: {err}",
                    config.stream
                )));
            }
        },
    };
    if config.streams == StreamSetup::CreateOrCheck && stream.cached_info().config.num_replicas < config.replicas {
        raise_replicas(context, &config.stream, config.replicas).await.map_err(misconfigured)?;
        let stream = context.get_stream(&config.stream).await.map_err(|err| {
            unavailable(format!("cannot get stream {} again: {err}", config.stream))
        })?;
        check_stream_config(&stream.cached_info().config, config).map_err(misconfigured)?;
        return Ok(stream);
    }
    check_stream_config(&stream.cached_info().config, config).map_err(misconfigured)?;
    Ok(stream)
}

/// An API request that went unanswered because the broker refused something of
/// this connection is a refusal, not an outage.
fn refused_instead(err: LogError, refusals: &Refusals) -> LogError {
    match (err, refusals.latest()) {
        (LogError::Unavailable { url, .. }, Some(refusal)) => LogError::Refused {
            url,
            detail: refusal,
        },
        (err, _) => err,
    }
}

/// JetStream errors a cluster answers while it has no leader for what was asked
/// (starting, or a node just lost): asking again later helps.
fn is_cluster_transient(code: ErrorCode) -> bool {
    [
        ErrorCode::CLUSTER_NOT_AVAILABLE,
        ErrorCode::CLUSTER_NOT_ACTIVE,
        ErrorCode::CLUSTER_NOT_LEADER,
        ErrorCode::CLUSTER_NOT_ASSIGNED,
        ErrorCode::CLUSTER_INCOMPLETE,
        ErrorCode::CLUSTER_NO_PEERS,
    ]
    .contains(&code)
}

/// The server a client is connected to, for a log line: its name and address.
pub fn connected_server(client: &async_nats::Client) -> String {
    let info = client.server_info();
    if info.server_name.is_empty() || info.server_name == info.server_id {
        format!("nats-server {}:{}", info.host, info.port)
    } else {
        format!("nats-server {} at {}:{}", info.server_name, info.host, info.port)
    }
}

fn is_stream_not_found(err: &js::context::GetStreamError) -> bool {
    matches!(err.kind(), GetStreamErrorKind::JetStream(js_err) if js_err.error_code() == ErrorCode::STREAM_NOT_FOUND)
}

/// Whether an existing stream can serve as the log: what would delete, lose or
/// misroute entries is refused; what is merely different is logged.
fn check_stream_config(actual: &stream::Config, wanted: &LogConfig) -> Result<(), String> {
    let name = &actual.name;
    let subjects: Vec<&str> = wanted.subjects.iter().map(String::as_str).collect();
    let mut problems = super::stream_check::copies_elsewhere(actual, &subjects);
    if actual.storage != StorageType::File {
        problems.push("it is not on file storage".to_string());
    }
    if actual.retention != RetentionPolicy::Limits {
        problems.push(format!(
            "its retention is {}, not limits: consumers would delete entries",
            match actual.retention {
                RetentionPolicy::Interest => "interest",
                RetentionPolicy::WorkQueue => "work-queue",
                RetentionPolicy::Limits => "limits",
            }
        ));
    }
    for (what, limit) in [
        ("max_msgs", actual.max_messages),
        ("max_bytes", actual.max_bytes),
        ("max_msgs_per_subject", actual.max_messages_per_subject),
    ] {
        if limit > 0 {
            problems.push(format!("{what} is {limit}: old entries would be deleted"));
        }
    }
    if !actual.max_age.is_zero() {
        problems.push(format!(
            "max_age is {}: old entries would be deleted",
            crate::human::duration(actual.max_age)
        ));
    }
    if actual.sealed {
        problems.push("it is sealed".to_string());
    }
    if actual.duplicate_window != wanted.duplicate_window {
        problems.push(format!(
            "its duplicate window is {}, configured {}",
            crate::human::duration(actual.duplicate_window),
            crate::human::duration(wanted.duplicate_window)
        ));
    }
    if actual.num_replicas < wanted.replicas {
        // Only a process that may not change streams gets here (the projector raises them).
        tracing::warn!(stream = %name, "stream has {} replica(s), configured {}", actual.num_replicas, wanted.replicas);
    }
    if !actual.deny_delete || !actual.deny_purge {
        tracing::warn!(stream = %name, "stream allows deleting or purging entries; the log relies on nobody doing so");
    }
    if actual.max_message_size > 0 && (actual.max_message_size as usize) < wanted.payload_bytes_max
    {
        tracing::warn!(stream = %name, "stream's max_msg_size {} is below the configured payload maximum", actual.max_message_size);
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "stream {name} cannot serve as the log: {}",
            problems.join("; ")
        ))
    }
}

/// The actual last sequence in the server's refusal, e.g. `wrong last sequence: 5`.
fn parse_actual_last_sequence(message: &str) -> Option<u64> {
    const MARKER: &str = "last sequence: ";
    message.match_indices(MARKER).find_map(|(at, _)| {
        let digits: String = message[at + MARKER.len()..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_actual_sequence_of_a_refusal() {
        let message = "wrong last sequence: wrong last sequence: 5 (code 400, error code 10071)";
        assert_eq!(parse_actual_last_sequence(message), Some(5));
        assert_eq!(parse_actual_last_sequence("wrong last sequence"), None);
    }

    #[test]
    fn refuses_streams_that_would_lose_entries() {
        let wanted = LogConfig::default();
        let good = stream::Config {
            name: STREAM_EVENTS.into(),
            subjects: vec![SUBJECTS_ALL.into()],
            storage: StorageType::File,
            retention: RetentionPolicy::Limits,
            num_replicas: 1,
            duplicate_window: wanted.duplicate_window,
            max_messages: -1,
            max_bytes: -1,
            max_messages_per_subject: -1,
            ..Default::default()
        };
        assert_eq!(check_stream_config(&good, &wanted), Ok(()));
        let cases = [
            stream::Config {
                max_age: Duration::from_secs(60),
                ..good.clone()
            },
            stream::Config {
                max_messages: 10,
                ..good.clone()
            },
            stream::Config {
                storage: StorageType::Memory,
                ..good.clone()
            },
            stream::Config {
                retention: RetentionPolicy::WorkQueue,
                ..good.clone()
            },
            stream::Config {
                subjects: vec!["gridfold.ev.orders".into()],
                ..good.clone()
            },
            stream::Config {
                duplicate_window: Duration::from_secs(1),
                ..good.clone()
            },
        ];
        for case in cases {
            assert!(check_stream_config(&case, &wanted).is_err(), "{case:?}");
        }
    }
}
