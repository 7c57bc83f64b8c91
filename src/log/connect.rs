//! How gridfold reaches a broker and who it says it is: one [`BrokerAccess`] (the
//! URL, the credentials, TLS, the inbox prefix) from which every connection of every
//! command is made, through [`BrokerAccess::connect_options`].
//!
//! - Credentials ([`Credentials`]): none, a user and password, an nkey seed, or a
//!   NATS credentials file (a user JWT and its seed, as `nsc` writes them). The
//!   seed and the creds file are read when the access is [loaded](BrokerAccess::load),
//!   so a missing or malformed file is reported before any connection, naming it.
//! - TLS ([`Tls`]): a CA file to trust (the connection then requires TLS, whatever
//!   the URL's scheme), and optionally a client certificate and key. A `tls://` URL
//!   requires TLS too; a server that requires it is met with TLS either way.
//! - The inbox prefix: replies to requests (JetStream acks and API answers, query
//!   answers) and pulled messages come to subjects under it. A broker that gives
//!   each principal a private prefix (`gridfold broker-config` gives `_INBOX_<name>`)
//!   keeps one principal from reading another's replies; the default is `_INBOX`.
//! - What the broker says of a refused operation (`Permissions Violation for
//!   Publish to ...`, authorization violations) is logged as a warning through
//!   `tracing` and kept in the connection's [`Refusals`]: the client sees such a
//!   refusal only as a missing reply, so whoever waited in vain looks there to say
//!   "refused" rather than "timed out".
//!
//! Secrets never appear in `Debug` output.
//!
//! Not here: which subjects a principal may use (that is the broker's
//! configuration, written by `crate::log::broker_config`).

use std::collections::VecDeque;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The inbox prefix NATS clients use unless told otherwise.
pub const INBOX_PREFIX_DEFAULT: &str = "_INBOX";
/// Refusals a connection remembers (the latest ones).
pub const REFUSALS_KEPT_MAX: usize = 16;

/// What the broker refused on one connection, newest last: its own words
/// (`Permissions Violation for Publish to "gridfold.ev.op.policy"`). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Refusals(Arc<Mutex<VecDeque<String>>>);

impl Refusals {
    fn record(&self, text: String) {
        let mut kept = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if kept.len() == REFUSALS_KEPT_MAX {
            kept.pop_front();
        }
        kept.push_back(text);
    }

    /// The newest refusal, explained for a person.
    pub fn latest(&self) -> Option<String> {
        let kept = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.back().map(|text| explain_refusal(text))
    }

    /// The newest refusal of `subject` (a publish on it, a subscription to it), explained.
    pub fn about(&self, subject: &str) -> Option<String> {
        let quoted = format!("\"{subject}\"");
        let kept = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.iter()
            .rev()
            .find(|text| text.contains(&quoted))
            .map(|text| explain_refusal(text))
    }
}

/// The broker's words, and what to do about them.
fn explain_refusal(text: &str) -> String {
    let hint = if text.contains("Subscription to \"_INBOX") {
        "; if the broker gives this user a private inbox prefix, set --inbox-prefix (NATS_INBOX_PREFIX)"
    } else {
        "; the credentials in use do not allow it (see docs/operators.md, \"Securing the broker\")"
    };
    format!("the broker refused: {text}{hint}")
}

/// A secret string (a password, an nkey seed, a creds file): shown as `<redacted>`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(text: impl Into<String>) -> Self {
        Secret(text.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Who a connection says it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Credentials {
    /// No credentials: a broker without authentication (or one with a `no_auth_user`).
    #[default]
    Anonymous,
    UserPassword {
        user: String,
        password: Secret,
    },
    /// A user nkey seed (`SU...`), read from `file`.
    Nkey {
        seed: Secret,
        file: PathBuf,
    },
    /// A NATS credentials file's text (a user JWT and its nkey seed), read from `file`.
    Creds {
        text: Secret,
        file: PathBuf,
    },
}

/// A client certificate and its private key (PEM files), for brokers that verify clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCert {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

/// TLS settings of a connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tls {
    /// The CA certificate(s) (PEM) that signed the broker's certificate. When set,
    /// the connection requires TLS.
    pub ca_file: Option<PathBuf>,
    pub client_cert: Option<ClientCert>,
}

