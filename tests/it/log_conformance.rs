//! One conformance suite for every [`EventLog`] backend: the cases are written once,
//! generic over a [`Backend`] (how to open a log and restart it over the same
//! storage), and instantiated for the embedded log and for JetStream by
//! [`conformance!`]. Each case gets a fresh log: a fresh directory, or a fresh
//! nats-server on its own port and store (which the case FAILS without).
//!
//! JetStream-only behaviour (broker away, reconnecting across a restart, refusing a
//! stream that would lose entries) is at the end.

use crate::support;

use std::future::Future;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use gridfold::log::embedded::{EmbeddedConfig, EmbeddedLog};
use gridfold::log::jetstream::{JetStreamLog, LogConfig};
use gridfold::log::nats_server::NatsServer;
use gridfold::log::{Append, Appended, EventLog, LogError, LogReader, RawEntry, read_to_end};

/// Every case must finish well within this; a hang is a failure, not a stuck run.
const CASE_TIMEOUT: Duration = Duration::from_secs(60);
/// Wait for an entry that should come at once.
const WAIT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
struct Options {
    duplicate_window: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            duplicate_window: Duration::from_secs(120),
        }
    }
}

/// How to get a log of one backend, and restart it over the same storage.
trait Backend: Sized {
    type Log: EventLog + Clone + 'static;
    fn start(options: Options) -> impl Future<Output = (Self, Self::Log)>;
    /// Closes `log` and whatever serves it, then opens it again over the same storage.
    fn restart(&mut self, log: Self::Log) -> impl Future<Output = Self::Log>;
}

struct Embedded {
    dir: tempfile::TempDir,
    config: EmbeddedConfig,
}

impl Backend for Embedded {
    type Log = EmbeddedLog;

    async fn start(options: Options) -> (Self, EmbeddedLog) {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = EmbeddedConfig {
            duplicate_window: options.duplicate_window,
            ..EmbeddedConfig::default()
        };
        let log = EmbeddedLog::open(dir.path(), config.clone()).expect("open embedded log");
        (Embedded { dir, config }, log)
    }

    async fn restart(&mut self, log: EmbeddedLog) -> EmbeddedLog {
        drop(log);
        EmbeddedLog::open(self.dir.path(), self.config.clone()).expect("reopen embedded log")
    }
}

struct JetStream {
    server: NatsServer,
    config: LogConfig,
}

impl Backend for JetStream {
    type Log = JetStreamLog;

    async fn start(options: Options) -> (Self, JetStreamLog) {
        let server = support::nats::start();
        let config = LogConfig {
            duplicate_window: options.duplicate_window,
            ..LogConfig::default()
        };
        let log = JetStreamLog::connect(&server.url(), config.clone())
            .await
            .expect("connect to JetStream");
        (JetStream { server, config }, log)
    }

