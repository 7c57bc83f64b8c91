//! What every networked command shares: finding the broker and logging in to it
//! (credentials and TLS, [`AuthArgs`], made into a `BrokerAccess` in one place),
//! opening the log (binding to its stream, or creating it for operators),
//! publishing an event the way outside publishers must (its UUID as
//! `Nats-Msg-Id`), and asking the projector a question.

use std::path::PathBuf;
use std::time::Duration;
use std::process::ExitCode;

use anyhow::{anyhow, Context as _};
use bytes::Bytes;
use clap::Args;

use crate::core::event::{Envelope, Event, Origin};
use crate::core::ids::UserName;
use super::BadInput;
use crate::log::connect::{AccessSpec, BrokerAccess, ConnectFailure, Secret};
use crate::log::jetstream::{JetStreamLog, LogConfig, StreamSetup};
use crate::log::{Append, EventLog, LogError};
use crate::wire;

/// Where the broker is (`--nats`, else `NATS_URL`, else the local default), and who
/// this command is there ([`AuthArgs`]).
#[derive(Debug, Clone, Args)]
pub struct NatsArgs {
    /// The NATS broker, with JetStream enabled (`tls://` to require TLS); a cluster's
    /// servers separated by commas (`nats://a:4222,nats://b:4222`), any of which will do.
    #[arg(long = "nats", env = "NATS_URL", default_value = "nats://127.0.0.1:4222")]
    pub url: String,
    /// Seconds to wait for the streams when they are not there yet (the projector or
    /// `gridfold setup` makes them; nothing else does).
    #[arg(long, env = "GRIDFOLD_WAIT_STREAMS_SECS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub wait_streams_secs: u64,
    #[command(flatten)]
    pub auth: AuthArgs,
    #[command(flatten)]
    pub acting: ActingArgs,
}

/// Who a command acts as on the log: a user, on its own jobs, or an operator.
/// The subject it publishes on says so, and the broker (on a secured
/// deployment, where a user's credentials allow only its own subjects) and the
/// projector's fold both hold it to that. Operators' own commands (policy,
/// drain, blacklists, libraries, keys, override tickets) always act as an
/// operator; these flags choose for the commands that act on jobs.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Acting as")]
pub struct ActingArgs {
    /// The user this command acts as: it publishes on `gridfold.ev.user.<NAME>.>`,
    /// and the jobs it submits are NAME's. Default: the login name ($USER). On a
    /// secured broker, the name of your credentials (their environment file sets it).
    #[arg(long = "as", env = "GRIDFOLD_USER", value_name = "NAME")]
    pub as_user: Option<String>,
    /// Act as an operator, who may act on any user's job and raise priorities
    /// (needs an operator's credentials on a secured broker).
    #[arg(long, env = "GRIDFOLD_OPERATOR", value_parser = clap::builder::FalseyValueParser::new(), default_value_t = false)]
    pub operator: bool,
}

impl ActingArgs {
    /// The publisher `event` goes out as: an operator for operators' events
    /// and with `--operator`, else the user named by `--as` or the login name.
    pub fn publisher_for(&self, event: &Event) -> Result<Origin, BadInput> {
        if self.operator || crate::core::subject::writer_of(event) != crate::core::subject::Writer::JobOwnerOrOperator {
            return Ok(match crate::core::subject::default_publisher(event) {
                Origin::User(_) => Origin::Operator,
                publisher => publisher,
            });
        }
        self.user().map(Origin::User)
    }

    /// The user this command acts as (see `--as`): `--as`, else `$USER` or
    /// `$LOGNAME`, else the name of the process's Unix user.
    pub fn user(&self) -> Result<UserName, BadInput> {
        let (name, from) = match &self.as_user {
            Some(name) => (name.clone(), "--as (or GRIDFOLD_USER)"),
            None => match std::env::var("USER").or_else(|_| std::env::var("LOGNAME")).ok().or_else(unix_user_name) {
                Some(name) => (name, "the login name"),
                None => return Err(BadInput("no user to act as: give --as NAME (or set GRIDFOLD_USER)".to_string())),
            },
        };
        UserName::new(&name).map_err(|error| {
            BadInput(format!("user name {name:?} from {from} cannot name a user on the log: {error}; give --as NAME"))
        })
    }
}

