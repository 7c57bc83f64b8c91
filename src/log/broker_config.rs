//! The broker's half of "who may write what" (docs/security.md): the nats-server
//! accounts, users and permissions that make the rules hold for anyone who
//! connects. `gridfold broker-config` renders them with [`render_server_config`].
//!
//! One account, [`ACCOUNT`], with JetStream enabled, holds one user per
//! [`Principal`], each authenticated by an nkey. What each [`Role`] may do:
//!
//! | role | publishes | reads |
//! |---|---|---|
//! | projector | `gridfold.ev.orders`, `gridfold.ev.tick`, `gridfold.order.>`, its lease (`$KV.GRIDFOLD_LEADER.>`); answers `gridfold.q.>` | the log, the orders and lease streams, tasks' output |
//! | operator | `gridfold.ev.op.>` (policy, drain, blacklists, libraries, override tickets, keys, and any job), libraries (`$O.GRIDFOLD_LIBRARIES.>`); queries | every gridfold stream |
//! | submitter `<name>` | `gridfold.ev.user.<name>.>`: its own jobs; queries | query answers |
//! | auditor | queries | the log |
//! | engine `<id>` | `gridfold.ev.engine.<id>.>`; its tasks' output objects (`$O.GRIDFOLD_OUTPUT.>`) | its own consumer `gridfold-engine-<id>` on `GRIDFOLD_ORDERS`, filtered to `gridfold.order.<id>`; the keys' subject `gridfold.ev.op.keys` through its own consumer `gridfold-keys-<id>` on `GRIDFOLD_EVENTS`; the newest entry on its own login subject (direct get); the libraries; output objects' metadata, never their contents |
//!
//! Stream creation: the projector creates `GRIDFOLD_EVENTS`, `GRIDFOLD_ORDERS`,
//! the lease bucket and the output bucket; so may the operator (`gridfold
//! setup`, before the first projector), who also creates the library bucket.
//! Every one of them is created with gridfold's own fixed configuration, and
//! every component refuses to use a stream whose configuration sources,
//! mirrors, republishes or transforms subjects ([`crate::log::stream_check`]):
//! such a stream could copy the log or the orders onto subjects others read.
//! No engine, submitter or auditor may create, update, delete or purge any
//! stream, and nobody may delete or purge the log or the orders, or update a
//! stream's configuration.
//!
//! JetStream is driven by requests on `$JS.API.>`, so each role gets the API
//! subjects of exactly the streams and consumers it uses: stream info to bind,
//! consumer create/next/delete to read (an engine deletes only its own consumer,
//! to take it over from an older process under its name). An engine's consumer create subject carries
//! its name and filter (`$JS.API.CONSUMER.CREATE.GRIDFOLD_ORDERS.gridfold-engine-<id>.gridfold.order.<id>`),
//! and the server refuses a request whose configuration names another filter, so an
//! engine can read nothing but its own orders; the same holds of the consumer it
//! reads the projector keys with (`$JS.API.CONSUMER.CREATE.GRIDFOLD_EVENTS.gridfold-keys-<id>.gridfold.ev.op.keys`):
//! of the log it reads only the keys' subject and its own logins. Replies (API answers, publish acks,
//! pulled messages) go to each principal's private inbox prefix,
//! `_INBOX_<principal>` ([`Principal::inbox_prefix`]), the only one it may subscribe
//! to: no principal can read another's replies.
//!
//! Pure: no IO, no key generation (the command does both).

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::core::ids::{EngineId, UserName};
use crate::core::subject::{ENGINE_SUBJECT_PREFIX, OPERATOR_SUBJECT_PREFIX, user_subject_prefix};
use crate::log::library_store::BUCKET as LIBRARY_BUCKET;
use crate::log::output_store::BUCKET as OUTPUT_BUCKET;
use crate::log::jetstream::{LEASE_BUCKET, STREAM_EVENTS, STREAM_ORDERS, SUBJECTS_ORDERS, consumer_name, keys_reader_name};
use crate::wire::delivery::order_subject;
use crate::wire::{KEYS_SUBJECT, ORDERS_SUBJECT, TICK_SUBJECT, engine_login_subject};