    async fn restart(&mut self, log: JetStreamLog) -> JetStreamLog {
        drop(log);
        support::nats::restart(&mut self.server);
        JetStreamLog::connect(&self.server.url(), self.config.clone())
            .await
            .expect("reconnect to JetStream")
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn msg(subject: &str, payload: &str) -> Append {
    Append::new(subject, Bytes::copy_from_slice(payload.as_bytes()))
}

async fn all<L: EventLog>(log: &L, from_seq: u64) -> Vec<RawEntry> {
    read_to_end(log, from_seq)
        .await
        .expect("reader")
        .collect()
        .await
        .expect("read to end")
}

/// What an append answers when it stored a new entry at `seq`.
fn stored_at(seq: u64) -> Appended {
    Appended {
        seq,
        duplicate: false,
    }
}

/// What an append answers when its message id was already stored at `seq`.
fn duplicate_of(seq: u64) -> Appended {
    Appended {
        seq,
        duplicate: true,
    }
}

/// Asserts that `err` refuses an append whose fence expected the subject at `expected`
/// while it was at `actual`.
#[track_caller]
fn assert_fence_refused(err: &LogError, expected: u64, actual: u64) {
    assert!(
        matches!(
            err,
            LogError::WrongLastSequence { expected: e, actual: Some(a), .. }
                if *e == expected && *a == actual
        ),
        "{err:?}"
    );
}

fn seqs(entries: &[RawEntry]) -> Vec<u64> {
    entries.iter().map(|entry| entry.seq).collect()
}

fn payloads(entries: &[RawEntry]) -> Vec<String> {
    entries
        .iter()
        .map(|entry| String::from_utf8(entry.payload.to_vec()).unwrap())
        .collect()
}

fn assert_times_sane(entries: &[RawEntry], started_ms: u64) {
    let finished_ms = now_ms();
    for pair in entries.windows(2) {
        assert!(
            pair[0].time_ms <= pair[1].time_ms,
            "log time went back: {pair:?}"
        );
    }
    for entry in entries {
        // The broker's clock is this machine's; allow for rounding to ms.
        assert!(
            entry.time_ms + 1 >= started_ms && entry.time_ms <= finished_ms + 1,
            "log time {} of entry {} outside the test's run [{started_ms}, {finished_ms}]",
            entry.time_ms,
            entry.seq
        );
    }
}

/// Reads with `reader` until it reports caught up, collecting what it read.
async fn read_until_caught_up<R: LogReader>(reader: &mut R, max: usize) -> Vec<RawEntry> {
    let deadline = Instant::now() + WAIT;
    let mut entries = Vec::new();
    loop {
        let batch = reader
            .next_batch(max, Duration::from_millis(200))
            .await
            .expect("next_batch");
        assert!(batch.entries.len() <= max);
        entries.extend(batch.entries);
        if batch.caught_up {
            return entries;
        }
        assert!(
            Instant::now() < deadline,
            "reader never caught up; read {:?}",
            seqs(&entries)
        );
    }
}

// ---- the cases ----

async fn sequences_start_at_one_and_keep_order<B: Backend>() {
    let started_ms = now_ms();
    let (_backend, log) = B::start(Options::default()).await;
    assert_eq!(log.last_seq().await.unwrap(), 0);
    let subjects = ["gridfold.ev.a", "gridfold.ev.b.c", "gridfold.ev.a"];
    for (i, subject) in subjects.iter().enumerate() {
        let appended = log.append(msg(subject, &format!("p{i}"))).await.unwrap();
        assert_eq!(appended, stored_at(i as u64 + 1));
    }
    assert_eq!(log.last_seq().await.unwrap(), 3);
    let entries = all(&log, 1).await;
    assert_eq!(seqs(&entries), [1, 2, 3]);
    assert_eq!(payloads(&entries), ["p0", "p1", "p2"]);
    let read_subjects: Vec<&str> = entries.iter().map(|entry| entry.subject.as_str()).collect();
    assert_eq!(read_subjects, subjects);
    assert_times_sane(&entries, started_ms);
}

async fn duplicate_msg_id_returns_the_original_and_stores_nothing<B: Backend>() {
    let (_backend, log) = B::start(Options::default()).await;
    let first = log
        .append(msg("gridfold.ev.a", "first").with_msg_id("id-1"))
        .await
        .unwrap();
    assert_eq!(first, stored_at(1));
    let again = log
        .append(msg("gridfold.ev.b", "other payload").with_msg_id("id-1"))
        .await
        .unwrap();
    assert_eq!(again, duplicate_of(1));
    let other = log
        .append(msg("gridfold.ev.a", "second").with_msg_id("id-2"))
        .await
        .unwrap();
    assert_eq!(other, stored_at(2));
    // Within one pipelined batch too.
    let batch = log
        .append_batch(vec![
            msg("gridfold.ev.a", "third").with_msg_id("id-3"),
            msg("gridfold.ev.a", "third again").with_msg_id("id-3"),
            msg("gridfold.ev.a", "first again").with_msg_id("id-1"),
        ])
        .await
        .unwrap();
    assert_eq!(batch, [stored_at(3), duplicate_of(3), duplicate_of(1),]);
    assert_eq!(log.last_seq().await.unwrap(), 3);
    assert_eq!(payloads(&all(&log, 1).await), ["first", "second", "third"]);
    assert_eq!(
        log.last_seq_for_subject("gridfold.ev.b").await.unwrap(),
        0,
        "the duplicate stored nothing"
    );
}

async fn the_fence_is_checked_before_the_message_id<B: Backend>() {
    let (_backend, log) = B::start(Options::default()).await;
    let fenced = || {
        msg("gridfold.ev.orders", "batch")
            .with_msg_id("orders-1")
            .with_expected_last_subject_seq(0)
    };
    assert_eq!(log.append(fenced()).await.unwrap(), stored_at(1));
    // A retry of a fenced append whose ack was lost: a single nats-server 2.15 checks
    // the (now stale) fence first, and says where the subject is: at the first try.
    let err = log.append(fenced()).await.unwrap_err();
    assert_fence_refused(&err, 0, 1);
    // With the right fence the id decides: a duplicate, nothing stored.
    let right = msg("gridfold.ev.orders", "batch")
        .with_msg_id("orders-1")
        .with_expected_last_subject_seq(1);
    assert_eq!(log.append(right).await.unwrap(), duplicate_of(1));
    assert_eq!(log.last_seq().await.unwrap(), 1);
}

async fn message_ids_are_forgotten_after_the_window<B: Backend>() {
    let window = Duration::from_millis(500);
    let (_backend, log) = B::start(Options {
        duplicate_window: window,
    })
    .await;
    let first = log
        .append(msg("gridfold.ev.a", "x").with_msg_id("tick-1"))
        .await
        .unwrap();
    let within = log
        .append(msg("gridfold.ev.a", "x").with_msg_id("tick-1"))
        .await
        .unwrap();
    assert_eq!(within, duplicate_of(first.seq));
    // JetStream purges ids on a timer, so an id lives between one and two windows.
    tokio::time::sleep(window * 3).await;
    let after = log
        .append(msg("gridfold.ev.a", "x").with_msg_id("tick-1"))
        .await
        .unwrap();
    assert_eq!(after, stored_at(first.seq + 1));
}

async fn stale_expected_last_subject_seq_is_refused<B: Backend>() {
    let (_backend, log) = B::start(Options::default()).await;
    let orders = "gridfold.ev.orders";
    assert_eq!(log.last_seq_for_subject(orders).await.unwrap(), 0);
    let first = log
        .append(msg(orders, "o1").with_expected_last_subject_seq(0))
        .await
        .unwrap();
    assert_eq!(first.seq, 1);
    let err = log
        .append(msg(orders, "o1 again").with_expected_last_subject_seq(0))
        .await
        .unwrap_err();
    match err {
        LogError::WrongLastSequence {
            subject,
            expected: 0,
            actual,
        } => {
            assert_eq!(subject, orders);
            assert_eq!(actual, Some(1));
        }
        other => panic!("expected WrongLastSequence, got {other:?}"),
    }
    // Another subject moves the stream on, not the orders subject.
    log.append(msg("gridfold.ev.engine.e1.report", "r"))
        .await
        .unwrap();
    let second = log
        .append(msg(orders, "o2").with_expected_last_subject_seq(1))
        .await
        .unwrap();
    assert_eq!(second, stored_at(3));
    let err = log
        .append(msg(orders, "o3 from a stale writer").with_expected_last_subject_seq(1))
        .await
        .unwrap_err();
    assert_fence_refused(&err, 1, 3);
    assert_eq!(log.last_seq().await.unwrap(), 3, "refusals store nothing");
    assert_eq!(log.last_seq_for_subject(orders).await.unwrap(), 3);
    assert_eq!(
        log.last_seq_for_subject("gridfold.ev.engine.e1.report")
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        log.last_seq_for_subject("gridfold.ev.never").await.unwrap(),
        0
    );
}

async fn only_one_of_two_racing_fenced_writers_wins<B: Backend>() {
    let (_backend, log) = B::start(Options::default()).await;
    let race = |name: &'static str| {
        let log = log.clone();
        tokio::spawn(async move {
            log.append(msg("gridfold.ev.orders", name).with_expected_last_subject_seq(0))
                .await
        })
    };
    let (a, b) = (race("a"), race("b"));
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    let wins = [&a, &b].iter().filter(|result| result.is_ok()).count();
    assert_eq!(wins, 1, "a: {a:?}, b: {b:?}");
    let loser = if a.is_err() { a } else { b };
    assert!(
        matches!(loser, Err(LogError::WrongLastSequence { .. })),
        "{loser:?}"
    );
    assert_eq!(log.last_seq().await.unwrap(), 1);
}

async fn reads_from_any_sequence<B: Backend>() {
    let (_backend, log) = B::start(Options::default()).await;
    let msgs = (1..=20)
        .map(|i| msg("gridfold.ev.a", &format!("p{i}")))
        .collect();
    log.append_batch(msgs).await.unwrap();
    for from in [0, 1, 2, 10, 20] {
        let entries = all(&log, from).await;
        let expected: Vec<u64> = (from.max(1)..=20).collect();
        assert_eq!(seqs(&entries), expected, "from {from}");
        assert_eq!(entries[0].payload, format!("p{}", from.max(1)).as_bytes());
    }
    assert!(all(&log, 21).await.is_empty());
    // In small batches, with the position advancing exactly.
    let mut reader = log.reader(5).await.unwrap();
    let mut read = Vec::new();
    while read.len() < 16 {
        let before = reader.position();
        let batch = reader.next_batch(7, WAIT).await.unwrap();
        assert!(!batch.entries.is_empty() && batch.entries.len() <= 7);
        assert_eq!(batch.entries[0].seq, before);
        assert_eq!(reader.position(), before + batch.entries.len() as u64);
        read.extend(batch.entries);
    }
    assert_eq!(seqs(&read), (5..=20).collect::<Vec<_>>());
    // Past the end: nothing, and caught up.
    let batch = reader
        .next_batch(7, Duration::from_millis(100))
        .await
        .unwrap();
    assert!(batch.entries.is_empty());
    assert!(batch.caught_up);
}

async fn a_reader_follows_new_entries<B: Backend>() {
    let (_backend, log) = B::start(Options::default()).await;
    log.append(msg("gridfold.ev.a", "1")).await.unwrap();
    log.append(msg("gridfold.ev.a", "2")).await.unwrap();
    let mut reader = log.reader(1).await.unwrap();
    assert_eq!(seqs(&read_until_caught_up(&mut reader, 100).await), [1, 2]);

    let writer = log.clone();
    let append_later = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        writer.append(msg("gridfold.ev.b", "3")).await.unwrap()
    });
    let waited = Instant::now();
    let batch = reader.next_batch(100, WAIT).await.unwrap();
    assert_eq!(append_later.await.unwrap().seq, 3);
    assert_eq!(
        seqs(&batch.entries),
        [3],
        "the waiting reader got the new entry"
    );
    assert!(
        waited.elapsed() < WAIT,
        "it came when appended, not at the timeout"
    );
    assert!(batch.caught_up);
    assert_eq!(batch.entries[0].subject, "gridfold.ev.b");

    let idle = reader
        .next_batch(100, Duration::from_millis(100))
        .await
        .unwrap();
    assert!(idle.entries.is_empty());
    assert!(idle.caught_up);
    assert_eq!(reader.position(), 4);
}