/// Credentials and TLS for the broker, shared by every command that connects. The
/// environment variables are those the `nats` command-line tool reads (but for
/// `NATS_INBOX_PREFIX`, gridfold's own); `gridfold broker-config` writes them in one
/// environment file per principal.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Broker credentials and TLS")]
pub struct AuthArgs {
    /// User name, for a broker with users and passwords (with --password).
    #[arg(long, env = "NATS_USER", conflicts_with_all = ["nkey", "creds"])]
    pub user: Option<String>,
    /// The user's password (better given in NATS_PASSWORD than on the command line).
    #[arg(long, env = "NATS_PASSWORD", hide_env_values = true, requires = "user")]
    pub password: Option<String>,
    /// A file holding the user's nkey seed (`SU...`), for a broker with nkey users.
    #[arg(long, env = "NATS_NKEY", value_name = "FILE", conflicts_with = "creds")]
    pub nkey: Option<PathBuf>,
    /// A NATS credentials file (a user JWT and its seed), for a broker in operator mode.
    #[arg(long, env = "NATS_CREDS", value_name = "FILE")]
    pub creds: Option<PathBuf>,
    /// The CA certificate (PEM) that signed the broker's certificate; requires TLS.
    #[arg(long, env = "NATS_CA", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// A client certificate (PEM), for a broker that verifies clients (with --tls-key).
    #[arg(long, env = "NATS_CERT", value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, env = "NATS_KEY", value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The subject prefix of this client's reply inboxes, when the broker gives each
    /// user a private one (`gridfold broker-config` gives `_INBOX_<principal>`).
    #[arg(long, env = "NATS_INBOX_PREFIX", value_name = "PREFIX")]
    pub inbox_prefix: Option<String>,
}

impl AuthArgs {
    /// The access to `url` these flags describe, with the files they name read and
    /// checked; a bad flag or file is the user's to fix (exit 2).
    pub fn access(&self, url: &str) -> Result<BrokerAccess, BadInput> {
        let spec = AccessSpec {
            user: self.user.clone(),
            password: self.password.clone().map(Secret::new),
            nkey_file: self.nkey.clone(),
            creds_file: self.creds.clone(),
            tls_ca_file: self.tls_ca.clone(),
            tls_cert_file: self.tls_cert.clone(),
            tls_key_file: self.tls_key.clone(),
            inbox_prefix: self.inbox_prefix.clone(),
        };
        BrokerAccess::load(url, &spec).map_err(|err| BadInput(err.to_string()))
    }
}

impl NatsArgs {
    pub fn access(&self) -> Result<BrokerAccess, BadInput> {
        self.auth.access(&self.url)
    }
}

fn unreachable_hint(url: &str) -> String {
    format!("cannot reach the NATS broker at {url}: is nats-server (2.11 or later, with -js) running there? Set --nats or NATS_URL")
}

/// Opens the log for a command: it never creates a stream (only the projector and
/// `gridfold setup` do); while the log's stream is not there yet it waits, up to
/// `--wait-streams-secs`, saying so. A broker that cannot be reached at all is an
/// error at once; one reached that does not answer (electing a leader) is asked
/// again for up to [`COMMAND_UNANSWERED_WAIT`], as [`Patience::command`] says.
/// Its appends are sent once each: [`publish`] sends them again itself.
pub async fn connect_log(nats: &NatsArgs) -> anyhow::Result<JetStreamLog> {
    let patience = Patience::command(nats);
    let config = LogConfig {
        streams: StreamSetup::Bind,
        publish_retry_window: Duration::ZERO,
        request_timeout: COMMAND_REQUEST_TIMEOUT,
        ..LogConfig::default()
    };
    open_patiently(nats, patience, || connect_log_with(nats, config.clone())).await
}

/// How long a command keeps asking a broker that it reached and that does not answer
/// (a request timed out, no responders): JetStream electing the leader of a stream or
/// of the cluster after a node was lost takes 4 to 9 s (docs/reliability.md).
pub const COMMAND_UNANSWERED_WAIT: Duration = Duration::from_secs(15);
/// Bound on each request of a command (a stream's info): a question sent while a
/// stream elects its leader goes unanswered, and the next one, a second later, may
/// find the new leader, rather than after the client's default 5 s.
const COMMAND_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// What a command says, once, when it asks again.
pub const ELECTING_NOTICE: &str = "the broker is electing a leader; retrying";
/// Pause between two sends of a command's publish that got no answer.
const PUBLISH_RETRY_PAUSE: Duration = Duration::from_millis(250);

