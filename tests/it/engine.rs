//! The engine agent against a real nats-server, real processes and real files.
//!
//! Each test starts its own nats-server (and FAILS, never skips, without one) and
//! plays the projector: it creates the streams, publishes `Delivery`s on
//! `gridfold.order.<engine>`, and reads what the engine published back from
//! `GRIDFOLD_EVENTS`. Deliveries carry the engine's epoch (the sequence of its
//! login) and a `batch_seq` after that login, as a projector's would (an engine
//! skips orders of an earlier epoch).

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use async_nats::jetstream::AckKind;
use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::message::PublishMessage;
use futures::StreamExt as _;
use gridfold::core::event::{
    CancelReason, EngineProps, Entry, Envelope, Event, FailureKind, LibraryRef, Order, Origin,
    Payload,
};
use gridfold::core::ids::{EngineId, JobId, Seq, TaskRef};
use gridfold::engine::feed::{FeedError, LogOrderFeed, consumer_name};
use gridfold::engine::{
    EmbeddedOrderFeed, EngineConfig, EngineError, EngineReport, FenceEvidence, JetStreamOrderFeed,
    OrderAck, OrderFeed, run_engine,
};
use gridfold::log::embedded::{EmbeddedConfig, EmbeddedLog};
use gridfold::log::jetstream::{JetStreamLog, JetStreamReader, LogConfig, STREAM_ORDERS};
use gridfold::log::nats_server::NatsServer;
use gridfold::log::{Append, EventLog, LogReader};
use gridfold::wire;
use gridfold::wire::delivery::{Delivery, DeliveryKind, RunTask, order_subject};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How long to wait for something that should happen within a second or two.
const WAIT: Duration = Duration::from_secs(15);

fn engine_id(name: &str) -> EngineId {
    EngineId::new(name).unwrap()
}

fn task(job: &str, index: u32) -> TaskRef {
    TaskRef::new(JobId::new(job).unwrap(), index)
}

fn log_config() -> LogConfig {
    LogConfig {
        request_timeout: Duration::from_secs(1),
        connect_timeout: Duration::from_secs(2),
        ..LogConfig::default()
    }
}

/// A nats-server with the streams made, a connection for the test, and a work directory.
struct Grid {
    server: NatsServer,
    log: JetStreamLog,
    events: Events<JetStreamReader>,
    dir: tempfile::TempDir,
}

/// An engine running in this process.
struct Engine {
    id: EngineId,
    shutdown: Option<oneshot::Sender<()>>,
    handle: JoinHandle<Result<EngineReport, EngineError>>,
}

impl Engine {
    async fn stop(mut self) -> EngineReport {
        let _ = self.shutdown.take().unwrap().send(());
        tokio::time::timeout(WAIT, self.handle)
            .await
            .unwrap_or_else(|_| panic!("engine {} did not stop", self.id))
            .unwrap()
            .unwrap_or_else(|err| panic!("engine {} failed: {err}", self.id))
    }

    /// The error the engine stops with by itself, within `within`.
    async fn failure(self, within: Duration) -> EngineError {
        match tokio::time::timeout(within, self.handle).await {
            Ok(Ok(Err(err))) => err,
            Ok(Ok(Ok(report))) => panic!("engine {} stopped without an error: {report:?}", self.id),
            Ok(Err(join)) => panic!("engine {} panicked: {join}", self.id),
            Err(_) => panic!("engine {} did not stop within {within:?}", self.id),
        }
    }
}