async fn a_pipelined_batch_of_10000_lands_in_order<B: Backend>() {
    const N: usize = 10_000;
    let started_ms = now_ms();
    let (_backend, log) = B::start(Options::default()).await;
    let batch = |_| {
        (0..N)
            .map(|i| {
                msg(&format!("gridfold.ev.load.{}", i % 7), &format!("{i:06}"))
                    .with_msg_id(format!("m{i}"))
            })
            .collect::<Vec<_>>()
    };
    let answers = log.append_batch(batch(())).await.unwrap();
    let expected: Vec<Appended> = (1..=N as u64).map(stored_at).collect();
    assert_eq!(answers, expected);
    assert_eq!(log.last_seq().await.unwrap(), N as u64);

    let mut reader = log.reader(1).await.unwrap();
    let entries = read_until_caught_up(&mut reader, 10_000).await;
    assert_eq!(entries.len(), N);
    for (i, entry) in entries.iter().enumerate() {
        assert_eq!(entry.seq, i as u64 + 1);
        assert_eq!(entry.payload, format!("{i:06}").as_bytes());
        assert_eq!(entry.subject, format!("gridfold.ev.load.{}", i % 7));
    }
    assert_times_sane(&entries, started_ms);
    // The last i < N with i % 7 == 0 is 9,996, stored at 9,997.
    assert_eq!(
        log.last_seq_for_subject("gridfold.ev.load.0")
            .await
            .unwrap(),
        9_997
    );

    // Sending the whole batch again is harmless: every message is a duplicate.
    let again = log.append_batch(batch(())).await.unwrap();
    assert!(
        again
            .iter()
            .zip(&expected)
            .all(|(a, e)| a.seq == e.seq && a.duplicate)
    );
    assert_eq!(log.last_seq().await.unwrap(), N as u64);
}