/// The context of an error of connecting at all (no server of the list answered,
/// or the connection was refused): not tried again by a command.
#[derive(Debug)]
struct NotReached(String);

impl std::fmt::Display for NotReached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// How long a process waits for what it needs and does not make itself: the
/// streams (made by the projector or `gridfold setup`) and the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Patience {
    /// How long to wait for a stream nobody has made yet.
    pub streams_wait: Duration,
    /// How long to keep trying a broker that does not answer (not started yet,
    /// restarting, electing its leaders); zero: not at all.
    pub broker_wait: Duration,
    /// How long to keep asking a broker that was reached and did not answer in time
    /// (electing a leader), when that is longer than `broker_wait`.
    pub unanswered_wait: Duration,
}

/// The first pause before trying an unanswering broker again; each next one is twice the last.
pub const BROKER_RETRY_FIRST: Duration = Duration::from_secs(1);
/// The longest pause between two tries to reach a broker that does not answer.
pub const BROKER_RETRY_MAX: Duration = Duration::from_secs(10);
/// How often a missing stream is looked for again.
const STREAMS_POLL: Duration = Duration::from_secs(1);
/// Tries of one opening at most (a bound on the loop besides its deadlines: a try takes
/// at least [`STREAMS_POLL`] or [`BROKER_RETRY_FIRST`]).
const OPEN_TRIES_MAX: u64 = 1_000_000;

impl Patience {
    /// A command: waits for the streams as `--wait-streams-secs` says; a broker away is an error.
    pub fn command(nats: &NatsArgs) -> Patience {
        Patience {
            streams_wait: Duration::from_secs(nats.wait_streams_secs),
            broker_wait: Duration::ZERO,
            unanswered_wait: COMMAND_UNANSWERED_WAIT,
        }
    }

    /// A service (the projector, an engine): the streams as `--wait-streams-secs`
    /// says, the broker for as long as it takes.
    pub fn service(nats: &NatsArgs) -> Patience {
        Patience { streams_wait: Duration::from_secs(nats.wait_streams_secs), broker_wait: Duration::MAX, unanswered_wait: Duration::MAX }
    }
}

/// Runs `open` until it succeeds, or fails otherwise than by a missing stream (for
/// up to `patience.streams_wait`) or an unanswering broker (for up to
/// `patience.broker_wait`, pausing [`BROKER_RETRY_FIRST`], then twice as long each
/// time up to [`BROKER_RETRY_MAX`]), or a broker reached that did not answer (for
/// up to `patience.unanswered_wait`, every [`BROKER_RETRY_FIRST`]). It says once that it waits for a stream and
/// each time it will try the broker again (a command: once, [`ELECTING_NOTICE`]); refusals (credentials, TLS, permissions)
/// and misconfigurations are not tried again.
pub async fn open_patiently<T, F, Fut>(nats: &NatsArgs, patience: Patience, mut open: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let started = tokio::time::Instant::now();
    let mut said_waiting = false;
    let mut said_electing = false;
    let mut pause = BROKER_RETRY_FIRST;
    for _ in 0..OPEN_TRIES_MAX {
        let err = match open().await {
            Ok(opened) => {
                if said_waiting {
                    tracing::info!("the streams are there after {} s", started.elapsed().as_secs());
                }
                return Ok(opened);
            }
            Err(err) => err,
        };
        let waited = started.elapsed();
        if let Some(missing) = stream_missing(&err) {
            if waited >= patience.streams_wait {
                return Err(err.context(format!(
                    "waited {} s for it (--wait-streams-secs) at {}",
                    waited.as_secs(),
                    nats.url
                )));
            }
            if !said_waiting {
                tracing::warn!(
                    "{missing}; waiting up to {} s for the projector or `gridfold setup` to make it",
                    patience.streams_wait.as_secs()
                );
                said_waiting = true;
            }
            tokio::time::sleep(STREAMS_POLL).await;
        } else if broker_unavailable(&err) && waited < patience.broker_wait {
            tracing::warn!("{err:#}; trying again in {} s", pause.as_secs());
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(BROKER_RETRY_MAX);
        } else if broker_unavailable(&err) && !not_reached(&err) && waited < patience.unanswered_wait {
            if !said_electing {
                tracing::warn!("{ELECTING_NOTICE} for up to {} s ({err:#})", patience.unanswered_wait.as_secs());
                said_electing = true;
            }
            tracing::debug!("{err:#}; trying again in {} s", BROKER_RETRY_FIRST.as_secs());
            tokio::time::sleep(BROKER_RETRY_FIRST).await;
        } else {
            return Err(err);
        }
    }
    anyhow::bail!("gave up opening the log at {} after {OPEN_TRIES_MAX} tries", nats.url)
}