/// The servers of a broker URL: one, or several separated by commas
/// (`nats://a:4222,nats://b:4222,nats://c:4222`), as a cluster's clients are given
/// them so that they can connect, and reconnect, while any one node is down.
pub fn server_urls(url: &str) -> Vec<&str> {
    url.split(',').map(str::trim).filter(|server| !server.is_empty()).collect()
}

/// Everything needed to connect to the broker. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerAccess {
    /// One server's URL or several, comma-separated ([`server_urls`]).
    pub url: String,
    pub credentials: Credentials,
    pub tls: Tls,
    /// `None`: [`INBOX_PREFIX_DEFAULT`].
    pub inbox_prefix: Option<String>,
}

/// What [`BrokerAccess::load`] reads: paths and names, no secrets read yet.
#[derive(Debug, Clone, Default)]
pub struct AccessSpec {
    pub user: Option<String>,
    pub password: Option<Secret>,
    pub nkey_file: Option<PathBuf>,
    pub creds_file: Option<PathBuf>,
    pub tls_ca_file: Option<PathBuf>,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
    pub inbox_prefix: Option<String>,
}

/// Why a [`BrokerAccess`] cannot be made: each names what to fix.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("{0}")]
    Conflict(String),
    #[error("cannot read {what} {}: {source}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} {} {problem}", path.display())]
    Malformed {
        what: &'static str,
        path: PathBuf,
        problem: String,
    },
    #[error("inbox prefix {prefix:?}: {problem}")]
    InboxPrefix { prefix: String, problem: String },
}

impl BrokerAccess {
    /// A broker without authentication or TLS (tests, the demo, a broker on loopback).
    pub fn anonymous(url: impl Into<String>) -> Self {
        BrokerAccess {
            url: url.into(),
            credentials: Credentials::Anonymous,
            tls: Tls::default(),
            inbox_prefix: None,
        }
    }

    /// Checks `spec` and reads the secrets it names (the nkey seed, the creds file);
    /// checks that the TLS files exist. Every error names the file or option at fault.
    pub fn load(url: impl Into<String>, spec: &AccessSpec) -> Result<Self, AccessError> {
        let given = [
            spec.user.is_some(),
            spec.nkey_file.is_some(),
            spec.creds_file.is_some(),
        ];
        if given.iter().filter(|&&set| set).count() > 1 {
            return Err(AccessError::Conflict(
                "give one of a user (and password), an nkey file or a creds file, not several"
                    .to_string(),
            ));
        }
        let credentials = match (&spec.user, &spec.nkey_file, &spec.creds_file) {
            (Some(user), _, _) => Credentials::UserPassword {
                user: user.clone(),
                password: spec.password.clone().unwrap_or_else(|| Secret::new("")),
            },
            (None, Some(file), _) => Credentials::Nkey {
                seed: Secret::new(read_nkey_seed(file)?),
                file: file.clone(),
            },
            (None, None, Some(file)) => Credentials::Creds {
                text: Secret::new(read_creds(file)?),
                file: file.clone(),
            },
            (None, None, None) if spec.password.is_some() => {
                return Err(AccessError::Conflict(
                    "a password was given without a user".to_string(),
                ));
            }
            (None, None, None) => Credentials::Anonymous,
        };
        for (what, file) in [
            ("the TLS CA file", &spec.tls_ca_file),
            ("the TLS client certificate", &spec.tls_cert_file),
            ("the TLS client key", &spec.tls_key_file),
        ] {
            if let Some(path) = file {
                check_readable(what, path)?;
            }
        }
        let client_cert = match (&spec.tls_cert_file, &spec.tls_key_file) {
            (Some(cert_file), Some(key_file)) => Some(ClientCert {
                cert_file: cert_file.clone(),
                key_file: key_file.clone(),
            }),
            (None, None) => None,
            _ => {
                return Err(AccessError::Conflict(
                    "a TLS client certificate needs both its certificate and its key".to_string(),
                ));
            }
        };
        if let Some(prefix) = &spec.inbox_prefix {
            check_inbox_prefix(prefix)?;
        }
        Ok(BrokerAccess {
            url: url.into(),
            credentials,
            tls: Tls {
                ca_file: spec.tls_ca_file.clone(),
                client_cert,
            },
            inbox_prefix: spec.inbox_prefix.clone(),
        })
    }