/// The account every gridfold user is in.
pub const ACCOUNT: &str = "GRIDFOLD";
/// Queries to the projector: `gridfold.q.stat`, `.why`, ...
pub const QUERY_SUBJECTS: &str = "gridfold.q.>";
/// Longest principal name: an engine id (64) and its `engine-` prefix.
pub const PRINCIPAL_NAME_BYTES_MAX: usize = 71;

/// What a principal is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    Projector,
    Operator,
    /// A user: the principal's name is its user name on the log.
    Submitter(UserName),
    Auditor,
    Engine(EngineId),
}

impl Role {
    pub fn describe(&self) -> String {
        match self {
            Role::Projector => {
                "the projector (every projector process, leader and standbys)".to_string()
            }
            Role::Operator => "an operator".to_string(),
            Role::Submitter(user) => format!("user {user}, acting on its own jobs only"),
            Role::Auditor => "an auditor (reads the log, asks queries)".to_string(),
            Role::Engine(id) => format!("engine {id}"),
        }
    }
}

/// One user of the broker: a name (for files and its inbox prefix), a role, its nkey.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    pub role: Role,
    /// The public half of its nkey (`U...`).
    pub nkey_public: String,
}

impl Principal {
    /// The name an engine's principal has: `engine-<id>`.
    pub fn engine_name(engine: &EngineId) -> String {
        format!("engine-{engine}")
    }

    /// Its private reply subjects' prefix (see the module docs).
    pub fn inbox_prefix(&self) -> String {
        format!("_INBOX_{}", self.name)
    }
}

/// Whether `name` can name a principal: 1 to [`PRINCIPAL_NAME_BYTES_MAX`] of
/// `[A-Za-z0-9_-]` (it becomes a file name and one subject token).
pub fn check_principal_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > PRINCIPAL_NAME_BYTES_MAX {
        return Err(format!(
            "principal name {name:?} must have 1 to {PRINCIPAL_NAME_BYTES_MAX} characters"
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(format!(
            "principal name {name:?} has {bad:?}; use only letters, digits, '_' and '-'"
        ));
    }
    Ok(())
}

/// What a principal may publish and subscribe to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permissions {
    pub publish: Vec<String>,
    pub subscribe: Vec<String>,
    /// May answer requests it received (the projector answers queries).
    pub allow_responses: bool,
}

fn api(rest: &str) -> String {
    format!("$JS.API.{rest}")
}

/// Binding to an existing stream: its info.
fn bind(stream: &str) -> Vec<String> {
    vec![api(&format!("STREAM.INFO.{stream}"))]
}

/// Creating a stream (and binding to it).
fn create(stream: &str) -> Vec<String> {
    let mut subjects = bind(stream);
    subjects.push(api(&format!("STREAM.CREATE.{stream}")));
    subjects
}

/// Reading a stream: single messages, and consumers of one's own making (without
/// acks; the flow control of an ordered consumer, as the object store's reads use).
fn read(stream: &str) -> Vec<String> {
    let mut subjects = bind(stream);
    subjects.extend([
        api(&format!("STREAM.MSG.GET.{stream}")),
        api(&format!("DIRECT.GET.{stream}")),
        api(&format!("DIRECT.GET.{stream}.>")),
        api(&format!("CONSUMER.CREATE.{stream}")),
        api(&format!("CONSUMER.CREATE.{stream}.>")),
        api(&format!("CONSUMER.INFO.{stream}.*")),
        api(&format!("CONSUMER.MSG.NEXT.{stream}.*")),
        api(&format!("CONSUMER.DELETE.{stream}.*")),
        format!("$JS.FC.{stream}.>"),
    ]);
    subjects
}

/// The stream behind a key-value bucket or an object store.
fn kv_stream(bucket: &str) -> String {
    format!("KV_{bucket}")
}
fn object_stream(bucket: &str) -> String {
    format!("OBJ_{bucket}")
}