/// The stream an error says is missing, if that is what it says.
fn stream_missing(err: &anyhow::Error) -> Option<&LogError> {
    err.chain().find_map(|cause| match cause.downcast_ref::<LogError>() {
        Some(missing @ LogError::StreamMissing { .. }) => Some(missing),
        _ => None,
    })
}

/// Whether an error is of connecting at all (see [`NotReached`]).
fn not_reached(err: &anyhow::Error) -> bool {
    err.downcast_ref::<NotReached>().is_some()
}

/// Whether an error is of a broker that did not answer (rather than one that refused).
fn broker_unavailable(err: &anyhow::Error) -> bool {
    use crate::projector::service::LeaseError;
    err.chain().any(|cause| {
        matches!(cause.downcast_ref::<LogError>(), Some(LogError::Unavailable { .. }))
            || matches!(cause.downcast_ref::<LeaseError>(), Some(LeaseError::Unavailable { .. }))
    })
}

/// Opens the log with `config`, each failure explained for a person: a broker away,
/// one that refused the credentials or TLS, a stream that is not there.
pub async fn connect_log_with(nats: &NatsArgs, config: LogConfig) -> anyhow::Result<JetStreamLog> {
    let access = nats.access()?;
    let connected = JetStreamLog::connect_client(&access, &config).await.map_err(|err| match err {
        err @ LogError::Unavailable { .. } => anyhow::Error::new(err).context(NotReached(unreachable_hint(&nats.url))),
        err => anyhow::Error::new(err),
    })?;
    JetStreamLog::open_connected(&access, connected, config).await.map_err(|err| match err {
        err @ LogError::Unavailable { .. } => {
            anyhow::Error::new(err).context(format!("the NATS broker at {} did not answer in time", nats.url))
        }
        err => anyhow::Error::new(err),
    })
}

/// The name of the process's real Unix user, from the password database.
fn unix_user_name() -> Option<String> {
    let mut record: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buffer = vec![0 as libc::c_char; 4096];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r writes into `record` and `buffer`, both ours and of the
    // sizes given, and sets `found` to `&mut record` or null.
    let status = unsafe { libc::getpwuid_r(libc::getuid(), &mut record, buffer.as_mut_ptr(), buffer.len(), &mut found) };
    if status != 0 || found.is_null() || record.pw_name.is_null() {
        return None;
    }
    // SAFETY: on success pw_name points at a NUL-terminated string inside `buffer`.
    let name = unsafe { std::ffi::CStr::from_ptr(record.pw_name) };
    name.to_str().ok().map(str::to_string)
}

/// Publishes one event as an outside client would, as `publisher` (see
/// [`ActingArgs::publisher_for`]); returns its log sequence.
///
/// Its UUID is its `Nats-Msg-Id`, so sending it again is safe: while the broker does
/// not answer (an ack lost with a node, a stream electing its leader) it is sent
/// again, the same, for up to [`COMMAND_UNANSWERED_WAIT`], saying so once. A copy
/// the broker had stored already comes back as a duplicate with the first one's
/// sequence, so the verdict asked for afterwards is that of the event stored, never a
/// "duplicate job" of the command's own retry.
pub async fn publish<L: EventLog>(log: &L, publisher: &Origin, source: &str, event: Event) -> anyhow::Result<u64> {
    let id = uuid::Uuid::new_v4();
    let subject = wire::subject_for(&event, publisher);
    let envelope = Envelope { id: *id.as_bytes(), source: source.to_string(), event };
    let append = Append::new(subject, Bytes::from(wire::encode(&envelope))).with_msg_id(id.to_string());
    let appended = append_patiently(log, append, COMMAND_UNANSWERED_WAIT).await.context("publishing the event")?;
    Ok(appended.seq)
}