    pub fn inbox_prefix(&self) -> &str {
        self.inbox_prefix.as_deref().unwrap_or(INBOX_PREFIX_DEFAULT)
    }

    /// Who this connects as, for messages: `user alice`, `nkey UABC...`, `creds file F`.
    pub fn identity(&self) -> String {
        match &self.credentials {
            Credentials::Anonymous => "a connection without credentials".to_string(),
            Credentials::UserPassword { user, .. } => format!("user {user}"),
            Credentials::Nkey { seed, file } => match nkeys::KeyPair::from_seed(seed.expose()) {
                Ok(pair) => format!("nkey {} ({})", pair.public_key(), file.display()),
                Err(_) => format!("nkey from {}", file.display()),
            },
            Credentials::Creds { file, .. } => format!("creds file {}", file.display()),
        }
    }

    /// The client options for this access, named `name` (the broker shows it in its
    /// connection list); what the broker refuses goes to `refusals`. Callers add
    /// their own timeouts.
    pub fn connect_options(
        &self,
        name: &str,
        refusals: &Refusals,
    ) -> Result<async_nats::ConnectOptions, AccessError> {
        let refusals = refusals.clone();
        let mut options =
            async_nats::ConnectOptions::new()
                .name(name)
                .event_callback(move |event| {
                    let refusals = refusals.clone();
                    async move { on_broker_event(event, &refusals) }
                });
        options = match &self.credentials {
            Credentials::Anonymous => options,
            Credentials::UserPassword { user, password } => {
                options.user_and_password(user.clone(), password.expose().to_string())
            }
            Credentials::Nkey { seed, .. } => options.nkey(seed.expose().to_string()),
            Credentials::Creds { text, file } => {
                options
                    .credentials(text.expose())
                    .map_err(|err| AccessError::Malformed {
                        what: "the creds file",
                        path: file.clone(),
                        problem: format!("is not a NATS credentials file: {err}"),
                    })?
            }
        };
        if let Some(ca_file) = &self.tls.ca_file {
            options = options
                .add_root_certificates(ca_file.clone())
                .require_tls(true);
        }
        if let Some(cert) = &self.tls.client_cert {
            options = options.add_client_certificate(cert.cert_file.clone(), cert.key_file.clone());
        }
        if let Some(prefix) = &self.inbox_prefix {
            options = options.custom_inbox_prefix(prefix);
        }
        Ok(options)
    }

    /// Connects with [`connect_options`](Self::connect_options), bounded by `timeout`;
    /// the error says whether the broker was away or refused.
    pub async fn connect(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<(async_nats::Client, Refusals), ConnectFailure> {
        let refusals = Refusals::default();
        let options = self
            .connect_options(name, &refusals)
            .map_err(|err| ConnectFailure::Refused(err.to_string()))?
            .connection_timeout(timeout);
        let client = options
            .connect(server_urls(&self.url))
            .await
            .map_err(|err| self.classify(&err))?;
        Ok((client, refusals))
    }

    /// Tells a broker that refused this access from one that could not be reached.
    pub fn classify(&self, err: &async_nats::ConnectError) -> ConnectFailure {
        use async_nats::ConnectErrorKind as Kind;
        match err.kind() {
            Kind::AuthorizationViolation | Kind::Authentication => {
                ConnectFailure::Refused(format!(
                    "the broker refused {} ({err}): check the credentials (--user/--password, --nkey, --creds)",
                    self.identity()
                ))
            }
            // rustls' refusal of the broker's certificate comes as an I/O error.
            Kind::Tls | Kind::Io if err.to_string().contains("certificate") => {
                ConnectFailure::Refused(format!(
                    "TLS with the broker failed ({err}): check --tls-ca (the CA that signed the broker's certificate) and the host name in the URL"
                ))
            }
            _ => ConnectFailure::Unreachable(format!("cannot connect: {err}")),
        }
    }
}

/// Why a connection could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectFailure {
    /// The broker was there and said no (credentials, TLS).
    #[error("{0}")]
    Refused(String),
    /// No broker answered (or it answered too late).
    #[error("{0}")]
    Unreachable(String),
}

