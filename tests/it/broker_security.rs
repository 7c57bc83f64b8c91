//! Who may write what, enforced by the broker: a real nats-server started with the
//! configuration `gridfold broker-config` writes and TLS from a CA made in the test
//! (`support::secure_nats`), and each principal connecting with its own nkey.
//!
//! - [`an_engines_publish_as_another_engine_is_refused_by_the_broker_and_nothing_is_stored`]
//! - [`a_submitters_publish_on_the_orders_subjects_is_refused_by_the_broker_and_nothing_is_stored`]
//! - [`a_projectors_registration_of_its_own_key_is_refused_by_the_broker_and_nothing_is_stored`]
//! - [`an_engine_may_open_no_consumer_but_its_own_so_it_reads_no_other_engines_orders`] (nor delete another's; a newer process of its own takes its consumer over)
//! - [`a_connection_without_tls_or_with_wrong_credentials_is_refused`]
//! - [`a_projector_two_engines_and_a_submitter_with_their_own_credentials_run_a_job_and_readers_replay_it`]
//! - [`a_batch_forged_with_the_projectors_credentials_but_not_its_key_is_refused_by_the_fold`]
//! - [`deliveries_not_sealed_for_the_engine_by_a_registered_key_are_refused_and_nothing_of_them_runs`]
//! - [`the_shipped_example_is_what_broker_config_writes_but_for_its_keys`]

use crate::support;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::{AckPolicy, pull};
use gridfold::core::event::{Envelope, Event, Order, OrderBatch};
use gridfold::core::ids::{EngineId, Seq};
use gridfold::core::schedule::ALGORITHM_VERSION;
use gridfold::projector::key::ProjectorKey;
use gridfold::wire;
use gridfold::engine::JetStreamOrderFeed;
use gridfold::engine::feed::{READER_KEY, consumer_name};
use gridfold::log::connect::{BrokerAccess, ConnectFailure, Credentials, Secret, Tls};
use gridfold::log::jetstream::{JetStreamLog, LogConfig, STREAM_ORDERS, StreamSetup};
use gridfold::log::{Append, EventLog, LogError, RawEntry, read_to_end};
use support::secure_nats::{self, SecureBroker, TestCa};

/// A refused publish or API request is an unanswered one: keep the wait short.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

async fn log_as(broker: &SecureBroker, principal: &str, streams: StreamSetup) -> JetStreamLog {
    let config = LogConfig {
        streams,
        request_timeout: REQUEST_TIMEOUT,
        connect_timeout: Duration::from_secs(5),
        ..LogConfig::default()
    };
    JetStreamLog::open(&broker.access(principal), config)
        .await
        .unwrap_or_else(|err| panic!("{principal} cannot open the log: {err}"))
}

/// The projector makes the streams, as it does when it starts.
async fn streams_made_by_the_projector(broker: &SecureBroker) -> JetStreamLog {
    let projector = log_as(broker, "projector", StreamSetup::CreateOrCheck).await;
    projector
        .ensure_order_stream()
        .await
        .expect("the projector makes the orders stream");
    projector
}

/// The whole log, as the auditor reads it.
async fn whole_log(broker: &SecureBroker) -> Vec<RawEntry> {
    let auditor = log_as(broker, "auditor", StreamSetup::Bind).await;
    let reading = read_to_end(&auditor, 1)
        .await
        .expect("the auditor reads the log");
    reading
        .collect()
        .await
        .expect("the auditor reads the log to its end")
}

fn subjects(entries: &[RawEntry]) -> Vec<&str> {
    entries.iter().map(|entry| entry.subject.as_str()).collect()
}

/// The error must be the broker's refusal of a publish on `subject`.
#[track_caller]
fn assert_refused_publish(result: Result<impl std::fmt::Debug, LogError>, subject: &str) {
    let expected = format!("Permissions Violation for Publish to \"{subject}\"");
    match result {
        Err(LogError::Rejected { detail }) => assert!(detail.contains(&expected), "{detail}"),
        other => panic!("a publish on {subject} was not refused by the broker: {other:?}"),
    }
}