/// Appends `append` (which must carry a message id), sending it again while the log
/// is [`LogError::Unavailable`] until `wait` has passed; says [`ELECTING_NOTICE`] once.
pub async fn append_patiently<L: EventLog>(log: &L, append: Append, wait: Duration) -> Result<crate::log::Appended, LogError> {
    assert!(append.msg_id.is_some(), "only an append with a message id is safe to send again");
    let deadline = tokio::time::Instant::now() + wait;
    let mut said = false;
    let mut sends: u32 = 0;
    loop {
        sends += 1;
        match log.append(append.clone()).await {
            Err(err @ LogError::Unavailable { .. }) if tokio::time::Instant::now() + PUBLISH_RETRY_PAUSE < deadline => {
                if !said {
                    tracing::warn!("{ELECTING_NOTICE} for up to {} s ({err})", wait.as_secs());
                    said = true;
                }
                tokio::time::sleep(PUBLISH_RETRY_PAUSE).await;
            }
            Err(LogError::Unavailable { url, detail }) if sends > 1 => {
                return Err(LogError::Unavailable {
                    url,
                    detail: format!("{detail}; sent {sends} times over {} s, never answered", wait.as_secs()),
                });
            }
            Ok(appended) if said => {
                tracing::info!(seq = appended.seq, duplicate = appended.duplicate, "stored after {sends} sends");
                return Ok(appended);
            }
            answer => return answer,
        }
    }
}

/// Asks the projector (request/reply on `gridfold.q.*`) and decodes its JSON answer.
pub async fn ask<Q: serde::Serialize, A: serde::de::DeserializeOwned>(
    nats: &NatsArgs,
    subject: &str,
    question: &Q,
) -> anyhow::Result<A> {
    ask_within(nats, subject, question, Duration::from_secs(10)).await
}

/// [`ask`], waiting at most `wait` for the answer.
pub async fn ask_within<Q: serde::Serialize, A: serde::de::DeserializeOwned>(
    nats: &NatsArgs,
    subject: &str,
    question: &Q,
    wait: Duration,
) -> anyhow::Result<A> {
    let (client, refusals) = match nats.access()?.connect("gridfold", Duration::from_secs(5)).await {
        Ok(connected) => connected,
        Err(ConnectFailure::Refused(detail)) => anyhow::bail!("{detail} (broker at {})", nats.url),
        Err(ConnectFailure::Unreachable(detail)) => {
            return Err(anyhow!("{detail}").context(unreachable_hint(&nats.url)));
        }
    };
    let payload = serde_json::to_vec(question)?;
    let answered = tokio::time::timeout(wait, client.request(subject.to_string(), payload.into())).await;
    // A question the broker refused (by permission) is never answered: say so, not "no projector".
    let reply = match answered {
        Ok(Ok(reply)) => reply,
        _ if refusals.latest().is_some() => {
            anyhow::bail!("asking on {subject}: {}", refusals.latest().unwrap_or_default())
        }
        Err(_) => {
            let waited = if wait.subsec_millis() == 0 { format!("{} s", wait.as_secs()) } else { format!("{} ms", wait.as_millis()) };
            anyhow::bail!("no projector answered on {subject} within {waited}: is `gridfold projector` running against {}?", nats.url)
        }
        Ok(Err(e)) => anyhow::bail!(
            "no projector answered on {subject}: {}; is `gridfold projector` running against {}?",
            super::said_once(&e.to_string()),
            nats.url
        ),
    };
    decode_answer(subject, &reply.payload)
}

/// The projector's answer on `subject`, or the error it answered with instead
/// (a request it could not read, an answer too large to send).
pub fn decode_answer<A: serde::de::DeserializeOwned>(subject: &str, payload: &[u8]) -> anyhow::Result<A> {
    use crate::projector::query::QueryError;
    match serde_json::from_slice::<A>(payload) {
        Ok(answer) => Ok(answer),
        Err(undecodable) => match serde_json::from_slice::<QueryError>(payload) {
            Ok(QueryError { error }) => anyhow::bail!("the projector answered on {subject} with an error: {}", crate::human::printable(&error)),
            Err(_) => Err(anyhow::Error::new(undecodable).context(format!("the projector's answer on {subject} does not decode"))),
        },
    }
}