/// What `principal` may do (see the module docs for the table).
pub fn permissions(principal: &Principal) -> Permissions {
    let lease = kv_stream(LEASE_BUCKET);
    let libraries = object_stream(LIBRARY_BUCKET);
    // Tasks' output: engines store it, the projector reads it to answer `gridfold.q.output`.
    let outputs = object_stream(OUTPUT_BUCKET);
    let mut publish: Vec<String> = Vec::new();
    let mut allow_responses = false;
    match &principal.role {
        Role::Projector => {
            publish.extend([
                ORDERS_SUBJECT.to_string(),
                TICK_SUBJECT.to_string(),
                SUBJECTS_ORDERS.to_string(),
                format!("$KV.{LEASE_BUCKET}.>"),
                api("INFO"),
            ]);
            publish.extend(create(STREAM_EVENTS));
            publish.extend(create(STREAM_ORDERS));
            publish.extend(create(&lease));
            publish.extend(create(&outputs));
            publish.extend(read(STREAM_EVENTS));
            publish.extend(read(STREAM_ORDERS));
            publish.extend(read(&lease));
            publish.extend(read(&outputs));
            allow_responses = true;
        }
        Role::Operator => {
            publish.extend([
                format!("{OPERATOR_SUBJECT_PREFIX}>"),
                QUERY_SUBJECTS.to_string(),
                format!("$O.{LIBRARY_BUCKET}.>"),
                api("INFO"),
            ]);
            publish.extend(create(STREAM_EVENTS));
            // `gridfold setup`: the streams and the lease bucket before any projector.
            publish.extend(create(STREAM_ORDERS));
            publish.extend(create(&lease));
            publish.extend(create(&libraries));
            publish.extend(create(&outputs));
            publish.extend(read(STREAM_EVENTS));
            publish.extend(read(STREAM_ORDERS));
            publish.extend(read(&lease));
            publish.extend(read(&libraries));
            publish.extend(read(&outputs));
        }
        Role::Submitter(user) => {
            publish.extend([format!("{}>", user_subject_prefix(user)), QUERY_SUBJECTS.to_string()]);
            publish.extend(bind(STREAM_EVENTS));
        }
        Role::Auditor => {
            publish.push(QUERY_SUBJECTS.to_string());
            publish.extend(read(STREAM_EVENTS));
        }
        Role::Engine(engine) => {
            let consumer = consumer_name(engine);
            publish.push(format!("{ENGINE_SUBJECT_PREFIX}{engine}.>"));
            publish.extend(bind(STREAM_EVENTS));
            // Its newest login on the log, to notice a newer process under its name.
            publish.push(api(&format!(
                "DIRECT.GET.{STREAM_EVENTS}.{}",
                engine_login_subject(engine)
            )));
            // The projector keys registered on the log, to check deliveries' seals:
            // a consumer of its own name filtered to the keys' subject, made,
            // read and deleted (`EventLog::read_subject`), no other.
            let keys_reader = keys_reader_name(engine);
            publish.extend([
                api(&format!("CONSUMER.CREATE.{STREAM_EVENTS}.{keys_reader}.{KEYS_SUBJECT}")),
                api(&format!("CONSUMER.INFO.{STREAM_EVENTS}.{keys_reader}")),
                api(&format!("CONSUMER.MSG.NEXT.{STREAM_EVENTS}.{keys_reader}")),
                api(&format!("CONSUMER.DELETE.{STREAM_EVENTS}.{keys_reader}")),
            ]);
            publish.extend(bind(STREAM_ORDERS));
            publish.extend([
                api(&format!(
                    "CONSUMER.CREATE.{STREAM_ORDERS}.{consumer}.{}",
                    order_subject(engine)
                )),
                api(&format!("CONSUMER.INFO.{STREAM_ORDERS}.{consumer}")),
                // A newer process under its name takes the consumer over by
                // deleting it (see `engine::feed`): only its own.
                api(&format!("CONSUMER.DELETE.{STREAM_ORDERS}.{consumer}")),
                api(&format!("CONSUMER.MSG.NEXT.{STREAM_ORDERS}.{consumer}")),
                format!("$JS.ACK.{STREAM_ORDERS}.{consumer}.>"),
            ]);
            publish.extend(read(&libraries));
            // Any engine may write any task's output object: object names are not
            // subjects the broker can scope per engine. The attempt's end report
            // holds each stored stream's blake3 and length, so a replaced object
            // is found out when it is read (docs/security.md). An engine binds
            // the bucket and reads objects' metadata (the store's `put` asks for
            // an object's previous version), never their contents, and never
            // creates the bucket: a stream of an engine's making could source the
            // log and republish it.
            publish.push(format!("$O.{OUTPUT_BUCKET}.>"));
            publish.extend(bind(&outputs));
            publish.push(api(&format!("DIRECT.GET.{outputs}.$O.{OUTPUT_BUCKET}.M.>")));
        }
    }
    // The groups overlap (each reads and binds): each subject once, first place kept.
    let mut seen = std::collections::BTreeSet::new();
    publish.retain(|subject| seen.insert(subject.clone()));
    let mut subscribe = vec![format!("{}.>", principal.inbox_prefix())];
    if principal.role == Role::Projector {
        subscribe.push(QUERY_SUBJECTS.to_string());
    }
    Permissions {
        publish,
        subscribe,
        allow_responses,
    }
}