async fn a_stale_fence_stops_a_batch<B: Backend>() {
    let (_backend, log) = B::start(Options::default()).await;
    let err = log
        .append_batch(vec![
            msg("gridfold.ev.orders", "ok").with_expected_last_subject_seq(0),
            msg("gridfold.ev.orders", "stale").with_expected_last_subject_seq(0),
        ])
        .await
        .unwrap_err();
    assert_fence_refused(&err, 0, 1);
    assert_eq!(payloads(&all(&log, 1).await), ["ok"]);
}

async fn refuses_what_is_not_a_log_message<B: Backend>() {
    let (_backend, log) = B::start(Options::default()).await;
    for subject in [
        "gridfold.order.e1",
        "gridfold.ev.*",
        "gridfold.ev.",
        "gridfold.ev.a b",
    ] {
        let err = log.append(msg(subject, "x")).await.unwrap_err();
        assert!(
            matches!(err, LogError::Rejected { .. }),
            "{subject}: {err:?}"
        );
    }
    let too_big = Append::new("gridfold.ev.a", Bytes::from(vec![0u8; 1024 * 1024 + 1]));
    assert!(matches!(
        log.append(too_big).await,
        Err(LogError::Rejected { .. })
    ));
    let bad_id = msg("gridfold.ev.a", "x").with_msg_id("");
    assert!(matches!(
        log.append_batch(vec![msg("gridfold.ev.a", "fine"), bad_id])
            .await,
        Err(LogError::Rejected { .. })
    ));
    assert_eq!(
        log.last_seq().await.unwrap(),
        0,
        "a batch is checked before any of it is sent"
    );
}