/// How long a publishing command waits for the projector's verdict on its event.
#[derive(Debug, Clone, Args)]
pub struct VerdictArgs {
    /// Seconds to wait for the projector to fold the event and say whether it
    /// was accepted (0: do not wait). A rejection is an error (exit 1); no
    /// answer in time is a warning: the event is stored, and folded later.
    #[arg(long, default_value_t = 5)]
    pub wait_secs: u64,
    /// Do not wait for the verdict: say where the event is stored and exit 0.
    #[arg(long, conflicts_with = "wait_secs")]
    pub no_wait: bool,
}

impl VerdictArgs {
    /// How long to wait for the verdict (zero with `--no-wait`).
    pub fn wait(&self) -> Duration {
        if self.no_wait { Duration::ZERO } else { Duration::from_secs(self.wait_secs) }
    }
}

/// What became of a published event.
#[derive(Debug)]
pub enum Settled {
    Accepted,
    /// The projector's rejection records of it.
    Rejected(Vec<String>),
    /// Not known within the wait: why, for a warning.
    NotKnown(String),
}

/// Asks the projector, until it has folded `seq` or `wait` has passed, whether
/// the entry at `seq` was accepted. Never fails: what cannot be known is said.
pub async fn await_verdict(nats: &NatsArgs, seq: u64, wait: Duration) -> Settled {
    use crate::projector::query::{VERDICT_SUBJECT, Verdict, VerdictKind, VerdictRequest};
    if wait.is_zero() {
        return Settled::NotKnown("not waited for".into());
    }
    let deadline = tokio::time::Instant::now() + wait;
    let connected = match nats.access() {
        Ok(access) => access.connect("gridfold", wait).await.map_err(|failure| match failure {
            ConnectFailure::Refused(detail) | ConnectFailure::Unreachable(detail) => detail,
        }),
        Err(error) => Err(error.to_string()),
    };
    let (client, refusals) = match connected {
        Ok(connected) => connected,
        Err(detail) => return Settled::NotKnown(format!("could not ask the projector: {detail}")),
    };
    let Ok(payload) = serde_json::to_vec(&VerdictRequest { seq }) else {
        return Settled::NotKnown("could not encode the question".into());
    };
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Settled::NotKnown(format!("no projector had folded it within {} s", wait.as_secs()));
        }
        let answer = tokio::time::timeout(left, client.request(VERDICT_SUBJECT, payload.clone().into())).await;
        let verdict: Verdict = match answer {
            Ok(Ok(reply)) => match serde_json::from_slice(&reply.payload) {
                Ok(verdict) => verdict,
                Err(_) => return Settled::NotKnown("the projector's answer does not decode (an older projector?)".into()),
            },
            _ if refusals.latest().is_some() => {
                return Settled::NotKnown(format!("the broker refused the question: {}", refusals.latest().unwrap_or_default()));
            }
            Ok(Err(_)) => {
                // No responder yet: a projector may be starting.
                tokio::time::sleep(Duration::from_millis(200).min(left)).await;
                continue;
            }
            Err(_) => return Settled::NotKnown(format!("no projector answered within {} s", wait.as_secs())),
        };
        match verdict.verdict {
            VerdictKind::Accepted => return Settled::Accepted,
            VerdictKind::Rejected => return Settled::Rejected(verdict.rejections),
            VerdictKind::Unknown => return Settled::NotKnown("folded too long ago to tell".into()),
            VerdictKind::Pending => tokio::time::sleep(Duration::from_millis(50).min(left)).await,
        }
    }
}

impl Settled {
    /// (verdict, rejections) for a command's `--json` output.
    pub fn as_json(&self) -> (&'static str, Vec<String>) {
        match self {
            Settled::Accepted => ("accepted", Vec::new()),
            Settled::Rejected(reasons) => ("rejected", reasons.clone()),
            Settled::NotKnown(_) => ("unknown", Vec::new()),
        }
    }