/// Where and how the server runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSettings {
    /// `host:port` the server listens on.
    pub listen: String,
    /// JetStream's store directory.
    pub store_dir: PathBuf,
    /// The server's certificate and key (PEM).
    pub tls_cert_file: PathBuf,
    pub tls_key_file: PathBuf,
}

/// A double-quoted string of the server's configuration language: `$` stays
/// literal inside quotes (unquoted, it names a variable).
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            _ => out.push(c),
        }
    }
    out.push('"');
    out
}

fn quoted_list(items: &[String], indent: &str) -> String {
    let mut out = String::from("[\n");
    for item in items {
        let _ = writeln!(out, "{indent}  {}", quoted(item));
    }
    let _ = write!(out, "{indent}]");
    out
}

/// The whole `nats-server.conf`: listen address, JetStream, TLS, and the
/// [`ACCOUNT`] account with one nkey user per principal.
pub fn render_server_config(settings: &ServerSettings, principals: &[Principal]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# nats-server configuration for gridfold, written by `gridfold broker-config`.\n\
         # Each principal is an nkey user of account {ACCOUNT} with the permissions of its role\n\
         # (docs/operators.md, \"Securing the broker\"; docs/security.md).\n\
         # Run `gridfold broker-config` again with the full list to add or remove principals:\n\
         # the ones that exist keep their keys.\n"
    );
    let _ = writeln!(out, "listen: {}\n", quoted(&settings.listen));
    let _ = writeln!(
        out,
        "jetstream {{\n  store_dir: {}\n}}\n",
        quoted(&settings.store_dir.display().to_string())
    );
    let _ = writeln!(
        out,
        "# Clients must use TLS; they check this certificate against the CA they are given.\n\
         tls {{\n  cert_file: {}\n  key_file: {}\n  timeout: 5\n}}\n",
        quoted(&settings.tls_cert_file.display().to_string()),
        quoted(&settings.tls_key_file.display().to_string())
    );
    let _ = writeln!(
        out,
        "accounts {{\n  {ACCOUNT} {{\n    jetstream: enabled\n    users: ["
    );
    for principal in principals {
        let permissions = permissions(principal);
        let _ = writeln!(
            out,
            "      # {}: {}, inbox prefix {}",
            principal.name,
            principal.role.describe(),
            principal.inbox_prefix()
        );
        let _ = writeln!(out, "      {{");
        let _ = writeln!(out, "        nkey: {}", quoted(&principal.nkey_public));
        let _ = writeln!(out, "        permissions: {{");
        let _ = writeln!(
            out,
            "          publish: {{ allow: {} }}",
            quoted_list(&permissions.publish, "          ")
        );
        let _ = writeln!(
            out,
            "          subscribe: {{ allow: {} }}",
            quoted_list(&permissions.subscribe, "          ")
        );
        if permissions.allow_responses {
            let _ = writeln!(out, "          allow_responses: true");
        }
        let _ = writeln!(out, "        }}\n      }}");
    }
    let _ = writeln!(out, "    ]\n  }}\n}}");
    out
}