async fn survives_a_restart<B: Backend>() {
    let started_ms = now_ms();
    let (mut backend, log) = B::start(Options::default()).await;
    log.append(msg("gridfold.ev.a", "1").with_msg_id("id-1"))
        .await
        .unwrap();
    log.append(msg("gridfold.ev.orders", "2").with_expected_last_subject_seq(0))
        .await
        .unwrap();
    log.append_batch(
        (3..=5)
            .map(|i| msg("gridfold.ev.a", &i.to_string()))
            .collect(),
    )
    .await
    .unwrap();
    let before = all(&log, 1).await;

    let log = backend.restart(log).await;
    assert_eq!(log.last_seq().await.unwrap(), 5);
    assert_eq!(all(&log, 1).await, before, "same entries, same times");
    assert_eq!(
        log.last_seq_for_subject("gridfold.ev.orders")
            .await
            .unwrap(),
        2
    );
    assert_eq!(log.last_seq_for_subject("gridfold.ev.a").await.unwrap(), 5);
    // Message ids are remembered across the restart.
    let again = log
        .append(msg("gridfold.ev.a", "1").with_msg_id("id-1"))
        .await
        .unwrap();
    assert_eq!(again, duplicate_of(1));
    // The sequence continues, and so does the fence.
    let next = log
        .append(msg("gridfold.ev.orders", "6").with_expected_last_subject_seq(2))
        .await
        .unwrap();
    assert_eq!(next, stored_at(6));
    let entries = all(&log, 1).await;
    assert_eq!(seqs(&entries), [1, 2, 3, 4, 5, 6]);
    assert_times_sane(&entries, started_ms);
}