    /// What a person reads of it on success: `applied`, or `stored` when not known.
    pub fn word(&self) -> &'static str {
        match self {
            Settled::Accepted => "applied",
            Settled::Rejected(_) => "rejected",
            Settled::NotKnown(_) => "stored",
        }
    }

    /// The verdict as every write's `--json` carries it: `seq`, `verdict`
    /// (accepted, rejected, unknown), `applied` (true, false, or null when not
    /// known) and `rejections` (the reasons), merged into `fields`.
    pub fn json_with(&self, seq: u64, fields: serde_json::Value) -> serde_json::Value {
        let (verdict, rejections) = self.as_json();
        let applied = match self {
            Settled::Accepted => serde_json::Value::Bool(true),
            Settled::Rejected(_) => serde_json::Value::Bool(false),
            Settled::NotKnown(_) => serde_json::Value::Null,
        };
        let mut object = match fields {
            serde_json::Value::Object(object) => object,
            _ => serde_json::Map::new(),
        };
        object.insert("seq".into(), seq.into());
        object.insert("verdict".into(), verdict.into());
        object.insert("applied".into(), applied);
        object.insert("rejections".into(), rejections.into());
        serde_json::Value::Object(object)
    }
}

/// Says what became of the event stored at `seq` (`what` names it) and gives the
/// command's exit code: a rejection is an error, not knowing is a warning.
pub fn report_verdict(what: &str, seq: u64, settled: &Settled) -> ExitCode {
    match settled {
        Settled::Accepted => ExitCode::SUCCESS,
        Settled::Rejected(reasons) => {
            eprintln!("gridfold: the projector rejected {what} (stored at seq {seq}): {}", crate::human::printable(&reasons.join("; ")));
            ExitCode::FAILURE
        }
        Settled::NotKnown(why) if why == "not waited for" => ExitCode::SUCCESS,
        Settled::NotKnown(why) => {
            eprintln!("gridfold: {what} is stored at seq {seq}; whether the projector accepts it is not known yet: {why}");
            ExitCode::SUCCESS
        }
    }
}

/// One current-thread runtime per command: the CLI does one thing at a time.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime starts")
        .block_on(future)
}

#[cfg(test)]
mod patience_tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use super::{ActingArgs, AuthArgs, NatsArgs, Patience, open_patiently};
    use crate::log::LogError;

    fn nats() -> NatsArgs {
        NatsArgs { url: "nats://127.0.0.1:1,nats://127.0.0.1:2".into(), wait_streams_secs: 60, auth: AuthArgs::default(), acting: ActingArgs::default() }
    }

    fn missing() -> anyhow::Error {
        LogError::StreamMissing { url: "u".into(), stream: "GRIDFOLD_EVENTS".into(), hint: "h".into() }.into()
    }

    fn away() -> anyhow::Error {
        anyhow::Error::new(LogError::Unavailable { url: "u".into(), detail: "connection refused".into() })
            .context(super::NotReached("cannot reach the NATS broker".into()))
    }

    /// Reached, and a request timed out (a stream electing its leader).
    fn unanswered() -> anyhow::Error {
        anyhow::Error::new(LogError::Unavailable { url: "u".into(), detail: "timed out".into() })
            .context("the NATS broker did not answer in time")
    }

    /// Runs `open_patiently` over answers given in turn (the last one repeated): its
    /// outcome and how many tries it made.
    fn run(patience: Patience, answers: Vec<fn() -> anyhow::Result<u32>>) -> (anyhow::Result<u32>, u32) {
        let tries = AtomicU32::new(0);
        let outcome = super::block_on(open_patiently(&nats(), patience, || {
            let n = tries.fetch_add(1, Ordering::SeqCst) as usize;
            let answer = answers[n.min(answers.len() - 1)];
            async move { answer() }
        }));
        (outcome, tries.load(Ordering::SeqCst))
    }

    const SERVICE: Patience =
        Patience { streams_wait: Duration::from_secs(60), broker_wait: Duration::MAX, unanswered_wait: Duration::MAX };

    #[test]
    fn a_missing_stream_is_waited_for_and_then_used() {
        let (outcome, tries) = run(SERVICE, vec![|| Err(missing()), || Ok(7)]);
        assert_eq!((outcome.unwrap(), tries), (7, 2));
    }

    #[test]
    fn a_stream_missing_past_the_wait_fails_naming_it_and_the_wait() {
        let patience = Patience { streams_wait: Duration::ZERO, ..SERVICE };
        let (outcome, tries) = run(patience, vec![|| Err(missing())]);
        let err = format!("{:#}", outcome.unwrap_err());
        assert!(err.contains("--wait-streams-secs") && err.contains("GRIDFOLD_EVENTS"), "{err}");
        assert_eq!(tries, 1);
    }

    #[test]
    fn a_service_tries_an_unanswering_broker_again_and_a_command_does_not() {
        let (outcome, tries) = run(SERVICE, vec![|| Err(away()), || Ok(1)]);
        assert_eq!((outcome.unwrap(), tries), (1, 2));
        let command = Patience { broker_wait: Duration::ZERO, unanswered_wait: Duration::from_secs(15), ..SERVICE };
        let (outcome, tries) = run(command, vec![|| Err(away()), || Ok(1)]);
        assert!(format!("{:#}", outcome.unwrap_err()).contains("cannot reach the NATS broker"));
        assert_eq!(tries, 1);
    }

    #[test]
    fn a_command_asks_a_reached_broker_that_did_not_answer_again_within_its_bound() {
        let command = Patience { broker_wait: Duration::ZERO, unanswered_wait: Duration::from_secs(15), ..SERVICE };
        let (outcome, tries) = run(command, vec![|| Err(unanswered()), || Ok(1)]);
        assert_eq!((outcome.unwrap(), tries), (1, 2));
        let impatient = Patience { unanswered_wait: Duration::ZERO, ..command };
        let (outcome, tries) = run(impatient, vec![|| Err(unanswered()), || Ok(1)]);
        assert!(format!("{:#}", outcome.unwrap_err()).contains("did not answer in time"));
        assert_eq!(tries, 1);
    }

    #[test]
    fn a_refusal_or_a_misconfiguration_is_never_tried_again() {
        let refused = || -> anyhow::Result<u32> { Err(LogError::Refused { url: "u".into(), detail: "authorization violation".into() }.into()) };
        let misconfigured =
            || -> anyhow::Result<u32> { Err(LogError::Misconfigured { location: "u".into(), detail: "max_age".into() }.into()) };
        for answer in [refused as fn() -> anyhow::Result<u32>, misconfigured] {
            let (outcome, tries) = run(SERVICE, vec![answer, || Ok(1)]);
            assert!(outcome.is_err());
            assert_eq!(tries, 1);
        }
    }
}