/// What a principal's environment file holds: the variables every `gridfold`
/// command (and the `nats` tool) reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSettings {
    pub url: String,
    pub nkey_file: PathBuf,
    pub ca_file: PathBuf,
}

/// Why a value cannot go into an environment file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {value:?} cannot be written to an environment file: it holds {bad:?}")]
pub struct EnvValueError {
    pub what: &'static str,
    pub value: String,
    pub bad: char,
}

fn env_value(what: &'static str, value: &str) -> Result<String, EnvValueError> {
    match value
        .chars()
        .find(|c| matches!(c, '"' | '\\' | '$' | '`' | '\n' | '\r'))
    {
        Some(bad) => Err(EnvValueError {
            what,
            value: value.to_string(),
            bad,
        }),
        None => Ok(format!("\"{value}\"")),
    }
}

/// A principal's environment file, for `set -a; . FILE; set +a` or systemd's `EnvironmentFile=`.
pub fn render_env_file(
    principal: &Principal,
    client: &ClientSettings,
) -> Result<String, EnvValueError> {
    // Who its commands act as on the log: a submitter as its own user, an
    // operator as an operator (see `gridfold submit --as` and `--operator`).
    let acting = match &principal.role {
        Role::Submitter(user) => format!("GRIDFOLD_USER={}\n", env_value("the user name", user.as_str())?),
        Role::Operator => "GRIDFOLD_OPERATOR=\"true\"\n".to_string(),
        _ => String::new(),
    };
    Ok(format!(
        "# gridfold on the broker as {name}: {role}.\n\
         # Load it with `set -a; . ./{name}.env; set +a`, or systemd's EnvironmentFile=.\n\
         NATS_URL={url}\n\
         NATS_NKEY={nkey}\n\
         NATS_CA={ca}\n\
         NATS_INBOX_PREFIX={inbox}\n\
         {acting}",
        name = principal.name,
        role = principal.role.describe(),
        url = env_value("the URL", &client.url)?,
        nkey = env_value("the nkey file", &client.nkey_file.display().to_string())?,
        ca = env_value("the CA file", &client.ca_file.display().to_string())?,
        inbox = env_value("the inbox prefix", &principal.inbox_prefix())?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NATS subject matching: `*` one token, `>` one or more trailing tokens.
    fn matches(pattern: &str, subject: &str) -> bool {
        let mut subject_tokens = subject.split('.');
        for token in pattern.split('.') {
            match (token, subject_tokens.next()) {
                (">", Some(_)) => return true,
                ("*", Some(_)) => {}
                (literal, Some(actual)) if literal == actual => {}
                _ => return false,
            }
        }
        subject_tokens.next().is_none()
    }

    fn principal(name: &str, role: Role) -> Principal {
        Principal {
            name: name.to_string(),
            role,
            nkey_public: format!("U{name}"),
        }
    }

    fn engine(id: &str) -> Principal {
        let id = EngineId::new(id).unwrap();
        principal(&Principal::engine_name(&id), Role::Engine(id))
    }

    fn may_publish(principal: &Principal, subject: &str) -> bool {
        permissions(principal)
            .publish
            .iter()
            .any(|pattern| matches(pattern, subject))
    }

    #[test]
    fn the_matcher_follows_nats_wildcards() {
        assert!(matches("a.>", "a.b.c") && !matches("a.>", "a"));
        assert!(matches("a.*", "a.b") && !matches("a.*", "a.b.c"));
        assert!(matches("a.b", "a.b") && !matches("a.b", "a.b.c") && !matches("a.b.c", "a.b"));
    }

    #[test]
    fn each_role_publishes_on_the_log_only_what_design_md_gives_it() {
        let projector = principal("projector", Role::Projector);
        let operator = principal("operator", Role::Operator);
        let submitter = principal("alice", Role::Submitter(UserName::new("alice").unwrap()));
        let other_submitter = principal("bob", Role::Submitter(UserName::new("bob").unwrap()));
        let auditor = principal("auditor", Role::Auditor);
        let (e1, e2) = (engine("e1"), engine("e2"));
        let all = [&projector, &operator, &submitter, &other_submitter, &auditor, &e1, &e2];
        let cases: [(&str, &[&Principal]); 20] = [
            ("gridfold.ev.orders", &[&projector]),
            ("gridfold.ev.tick", &[&projector]),
            ("gridfold.order.e1", &[&projector]),
            ("gridfold.ev.op.policy", &[&operator]),
            ("gridfold.ev.op.blacklists_cleared", &[&operator]),
            ("gridfold.ev.op.library_published", &[&operator]),
            ("gridfold.ev.op.keys", &[&operator]),
            ("gridfold.ev.op.job.cancelled", &[&operator]),
            ("gridfold.ev.user.alice.job.submitted", &[&submitter]),
            ("gridfold.ev.user.alice.job.cancelled", &[&submitter]),
            ("gridfold.ev.user.bob.job.cancelled", &[&other_submitter]),
            ("gridfold.ev.engine.e1.heartbeat", &[&e1]),
            ("gridfold.ev.engine.e2.completed", &[&e2]),
            ("gridfold.q.stat", &[&operator, &submitter, &other_submitter, &auditor]),
            ("$JS.API.STREAM.CREATE.GRIDFOLD_ORDERS", &[&projector, &operator]),
            ("$JS.API.STREAM.CREATE.OBJ_GRIDFOLD_OUTPUT", &[&projector, &operator]),
            ("$JS.API.STREAM.CREATE.OBJ_GRIDFOLD_LIBRARIES", &[&operator]),
            ("$O.GRIDFOLD_OUTPUT.C.abc", &[&e1, &e2]),
            ("$JS.API.DIRECT.GET.OBJ_GRIDFOLD_OUTPUT.$O.GRIDFOLD_OUTPUT.M.b3V0", &[&projector, &operator, &e1, &e2]),
            ("$JS.API.DIRECT.GET.OBJ_GRIDFOLD_OUTPUT.$O.GRIDFOLD_OUTPUT.C.abc", &[&projector, &operator]),
        ];
        for (subject, allowed) in cases {
            for who in all {
                assert_eq!(
                    may_publish(who, subject),
                    allowed.contains(&who),
                    "{} on {subject}",
                    who.name
                );
            }
        }
        for who in all {
            for subject in [
                "$JS.API.STREAM.DELETE.GRIDFOLD_EVENTS",
                "$JS.API.STREAM.PURGE.GRIDFOLD_EVENTS",
                "$JS.API.STREAM.UPDATE.GRIDFOLD_EVENTS",
                "$JS.API.STREAM.MSG.DELETE.GRIDFOLD_EVENTS",
                "gridfold.ev.engine.e3.login",
                "gridfold.ev.other",
                "gridfold.ev.job.submitted",
                "gridfold.ev.policy",
                "gridfold.ev.user.carol.job.submitted",
                "$JS.API.STREAM.CREATE.OBJ_GRIDFOLD_EVIL",
                "$JS.API.STREAM.UPDATE.OBJ_GRIDFOLD_OUTPUT",
                "$JS.API.STREAM.PURGE.OBJ_GRIDFOLD_OUTPUT",
            ] {
                assert!(!may_publish(who, subject), "{} on {subject}", who.name);
            }
        }
    }

    #[test]
    fn an_engine_reads_only_its_own_orders_its_own_logins_the_keys_and_replies() {
        let e1 = engine("e1");
        let own = "$JS.API.CONSUMER.CREATE.GRIDFOLD_ORDERS.gridfold-engine-e1.gridfold.order.e1";
        assert!(may_publish(&e1, own));
        assert!(may_publish(&e1, "$JS.API.CONSUMER.DELETE.GRIDFOLD_ORDERS.gridfold-engine-e1"));
        let own_logins = "$JS.API.DIRECT.GET.GRIDFOLD_EVENTS.gridfold.ev.engine.e1.login";
        assert!(may_publish(&e1, own_logins));
        for other in [
            "$JS.API.DIRECT.GET.GRIDFOLD_EVENTS.gridfold.ev.engine.e2.login",
            "$JS.API.DIRECT.GET.GRIDFOLD_EVENTS.gridfold.ev.engine.e1.report",
            "$JS.API.DIRECT.GET.GRIDFOLD_EVENTS",
            "$JS.API.STREAM.MSG.GET.GRIDFOLD_EVENTS",
            "$JS.API.CONSUMER.CREATE.GRIDFOLD_ORDERS.gridfold-engine-e2.gridfold.order.e2",
            "$JS.API.CONSUMER.CREATE.GRIDFOLD_ORDERS.gridfold-engine-e1.gridfold.order.e2",
            "$JS.API.CONSUMER.CREATE.GRIDFOLD_ORDERS.sneaky.gridfold.order.e2",
            "$JS.API.CONSUMER.CREATE.GRIDFOLD_ORDERS",
            "$JS.API.CONSUMER.CREATE.GRIDFOLD_EVENTS",
            "$JS.API.CONSUMER.MSG.NEXT.GRIDFOLD_ORDERS.gridfold-engine-e2",
            "$JS.API.CONSUMER.DELETE.GRIDFOLD_ORDERS.gridfold-engine-e2",
            "$JS.API.CONSUMER.DELETE.GRIDFOLD_ORDERS.*",
            "$JS.API.STREAM.MSG.GET.GRIDFOLD_ORDERS",
            "$JS.API.DIRECT.GET.GRIDFOLD_ORDERS.gridfold.order.e2",
            "$JS.API.STREAM.CREATE.GRIDFOLD_ORDERS",
        ] {
            assert!(!may_publish(&e1, other), "{other}");
        }
        // The keys' subject of the log through its own reader, made, read and deleted.
        for keys in [
            "$JS.API.CONSUMER.CREATE.GRIDFOLD_EVENTS.gridfold-keys-e1.gridfold.ev.op.keys",
            "$JS.API.CONSUMER.INFO.GRIDFOLD_EVENTS.gridfold-keys-e1",
            "$JS.API.CONSUMER.MSG.NEXT.GRIDFOLD_EVENTS.gridfold-keys-e1",
            "$JS.API.CONSUMER.DELETE.GRIDFOLD_EVENTS.gridfold-keys-e1",
        ] {
            assert!(may_publish(&e1, keys), "{keys}");
        }
        for other in [
            // Another filter under its reader's name: the jobs, another engine's reports.
            "$JS.API.CONSUMER.CREATE.GRIDFOLD_EVENTS.gridfold-keys-e1.gridfold.ev.job.submitted",
            "$JS.API.CONSUMER.CREATE.GRIDFOLD_EVENTS.gridfold-keys-e1.gridfold.ev.engine.e2.completed",
            "$JS.API.CONSUMER.CREATE.GRIDFOLD_EVENTS.gridfold-keys-e1.gridfold.ev.>",
            "$JS.API.CONSUMER.CREATE.GRIDFOLD_EVENTS.gridfold-keys-e1",
            // The keys' filter under another name, another engine's reader, none.
            "$JS.API.CONSUMER.CREATE.GRIDFOLD_EVENTS.gridfold-keys-e2.gridfold.ev.op.keys",
            "$JS.API.CONSUMER.CREATE.GRIDFOLD_EVENTS.sneaky.gridfold.ev.op.keys",
            "$JS.API.CONSUMER.DURABLE.CREATE.GRIDFOLD_EVENTS.gridfold-keys-e1",
            "$JS.API.CONSUMER.MSG.NEXT.GRIDFOLD_EVENTS.gridfold-keys-e2",
            "$JS.API.CONSUMER.DELETE.GRIDFOLD_EVENTS.gridfold-keys-e2",
            "$JS.API.CONSUMER.INFO.GRIDFOLD_EVENTS.gridfold-keys-e2",
            "$JS.API.DIRECT.GET.GRIDFOLD_EVENTS.gridfold.ev.op.keys",
        ] {
            assert!(!may_publish(&e1, other), "{other}");
        }
        assert_eq!(permissions(&e1).subscribe, ["_INBOX_engine-e1.>"]);
        assert!(!permissions(&e1).allow_responses);
    }

    #[test]
    fn principal_names_are_tokens() {
        assert!(check_principal_name("engine-node_01").is_ok());
        let long = "a".repeat(PRINCIPAL_NAME_BYTES_MAX + 1);
        for bad in ["", "a.b", "a b", "a>", long.as_str()] {
            assert!(check_principal_name(bad).is_err(), "{bad:?}");
        }
        let longest_engine = EngineId::new(&"e".repeat(64)).unwrap();
        assert!(check_principal_name(&Principal::engine_name(&longest_engine)).is_ok());
    }

    #[test]
    fn the_config_quotes_every_subject_and_holds_every_user() {
        let settings = ServerSettings {
            listen: "0.0.0.0:4222".into(),
            store_dir: "/var/lib/nats".into(),
            tls_cert_file: "/etc/gridfold/server-cert.pem".into(),
            tls_key_file: "/etc/gridfold/server-key.pem".into(),
        };
        let principals = [principal("projector", Role::Projector), engine("e1")];
        let text = render_server_config(&settings, &principals);
        assert!(
            text.contains("\"$JS.API.STREAM.INFO.GRIDFOLD_EVENTS\""),
            "{text}"
        );
        assert!(
            !text.contains(" $JS"),
            "a bare $ would name a variable: {text}"
        );
        assert!(text.contains("nkey: \"Uprojector\"") && text.contains("nkey: \"Uengine-e1\""));
        assert!(text.contains("jetstream: enabled"));
        assert_eq!(text.matches("allow_responses: true").count(), 1);
        assert_eq!(text.matches('{').count(), text.matches('}').count());
        let publish = permissions(&principals[0]).publish;
        let distinct: std::collections::BTreeSet<_> = publish.iter().collect();
        assert_eq!(
            distinct.len(),
            publish.len(),
            "each subject once: {publish:?}"
        );
    }

    #[test]
    fn env_files_refuse_values_a_shell_would_expand() {
        let client = ClientSettings {
            url: "tls://broker:4222".into(),
            nkey_file: "/etc/gridfold/e1.nk".into(),
            ca_file: "/etc/gridfold/ca.pem".into(),
        };
        let text = render_env_file(&engine("e1"), &client).unwrap();
        assert!(
            text.contains("NATS_INBOX_PREFIX=\"_INBOX_engine-e1\""),
            "{text}"
        );
        assert!(!text.contains("GRIDFOLD_USER") && !text.contains("GRIDFOLD_OPERATOR"), "{text}");
        let alice = principal("alice", Role::Submitter(UserName::new("alice").unwrap()));
        let text = render_env_file(&alice, &client).unwrap();
        assert!(text.contains("GRIDFOLD_USER=\"alice\"\n"), "{text}");
        let text = render_env_file(&principal("operator", Role::Operator), &client).unwrap();
        assert!(text.contains("GRIDFOLD_OPERATOR=\"true\"\n"), "{text}");
        let bad = ClientSettings {
            ca_file: "/etc/$HOME/ca.pem".into(),
            ..client
        };
        assert!(render_env_file(&engine("e1"), &bad).is_err());
    }
}