/// Logs what the broker says of this connection that no reply carries, and keeps
/// refusals by permission, which otherwise show only as a request timing out.
fn on_broker_event(event: async_nats::Event, refusals: &Refusals) {
    use async_nats::{Event, ServerError};
    match event {
        Event::ServerError(ServerError::AuthorizationViolation) => {
            tracing::warn!("the broker refused these credentials (authorization violation)")
        }
        Event::ServerError(ServerError::Other(text)) if text.contains("Permissions Violation") => {
            tracing::warn!("{}", explain_refusal(&text));
            refusals.record(text);
        }
        Event::ServerError(err) => tracing::warn!("the broker says: {err}"),
        Event::ClientError(err) => tracing::warn!("{err}"),
        Event::Disconnected => tracing::info!("lost the connection to the broker; reconnecting to any of its servers"),
        Event::Connected => tracing::debug!("connected to the broker"),
        _ => {}
    }
}

fn check_readable(what: &'static str, path: &Path) -> Result<(), AccessError> {
    std::fs::File::open(path)
        .map(drop)
        .map_err(|source| AccessError::Read {
            what,
            path: path.to_path_buf(),
            source,
        })
}

fn read_text(what: &'static str, path: &Path) -> Result<String, AccessError> {
    std::fs::read_to_string(path).map_err(|source| AccessError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })
}

/// The user seed in an nkey file: its first line starting `SU` (other lines, such as
/// a public key or comments, are skipped), checked to decode.
fn read_nkey_seed(path: &Path) -> Result<String, AccessError> {
    const WHAT: &str = "the nkey file";
    let text = read_text(WHAT, path)?;
    let malformed = |problem: String| AccessError::Malformed {
        what: WHAT,
        path: path.to_path_buf(),
        problem,
    };
    let seed = text
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with("SU"))
        .ok_or_else(|| malformed("holds no user nkey seed (a line starting SU)".to_string()))?;
    nkeys::KeyPair::from_seed(seed)
        .map_err(|err| malformed(format!("holds a seed that does not decode: {err}")))?;
    Ok(seed.to_string())
}

fn read_creds(path: &Path) -> Result<String, AccessError> {
    const WHAT: &str = "the creds file";
    let text = read_text(WHAT, path)?;
    if !text.contains("BEGIN NATS USER JWT") || !text.contains("BEGIN USER NKEY SEED") {
        return Err(AccessError::Malformed {
            what: WHAT,
            path: path.to_path_buf(),
            problem: "is not a NATS credentials file (a user JWT and a user nkey seed)".to_string(),
        });
    }
    Ok(text)
}