async fn one_subject_is_read_alone_from_any_point_and_its_newest_entry_whole<B: Backend>() {
    let (_backend, log) = B::start(Options::default()).await;
    let keys = "gridfold.ev.op.keys";
    assert_eq!(log.last_entry_for_subject(keys).await.unwrap(), None);
    assert_eq!(log.read_subject(keys, 0, "reader-1", 10).await.unwrap(), []);
    for (subject, payload) in [(keys, "k1"), ("gridfold.ev.a", "a1"), ("gridfold.ev.op.keys.more", "no"), (keys, "k2"), ("gridfold.ev.a", "a2")] {
        log.append(msg(subject, payload)).await.unwrap();
    }
    let read = log.read_subject(keys, 0, "reader-1", 10).await.unwrap();
    assert_eq!(seqs(&read), [1, 4]);
    assert_eq!(payloads(&read), ["k1", "k2"]);
    assert!(read.iter().all(|entry| entry.subject == keys && entry.time_ms > 0));
    // Again from a point, under the same name (the reader of a call does not outlive it).
    let after = log.read_subject(keys, 1, "reader-1", 10).await.unwrap();
    assert_eq!(seqs(&after), [4]);
    assert_eq!(log.read_subject(keys, 4, "reader-1", 10).await.unwrap(), []);
    let too_many = log.read_subject(keys, 0, "reader-1", 1).await.unwrap_err();
    assert!(matches!(too_many, LogError::Rejected { .. }), "{too_many:?}");
    let newest = log.last_entry_for_subject(keys).await.unwrap().expect("the newest entry on the subject");
    assert_eq!(payloads(std::slice::from_ref(&newest)), ["k2"]);
    assert_eq!(newest, all(&log, 1).await[3], "as a reader reads it");
    assert_eq!(log.last_entry_for_subject("gridfold.ev.never").await.unwrap(), None);
}

/// Instantiates every case for one backend, as `#[tokio::test]`s in a module.
macro_rules! conformance {
    ($module:ident, $backend:ty) => {
        mod $module {
            use super::*;
            conformance!(@cases $backend;
                sequences_start_at_one_and_keep_order,
                duplicate_msg_id_returns_the_original_and_stores_nothing,
                the_fence_is_checked_before_the_message_id,
                message_ids_are_forgotten_after_the_window,
                stale_expected_last_subject_seq_is_refused,
                only_one_of_two_racing_fenced_writers_wins,
                reads_from_any_sequence,
                a_reader_follows_new_entries,
                a_pipelined_batch_of_10000_lands_in_order,
                a_stale_fence_stops_a_batch,
                refuses_what_is_not_a_log_message,
                survives_a_restart,
                one_subject_is_read_alone_from_any_point_and_its_newest_entry_whole,
            );
        }
    };
    (@cases $backend:ty; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                tokio::time::timeout(CASE_TIMEOUT, super::$case::<$backend>())
                    .await
                    .expect(concat!(stringify!($case), " did not finish in time"));
            }
        )*
    };
}

conformance!(embedded, Embedded);
conformance!(jetstream, JetStream);

// ---- JetStream only ----

mod jetstream_only {
    use super::*;
    use async_nats::jetstream::stream;