impl Grid {
    async fn start() -> Grid {
        // RUST_LOG=gridfold=debug shows what the engines do.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let server = support::nats::start();
        let log = JetStreamLog::connect(&server.url(), log_config())
            .await
            .unwrap();
        log.ensure_order_stream().await.unwrap();
        // As an operator registers the projector's key: deliveries are sealed with it.
        support::sealing::register(&log).await;
        let events = Events::new(log.reader(1).await.unwrap());
        Grid {
            server,
            log,
            events,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn work_dir(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn config(&self, name: &str, slots: u32) -> EngineConfig {
        EngineConfig {
            heartbeat_interval: Duration::from_secs(1),
            drain_timeout: Duration::from_secs(2),
            kill_grace: Duration::from_millis(300),
            ..EngineConfig::new(engine_id(name), slots, self.work_dir(name))
        }
    }

    /// A fresh grid with one engine of `slots` slots, and the log sequence of its login.
    async fn with_engine(name: &str, slots: u32) -> (Grid, Engine, u64) {
        let mut grid = Grid::start().await;
        let engine = grid.spawn(grid.config(name, slots)).await;
        let login = grid.login_seq(name).await;
        (grid, engine, login)
    }

    /// Starts an engine with its own connection, as a separate process would have.
    async fn spawn(&self, config: EngineConfig) -> Engine {
        let log = JetStreamLog::connect(&self.server.url(), log_config())
            .await
            .unwrap();
        let feed = JetStreamOrderFeed::open(&log, &config.engine)
            .await
            .unwrap();
        let (tx, rx) = oneshot::channel();
        let id = config.engine.clone();
        let handle = tokio::spawn(run_engine(config, log, feed, async move {
            let _ = rx.await;
        }));
        Engine {
            id,
            shutdown: Some(tx),
            handle,
        }
    }

    /// Publishes a delivery as the projector does, with its id as `Nats-Msg-Id`.
    async fn deliver(&self, delivery: &Delivery) {
        self.deliver_with_msg_id(delivery, &delivery.id).await;
    }

    async fn deliver_with_msg_id(&self, delivery: &Delivery, msg_id: &str) {
        let message = PublishMessage::build()
            .payload(support::sealing::sealed(delivery).into())
            .message_id(msg_id);
        let ack = self
            .log
            .context()
            .send_publish(order_subject(&delivery.engine), message)
            .await
            .unwrap();
        ack.await.unwrap();
    }

    /// Publishes attempt 1 of `t` running `sh -c script`, alone in batch `batch_seq`
    /// of the engine's `epoch`, and waits for it to start.
    async fn start_script(&mut self, engine: &str, epoch: u64, batch_seq: u64, t: &TaskRef, script: &str) {
        self.deliver(&run(engine, epoch, batch_seq, 0, t, 1, &["sh", "-c", script]))
            .await;
        self.events.until("the start", started(t, 1)).await;
    }

    /// Starts task 0 of `job` (a `sleep 300`) on `engine` in epoch `login`, and
    /// returns its process group, as the task wrote it.
    async fn start_long_task(&mut self, engine: &str, login: u64, job: &str) -> i32 {
        let t = task(job, 0);
        self.start_script(engine, login, login + 1, &t, "echo $$ > pgid; sleep 300")
            .await;
        read_pid(&self.work_dir(engine).join(format!("{job}/0-1/pgid"))).await
    }

    /// The log sequence of the engine's latest login, waiting for the first.
    async fn login_seq(&mut self, engine: &str) -> u64 {
        self.events.until("a login", |e| is_login(e, engine)).await;
        self.events
            .all()
            .filter(|e| is_login(e, engine))
            .map(|e| e.seq.0)
            .max()
            .unwrap()
    }
}

/// Appends a login of `engine` to `log` as another process under its name
/// would, and returns its sequence.
async fn append_login_of(log: &JetStreamLog, engine: &str) -> u64 {
    let login = Envelope {
        id: *uuid::Uuid::new_v4().as_bytes(),
        source: format!("engine:{engine}"),
        event: Event::EngineLoggedIn { engine: engine_id(engine), slots: 1, props: EngineProps::default() },
    };
    log.append(Append::new(wire::default_subject(&login.event), wire::encode(&login))).await.unwrap().seq
}

fn is_login(entry: &Entry, engine: &str) -> bool {
    matches!(event(entry), Some(Event::EngineLoggedIn { engine: e, .. }) if e.as_str() == engine)
}

fn event(entry: &Entry) -> Option<&Event> {
    match &entry.payload {
        Payload::Event(envelope) => Some(&envelope.event),
        Payload::Undecodable { .. } => None,
    }
}

/// What the engines published, read back from the log as the projector would.
struct Events<R> {
    reader: R,
    seen: Vec<Entry>,
}

impl<R: LogReader> Events<R> {
    fn new(reader: R) -> Self {
        Events {
            reader,
            seen: Vec::new(),
        }
    }

    fn all(&self) -> impl Iterator<Item = &Entry> {
        self.seen.iter()
    }

    /// Reads on until an entry matching `pred` has been seen, and returns the first.
    async fn until(&mut self, what: &str, pred: impl Fn(&Entry) -> bool) -> Entry {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(entry) = self.seen.iter().find(|e| pred(e)) {
                return entry.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no {what} within {WAIT:?}; the log holds:\n{}",
                self.dump()
            );
            match self
                .reader
                .next_batch(1_000, Duration::from_millis(200))
                .await
            {
                Ok(batch) => self.seen.extend(batch.entries.iter().flat_map(|raw| {
                    support::folded_log::split_reports(wire::entry_from_log(Seq(raw.seq), raw.time_ms, &raw.subject, &raw.payload))
                })),
                // The broker may be away (a restart test): the reader reconnects.
                Err(err) => {
                    eprintln!("reading events: {err}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }

    /// Reads everything the log holds now (a read that finds nothing ends it).
    async fn read_all(&mut self) {
        loop {
            let batch = self.reader.next_batch(1_000, Duration::from_millis(200)).await.unwrap();
            if batch.entries.is_empty() {
                return;
            }
            self.seen.extend(batch.entries.iter().flat_map(|raw| {
                support::folded_log::split_reports(wire::entry_from_log(Seq(raw.seq), raw.time_ms, &raw.subject, &raw.payload))
            }));
        }
    }

    fn count(&self, pred: impl Fn(&Entry) -> bool) -> usize {
        self.seen.iter().filter(|e| pred(e)).count()
    }

    fn dump(&self) -> String {
        self.seen
            .iter()
            .map(|e| {
                format!(
                    "  {} {:?}",
                    e.seq.0,
                    event(e).map_or("undecodable".to_string(), |ev| format!("{ev:?}"))
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn started(t: &TaskRef, attempt: u32) -> impl Fn(&Entry) -> bool {
    let t = t.clone();
    move |e| matches!(event(e), Some(Event::TaskStarted { task, attempt: a, .. }) if *task == t && *a == attempt)
}

fn ended(t: &TaskRef, attempt: u32) -> impl Fn(&Entry) -> bool {
    let t = t.clone();
    move |e| {
        matches!(event(e), Some(Event::TaskCompleted { task, attempt: a, .. } | Event::TaskFailed { task, attempt: a, .. })
            if *task == t && *a == attempt)
    }
}

fn logged_out(engine: &str) -> impl Fn(&Entry) -> bool {
    let engine = engine.to_string();
    move |e| matches!(event(e), Some(Event::EngineLoggedOut { engine: id }) if id.as_str() == engine)
}

/// A `Run` in batch `batch_seq`, folded in the engine's `epoch` (the sequence of
/// the login it was decided after: an engine skips runs of an earlier epoch).
fn run(
    engine: &str,
    epoch: u64,
    batch_seq: u64,
    n: usize,
    t: &TaskRef,
    attempt: u32,
    argv: &[&str],
) -> Delivery {
    let run = RunTask {
        task: t.clone(),
        attempt,
        argv: argv.iter().map(|s| s.to_string()).collect(),
        params: BTreeMap::new(),
        wall_time_limit_ms: 0,
        slots: 1,
        root_library: None,
        output_bytes_max: gridfold::core::event::OutputPolicy::default().task_bytes_max,
        work_dir_retention_ms: gridfold::core::event::OutputPolicy::default().work_dir_retention_ms,
        nodes: Vec::new(),
        companion: false,
        companion_argv: Vec::new(),
    };
    Delivery {
        id: Delivery::id_for(Seq(batch_seq), n),
        batch_seq: Seq(batch_seq),
        engine: engine_id(engine),
        epoch,
        kind: DeliveryKind::Run(run),
    }
}

/// `delivery`, a `Run`, with its run adjusted.
fn adjusted(mut delivery: Delivery, adjust: impl FnOnce(&mut RunTask)) -> Delivery {
    match &mut delivery.kind {
        DeliveryKind::Run(run) => adjust(run),
        other => panic!("not a run: {other:?}"),
    }
    delivery
}

fn cancel(engine: &str, epoch: u64, batch_seq: u64, n: usize, t: &TaskRef, attempt: u32) -> Delivery {
    let order = Order::Cancel {
        task: t.clone(),
        attempt,
        engine: engine_id(engine),
        reason: CancelReason::JobCancelled,
    };
    Delivery {
        id: Delivery::id_for(Seq(batch_seq), n),
        batch_seq: Seq(batch_seq),
        engine: engine_id(engine),
        epoch,
        kind: DeliveryKind::Cancel(order),
    }
}

/// The news that the engine's `epoch` was declared lost.
fn lost(engine: &str, epoch: u64, batch_seq: u64, n: usize) -> Delivery {
    let order = Order::EngineLost {
        engine: engine_id(engine),
        epoch,
        last_seen_ms: 0,
    };
    Delivery {
        id: Delivery::id_for(Seq(batch_seq), n),
        batch_seq: Seq(batch_seq),
        engine: engine_id(engine),
        epoch,
        kind: DeliveryKind::Lost(order),
    }
}

/// Processes of group `pgid` that are alive (not zombies), from `/proc`.
fn live_group_members(pgid: i32) -> Vec<i32> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // fields[0] is the state, fields[2] the process group.
        if fields.get(2) == Some(&pgid.to_string().as_str()) && fields.first() != Some(&"Z") {
            members.push(pid);
        }
    }
    members
}

/// How process `pid` is on its way out, from `/proc`: `exiting`, `gone`, a fatal
/// signal (SIGKILL or SIGTERM) pending for it or its group (the kernel keeps a
/// group's signal pending until the process is reaped); empty if it is not.
fn dying(pid: i32) -> String {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return "gone".into();
    };
    let fields: Vec<&str> = stat.rsplit_once(')').map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    // fields[0] is the state, fields[6] the flags (PF_EXITING = 0x4).
    if matches!(fields.first(), Some(&"Z" | &"X" | &"x")) {
        return "gone".into();
    }
    if fields.get(6).and_then(|flags| flags.parse::<u64>().ok()).is_some_and(|flags| flags & 0x4 != 0) {
        return "exiting".into();
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let fatal = (1u64 << (libc::SIGKILL - 1)) | (1u64 << (libc::SIGTERM - 1));
    let signalled = status
        .lines()
        .filter_map(|line| line.strip_prefix("SigPnd:").or_else(|| line.strip_prefix("ShdPnd:")))
        .filter_map(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .any(|mask| mask & fatal != 0);
    if signalled { "signalled".into() } else { String::new() }
}

fn is_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .map(|(_, rest)| rest.split_whitespace().next() != Some("Z"))
        })
        .unwrap_or(false)
}

async fn wait_for_file(path: &Path) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The process id a task wrote to `path`, once the file is complete.
async fn read_pid(path: &Path) -> i32 {
    wait_for_file(path).await.trim().parse().unwrap()
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---- engines over the embedded logs, without a broker ----

/// The order log and the event log of an embedded grid under `dir`.
async fn open_embedded_logs(dir: &Path) -> (EmbeddedLog, EmbeddedLog) {
    let orders = gridfold::projector::service::sink::open_order_log(&dir.join("orders")).unwrap();
    let events = EmbeddedLog::open(dir.join("events"), EmbeddedConfig::default()).unwrap();
    support::sealing::register(&events).await;
    (orders, events)
}

/// A one-slot engine working in `<dir>/work`.
fn embedded_config(name: &str, dir: &Path) -> EngineConfig {
    EngineConfig {
        kill_grace: Duration::from_millis(300),
        ..EngineConfig::new(engine_id(name), 1, dir.join("work"))
    }
}

/// Starts an engine reading its orders from `orders` and writing to `events`.
async fn spawn_embedded(
    config: EngineConfig,
    orders: &EmbeddedLog,
    events: &EmbeddedLog,
) -> (
    oneshot::Sender<()>,
    JoinHandle<Result<EngineReport, EngineError>>,
) {
    let feed = EmbeddedOrderFeed::open(orders, &config.engine)
        .await
        .unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let handle = tokio::spawn(run_engine(config, events.clone(), feed, async move {
        let _ = stopped.await;
    }));
    (stop, handle)
}

/// Tells an engine of [`spawn_embedded`] to stop, and returns its report.
async fn stop_embedded(
    stop: oneshot::Sender<()>,
    handle: JoinHandle<Result<EngineReport, EngineError>>,
) -> EngineReport {
    stop.send(()).unwrap();
    tokio::time::timeout(WAIT, handle)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
}

/// Appends a delivery to an embedded order log, as the projector's sink does.
async fn append_delivery(orders: &EmbeddedLog, delivery: &Delivery) {
    let subject = order_subject(&delivery.engine);
    orders
        .append(Append::new(subject, support::sealing::sealed(delivery)))
        .await
        .unwrap();
}

// ---- tests ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_carries_measured_and_custom_props_and_heartbeats_follow() {
    let mut grid = Grid::start().await;
    let mut config = grid.config("e-props", 3);
    config.heartbeat_interval = Duration::from_millis(200);
    config.given_props = [("type", "blade"), ("site", "lyon"), ("memory_mb", "512")]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into();
    let engine = grid.spawn(config).await;

    let login = grid
        .events
        .until("a login", |e| is_login(e, "e-props"))
        .await;
    assert_eq!(
        login.origin,
        Origin::Engine(engine_id("e-props")),
        "published on its own subject"
    );
    let Payload::Event(envelope) = &login.payload else {
        unreachable!()
    };
    assert_eq!(envelope.source, "engine:e-props");
    let Event::EngineLoggedIn { slots, props, .. } = &envelope.event else {
        unreachable!()
    };
    assert_eq!(*slots, 3);
    assert_eq!(props.os, std::env::consts::OS);
    assert_eq!(props.arch, std::env::consts::ARCH);
    assert_eq!(
        props.cores,
        std::thread::available_parallelism().unwrap().get() as u32
    );
    assert!(props.disk_mb > 0 && props.mflops > 0, "{props:?}");
    assert_eq!(
        props.memory_mb, 512,
        "a given intrinsic property replaces the measurement"
    );
    assert_eq!(props.site, "lyon");
    assert_eq!(
        props.custom,
        [("type".to_string(), "blade".to_string())].into()
    );

    let heartbeat = grid
        .events
        .until("a heartbeat", |e| matches!(event(e), Some(Event::EngineHeartbeat { engine, .. }) if engine.as_str() == "e-props"))
        .await;
    let Some(Event::EngineHeartbeat { load, .. }) = event(&heartbeat) else {
        unreachable!()
    };
    assert!(load.memory_free_mb > 0, "{load:?}");

    let report = engine.stop().await;
    grid.events.until("a logout", logged_out("e-props")).await;
    assert_eq!(report.logins, 1);
    assert_eq!(report.props.custom["type"], "blade");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_sees_its_environment_runs_in_its_work_dir_and_completes_with_its_stdout() {
    let (mut grid, engine, login) = Grid::with_engine("e1", 2).await;

    let t = task("render.v2", 3);
    let script = r#"
        [ "$GRIDFOLD_JOB_ID" = render.v2 ] || { echo "job $GRIDFOLD_JOB_ID" >&2; exit 11; }
        [ "$GRIDFOLD_TASK_ID" = render.v2/3 ] || exit 12
        [ "$GRIDFOLD_TASK_INDEX" = 3 ] || exit 13
        [ "$GRIDFOLD_ATTEMPT" = 2 ] || exit 14
        [ "$GRIDFOLD_ENGINE" = e1 ] || exit 15
        [ "$GRIDFOLD_SLOTS" = 2 ] || exit 16
        [ "$GRIDFOLD_PARAM_FRAME_RATE" = 24 ] || exit 17
        [ "$(pwd -P)" = "$GRIDFOLD_WORKDIR" ] || { echo "in $(pwd -P) not $GRIDFOLD_WORKDIR" >&2; exit 18; }
        echo written > out.txt
        printf 'frame %s done' "$GRIDFOLD_TASK_INDEX"
    "#;
    let delivery = adjusted(run("e1", login, login + 1, 0, &t, 2, &["sh", "-c", script]), |run| {
        run.params.insert("frame-rate".into(), "24".into());
        run.slots = 2;
    });
    grid.deliver(&delivery).await;

    let end = grid.events.until("the task's end", ended(&t, 2)).await;
    grid.events.until("the task's start", started(&t, 2)).await;
    // Alone or joined in one batch, the start comes first.
    let start_at = grid.events.seen.iter().position(started(&t, 2));
    let end_at = grid.events.seen.iter().position(ended(&t, 2));
    assert!(start_at < end_at, "started is stored before the end");
    match event(&end) {
        Some(Event::TaskCompleted {
            exit_code,
            result,
            wall_ms,
            cpu_ms,
            engine,
            ..
        }) => {
            assert_eq!((*exit_code, engine.as_str()), (0, "e1"));
            assert_eq!(String::from_utf8_lossy(result), "frame 3 done");
            assert!(
                *wall_ms < 10_000 && *cpu_ms < 10_000,
                "wall {wall_ms} cpu {cpu_ms}"
            );
        }
        other => panic!("expected a completion, got {other:?}"),
    }
    let written = grid
        .work_dir("e1")
        .join("render.v2")
        .join("3-2")
        .join("out.txt");
    assert_eq!(std::fs::read_to_string(&written).unwrap(), "written\n");

    let report = engine.stop().await;
    assert_eq!((report.started, report.completed, report.failed), (1, 1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_report_exit_code_and_stderr_tail_and_launch_failures_say_why() {
    let (mut grid, engine, login) = Grid::with_engine("e-fail", 1).await;

    let noisy = task("fail", 0);
    let script = r#"i=0; while [ $i -lt 1500 ]; do echo "line $i" >&2; i=$((i+1)); done; echo "dernière ligne é" >&2; exit 7"#;
    grid.deliver(&run(
        "e-fail",
        login,
        login + 1,
        0,
        &noisy,
        1,
        &["sh", "-c", script],
    ))
    .await;
    let end = grid.events.until("the failure", ended(&noisy, 1)).await;
    match event(&end) {
        Some(Event::TaskFailed {
            exit_code,
            kind,
            error_tail,
            ..
        }) => {
            assert_eq!((*exit_code, *kind), (Some(7), FailureKind::NonZeroExit));
            assert!(
                error_tail.len() <= 4096 && error_tail.len() > 4000,
                "{} bytes",
                error_tail.len()
            );
            assert!(
                error_tail.ends_with("line 1499\ndernière ligne é\n"),
                "{error_tail:?}"
            );
            assert!(!error_tail.contains("line 0\n"), "only the tail is kept");
        }
        other => panic!("expected a failure, got {other:?}"),
    }

    let missing = task("fail", 1);
    grid.deliver(&run(
        "e-fail",
        login,
        login + 2,
        0,
        &missing,
        1,
        &["gridfold-no-such-program", "x"],
    ))
    .await;
    let end = grid
        .events
        .until("the launch failure", ended(&missing, 1))
        .await;
    match event(&end) {
        Some(Event::TaskFailed {
            exit_code: None,
            kind: FailureKind::LaunchFailed,
            error_tail,
            ..
        }) => {
            assert!(
                error_tail.contains("gridfold-no-such-program"),
                "{error_tail}"
            );
        }
        other => panic!("expected a launch failure, got {other:?}"),
    }
    assert_eq!(
        grid.events.count(started(&missing, 1)),
        0,
        "what did not start is not reported started"
    );

    // One slot: a second run while the first holds it is refused, saying so.
    let holder = task("slots", 0);
    let extra = task("slots", 1);
    grid.deliver(&run(
        "e-fail",
        login,
        login + 3,
        0,
        &holder,
        1,
        &["sh", "-c", "echo $$ > pgid; exec sleep 30"],
    ))
    .await;
    grid.deliver(&run("e-fail", login, login + 3, 1, &extra, 1, &["true"]))
        .await;
    let end = grid.events.until("the refusal", ended(&extra, 1)).await;
    match event(&end) {
        Some(Event::TaskFailed {
            kind: FailureKind::LaunchFailed,
            error_tail,
            ..
        }) => {
            assert!(
                error_tail.contains("needs 1 slot(s) and 0 of the engine's 1 are free"),
                "{error_tail}"
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let pgid: i32 = read_pid(&grid.work_dir("e-fail").join("slots/0-1/pgid")).await;
    grid.deliver(&cancel("e-fail", login, login + 4, 0, &holder, 1))
        .await;
    // Shutdown wins over unread deliveries, so see the cancel take effect first.
    eventually("the cancelled holder dies", || {
        live_group_members(pgid).is_empty()
    })
    .await;
    let report = engine.stop().await;
    assert_eq!(
        (report.started, report.failed, report.stopped_on_order),
        (2, 3, 1),
        "{report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wall_time_limit_kills_the_task_and_reports_it() {
    let (mut grid, engine, login) = Grid::with_engine("e-wall", 1).await;

    let t = task("slow", 0);
    let delivery = adjusted(run("e-wall", login, login + 1, 0, &t, 1, &["sleep", "30"]), |run| {
        run.wall_time_limit_ms = 500
    });
    grid.deliver(&delivery).await;
    let start = grid.events.until("the start", started(&t, 1)).await;
    let end = grid
        .events
        .until("the wall-time failure", ended(&t, 1))
        .await;
    // The log's own times, not the test's clock: stopped at its limit, long
    // before the 30 s its command would have run.
    assert!(
        end.time_ms - start.time_ms < 30_000,
        "killed near its limit, not after 30 s: it ran from {} to {}",
        start.time_ms,
        end.time_ms
    );
    match event(&end) {
        Some(Event::TaskFailed {
            kind, exit_code, ..
        }) => assert_eq!((*kind, *exit_code), (FailureKind::WallTimeExceeded, None)),
        other => panic!("expected a wall-time failure, got {other:?}"),
    }
    engine.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_kills_the_whole_process_group_and_reports_nothing() {
    let (mut grid, engine, login) = Grid::with_engine("e-cancel", 1).await;

    let t = task("long", 0);
    let script = "echo $$ > pgid; sleep 300 & echo $! > child; wait";
    grid.start_script("e-cancel", login, login + 1, &t, script).await;
    let dir = grid.work_dir("e-cancel").join("long").join("0-1");
    let pgid: i32 = read_pid(&dir.join("pgid")).await;
    let child: i32 = read_pid(&dir.join("child")).await;
    assert!(is_alive(child));
    assert_eq!(live_group_members(pgid).len(), 2, "the shell and its sleep");

    grid.deliver(&cancel("e-cancel", login, login + 2, 0, &t, 1)).await;
    eventually("the group dies", || live_group_members(pgid).is_empty()).await;
    assert!(!is_alive(child), "the task's child died with it");

    let report = engine.stop().await;
    grid.events
        .until("the logout", logged_out("e-cancel"))
        .await;
    assert_eq!(
        grid.events.count(ended(&t, 1)),
        0,
        "a cancelled attempt is not reported"
    );
    assert_eq!(report.stopped_on_order, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_delivery_twice_runs_once() {
    let (mut grid, engine, login) = Grid::with_engine("e-dup", 2).await;

    let t = task("once", 0);
    let delivery = run(
        "e-dup",
        login,
        login + 1,
        0,
        &t,
        1,
        &["sh", "-c", "echo ran >> runs"],
    );
    grid.deliver(&delivery).await;
    // Another message id, as a projector restarted after the broker's duplicate window
    // would send: the broker stores it again, the engine must not run it again.
    grid.deliver_with_msg_id(&delivery, "redelivered").await;
    // Another delivery id for the same attempt (a projector bug): not run either.
    let mut same_attempt = delivery.clone();
    same_attempt.id = Delivery::id_for(Seq(login + 2), 0);
    same_attempt.batch_seq = Seq(login + 2);
    grid.deliver(&same_attempt).await;
    // A later delivery, to know the repeats were read before it.
    let marker = task("once", 1);
    grid.deliver(&run("e-dup", login, login + 3, 0, &marker, 1, &["true"]))
        .await;
    grid.events
        .until("the marker's end", ended(&marker, 1))
        .await;
    grid.events.until("the task's end", ended(&t, 1)).await;

    let report = engine.stop().await;
    grid.events.until("the logout", logged_out("e-dup")).await;
    assert_eq!(grid.events.count(started(&t, 1)), 1);
    assert_eq!(grid.events.count(ended(&t, 1)), 1);
    let runs = std::fs::read_to_string(grid.work_dir("e-dup").join("once/0-1/runs")).unwrap();
    assert_eq!(runs, "ran\n");
    assert_eq!(report.duplicates_ignored, 2, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_the_engine_process_then_logs_out() {
    let mut grid = Grid::start().await;
    let stderr_path = grid.dir.path().join("engine.stderr");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_gridfold")).env("GRIDFOLD_OPERATOR", "true")
        .args([
            "engine",
            "--nats",
            &grid.server.url(),
            "--name",
            "e-term",
            "--slots",
            "2",
        ])
        .args([
            "--prop",
            "type=blade",
            "--heartbeat-secs",
            "1",
            "--drain-timeout-secs",
            "2",
        ])
        .arg("--work-dir")
        .arg(grid.work_dir("e-term"))
        .env("RUST_LOG", "gridfold=info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap();
    let stderr = || std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let login = grid.login_seq("e-term").await;

    let short = task("drain", 0);
    let long = task("drain", 1);
    grid.deliver(&run(
        "e-term",
        login,
        login + 1,
        0,
        &short,
        1,
        &["sh", "-c", "sleep 1; echo short done"],
    ))
    .await;
    grid.deliver(&run("e-term", login, login + 1, 1, &long, 1, &["sleep", "30"]))
        .await;
    grid.events
        .until("the short start", started(&short, 1))
        .await;
    grid.events.until("the long start", started(&long, 1)).await;
    let signalled = Instant::now();
    // SAFETY: kill only signals our own child, by its id.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);

    let short_end = grid.events.until("the short end", ended(&short, 1)).await;
    let long_end = grid.events.until("the long end", ended(&long, 1)).await;
    let logout = grid.events.until("the logout", logged_out("e-term")).await;
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "exit {status:?}; stderr:\n{}", stderr());
    assert!(
        signalled.elapsed() >= Duration::from_secs(2),
        "the long task had the drain timeout"
    );
    // And no more: stopped by the drain (its end says so below), long before
    // the 30 s its command would have run, by the log's own times.
    let long_start = grid.events.until("the long start", started(&long, 1)).await;
    assert!(
        long_end.time_ms - long_start.time_ms < 30_000,
        "the long task ran from {} to {}",
        long_start.time_ms,
        long_end.time_ms
    );
    match event(&short_end) {
        Some(Event::TaskCompleted { result, .. }) => assert_eq!(result, b"short done\n"),
        other => panic!(
            "the short task should finish while draining, got {other:?}; stderr:\n{}",
            stderr()
        ),
    }
    match event(&long_end) {
        Some(Event::TaskFailed { kind, .. }) => assert_eq!(*kind, FailureKind::EngineShutdown),
        other => panic!("the long task should be stopped at shutdown, got {other:?}"),
    }
    assert!(
        long_end.seq < logout.seq && short_end.seq < logout.seq,
        "logout comes last"
    );
    assert!(stderr().contains("logged out"), "{}", stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_catches_up_on_orders_published_while_it_was_away_and_skips_stale_ones() {
    // A first session creates the durable consumer, then the engine goes away.
    let (mut grid, engine, first_login) = Grid::with_engine("e-away", 2).await;
    engine.stop().await;
    grid.events.until("the logout", logged_out("e-away")).await;

    // While it is away: an order of its old session (stale once it logs in again),
    // and orders the projector decides after its next login. The test publishes those
    // early, with the batch sequence they would have, to show the broker keeps them.
    let next_login = grid.log.last_seq().await.unwrap() + 1;
    let stale = task("away", 0);
    let fresh: Vec<TaskRef> = (1..=3).map(|i| task("away", i)).collect();
    grid.deliver(&run("e-away", first_login, first_login + 1, 0, &stale, 1, &["true"]))
        .await;
    for (n, t) in fresh.iter().enumerate() {
        grid.deliver(&run(
            "e-away",
            next_login,
            next_login + 5,
            n,
            t,
            1,
            &["sh", "-c", "echo caught up"],
        ))
        .await;
    }

    // Slots for all three at once, as a projector would have needed to send them together.
    let engine = grid.spawn(grid.config("e-away", 3)).await;
    for t in &fresh {
        let end = grid
            .events
            .until("a caught-up task's end", ended(t, 1))
            .await;
        assert!(
            matches!(event(&end), Some(Event::TaskCompleted { .. })),
            "{end:?}"
        );
    }
    assert_eq!(grid.login_seq("e-away").await, next_login);
    let report = engine.stop().await;
    assert_eq!(
        grid.events.count(started(&stale, 1)),
        0,
        "an order of an old session is not run"
    );
    assert_eq!(
        (report.completed, report.stale_ignored),
        (3, 1),
        "{report:?}"
    );

    // Everything it read was acknowledged, the stale order included.
    let stream = grid.log.context().get_stream(STREAM_ORDERS).await.unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let info = stream
            .consumer_info(consumer_name(&engine_id("e-away")))
            .await
            .unwrap();
        if info.num_ack_pending == 0 && info.num_pending == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "unacknowledged orders remain: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restart_mid_task_loses_no_order_and_no_report() {
    let (mut grid, engine, login) = Grid::with_engine("e-restart", 2).await;

    let during = task("restart", 0);
    grid.start_script("e-restart", login, login + 1, &during, "sleep 2; echo survived")
        .await;

    // Down while the task finishes, so its report waits for the broker: the
    // broker comes back once the task's process has ended (its group record
    // gone: the engine has reaped it and holds its report).
    tokio::task::block_in_place(|| grid.server.stop()).unwrap();
    let records = grid.work_dir("e-restart").join(gridfold::engine::groups::RECORDS_DIR_NAME);
    let deadline = Instant::now() + WAIT;
    while !gridfold::engine::groups::read_records(&records).unwrap().records.is_empty() {
        assert!(Instant::now() < deadline, "the task's process did not end within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::task::block_in_place(|| grid.server.start_again())
        .unwrap_or_else(|err| panic!("restarting nats-server: {err}"));

    // An order published after the restart reaches the engine through its durable consumer.
    let after = task("restart", 1);
    let deadline = Instant::now() + WAIT;
    let delivery = run(
        "e-restart",
        login,
        login + 2,
        0,
        &after,
        1,
        &["sh", "-c", "echo after"],
    );
    loop {
        let message = PublishMessage::build()
            .payload(support::sealing::sealed(&delivery).into())
            .message_id(&delivery.id);
        let published = match grid
            .log
            .context()
            .send_publish(order_subject(&delivery.engine), message)
            .await
        {
            Ok(ack) => ack.await.is_ok(),
            Err(_) => false,
        };
        if published {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "could not publish after the restart"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let end = grid
        .events
        .until("the report held through the restart", ended(&during, 1))
        .await;
    assert!(
        matches!(event(&end), Some(Event::TaskCompleted { result, .. }) if result == b"survived\n"),
        "{end:?}"
    );
    let end = grid
        .events
        .until("the task ordered after the restart", ended(&after, 1))
        .await;
    assert!(
        matches!(event(&end), Some(Event::TaskCompleted { .. })),
        "{end:?}"
    );

    let report = engine.stop().await;
    grid.events
        .until("the logout", logged_out("e-restart"))
        .await;
    for t in [&during, &after] {
        assert_eq!(
            grid.events.count(started(t, 1)),
            1,
            "{t} started once:\n{}",
            grid.events.dump()
        );
        assert_eq!(
            grid.events.count(ended(t, 1)),
            1,
            "{t} ended once:\n{}",
            grid.events.dump()
        );
    }
    assert_eq!(
        (report.started, report.completed, report.logins),
        (2, 2, 1),
        "{report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_login_under_its_name_fences_the_engine_out_within_a_heartbeat() {
    let (mut grid, engine, login) = Grid::with_engine("e-twin", 1).await;
    let pgid = grid.start_long_task("e-twin", login, "twin").await;

    // Another process logs in under the same name; no projector runs here, so only
    // the log's newest login can tell the engine.
    let newer = append_login_of(&grid.log, "e-twin").await;
    match engine.failure(WAIT).await {
        EngineError::Fenced { newer_login, own_login, evidence, .. } => {
            assert_eq!((newer_login, own_login), (newer, login));
            assert_eq!(evidence, FenceEvidence::NewestLogin);
        }
        other => panic!("expected Fenced, got {other}"),
    }
    // Within a heartbeat, counted in the engine's own heartbeats rather than on the
    // test's clock: each heartbeat asks the log for the newest login, so the engine
    // stops at the first whose question is read after the newer login. Of its
    // heartbeats, the log stores after that login at most the one on its way then
    // and the one whose question saw it, and one more if the log was slow to answer.
    grid.events.read_all().await;
    let heartbeats_after = grid.events.count(|e| e.seq.0 > newer && is_heartbeat(e, "e-twin"));
    assert!(
        heartbeats_after <= 3,
        "fenced out within a heartbeat of the newer login: {heartbeats_after} of its heartbeats after it:\n{}",
        grid.events.dump()
    );
    eventually("the fenced engine's task dies", || live_group_members(pgid).is_empty()).await;
}

/// The newest entry on the engine's login subject is a newer login only when
/// the fold accepts it as one: bytes that do not decode, and a login with no
/// slots, leave the engine running (and working); a real login still fences it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_the_fold_rejects_on_its_login_subject_does_not_fence_the_engine_out() {
    let (mut grid, engine, login) = Grid::with_engine("e-bad", 1).await;
    let subject = wire::engine_login_subject(&engine_id("e-bad"));
    let no_slots = Envelope {
        id: *uuid::Uuid::new_v4().as_bytes(),
        source: "engine:e-bad".into(),
        event: Event::EngineLoggedIn { engine: engine_id("e-bad"), slots: 0, props: EngineProps::default() },
    };
    for (n, payload) in [b"not an envelope".to_vec(), wire::encode(&no_slots)].into_iter().enumerate() {
        let bad = grid.log.append(Append::new(subject.clone(), payload)).await.unwrap().seq;
        // Three heartbeats after it: the newest login was asked for and answered since.
        let mut after = bad;
        for _ in 0..3 {
            after = grid.events.until("a heartbeat after the bad entry", |e| e.seq.0 > after && is_heartbeat(e, "e-bad")).await.seq.0;
        }
        let t = task("after-bad", n as u32);
        grid.start_script("e-bad", login, after + 1, &t, "true").await;
        grid.events.until("the task's end", ended(&t, 1)).await;
    }
    let newer = append_login_of(&grid.log, "e-bad").await;
    match engine.failure(WAIT).await {
        EngineError::Fenced { newer_login, evidence, .. } => {
            assert_eq!((newer_login, evidence), (newer, FenceEvidence::NewestLogin));
        }
        other => panic!("expected Fenced, got {other}"),
    }
}

fn is_heartbeat(entry: &Entry, engine: &str) -> bool {
    matches!(event(entry), Some(Event::EngineHeartbeat { engine: e, .. }) if e.as_str() == engine)
}

/// A newer process takes the engine's order feed over before it logs in: the
/// running engine, finding the newer mark on its consumer, kills its task at
/// once and stops, fenced out, when the newer login is on the log, saying that
/// its feed was taken over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_whose_order_feed_a_newer_process_took_kills_its_tasks_and_is_fenced_out_at_the_newer_login() {
    let (mut grid, engine, login) = Grid::with_engine("e-taken", 1).await;
    let pgid = grid.start_long_task("e-taken", login, "taken").await;

    let newer_log = JetStreamLog::connect(&grid.server.url(), log_config()).await.unwrap();
    let _newer_feed = JetStreamOrderFeed::open(&newer_log, &engine_id("e-taken")).await.unwrap();
    // The task dies as soon as the engine finds its feed taken, before any newer login.
    eventually("the task of the engine whose feed was taken dies", || live_group_members(pgid).is_empty()).await;

    let newer = append_login_of(&newer_log, "e-taken").await;
    match engine.failure(WAIT).await {
        EngineError::Fenced { newer_login, own_login, evidence, .. } => {
            assert_eq!((newer_login, own_login), (newer, login));
            assert_eq!(evidence, FenceEvidence::FeedTakenOver);
        }
        other => panic!("expected Fenced, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_of_a_newer_epoch_fences_the_engine_out_and_is_handed_back_unrun() {
    let (mut grid, engine, login) = Grid::with_engine("e-older", 1).await;
    let t = task("newer", 0);
    let delivery = run("e-older", login + 5, login + 6, 0, &t, 1, &["true"]);
    grid.deliver(&delivery).await;
    match engine.failure(WAIT).await {
        EngineError::Fenced { newer_login, own_login, evidence, .. } => {
            assert_eq!((newer_login, own_login), (login + 5, login));
            assert_eq!(evidence, FenceEvidence::Delivery { id: delivery.id.clone() });
        }
        other => panic!("expected Fenced, got {other}"),
    }
    grid.events.read_all().await;
    assert_eq!(grid.events.count(started(&t, 1)), 0, "not run:\n{}", grid.events.dump());
    // Handed back at once rather than after the consumer's ack wait (30 s): a pull on
    // the engine's consumer, its mark left as it is, gets it again, delivered a second
    // time sooner after the first than the ack wait, by the broker's record of both.
    let stream = grid.log.context().get_stream(STREAM_ORDERS).await.unwrap();
    let name = consumer_name(&engine_id("e-older"));
    let mut consumer: PullConsumer = stream.get_consumer(&name).await.unwrap();
    let before = consumer.info().await.unwrap().clone();
    let ack_wait = before.config.ack_wait;
    assert!(ack_wait >= Duration::from_secs(10), "the consumer's ack wait: {before:?}");
    let delivered_to_engine = before.delivered.last_active.expect("the broker's time of the delivery to the engine");
    let mut again = consumer.fetch().max_messages(1).expires(ack_wait * 2).messages().await.unwrap();
    let message = tokio::time::timeout(ack_wait * 3, again.next())
        .await
        .expect("the delivery comes again")
        .expect("a message")
        .unwrap();
    assert_eq!(wire::delivery::decode_delivery(&engine_id("e-older"), &message.payload).unwrap(), delivery);
    assert_eq!(message.info().unwrap().delivered, 2, "delivered to the engine, then here");
    let after = consumer.info().await.unwrap().clone();
    let delivered_again = after.delivered.last_active.expect("the broker's time of the second delivery");
    assert!(
        delivered_again - delivered_to_engine < ack_wait,
        "handed back, not come again after the ack wait: delivered at {delivered_to_engine} then {delivered_again}"
    );
    message.ack_with(AckKind::Nak(None)).await.unwrap();
    // The newer process reading the same consumer gets it.
    let log = JetStreamLog::connect(&grid.server.url(), log_config()).await.unwrap();
    let mut feed = JetStreamOrderFeed::open(&log, &engine_id("e-older")).await.unwrap();
    let message = tokio::time::timeout(WAIT, feed.next())
        .await
        .expect("the delivery comes to the newer process")
        .unwrap();
    assert_eq!(wire::delivery::decode_delivery(&engine_id("e-older"), &message.payload).unwrap(), delivery);
}

/// Two processes under one engine name: the newer one's feed takes the consumer
/// over, ending the pull the older one left waiting at the broker, so every
/// delivery published from then on reaches the newer one at once (none goes to
/// the older one's pull, to come back only after the consumer's 30 s ack wait),
/// and the older feed says it was taken over. What the older one left
/// unacknowledged comes to the newer one too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_process_takes_the_order_feed_over_and_gets_every_delivery_at_once() {
    const DELIVERIES: usize = 20;
    let grid = Grid::start().await;
    let e1 = engine_id("e-two");
    let left_unacked = run("e-two", 1, 2, 0, &task("two", 99), 1, &["true"]);
    grid.deliver(&left_unacked).await;

    let older_log = JetStreamLog::connect(&grid.server.url(), log_config()).await.unwrap();
    let mut older = JetStreamOrderFeed::open(&older_log, &e1).await.unwrap();
    let taken = tokio::time::timeout(WAIT, older.next()).await.unwrap().unwrap();
    assert_eq!(wire::delivery::decode_delivery(&e1, &taken.payload).unwrap(), left_unacked);
    // The older process pulls on: a pull of its waits at the broker.
    let older_pulls = tokio::spawn(async move {
        let next = older.next().await.map(|message| message.payload);
        drop(taken);
        next
    });
    let stream = grid.log.context().get_stream(STREAM_ORDERS).await.unwrap();
    let consumer_info = || async { stream.consumer_info(consumer_name(&e1)).await.unwrap() };
    let deadline = Instant::now() + WAIT;
    loop {
        let info = consumer_info().await;
        if info.num_waiting > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "a pull of the older process waiting at the broker: not within {WAIT:?}: {info:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ack_wait = consumer_info().await.config.ack_wait;

    let newer_log = JetStreamLog::connect(&grid.server.url(), log_config()).await.unwrap();
    let mut newer = JetStreamOrderFeed::open(&newer_log, &e1).await.unwrap();
    let deliveries: Vec<Delivery> = (0..DELIVERIES)
        .map(|n| run("e-two", 3, 4, n, &task("two", n as u32), 1, &["true"]))
        .collect();
    for delivery in &deliveries {
        grid.deliver(delivery).await;
    }

    let mut received = Vec::new();
    let mut acks = Vec::new();
    for _ in 0..=DELIVERIES {
        let message = tokio::time::timeout(ack_wait * 2, newer.next())
            .await
            .expect("every delivery reaches the newer process")
            .unwrap();
        received.push(wire::delivery::decode_delivery(&e1, &message.payload).unwrap());
        acks.push(message.ack);
    }
    let mut expected = vec![left_unacked];
    expected.extend(deliveries);
    assert_eq!(received, expected, "the older one's unacknowledged delivery first, then every new one, in order");
    // A delivery held by the older one's pull would have come here only after the ack
    // wait, delivered twice: by the broker's count, the consumer delivered each once.
    let info = consumer_info().await;
    assert_eq!(
        (info.delivered.consumer_sequence, info.num_redelivered),
        (DELIVERIES as u64 + 1, 0),
        "every delivery reached the newer process at once, none held by the older one's pull: {info:?}"
    );
    for ack in acks {
        ack.ack().await.unwrap();
    }

    match tokio::time::timeout(WAIT, older_pulls).await.unwrap().unwrap() {
        Err(FeedError::TakenOver { consumer, .. }) => assert_eq!(consumer, consumer_name(&e1)),
        Err(other) => panic!("expected TakenOver, got {other}"),
        Ok(payload) => panic!("the older process got a delivery: {payload:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_engine_stops_everything_and_logs_in_again() {
    let (mut grid, engine, first_login) = Grid::with_engine("e-lost", 2).await;

    let t = task("lost", 0);
    grid.start_script("e-lost", first_login, first_login + 1, &t, "echo $$ > pgid; sleep 300")
        .await;
    let pgid: i32 = read_pid(&grid.work_dir("e-lost").join("lost/0-1/pgid")).await;

    grid.deliver(&lost("e-lost", first_login, first_login + 2, 0)).await;
    grid.events
        .until("a second login", |e| {
            is_login(e, "e-lost") && e.seq.0 > first_login
        })
        .await;
    // The engine logs in again only once every run it stopped has ended (its
    // leader reaped, its output closed, the rest of its group killed). A process
    // killed with it may still be on its way out: every one left is dying (a fatal
    // signal pending, or exiting), and then the group ends (a process left running
    // would still be there after `sleep 300`).
    let left: Vec<(i32, String)> = live_group_members(pgid).into_iter().map(|pid| (pid, dying(pid))).collect();
    assert!(
        left.iter().all(|(_, how)| !how.is_empty()),
        "everything was stopped when logging in again: {left:?}"
    );
    eventually("the stopped task's processes end", || live_group_members(pgid).is_empty()).await;
    let second_login = grid.login_seq("e-lost").await;

    // Decided before the second login: stale. After it: run.
    let stale = task("lost", 1);
    let fresh = task("lost", 2);
    // (Order index 7: batch `second_login - 1` may be the Lost's own, whose id is "<seq>-0".)
    grid.deliver(&run("e-lost", first_login, second_login - 1, 7, &stale, 1, &["true"]))
        .await;
    grid.deliver(&run("e-lost", second_login, second_login + 1, 0, &fresh, 1, &["true"]))
        .await;
    grid.events
        .until("the fresh task's end", ended(&fresh, 1))
        .await;
    let report = engine.stop().await;
    assert_eq!(
        grid.events.count(ended(&t, 1)),
        0,
        "the projector already ended the lost attempt"
    );
    assert_eq!(grid.events.count(started(&stale, 1)), 0);
    assert_eq!(
        (report.logins, report.stopped_on_order, report.stale_ignored),
        (2, 1, 1),
        "{report:?}"
    );
}

/// What `catch_up` holds, in order: the payloads of `deliveries`.
fn assert_holds(held: &[bytes::Bytes], deliveries: &[&Delivery]) {
    let held: Vec<Delivery> = held
        .iter()
        .map(|payload| wire::delivery::decode_delivery(&deliveries[0].engine, payload).unwrap())
        .collect();
    let want: Vec<Delivery> = deliveries.iter().map(|d| (*d).clone()).collect();
    assert_eq!(held, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_feeds_catch_up_to_the_end_of_the_engines_subject_and_give_what_they_hold_first() {
    // JetStream: a durable consumer with three deliveries waiting, one taken in hand.
    let grid = Grid::start().await;
    let e1 = engine_id("e-catch");
    let mut feed = JetStreamOrderFeed::open(&grid.log, &e1).await.unwrap();
    let deliveries: Vec<Delivery> =
        (0..3).map(|n| run("e-catch", 1, 2, n, &task("catch", n as u32), 1, &["true"])).collect();
    for delivery in &deliveries {
        grid.deliver(delivery).await;
    }
    let first = tokio::time::timeout(WAIT, feed.next()).await.unwrap().unwrap();
    assert!(tokio::time::timeout(WAIT, feed.catch_up(Duration::from_secs(5), 1)).await.unwrap().unwrap());
    assert_holds(&feed.held(), &[&deliveries[1], &deliveries[2]]);
    for delivery in &deliveries[1..] {
        let message = tokio::time::timeout(WAIT, feed.next()).await.unwrap().unwrap();
        assert_eq!(wire::delivery::decode_delivery(&e1, &message.payload).unwrap(), *delivery);
        message.ack.ack().await.unwrap();
    }
    first.ack.ack().await.unwrap();
    // Nothing left: caught up at once, holding nothing.
    assert!(feed.catch_up(Duration::from_secs(5), 0).await.unwrap());
    assert!(feed.held().is_empty());

    // A log: to its last entry, this engine's entries only.
    let dir = tempfile::tempdir().unwrap();
    let (orders, _events) = open_embedded_logs(dir.path()).await;
    let mut feed: EmbeddedOrderFeed = LogOrderFeed::open(&orders, &e1).await.unwrap();
    let other = run("e-other", 1, 2, 9, &task("catch", 9), 1, &["true"]);
    for delivery in [&deliveries[0], &other, &deliveries[1]] {
        append_delivery(&orders, delivery).await;
    }
    assert!(feed.catch_up(Duration::from_secs(5), 0).await.unwrap());
    assert_holds(&feed.held(), &[&deliveries[0], &deliveries[1]]);
    let message = feed.next().await.unwrap();
    assert_eq!(wire::delivery::decode_delivery(&e1, &message.payload).unwrap(), deliveries[0]);
    assert_eq!(feed.position(), 3, "the held entry after e-other's is next");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_feed_follows_one_engines_deliveries_and_drives_an_engine_without_a_broker() {
    let dir = tempfile::tempdir().unwrap();
    let (orders, events) = open_embedded_logs(dir.path()).await;
    let e1 = engine_id("e1");

    // The feed alone: only e1's deliveries, in order, following new ones.
    let mut feed: EmbeddedOrderFeed = LogOrderFeed::open(&orders, &e1).await.unwrap();
    let first = run("e1", 1, 10, 0, &task("emb", 0), 1, &["true"]);
    let other = run("e2", 1, 10, 1, &task("emb", 1), 1, &["true"]);
    for delivery in [&first, &other] {
        append_delivery(&orders, delivery).await;
    }
    let message = tokio::time::timeout(WAIT, feed.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        wire::delivery::decode_delivery(&e1, &message.payload).unwrap(),
        first
    );
    let next = tokio::spawn(async move {
        let message = feed.next().await.unwrap();
        (feed, message)
    });
    let second = cancel("e1", 1, 11, 0, &task("emb", 0), 1);
    append_delivery(&orders, &second).await;
    let (feed, message) = tokio::time::timeout(WAIT, next).await.unwrap().unwrap();
    assert_eq!(
        wire::delivery::decode_delivery(&e1, &message.payload).unwrap(),
        second
    );
    assert_eq!(feed.position(), 4, "three entries read, e2's skipped");
    drop(feed);

    // An engine over the embedded logs: login, a task, logout.
    let config = embedded_config("e9", dir.path());
    let (stop, handle) = spawn_embedded(config, &orders, &events).await;
    let mut seen = Events::new(events.reader(1).await.unwrap());
    let login = seen.until("a login", |e| is_login(e, "e9")).await.seq.0;
    let t = task("emb", 5);
    let delivery = run("e9", login, login + 1, 0, &t, 1, &["sh", "-c", "printf embedded"]);
    append_delivery(&orders, &delivery).await;
    let end = seen.until("the task's end", ended(&t, 1)).await;
    assert!(
        matches!(event(&end), Some(Event::TaskCompleted { result, .. }) if result == b"embedded"),
        "{end:?}"
    );
    let report = stop_embedded(stop, handle).await;
    seen.until("the logout", logged_out("e9")).await;
    assert_eq!((report.completed, report.logins), (1, 1));
}

/// Over the embedded logs, so it needs no broker.
#[tokio::test]
async fn an_engine_reports_its_libraries_answers_syncs_and_gives_tasks_their_library_dir() {
    let dir = tempfile::tempdir().unwrap();
    let (orders, events) = open_embedded_logs(dir.path()).await;
    let library_dir = dir.path().join("work").join("libraries");
    let held = LibraryRef::new("render-lib", "2.1.0");
    let missing = LibraryRef::new("ffmpeg", "7");
    std::fs::create_dir_all(library_dir.join("render-lib/2.1.0")).unwrap();
    std::fs::write(library_dir.join("render-lib/2.1.0/.synced"), b"").unwrap();
    std::fs::create_dir_all(library_dir.join("ffmpeg/7")).unwrap(); // no marker: not held

    let config = embedded_config("e8", dir.path());
    assert_eq!(config.library_dir, library_dir, "the default is <work dir>/libraries");
    let (stop, handle) = spawn_embedded(config, &orders, &events).await;
    let mut seen = Events::new(events.reader(1).await.unwrap());
    let login = seen.until("a login", |e| is_login(e, "e8")).await;
    let Some(Event::EngineLoggedIn { props, .. }) = event(&login) else { panic!("{login:?}") };
    assert_eq!(props.libraries, vec![held.clone()]);
    let login = login.seq.0;

    let deliver = |delivery: Delivery| {
        let orders = orders.clone();
        async move { append_delivery(&orders, &delivery).await }
    };
    let sync = |n: usize, library: &LibraryRef| Delivery {
        id: Delivery::id_for(Seq(login + 1), n),
        batch_seq: Seq(login + 1),
        engine: engine_id("e8"),
        epoch: login,
        kind: DeliveryKind::SyncLibrary { library: library.clone(), published: None },
    };
    deliver(sync(0, &held)).await;
    deliver(sync(1, &missing)).await;
    let synced = seen.until("LibrarySynced", |e| matches!(event(e), Some(Event::LibrarySynced { .. }))).await;
    assert!(matches!(event(&synced), Some(Event::LibrarySynced { library, .. }) if *library == held), "{synced:?}");
    let failed = seen.until("LibrarySyncFailed", |e| matches!(event(e), Some(Event::LibrarySyncFailed { .. }))).await;
    let Some(Event::LibrarySyncFailed { library, error, .. }) = event(&failed) else { unreachable!() };
    assert_eq!(*library, missing);
    assert!(error.contains("ffmpeg/7") && error.contains("no object store"), "{error}");
    // In two messages or joined in one batch, the answers keep the orders' order.
    let answers: Vec<&str> = seen
        .seen
        .iter()
        .filter_map(|e| match event(e) {
            Some(Event::LibrarySynced { .. }) => Some("synced"),
            Some(Event::LibrarySyncFailed { .. }) => Some("failed"),
            _ => None,
        })
        .collect();
    assert_eq!(answers, ["synced", "failed"], "answered in order");

    let rooted = task("lib", 0);
    let with_library = |library: &LibraryRef| {
        let library = library.clone();
        move |run: &mut RunTask| run.root_library = Some(library)
    };
    let argv = ["sh", "-c", "printf %s \"$GRIDFOLD_LIBRARY_DIR\""];
    deliver(adjusted(run("e8", login, login + 2, 0, &rooted, 1, &argv), with_library(&held))).await;
    let end = seen.until("the rooted task's end", ended(&rooted, 1)).await;
    let expected = std::path::absolute(library_dir.join("render-lib/2.1.0")).unwrap();
    assert!(
        matches!(event(&end), Some(Event::TaskCompleted { result, .. }) if *result == expected.display().to_string().into_bytes()),
        "{end:?}"
    );
    let unrooted = task("lib", 1);
    deliver(adjusted(run("e8", login, login + 3, 0, &unrooted, 1, &argv), with_library(&missing))).await;
    let end = seen.until("the task without its library", ended(&unrooted, 1)).await;
    assert!(
        matches!(event(&end), Some(Event::TaskFailed { kind: FailureKind::LaunchFailed, error_tail, .. }) if error_tail.contains("ffmpeg@7 is not synced here")),
        "{end:?}"
    );

    let report = stop_embedded(stop, handle).await;
    assert_eq!((report.completed, report.failed, report.logins), (1, 1, 1));
}

/// An engine started before its broker names the broker it cannot reach and keeps
/// trying (it does not exit); a signal meanwhile stops it at once, and a broker that
/// comes up on that address is found: the engine logs in and runs.
#[test]
fn an_engine_started_before_its_broker_names_it_waits_and_logs_in_when_it_comes() {
    let port = support::nats::unused_port();
    let url = format!("nats://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let spawn_engine = |name: &str| {
        let stderr = dir.path().join(format!("{name}.stderr"));
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_gridfold")).env("GRIDFOLD_OPERATOR", "true")
            .args(["engine", "--nats", &url, "--name", name, "--slots", "1", "--heartbeat-secs", "1"])
            .env_remove("NATS_URL")
            .env("RUST_LOG", "warn")
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        (child, stderr)
    };
    let wait_for = |what: &str, stderr: &std::path::Path, needle: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let said = std::fs::read_to_string(stderr).unwrap_or_default();
            if said.contains(needle) {
                return said;
            }
            assert!(Instant::now() < deadline, "waiting for {what}: {said}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };

    // A signal while it waits: it stops at once, saying so.
    let (mut early, early_err) = spawn_engine("e-early");
    let said = wait_for("the first retry line", &early_err, "trying again in 1 s");
    assert!(said.contains("cannot reach the NATS broker") && said.contains(&port.to_string()), "{said}");
    // SAFETY: kill(2) on our unreaped child.
    assert_eq!(unsafe { libc::kill(early.id() as i32, libc::SIGTERM) }, 0);
    assert!(early.wait().unwrap().success());
    wait_for("the stop line", &early_err, "SIGTERM before reaching the broker: stopped");

    // The broker comes later, on the address the engine was given.
    let (mut engine, engine_err) = spawn_engine("e-late");
    wait_for("the second retry line", &engine_err, "trying again in 2 s");
    let server = gridfold::log::nats_server::NatsServer::start_with(gridfold::log::nats_server::NatsServerConfig {
        port: Some(port),
        ..Default::default()
    })
    .unwrap_or_else(|err| panic!("this test needs a nats-server: {err}"));
    let state = dir.path().join("projector");
    let mut projector = std::process::Command::new(env!("CARGO_BIN_EXE_gridfold")).env("GRIDFOLD_OPERATOR", "true")
        .args(["projector", "--nats", &server.url(), "--state"])
        .arg(&state)
        .arg("--register-key")
        .env_remove("NATS_URL")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_gridfold")).env("GRIDFOLD_OPERATOR", "true")
            .args(["stat", "--json", "--nats", &server.url()])
            .env_remove("NATS_URL")
            .output()
            .unwrap();
        let stat: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let logged_in = stat["engines"]
            .as_array()
            .is_some_and(|engines| engines.iter().any(|e| e["id"] == "e-late" && e["status"] == "logged-in"));
        if logged_in {
            break;
        }
        let said = std::fs::read_to_string(&engine_err).unwrap_or_default();
        assert!(Instant::now() < deadline, "the engine never logged in: {stat}\n{said}");
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(engine.try_wait().unwrap().is_none(), "the engine runs on");
    let _ = engine.kill();
    let _ = engine.wait();
    let _ = projector.kill();
    let _ = projector.wait();
}