/// An inbox prefix is one or more subject tokens without wildcards.
fn check_inbox_prefix(prefix: &str) -> Result<(), AccessError> {
    let problem = if prefix.is_empty() {
        Some("it is empty")
    } else if prefix.split('.').any(str::is_empty) {
        Some("it has an empty token (a leading, trailing or double dot)")
    } else if prefix.contains(['*', '>']) {
        Some("it has a wildcard")
    } else if prefix.contains(char::is_whitespace) {
        Some("it has white space")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(AccessError::InboxPrefix {
            prefix: prefix.to_string(),
            problem: problem.to_string(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn load(spec: AccessSpec) -> Result<BrokerAccess, AccessError> {
        BrokerAccess::load("tls://broker:4222", &spec)
    }

    fn nkey_file(path: PathBuf) -> AccessSpec {
        AccessSpec {
            nkey_file: Some(path),
            ..AccessSpec::default()
        }
    }

    /// The error `spec` gets, which must contain `expected`.
    #[track_caller]
    fn refused(spec: AccessSpec, expected: &str) {
        let shown = format!("{spec:?}");
        match load(spec) {
            Ok(access) => panic!("{shown} was accepted: {access:?}"),
            Err(err) => assert!(err.to_string().contains(expected), "{shown}: {err}"),
        }
    }

    #[test]
    fn secrets_stay_out_of_debug_output() {
        let access = BrokerAccess {
            credentials: Credentials::UserPassword {
                user: "alice".into(),
                password: Secret::new("hunter2"),
            },
            ..BrokerAccess::anonymous("nats://127.0.0.1:4222")
        };
        let shown = format!("{access:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains("<redacted>"),
            "{shown}"
        );
        assert_eq!(access.identity(), "user alice");
    }

    #[test]
    fn an_nkey_file_is_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let pair = nkeys::KeyPair::new_user();
        let seed = pair.seed().unwrap();
        let access = load(nkey_file(write(
            dir.path(),
            "good.nk",
            &format!("# a comment\n{seed}\n"),
        )))
        .unwrap();
        assert!(
            matches!(&access.credentials, Credentials::Nkey { seed: s, .. } if s.expose() == seed)
        );
        assert!(
            access.identity().contains(&pair.public_key()),
            "{}",
            access.identity()
        );

        let empty = write(dir.path(), "empty.nk", "nothing here\n");
        refused(
            nkey_file(empty.clone()),
            &format!("the nkey file {} holds no user nkey seed", empty.display()),
        );
        refused(
            nkey_file(write(dir.path(), "bad.nk", "SUNOTASEED\n")),
            "does not decode",
        );
        let missing = dir.path().join("missing.nk");
        refused(
            nkey_file(missing.clone()),
            &format!("cannot read the nkey file {}", missing.display()),
        );
    }

    #[test]
    fn contradictory_incomplete_or_malformed_options_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let seed = write(
            dir.path(),
            "a.nk",
            &nkeys::KeyPair::new_user().seed().unwrap(),
        );
        let cert = write(dir.path(), "cert.pem", "");
        let not_creds = write(dir.path(), "x.creds", "hello\n");
        let spec = AccessSpec::default;
        refused(
            AccessSpec {
                user: Some("a".into()),
                nkey_file: Some(seed),
                ..spec()
            },
            "not several",
        );
        refused(
            AccessSpec {
                password: Some(Secret::new("p")),
                ..spec()
            },
            "without a user",
        );
        refused(
            AccessSpec {
                tls_cert_file: Some(cert),
                ..spec()
            },
            "both its certificate and its key",
        );
        refused(
            AccessSpec {
                tls_ca_file: Some(dir.path().join("no-ca.pem")),
                ..spec()
            },
            "cannot read the TLS CA file",
        );
        refused(
            AccessSpec {
                inbox_prefix: Some("_INBOX.>".into()),
                ..spec()
            },
            "wildcard",
        );
        refused(
            AccessSpec {
                inbox_prefix: Some("_INBOX.".into()),
                ..spec()
            },
            "empty token",
        );
        refused(
            AccessSpec {
                creds_file: Some(not_creds),
                ..spec()
            },
            "is not a NATS credentials file",
        );
    }

    #[test]
    fn the_inbox_prefix_defaults_to_the_clients() {
        let access = BrokerAccess::anonymous("nats://127.0.0.1:4222");
        assert_eq!(access.inbox_prefix(), "_INBOX");
        let access = BrokerAccess {
            inbox_prefix: Some("_INBOX_engine-e1".into()),
            ..access
        };
        assert_eq!(access.inbox_prefix(), "_INBOX_engine-e1");
        assert!(access.connect_options("t", &Refusals::default()).is_ok());
    }

    #[test]
    fn refusals_are_found_by_subject_and_bounded() {
        let refusals = Refusals::default();
        assert_eq!(refusals.latest(), None);
        refusals.record("Permissions Violation for Publish to \"gridfold.ev.op.policy\"".into());
        refusals.record("Permissions Violation for Subscription to \"_INBOX.abc.*\"".into());
        let policy = refusals.about("gridfold.ev.op.policy").unwrap();
        assert!(
            policy.starts_with("the broker refused: Permissions Violation for Publish to")
                && policy.contains("credentials"),
            "{policy}"
        );
        assert_eq!(refusals.about("gridfold.ev"), None, "whole subjects only");
        assert!(refusals.latest().unwrap().contains("--inbox-prefix"));
        for n in 0..2 * REFUSALS_KEPT_MAX {
            refusals.record(format!("refusal {n}"));
        }
        assert_eq!(refusals.0.lock().unwrap().len(), REFUSALS_KEPT_MAX);
    }
}