    #[tokio::test]
    async fn an_unreachable_broker_is_reported_with_its_url() {
        let port = support::nats::unused_port();
        let url = format!("nats://127.0.0.1:{port}");
        let config = LogConfig {
            connect_timeout: Duration::from_secs(2),
            ..LogConfig::default()
        };
        let err = JetStreamLog::connect(&url, config).await.unwrap_err();
        assert!(matches!(err, LogError::Unavailable { .. }), "{err:?}");
        assert!(err.to_string().contains(&url), "{err}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_connection_keeps_writing_and_reading_across_a_broker_restart() {
        let mut server = support::nats::start();
        let config = LogConfig {
            request_timeout: Duration::from_secs(1),
            ..LogConfig::default()
        };
        let log = JetStreamLog::connect(&server.url(), config).await.unwrap();
        log.append(msg("gridfold.ev.a", "before")).await.unwrap();
        let mut reader = log.reader(1).await.unwrap();
        assert_eq!(seqs(&read_until_caught_up(&mut reader, 100).await), [1]);

        server.stop().unwrap();
        let while_away = || msg("gridfold.ev.a", "while away").with_msg_id("while-away");
        let err = log.append(while_away()).await.unwrap_err();
        assert!(matches!(err, LogError::Unavailable { .. }), "{err:?}");
        assert!(err.to_string().contains(&server.url()), "{err}");
        server.start_again().unwrap();

        // The client reconnects by itself, and may then deliver the publish it held
        // while away: the outcome of an Unavailable append is unknown. A retry with
        // the same msg id settles it, exactly once.
        let deadline = Instant::now() + Duration::from_secs(20);
        let appended = loop {
            match log.append(while_away()).await {
                Ok(appended) => break appended,
                Err(LogError::Unavailable { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Err(err) => panic!("append after restart: {err:?}"),
            }
        };
        assert_eq!(appended.seq, 2, "{appended:?}");
        assert_eq!(
            log.append(msg("gridfold.ev.a", "after")).await.unwrap().seq,
            3
        );
        // The reader lost its consumer with the restart and makes a new one from its position.
        let mut read = Vec::new();
        while read.is_empty() {
            match reader.next_batch(100, Duration::from_secs(1)).await {
                Ok(batch) => read.extend(batch.entries),
                Err(LogError::Unavailable { .. }) if Instant::now() < deadline => {}
                Err(err) => panic!("reading after restart: {err:?}"),
            }
        }
        while read.len() < 2 {
            read.extend(reader.next_batch(100, WAIT).await.unwrap().entries);
        }
        assert_eq!(payloads(&read), ["while away", "after"]);
    }

    #[tokio::test]
    async fn a_stream_that_would_lose_entries_is_refused() {
        let server = support::nats::start();
        let client = async_nats::connect(server.url()).await.unwrap();
        let context = async_nats::jetstream::new(client);
        context
            .create_stream(stream::Config {
                name: "GRIDFOLD_EVENTS".into(),
                subjects: vec!["gridfold.ev.>".into()],
                max_age: Duration::from_secs(3600),
                ..Default::default()
            })
            .await
            .unwrap();
        let err = JetStreamLog::connect(&server.url(), LogConfig::default())
            .await
            .unwrap_err();
        assert!(matches!(err, LogError::Misconfigured { .. }), "{err:?}");
        assert!(err.to_string().contains("max_age"), "{err}");
    }

    #[tokio::test]
    async fn the_log_stream_is_created_append_only_and_orders_stream_on_demand() {
        let server = support::nats::start();
        let log = JetStreamLog::connect(&server.url(), LogConfig::default())
            .await
            .unwrap();
        let mut events = log.context().get_stream("GRIDFOLD_EVENTS").await.unwrap();
        let config = events.info().await.unwrap().config.clone();
        assert_eq!(config.storage, stream::StorageType::File);
        assert!(config.allow_direct && config.deny_delete && config.deny_purge);
        assert_eq!(config.duplicate_window, Duration::from_secs(120));
        log.ensure_order_stream().await.unwrap();
        log.ensure_order_stream().await.unwrap();
        let orders = log.context().get_stream("GRIDFOLD_ORDERS").await.unwrap();
        assert_eq!(orders.cached_info().config.subjects, ["gridfold.order.>"]);
        // A second connection accepts the stream the first created.
        JetStreamLog::connect(&server.url(), LogConfig::default())
            .await
            .unwrap();
    }

    #[test]
    fn the_harness_restarts_on_the_same_port_and_store() {
        let mut server = support::nats::start();
        assert!(server.version() >= gridfold::log::nats_server::VERSION_MIN);
        let (url, store) = (server.url(), server.store_dir());
        support::nats::restart(&mut server);
        assert_eq!((server.url(), server.store_dir()), (url, store));
        assert!(server.is_running());
        assert!(
            server.log_tail(50).contains("Server is ready"),
            "{}",
            server.log_tail(50)
        );
        server.stop().unwrap();
        assert!(!server.is_running());
    }
}