#[track_caller]
fn assert_broker_logged(broker: &SecureBroker, what: &str, subject: &str) {
    let violations = broker.violations();
    assert!(
        violations
            .iter()
            .any(|line| line.contains(what) && line.contains(subject)),
        "the broker did not log a {what} on {subject}: {violations:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engines_publish_as_another_engine_is_refused_by_the_broker_and_nothing_is_stored() {
    let broker = secure_nats::start(&["e1", "e2"]);
    let _projector = streams_made_by_the_projector(&broker).await;
    let e1 = log_as(&broker, "engine-e1", StreamSetup::Bind).await;

    let own = e1
        .append(Append::new("gridfold.ev.engine.e1.heartbeat", "e1 itself").with_msg_id("own"))
        .await
        .expect("e1 publishes under its own id");
    let forged = e1
        .append(
            Append::new("gridfold.ev.engine.e2.heartbeat", "e1 posing as e2").with_msg_id("forged"),
        )
        .await;

    assert_refused_publish(forged, "gridfold.ev.engine.e2.heartbeat");
    assert_broker_logged(
        &broker,
        "Publish Violation",
        "gridfold.ev.engine.e2.heartbeat",
    );
    let log = whole_log(&broker).await;
    assert_eq!(
        subjects(&log),
        ["gridfold.ev.engine.e1.heartbeat"],
        "only e1's own event is stored"
    );
    assert_eq!(log[0].seq, own.seq);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submitters_publish_on_the_orders_subjects_is_refused_by_the_broker_and_nothing_is_stored()
 {
    let broker = secure_nats::start(&["e1"]);
    let projector = streams_made_by_the_projector(&broker).await;
    let submitter = log_as(&broker, "submitter", StreamSetup::Bind).await;

    submitter
        .append(Append::new("gridfold.ev.user.submitter.job.submitted", "a job").with_msg_id("job"))
        .await
        .expect("a submitter publishes job events");
    // An order batch, fenced as the projector fences its own.
    let batch = submitter
        .append(
            Append::new("gridfold.ev.orders", "a forged batch").with_expected_last_subject_seq(0),
        )
        .await;
    // A delivery straight onto an engine's order subject.
    let delivery = async {
        let ack = submitter
            .context()
            .publish("gridfold.order.e1", "a forged dispatch".into())
            .await?;
        ack.await
    }
    .await;

    assert_refused_publish(batch, "gridfold.ev.orders");
    assert!(
        delivery.is_err(),
        "a delivery by the submitter was stored: {delivery:?}"
    );
    assert_broker_logged(&broker, "Publish Violation", "\"gridfold.order.e1\"");
    assert_eq!(
        subjects(&whole_log(&broker).await),
        ["gridfold.ev.user.submitter.job.submitted"]
    );
    let mut orders = projector
        .context()
        .get_stream(STREAM_ORDERS)
        .await
        .expect("the orders stream");
    let stored = orders
        .info()
        .await
        .expect("the orders stream's state")
        .state
        .messages;
    assert_eq!(stored, 0, "nothing on {STREAM_ORDERS}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projectors_registration_of_its_own_key_is_refused_by_the_broker_and_nothing_is_stored() {
    let broker = secure_nats::start(&[]);
    let projector = streams_made_by_the_projector(&broker).await;
    let operator = log_as(&broker, "operator", StreamSetup::Bind).await;

    // Only an operator's registration makes a key's batches count.
    let own = projector
        .append(Append::new(wire::KEYS_SUBJECT, "its own key").with_msg_id("own-key"))
        .await;
    operator
        .append(Append::new(wire::KEYS_SUBJECT, "a key").with_msg_id("operator-key"))
        .await
        .expect("an operator registers keys");

    assert_refused_publish(own, wire::KEYS_SUBJECT);
    assert_eq!(subjects(&whole_log(&broker).await), [wire::KEYS_SUBJECT]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_may_open_no_consumer_but_its_own_so_it_reads_no_other_engines_orders() {
    let broker = secure_nats::start(&["e1", "e2"]);
    let _projector = streams_made_by_the_projector(&broker).await;
    let e1 = log_as(&broker, "engine-e1", StreamSetup::Bind).await;
    let (e1_id, e2_id) = (EngineId::new("e1").unwrap(), EngineId::new("e2").unwrap());
    let orders = e1
        .context()
        .get_stream(STREAM_ORDERS)
        .await
        .expect("e1 binds to the orders stream");
    let consumer = |name: String, filter: &str| pull::Config {
        durable_name: Some(name.clone()),
        name: Some(name),
        filter_subject: filter.to_string(),
        ack_policy: AckPolicy::Explicit,
        ..Default::default()
    };

    // e1's own consumer's create subject, with e2's orders as the filter in its body:
    // the subject's filter is the one the broker holds it to.
    let request = serde_json::json!({
        "stream_name": STREAM_ORDERS,
        "config": {
            "durable_name": consumer_name(&e1_id),
            "name": consumer_name(&e1_id),
            "filter_subject": "gridfold.order.e2",
            "ack_policy": "explicit",
            "deliver_policy": "all",
        },
        "action": "create",
    });
    let own_subject =
        format!("$JS.API.CONSUMER.CREATE.{STREAM_ORDERS}.gridfold-engine-e1.gridfold.order.e1");
    let answer = e1
        .context()
        .client()
        .request(own_subject, serde_json::to_vec(&request).unwrap().into())
        .await
        .expect("the broker answers e1 on its own consumer's subject");
    let answer: serde_json::Value = serde_json::from_slice(&answer.payload).unwrap();
    assert!(
        answer["error"].is_object(),
        "a consumer of e2's orders was made: {answer}"
    );

    let e2s = orders
        .create_consumer(consumer(consumer_name(&e2_id), "gridfold.order.e2"))
        .await;
    assert!(e2s.is_err(), "e1 made e2's consumer");
    let renamed = orders
        .create_consumer(consumer(consumer_name(&e1_id), "gridfold.order.e2"))
        .await;
    assert!(
        renamed.is_err(),
        "e1 made a consumer of e2's orders under its own name"
    );
    let log_reader = e1.reader(1).await;
    assert!(log_reader.is_err(), "e1 reads the log");
    for subject in [
        "CONSUMER.CREATE.GRIDFOLD_ORDERS.gridfold-engine-e2.gridfold.order.e2",
        "CONSUMER.CREATE.GRIDFOLD_ORDERS.gridfold-engine-e1.gridfold.order.e2",
        "CONSUMER.CREATE.GRIDFOLD_EVENTS",
    ] {
        assert_broker_logged(
            &broker,
            "Publish Violation",
            &format!("\"$JS.API.{subject}"),
        );
    }
    JetStreamOrderFeed::open(&e1, &e1_id)
        .await
        .expect("e1 opens its own order feed");

    // A newer process of e1 takes its consumer over (deleting it and making it
    // again under its own mark); another engine may not delete it.
    let reader_of = |info: async_nats::jetstream::consumer::Info| info.config.metadata.get(READER_KEY).cloned();
    let first_reader = reader_of(orders.consumer_info(consumer_name(&e1_id)).await.unwrap());
    let e1_again = log_as(&broker, "engine-e1", StreamSetup::Bind).await;
    JetStreamOrderFeed::open(&e1_again, &e1_id)
        .await
        .expect("a newer process of e1 takes its order feed over");
    let second_reader = reader_of(orders.consumer_info(consumer_name(&e1_id)).await.unwrap());
    assert!(first_reader.is_some() && second_reader.is_some() && first_reader != second_reader, "{first_reader:?} then {second_reader:?}");
    let e2 = log_as(&broker, "engine-e2", StreamSetup::Bind).await;
    let e2_orders = e2.context().get_stream(STREAM_ORDERS).await.expect("e2 binds to the orders stream");
    assert!(e2_orders.delete_consumer(&consumer_name(&e1_id)).await.is_err(), "e2 deleted e1's consumer");
    assert_broker_logged(
        &broker,
        "Publish Violation",
        &format!("\"$JS.API.CONSUMER.DELETE.{STREAM_ORDERS}.gridfold-engine-e1"),
    );
    let still = reader_of(orders.consumer_info(consumer_name(&e1_id)).await.unwrap());
    assert_eq!(still, second_reader, "e1's consumer is as its newer process made it");

    // Of the log, the keys' subject through its own reader, and nothing else that way.
    let operator = log_as(&broker, "operator", StreamSetup::Bind).await;
    operator.append(Append::new(wire::KEYS_SUBJECT, "a key").with_msg_id("key")).await.unwrap();
    operator.append(Append::new(wire::POLICY_SUBJECT, "a policy").with_msg_id("policy")).await.unwrap();
    let keys_reader = gridfold::engine::feed::keys_reader_name(&e1_id);
    let keys = e1.read_subject(wire::KEYS_SUBJECT, 0, &keys_reader, 10).await.expect("e1 reads the keys' subject");
    assert_eq!(subjects(&keys), [wire::KEYS_SUBJECT]);
    assert!(e1.read_subject("gridfold.ev.policy", 0, &keys_reader, 10).await.is_err(), "e1 read the policy with its keys' reader");
    let e2_reader = gridfold::engine::feed::keys_reader_name(&e2_id);
    assert!(e1.read_subject(wire::KEYS_SUBJECT, 0, &e2_reader, 10).await.is_err(), "e1 read the keys as e2's reader");
    for subject in [
        "CONSUMER.CREATE.GRIDFOLD_EVENTS.gridfold-keys-e1.gridfold.ev.policy",
        "CONSUMER.CREATE.GRIDFOLD_EVENTS.gridfold-keys-e2.gridfold.ev.op.keys",
    ] {
        assert_broker_logged(&broker, "Publish Violation", &format!("\"$JS.API.{subject}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_without_tls_or_with_wrong_credentials_is_refused() {
    let broker = secure_nats::start(&[]);
    let submitter = broker.access("submitter");
    let connect = |access: BrokerAccess| async move {
        access
            .connect("gridfold-test", Duration::from_secs(5))
            .await
            .map(|_| ())
    };
    let refused = |result: Result<(), ConnectFailure>, expected: &str| match result {
        Err(ConnectFailure::Refused(detail)) => assert!(detail.contains(expected), "{detail}"),
        other => panic!("not refused (expected {expected:?}): {other:?}"),
    };

    // Plain text: the broker announces that it requires TLS, and a client that goes
    // on without it is cut off without an answer (no PONG, no +OK).
    let mut plain =
        TcpStream::connect(("127.0.0.1", broker.server.port())).expect("reach the broker");
    plain
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut info = String::new();
    BufReader::new(&plain)
        .read_line(&mut info)
        .expect("the broker's INFO");
    assert!(info.contains("\"tls_required\":true"), "{info}");
    plain
        .write_all(b"CONNECT {\"verbose\":true,\"tls_required\":false}\r\nPING\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let closed = plain.read_to_end(&mut answer);
    assert!(
        closed.is_ok() && answer.is_empty(),
        "a plain-text client got {:?} ({closed:?})",
        String::from_utf8_lossy(&answer)
    );

    // TLS, but no credentials, or an nkey the broker does not know.
    let anonymous = BrokerAccess {
        credentials: Credentials::Anonymous,
        ..submitter.clone()
    };
    refused(connect(anonymous).await, "authorization violation");
    let stranger = secure_nats::stranger_nkey(broker.dir.path());
    let seed = std::fs::read_to_string(&stranger).unwrap();
    let stranger_access = BrokerAccess {
        credentials: Credentials::Nkey {
            seed: Secret::new(seed.trim()),
            file: stranger.clone(),
        },
        ..submitter.clone()
    };
    refused(connect(stranger_access).await, "authorization violation");

    // The right nkey, but trusting another CA, or only the system's.
    let other_ca = broker.path("other-ca.pem");
    std::fs::write(&other_ca, TestCa::new("another CA").cert_pem).unwrap();
    let wrong_ca = BrokerAccess {
        tls: Tls {
            ca_file: Some(other_ca),
            client_cert: None,
        },
        ..submitter.clone()
    };
    refused(connect(wrong_ca).await, "TLS");
    let no_ca = BrokerAccess {
        tls: Tls::default(),
        ..submitter.clone()
    };
    refused(connect(no_ca).await, "TLS");

    // The command line says the same: a refusal exits 1, a file to fix exits 2.
    let stat_with_nkey = |nkey: &std::path::Path, code: i32, expected: &[&str]| {
        let output = broker
            .gridfold_as("submitter")
            .args(["stat", "--nkey"])
            .arg(nkey)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{stderr}");
        assert!(
            expected.iter().all(|part| stderr.contains(part)),
            "{expected:?}: {stderr}"
        );
    };
    stat_with_nkey(
        &stranger,
        1,
        &["authorization violation", "check the credentials"],
    );
    let missing = broker.path("missing.nk");
    stat_with_nkey(
        &missing,
        2,
        &[&format!("cannot read the nkey file {}", missing.display())],
    );

    connect(submitter)
        .await
        .expect("the submitter's own credentials over TLS connect");
}

// ---- the whole grid, each process with its own credentials --------------------------

/// A `gridfold` process with its stderr in a file; killed and reaped on drop.
struct Running {
    name: String,
    child: Child,
    stderr: PathBuf,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_as(broker: &SecureBroker, principal: &str, name: &str, args: &[&str]) -> Running {
    let stderr = broker.path(&format!("{name}.stderr"));
    let child = broker
        .gridfold_as(principal)
        .args(args)
        .env(
            "RUST_LOG",
            "warn,gridfold::projector::service=info,gridfold::engine=info",
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap_or_else(|err| panic!("cannot start gridfold {name}: {err}"));
    Running {
        name: name.to_string(),
        child,
        stderr,
    }
}

/// Runs a command as `principal` to its end; its stdout, or a failure with what it said.
fn run_as(broker: &SecureBroker, principal: &str, args: &[&str]) -> String {
    let output = broker.gridfold_as(principal).args(args).output().unwrap();
    assert!(
        output.status.success(),
        "gridfold {args:?} as {principal} failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn json_as(broker: &SecureBroker, principal: &str, args: &[&str]) -> serde_json::Value {
    let stdout = run_as(broker, principal, args);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|err| panic!("{args:?}: {err}: {stdout}"))
}

fn tails(running: &[&Running]) -> String {
    running
        .iter()
        .map(|r| {
            format!(
                "--- {}:\n{}",
                r.name,
                std::fs::read_to_string(&r.stderr).unwrap_or_default()
            )
        })
        .collect()
}

/// Asks `stat --json` as the submitter until `done` holds of its answer, for at most 25 s
/// (the projector answers once it has started; until then `stat` fails).
fn wait_for_stat(
    broker: &SecureBroker,
    running: &[&Running],
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(25);
    loop {
        let output = broker
            .gridfold_as("submitter")
            .args(["stat", "--json"])
            .output()
            .unwrap();
        let stat: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_else(
            |_| serde_json::json!({ "stat": String::from_utf8_lossy(&output.stderr) }),
        );
        if done(&stat) {
            return stat;
        }
        assert!(
            Instant::now() < deadline,
            "waiting for {what}: {stat}\n{}\nbroker refusals: {:#?}",
            tails(running),
            broker.violations()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

const LIBRARY_SCRIPT: &str = "#!/bin/sh\necho ran-with-the-library\n";

#[test]
fn a_projector_two_engines_and_a_submitter_with_their_own_credentials_run_a_job_and_readers_replay_it()
 {
    let broker = secure_nats::start(&["e1", "e2"]);
    let dir = broker.dir.path().to_path_buf();
    let path = |name: &str| dir.join(name).display().to_string();
    std::fs::write(
        dir.join("policy.toml"),
        "engine_timeout_secs = 5\ndispatch_timeout_secs = 5\n",
    )
    .unwrap();
    std::fs::write(dir.join("run.sh"), LIBRARY_SCRIPT).unwrap();
    std::fs::write(
        dir.join("job.toml"),
        "id = \"secured\"\ntasks = 6\nroot_library = { name = \"tools\", version = \"1\" }\n\n\
         [task]\nargv = [\"sh\", \"-c\", \"sh \\\"$GRIDFOLD_LIBRARY_DIR/run.sh\\\" && sleep 0.3\"]\n",
    )
    .unwrap();

    // The operator makes the streams (`gridfold setup`), sets the policy and stores a library.
    run_as(&broker, "operator", &["setup"]);
    run_as(
        &broker,
        "operator",
        &["policy", "apply", &path("policy.toml"), "--wait-secs", "0"],
    );
    run_as(
        &broker,
        "operator",
        &["library", "put", "tools", "1", &path("run.sh")],
    );
    // The operator registers the projector's key, so the fold accepts its batches
    // (a projector may not register its own on a secured broker).
    let key = run_as(
        &broker,
        "projector",
        &["key", "show", "--state", &path("projector")],
    );
    run_as(
        &broker,
        "operator",
        &["key", "register", key.trim(), "--name", "the projector"],
    );
    let projector = spawn_as(
        &broker,
        "projector",
        "projector",
        &["projector", "--state", &path("projector")],
    );
    let engine = |id: &str| {
        let work = path(&format!("work-{id}"));
        let args = [
            "engine",
            "--name",
            id,
            "--slots",
            "2",
            "--work-dir",
            &work,
            "--heartbeat-secs",
            "1",
            "--drain-timeout-secs",
            "1",
        ];
        spawn_as(&broker, &format!("engine-{id}"), id, &args)
    };
    let (e1, e2) = (engine("e1"), engine("e2"));
    let running = [&projector, &e1, &e2];
    wait_for_stat(&broker, &running, "both engines to log in", |stat| {
        let logged_in = stat["engines"].as_array().map_or(0, |engines| {
            engines
                .iter()
                .filter(|e| e["status"] == "logged-in")
                .count()
        });
        logged_in == 2
    });
    // Neither engine holds the library: both are told to sync it from the object store.
    let submitted = json_as(
        &broker,
        "submitter",
        &["submit", &path("job.toml"), "--json"],
    );
    assert_eq!(submitted["job"], "secured", "{submitted}");
    let summary = wait_for_stat(&broker, &running, "the job to complete", |stat| {
        stat["jobs"].as_array().is_some_and(|jobs| {
            jobs.iter()
                .any(|job| job["id"] == "secured" && job["status"] == "done")
        })
    });
    let completed: Vec<(&str, u64)> = summary["engines"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| Some((e["id"].as_str()?, e["completed"].as_u64()?)))
        .collect();
    assert_eq!(
        completed.iter().map(|(_, n)| n).sum::<u64>(),
        6,
        "{summary}"
    );
    for id in ["e1", "e2"] {
        let synced = dir.join(format!("work-{id}/libraries/tools/1/run.sh"));
        assert_eq!(
            std::fs::read_to_string(&synced).ok().as_deref(),
            Some(LIBRARY_SCRIPT),
            "{}",
            synced.display()
        );
    }

    // Readers: the auditor asks and replays; the whole log re-derives every decision.
    let asked = json_as(&broker, "auditor", &["stat", "--json", "secured"]);
    assert_eq!(asked["jobs"][0]["done"], 6, "{asked}");
    let replayed = json_as(&broker, "auditor", &["replay", "--verify", "--json"]);
    assert_eq!(replayed["verified"], true, "{replayed}");
    assert!(
        replayed["batches_verified"].as_u64().is_some_and(|n| n > 0),
        "{replayed}"
    );
    let job = replayed["jobs"]
        .as_array()
        .and_then(|jobs| jobs.iter().find(|job| job["id"] == "secured"));
    assert_eq!(
        job.map(|job| &job["status"]),
        Some(&serde_json::json!("done")),
        "{replayed}"
    );
    run_as(
        &broker,
        "auditor",
        &["export", "--out", &path("history.jsonl")],
    );

    assert_eq!(
        broker.violations(),
        Vec::<String>::new(),
        "nothing a principal does in its role is refused"
    );
    drop((e1, e2, projector));
}

/// A batch that reaches the log with the projector's broker credentials but is not
/// sealed by its registered key (a stolen nkey, a second projector nobody
/// registered): the broker stores it, fenced as the projector fences its own, and
/// the fold refuses it whole. Here it declares a healthy engine lost while it runs a
/// task: the engine keeps the task, which completes once, in its first attempt.
#[test]
fn a_batch_forged_with_the_projectors_credentials_but_not_its_key_is_refused_by_the_fold() {
    let broker = secure_nats::start(&["e1"]);
    let dir = broker.dir.path().to_path_buf();
    let path = |name: &str| dir.join(name).display().to_string();
    std::fs::write(dir.join("policy.toml"), "engine_timeout_secs = 30\n").unwrap();
    std::fs::write(dir.join("job.toml"), "id = \"long\"\ntasks = 1\n\n[task]\nargv = [\"sleep\", \"3\"]\n").unwrap();
    run_as(&broker, "operator", &["setup"]);
    run_as(&broker, "operator", &["policy", "apply", &path("policy.toml"), "--wait-secs", "0"]);
    let key = run_as(&broker, "projector", &["key", "show", "--state", &path("projector")]);
    run_as(&broker, "operator", &["key", "register", key.trim(), "--name", "the projector"]);
    let projector = spawn_as(&broker, "projector", "projector", &["projector", "--state", &path("projector")]);
    let work = path("work-e1");
    let e1 = spawn_as(
        &broker,
        "engine-e1",
        "e1",
        &["engine", "--name", "e1", "--slots", "1", "--work-dir", &work, "--heartbeat-secs", "1"],
    );
    let running = [&projector, &e1];
    run_as(&broker, "submitter", &["submit", &path("job.toml")]);
    wait_for_stat(&broker, &running, "the task to run", |stat| stat["jobs"][0]["running"] == 1);

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let stored = runtime.block_on(async {
        let forger = log_as(&broker, "projector", StreamSetup::Bind).await;
        let login = whole_log(&broker)
            .await
            .iter()
            .find(|entry| entry.subject == "gridfold.ev.engine.e1.login")
            .map(|entry| entry.seq)
            .expect("e1's login is on the log");
        let batch = OrderBatch {
            based_on_seq: Seq(forger.last_seq().await.unwrap()),
            algorithm: "sge-plain".into(),
            algorithm_version: ALGORITHM_VERSION,
            orders: vec![Order::EngineLost { engine: EngineId::new("e1").unwrap(), epoch: login, last_seen_ms: 0 }],
        };
        let envelope =
            Envelope { id: *uuid::Uuid::new_v4().as_bytes(), source: "gridfold-projector".into(), event: Event::OrderBatch(batch) };
        let sealed = ProjectorKey::from_seed([7; 32]).seal(&envelope);
        // The real projector appends beside it: fence on the orders subject, as it does.
        for _ in 0..20 {
            let last = forger.last_seq_for_subject(wire::ORDERS_SUBJECT).await.unwrap();
            let append = Append::new(wire::ORDERS_SUBJECT, sealed.clone()).with_expected_last_subject_seq(last);
            if let Ok(appended) = forger.append(append).await {
                return appended.seq;
            }
        }
        panic!("the forged batch was never stored");
    });

    let refused = wait_for_stat(&broker, &running, "the fold to refuse the batch", |stat| {
        stat["rejections_by_kind"]["bad-seal"] == 1
    });
    assert!(refused["last_seq"].as_u64().unwrap() >= stored, "{refused}");
    let done = wait_for_stat(&broker, &running, "the job to complete", |stat| stat["jobs"][0]["status"] == "done");
    let engines = done["engines"].as_array().unwrap();
    assert_eq!(engines[0]["status"], "logged-in", "e1 was never lost: {done}");
    assert_eq!(engines[0]["completed"], 1, "{done}");
    assert_eq!(done["engines_lost"], 0, "{done}");
    assert_eq!(done["requeues"], 0, "the task ran once: {done}");
    let said = std::fs::read_to_string(&e1.stderr).unwrap_or_default();
    assert!(!said.contains("lost"), "e1 never heard it was lost:\n{said}");
    drop((e1, projector));
}

/// Reads the log as the auditor until an entry satisfies `pred` (for at most 25 s): it.
async fn until_on_log(broker: &SecureBroker, running: &[&Running], what: &str, pred: impl Fn(&gridfold::core::event::Entry) -> bool) -> gridfold::core::event::Entry {
    let deadline = Instant::now() + Duration::from_secs(25);
    loop {
        let entries = whole_log(broker).await;
        let found = entries
            .iter()
            .map(|raw| wire::entry_from_log(Seq(raw.seq), raw.time_ms, &raw.subject, &raw.payload))
            .flat_map(support::folded_log::split_reports)
            .find(|entry| pred(entry));
        if let Some(entry) = found {
            return entry;
        }
        assert!(Instant::now() < deadline, "no {what} on the log within 25 s:\n{}", tails(running));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An engine runs only deliveries a key registered on the log sealed for it: a
/// principal that may publish on its order subject (here with the projector's
/// credentials) and has no registered key makes it run nothing.
#[test]
fn deliveries_not_sealed_for_the_engine_by_a_registered_key_are_refused_and_nothing_of_them_runs() {
    use gridfold::core::event::Payload;
    use gridfold::wire::delivery::{Delivery, DeliveryKind, RunTask, encode_delivery};
    let broker = secure_nats::start(&["e1", "e2"]);
    let dir = broker.dir.path().to_path_buf();
    let genuine = support::sealing::projector_key();
    let revoked = ProjectorKey::from_seed([9; 32]);
    let foreign = ProjectorKey::from_seed([8; 32]);
    run_as(&broker, "operator", &["setup"]);
    run_as(&broker, "operator", &["key", "register", &genuine.public_hex(), "--name", "the projector"]);
    run_as(&broker, "operator", &["key", "register", &revoked.public_hex(), "--name", "an old projector"]);
    run_as(&broker, "operator", &["key", "revoke", &revoked.public_hex()]);
    let work = dir.join("work-e1").display().to_string();
    let e1 = spawn_as(
        &broker,
        "engine-e1",
        "e1",
        &["engine", "--name", "e1", "--slots", "1", "--work-dir", &work, "--heartbeat-secs", "1"],
    );
    let marker = |name: &str| dir.join(format!("ran-{name}"));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let entries = runtime.block_on(async {
        let login = until_on_log(&broker, &[&e1], "login of e1", |entry| entry.subject == "gridfold.ev.engine.e1.login").await.seq.0;
        let run = |engine: &str, n: usize, name: &str| Delivery {
            id: Delivery::id_for(Seq(login + 1), n),
            batch_seq: Seq(login + 1),
            engine: EngineId::new(engine).unwrap(),
            epoch: login,
            kind: DeliveryKind::Run(RunTask {
                task: gridfold::core::ids::TaskRef::new(gridfold::core::ids::JobId::new(name).unwrap(), 0),
                attempt: 1,
                argv: vec!["touch".into(), marker(name).display().to_string()],
                params: Default::default(),
                wall_time_limit_ms: 0,
                slots: 1,
                root_library: None,
                output_bytes_max: 0,
                work_dir_retention_ms: 60_000,
                nodes: Vec::new(),
                companion: false,
                companion_argv: Vec::new(),
            }),
        };
        let forger = log_as(&broker, "projector", StreamSetup::Bind).await;
        let messages = [
            ("unsealed", encode_delivery(&run("e1", 0, "unsealed"))),
            ("foreign", support::sealing::sealed_with(&foreign, &run("e1", 1, "foreign"))),
            ("revoked", support::sealing::sealed_with(&revoked, &run("e1", 2, "revoked"))),
            // A genuine message for e2, copied onto e1's subject.
            ("copied", support::sealing::sealed(&run("e2", 3, "copied"))),
            ("genuine", support::sealing::sealed(&run("e1", 4, "genuine"))),
        ];
        for (name, payload) in messages {
            let ack = forger.context().publish("gridfold.order.e1", payload.into()).await.unwrap();
            ack.await.unwrap_or_else(|err| panic!("the {name} message was not stored: {err}"));
        }
        let is_genuine = |task: &gridfold::core::ids::TaskRef| task.job.as_str() == "genuine";
        until_on_log(&broker, &[&e1], "the genuine run's end", |entry| {
            matches!(entry.payload_event(), Some(Event::TaskCompleted { task, .. }) if is_genuine(task))
        })
        .await;
        whole_log(&broker).await
    });
    let started: Vec<String> = entries
        .iter()
        .map(|raw| wire::entry_from_log(Seq(raw.seq), raw.time_ms, &raw.subject, &raw.payload))
        .flat_map(support::folded_log::split_reports)
        .filter_map(|entry| match &entry.payload {
            Payload::Event(envelope) => match &envelope.event {
                Event::TaskStarted { task, .. } => Some(task.job.to_string()),
                _ => None,
            },
            Payload::Undecodable { .. } => None,
        })
        .collect();
    assert_eq!(started, ["genuine"], "only the genuine run started");
    for name in ["unsealed", "foreign", "revoked", "copied"] {
        assert!(!marker(name).exists(), "the {name} run ran:\n{}", tails(&[&e1]));
    }
    assert!(marker("genuine").exists());
    let said = std::fs::read_to_string(&e1.stderr).unwrap_or_default();
    assert_eq!(said.matches("refusing a message on this engine's order subject").count(), 3, "{said}");
    assert!(said.contains("it is not sealed") && said.contains("the key is not registered"), "{said}");
    assert!(said.contains(&format!("key {}", revoked.public_hex())) && said.contains(&format!("key {}", foreign.public_hex())), "{said}");
    assert!(said.contains("the delivery is for engine \"e2\", read by engine e1"), "{said}");
    drop(e1);
}

/// `deploy/nats/` is what `gridfold broker-config` writes today, keys aside: a change to
/// the permissions shows in the shipped example, or this fails.
#[test]
fn the_shipped_example_is_what_broker_config_writes_but_for_its_keys() {
    let shipped = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/nats");
    let out = tempfile::tempdir().unwrap();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_gridfold"))
        .args([
            "broker-config",
            "--engine",
            "node-01",
            "--engine",
            "node-02",
        ])
        .args([
            "--url",
            "tls://broker.example.org:4222",
            "--client-dir",
            "/etc/gridfold/nats",
        ])
        .args(["--tls-cert", "/etc/gridfold/nats/server-cert.pem"])
        .args([
            "--tls-key",
            "/etc/gridfold/nats/server-key.pem",
            "--tls-ca",
            "/etc/gridfold/nats/ca.pem",
        ])
        .arg("--out")
        .arg(out.path())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let without_keys = |text: String| -> String {
        let lines = text
            .lines()
            .filter(|line| !line.trim_start().starts_with("nkey: \"U"));
        lines.collect::<Vec<_>>().join("\n")
    };
    for name in [
        "nats-server.conf",
        "projector.env",
        "operator.env",
        "submitter.env",
        "auditor.env",
        "engine-node-01.env",
        "engine-node-02.env",
    ] {
        let read = |dir: &std::path::Path| std::fs::read_to_string(dir.join(name)).unwrap();
        assert_eq!(
            without_keys(read(&shipped)),
            without_keys(read(out.path())),
            "deploy/nats/{name} differs from what broker-config writes: regenerate it (deploy/nats/README.md)"
        );
    }
}

// ---- the trust suite: each principal tries what its role may not do ---------------

/// One event as a client publishes it: encoded, with a fresh id as its `Nats-Msg-Id`.
fn event_append(subject: &str, event: Event) -> Append {
    let envelope = Envelope { id: *uuid::Uuid::new_v4().as_bytes(), source: "mallory".into(), event };
    let id = uuid::Uuid::from_bytes(envelope.id).to_string();
    Append::new(subject.to_string(), wire::encode(&envelope)).with_msg_id(id)
}

/// `gridfold ARGS` as `principal`, expected to fail: its exit code and what it said.
fn refused_as(broker: &SecureBroker, principal: &str, args: &[&str]) -> (Option<i32>, String) {
    let output = broker.gridfold_as(principal).args(args).output().unwrap();
    assert!(!output.status.success(), "gridfold {args:?} as {principal} succeeded: {}", String::from_utf8_lossy(&output.stdout));
    (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
}

/// With only a user's credentials, or only an engine's, nothing outside that role
/// is done to the grid: tried directly on the broker (refused there) and through
/// every subject the broker does let it use (stored, and refused by the fold with
/// its kind), by the command line and by hand-made messages. The jobs, the policy,
/// the engines and the keys are as their owners left them, and the grid dispatches
/// and finishes every job afterwards.
#[test]
fn a_user_or_an_engine_can_do_nothing_outside_its_role_and_the_grid_runs_on() {
    use gridfold::core::event::{EngineLoad, Policy, TaskSelector};
    use gridfold::core::ids::JobId;
    let broker = secure_nats::start_with(&["e1"], &["submitter", "alice", "bob"]);
    let dir = broker.dir.path().to_path_buf();
    let path = |name: &str| dir.join(name).display().to_string();
    std::fs::write(dir.join("policy.toml"), "engine_timeout_secs = 30\ndispatch_timeout_secs = 30\n").unwrap();
    let job_file = |id: &str, owner: &str| {
        let owner = if owner.is_empty() { String::new() } else { format!("owner = \"{owner}\"\n") };
        std::fs::write(dir.join(format!("{id}.toml")), format!("id = \"{id}\"\ntasks = 2\n{owner}\n[task]\nargv = [\"true\"]\n")).unwrap();
        path(&format!("{id}.toml"))
    };
    run_as(&broker, "operator", &["setup"]);
    run_as(&broker, "operator", &["policy", "apply", &path("policy.toml")]);
    let key = run_as(&broker, "projector", &["key", "show", "--state", &path("projector")]);
    run_as(&broker, "operator", &["key", "register", key.trim(), "--name", "the projector"]);
    let projector = spawn_as(&broker, "projector", "projector", &["projector", "--state", &path("projector")]);
    let work = path("work-e1");
    let e1 = spawn_as(&broker, "engine-e1", "e1", &["engine", "--name", "e1", "--slots", "2", "--work-dir", &work, "--heartbeat-secs", "1"]);
    let running = [&projector, &e1];
    wait_for_stat(&broker, &running, "e1 to log in", |stat| stat["engines"][0]["status"] == "logged-in");

    // Bob's job, held by bob so that it waits while alice tries her hand at it
    // (e1 drained meanwhile, so that it cannot run before bob holds it).
    run_as(&broker, "operator", &["engine", "drain", "e1"]);
    let bobs = job_file("bobs", "");
    assert_eq!(json_as(&broker, "bob", &["submit", &bobs, "--json"])["job"], "bobs");
    run_as(&broker, "bob", &["hold", "bobs"]);
    run_as(&broker, "operator", &["engine", "resume", "e1"]);
    let policy_seq = json_as(&broker, "auditor", &["policy", "show", "--json"])["seq"].clone();

    // The command line, as alice: each refused by the fold, said, exit 1.
    for (args, said) in [
        (vec!["cancel", "bobs"], "user alice may not act on job bobs, which user bob owns"),
        (vec!["release", "bobs"], "user alice may not act on job bobs"),
        (vec!["priority", "bobs", "-100"], "user alice may not act on job bobs"),
        (vec!["reschedule", "bobs"], "user alice may not act on job bobs"),
        (vec!["submit", &job_file("posing", "bob")], "user alice may not act on job posing, which user bob owns"),
    ] {
        let (code, stderr) = refused_as(&broker, "alice", &args);
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(said), "{args:?}: {stderr}");
    }
    let alices = job_file("alices", "");
    run_as(&broker, "alice", &["submit", &alices]);
    let (code, stderr) = refused_as(&broker, "alice", &["priority", "alices", "5"]);
    assert!(code == Some(1) && stderr.contains("a user may set a priority up to the default 0, not 5"), "{stderr}");
    // Operators' commands: the broker refuses alice outright.
    for args in [vec!["policy", "apply", &path("policy.toml")], vec!["engine", "drain", "e1"], vec!["key", "register", key.trim(), "--name", "mine"]] {
        let (code, stderr) = refused_as(&broker, "alice", &args);
        assert!(code == Some(1) && stderr.contains("Permissions Violation"), "{args:?}: {stderr}");
    }

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let stored_by_hand = runtime.block_on(async {
        let alice = log_as(&broker, "alice", StreamSetup::Bind).await;
        let e1_log = log_as(&broker, "engine-e1", StreamSetup::Bind).await;
        let auditor = log_as(&broker, "auditor", StreamSetup::Bind).await;
        let bobs_job = || JobId::new("bobs").unwrap();
        let e1_id = || EngineId::new("e1").unwrap();

        // Directly on the broker: every subject outside each one's prefix is refused.
        for subject in [
            "gridfold.ev.user.bob.job.cancelled",
            "gridfold.ev.op.job.cancelled",
            "gridfold.ev.op.policy",
            "gridfold.ev.op.keys",
            "gridfold.ev.tick",
            "gridfold.ev.orders",
            "gridfold.ev.engine.e1.completed",
            "gridfold.ev.job.cancelled",
        ] {
            assert_refused_publish(alice.append(event_append(subject, Event::JobCancelled { job: bobs_job(), reason: "x".into() })).await, subject);
        }
        for subject in ["gridfold.ev.op.keys", "gridfold.ev.user.alice.job.cancelled", "gridfold.ev.engine.e2.completed", "gridfold.ev.orders"] {
            assert_refused_publish(e1_log.append(event_append(subject, Event::Tick)).await, subject);
        }
        for subject in ["gridfold.ev.user.auditor.job.submitted", "gridfold.ev.op.policy", "gridfold.ev.tick"] {
            assert_refused_publish(auditor.append(event_append(subject, Event::Tick)).await, subject);
        }
        // The takeover of old: an engine making the output bucket's stream with
        // the log and the deliveries as its sources and a republish onto
        // gridfold.>. The broker refuses the request (no answer comes).
        let evil = async_nats::jetstream::stream::Config {
            name: "OBJ_GRIDFOLD_EVIL".into(),
            subjects: vec!["$O.GRIDFOLD_EVIL.>".into()],
            sources: Some(vec![async_nats::jetstream::stream::Source { name: "GRIDFOLD_EVENTS".into(), ..Default::default() }]),
            republish: Some(async_nats::jetstream::stream::Republish { source: ">".into(), destination: "gridfold.>".into(), headers_only: false }),
            ..Default::default()
        };
        for (who, log) in [("engine e1", &e1_log), ("alice", &alice)] {
            let made = tokio::time::timeout(Duration::from_secs(5), log.context().create_stream(evil.clone())).await;
            assert!(!matches!(made, Ok(Ok(_))), "{who} made a stream");
        }
        assert_broker_logged(&broker, "Publish Violation", "\"$JS.API.STREAM.CREATE.OBJ_GRIDFOLD_EVIL\"");
        // And an engine reads no output's contents, nor any other stream's entries.
        let chunks = tokio::time::timeout(
            Duration::from_secs(5),
            e1_log.context().client().request("$JS.API.DIRECT.GET.OBJ_GRIDFOLD_OUTPUT.$O.GRIDFOLD_OUTPUT.C.x", "".into()),
        )
        .await;
        assert!(!matches!(chunks, Ok(Ok(_))), "e1 read output chunks");
        assert!(e1_log.reader(1).await.is_err(), "e1 reads the log");

        // Through the subjects each may use: stored, and refused by the fold.
        let alices = |kind: &str| format!("gridfold.ev.user.alice.{kind}");
        let e1s = |kind: &str| format!("gridfold.ev.engine.e1.{kind}");
        let mut posing = gridfold::core::testkit::job_spec("posing2", 1, "");
        posing.owner = "bob".into();
        let by_hand = [
            (alices("job.policy"), Event::PolicySet(Policy { dispatches_per_run_max: 1, ..Policy::default() })),
            (alices("job.drain"), Event::EngineDrainChanged { engine: e1_id(), drained: true }),
            (alices("blacklists_cleared"), Event::BlacklistsCleared { engine: None }),
            (alices("keys"), Event::ProjectorKeyRegistered { key: [9; 32], name: "mine".into() }),
            (alices("tick"), Event::Tick),
            (alices("job.override_tickets"), Event::JobOverrideTicketsSet { job: bobs_job(), tickets: 1_000_000 }),
            (alices("job.cancelled"), Event::JobCancelled { job: bobs_job(), reason: "mine now".into() }),
            (alices("job.hold"), Event::JobHoldChanged { job: bobs_job(), held: false }),
            (alices("job.suspend"), Event::SuspendRequested(TaskSelector { job: bobs_job(), task: None })),
            (alices("job.submitted"), Event::JobSubmitted(posing)),
            (alices("job.submitted"), Event::JobCancelled { job: bobs_job(), reason: "on another kind's subject".into() }),
            (e1s("policy"), Event::PolicySet(Policy { dispatches_per_run_max: 1, ..Policy::default() })),
            (e1s("cancelled"), Event::JobCancelled { job: bobs_job(), reason: "an engine's".into() }),
            (e1s("keys"), Event::ProjectorKeyRegistered { key: [9; 32], name: "mine".into() }),
            (e1s("heartbeat"), Event::EngineHeartbeat { engine: EngineId::new("e2").unwrap(), load: EngineLoad::default() }),
        ];
        let mut last = 0;
        for (subject, event) in by_hand {
            let log = if subject.starts_with("gridfold.ev.user.") { &alice } else { &e1_log };
            last = log.append(event_append(&subject, event)).await.unwrap_or_else(|err| panic!("{subject}: {err}")).seq;
        }
        last
    });
    let refused = wait_for_stat(&broker, &running, "the fold to judge every entry", |stat| {
        stat["last_seq"].as_u64().is_some_and(|seq| seq >= stored_by_hand)
    });
    let kinds = &refused["rejections_by_kind"];
    // By the command line: cancel, release, priority, reschedule and the posing
    // submission (5 not-owner) and the raised priority; by hand: 9 wrong-publisher
    // (6 of alice's, 3 of e1's), 4 not-owner, 1 wrong-subject, 1 forged-engine.
    assert_eq!(kinds["not-owner"], 9, "{refused}");
    assert_eq!(kinds["priority-above-default"], 1, "{refused}");
    assert_eq!(kinds["wrong-publisher"], 9, "{refused}");
    assert_eq!(kinds["wrong-subject"], 1, "{refused}");
    assert_eq!(kinds["forged-engine"], 1, "{refused}");
    let bobs_now = refused["jobs"].as_array().unwrap().iter().find(|job| job["id"] == "bobs").cloned().unwrap();
    assert_eq!((&bobs_now["held"], &bobs_now["priority"], &bobs_now["owner"]), (&serde_json::json!(true), &serde_json::json!(0), &serde_json::json!("bob")), "{refused}");
    assert!(refused["jobs"].as_array().unwrap().iter().all(|job| job["id"] != "posing" && job["id"] != "posing2"), "{refused}");
    assert_eq!(json_as(&broker, "auditor", &["policy", "show", "--json"])["seq"], policy_seq, "the policy is the operator's");
    assert_eq!(refused["engines"][0]["status"], "logged-in", "e1 is not drained: {refused}");

    // The grid runs on: bob releases his job, and both jobs complete on e1.
    run_as(&broker, "bob", &["release", "bobs"]);
    let done = wait_for_stat(&broker, &running, "both jobs to complete", |stat| {
        let status = |id: &str| stat["jobs"].as_array().and_then(|jobs| jobs.iter().find(|job| job["id"] == id).map(|job| job["status"].clone()));
        status("bobs") == Some("done".into()) && status("alices") == Some("done".into())
    });
    assert_eq!(done["engines"][0]["completed"], 4, "{done}");
    // The auditor replays it all: the same decisions, the same refusals.
    let replayed = json_as(&broker, "auditor", &["replay", "--verify", "--json"]);
    assert_eq!(replayed["verified"], true, "{replayed}");
    assert_eq!(replayed["rejections_by_kind"], done["rejections_by_kind"], "{replayed}");
    drop((e1, projector));
}

/// A stream of another's making where gridfold expects its own (a bucket left by
/// an engine of an older version, or made by hand) is refused by every component,
/// naming what is wrong with it, before anything is stored or read through it.
#[test]
fn a_stream_that_copies_elsewhere_is_refused_by_the_projector_and_setup() {
    let broker = secure_nats::start(&[]);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let operator = log_as(&broker, "operator", StreamSetup::CreateOrCheck).await;
        // What the attacker made: the output bucket's stream, sourcing the log and
        // republishing what it holds.
        let evil = async_nats::jetstream::stream::Config {
            name: "OBJ_GRIDFOLD_OUTPUT".into(),
            subjects: vec!["$O.GRIDFOLD_OUTPUT.C.>".into(), "$O.GRIDFOLD_OUTPUT.M.>".into()],
            sources: Some(vec![async_nats::jetstream::stream::Source { name: "GRIDFOLD_EVENTS".into(), ..Default::default() }]),
            republish: Some(async_nats::jetstream::stream::Republish { source: ">".into(), destination: "gridfold.copied.>".into(), headers_only: false }),
            allow_direct: true,
            allow_rollup: true,
            ..Default::default()
        };
        operator.context().create_stream(evil).await.expect("the operator's credentials make any stream");
    });
    for principal in ["operator", "projector"] {
        let args: &[&str] = if principal == "operator" { &["setup"] } else { &["projector", "--state", "p"] };
        let (code, stderr) = refused_as(&broker, principal, args);
        assert_eq!(code, Some(1), "{principal}: {stderr}");
        for said in ["stream OBJ_GRIDFOLD_OUTPUT is not gridfold's to use", "it sources stream(s) GRIDFOLD_EVENTS", "it republishes > onto gridfold.copied.>"] {
            assert!(stderr.contains(said), "{principal} did not say {said:?}: {stderr}");
        }
    }
}