#[cfg(test)]
mod answer_tests {
    use crate::projector::query::StateSummary;

    #[test]
    fn an_error_answer_is_an_error_that_says_the_projectors_words_and_garbage_says_it_does_not_decode() {
        let said = super::decode_answer::<StateSummary>("gridfold.q.stat", br#"{"error": "too large\u001b[2J"}"#).unwrap_err();
        assert_eq!(said.to_string(), r"the projector answered on gridfold.q.stat with an error: too large\x1b[2J");
        let garbage = super::decode_answer::<StateSummary>("gridfold.q.stat", b"[1, 2]").unwrap_err();
        assert!(format!("{garbage:#}").starts_with("the projector's answer on gridfold.q.stat does not decode: "), "{garbage:#}");
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory as _, Parser as _};

    use crate::cli::{Cli, Command};

    #[test]
    fn every_command_takes_the_broker_flags_without_clashes() {
        Cli::command().debug_assert();
        let parsed = Cli::try_parse_from([
            "gridfold", "stat", "--nats", "tls://broker:4222", "--nkey", "s.nk", "--tls-ca", "ca.pem",
            "--inbox-prefix", "_INBOX_submitter",
        ])
        .unwrap();
        let Command::Stat(args) = parsed.command else { panic!("not stat") };
        assert_eq!(args.nats.auth.nkey.as_deref(), Some(std::path::Path::new("s.nk")));
        assert_eq!(args.nats.auth.inbox_prefix.as_deref(), Some("_INBOX_submitter"));
        for clash in [
            &["gridfold", "stat", "--user", "u", "--nkey", "s.nk"][..],
            &["gridfold", "stat", "--nkey", "s.nk", "--creds", "c.creds"],
            &["gridfold", "stat", "--password", "p"],
            &["gridfold", "stat", "--tls-cert", "c.pem"],
        ] {
            assert!(Cli::try_parse_from(clash).is_err(), "{clash:?}");
        }
    }
}
