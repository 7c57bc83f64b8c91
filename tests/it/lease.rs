//! The leader lease against a real nats-server: never two leaders.
//!
//! A *term* is a stretch during which one holder acts as leader: for a [`KvLease`],
//! from an answer yes until `valid_for` after the request was sent (cut short by the
//! holder's death); for a `gridfold projector` process, from its `leader:` log line
//! to its `standby:` line or its death. Every test collects the terms of every holder
//! it ran and fails if two holders' terms overlap ([`assert_never_two_leaders`]).
//!
//! - [`a_projector_restarted_just_before_its_lease_expires_takes_it_back_by_cas_and_the_standby_waits`]:
//!   the sequence of the report (a restarted projector took its lease back without a
//!   write; the key expired under it, a standby created it, both led).
//! - [`a_restarted_projector_stands_by_when_a_standby_took_the_lease_after_it_expired`]
//! - [`leases_of_distinct_projectors_racing_never_hold_at_once`],
//!   [`leases_under_one_bare_name_racing_never_hold_at_once`],
//!   [`leases_restarted_on_their_state_directories_racing_never_hold_at_once`]: three
//!   leases race `acquire_or_renew` for seconds while the holder dies or freezes.
//! - [`a_leader_killed_and_restarted_inside_its_lease_time_never_leads_alongside_the_standby`]:
//!   real processes, `kill -9` of whoever leads and a restart on its state directory
//!   within the lease time, five times; and every write to the lease key on the
//!   server is a compare-and-set, by one holder after another.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::consumer::DeliverPolicy;
use async_nats::jetstream::consumer::pull::OrderedConfig;
use futures::StreamExt;
use gridfold::log::jetstream::{JetStreamLog, LogConfig};
use gridfold::projector::service::lease::{LEASE_BUCKET, LEASE_KEY};
use gridfold::projector::service::{KvLease, KvLeaseConfig, Lease, ProjectorIdClaim};
use support::nats::NatsServer;
use support::procs::Proc;

// ---- terms ----------------------------------------------------------------------------

/// One holder acting as leader over `[from, until)` (times on one clock; `until` is
/// `Duration::MAX` while it lasts).
#[derive(Debug, Clone)]
struct Term {
    holder: String,
    from: Duration,
    until: Duration,
}

/// Fails, naming them, if two holders' terms overlap.
fn assert_never_two_leaders(terms: &[Term]) {
    let mut terms = terms.to_vec();
    terms.sort_by_key(|term| term.from);
    for (i, earlier) in terms.iter().enumerate() {
        for later in &terms[i + 1..] {
            assert!(
                later.holder == earlier.holder || later.from >= earlier.until,
                "two leaders at once for {:?}: {earlier:?} and {later:?}",
                earlier.until.min(later.until) - later.from
            );
        }
    }
}

// ---- KvLease against a real server ------------------------------------------------------

/// The racing leases': a lease of a second, renewed four times in it.
const TTL: Duration = Duration::from_millis(1000);
const RENEW: Duration = Duration::from_millis(250);
/// The lease of the tests of a restart against one standby, whose scenes are set
/// inside a renewal interval of the key's expiry: three seconds, so that each of
/// their margins (a renewal interval, and the server dropping an expired entry
/// about 250 ms late) outlasts the pauses of a loaded machine.
const PAIR_TTL: Duration = Duration::from_secs(3);
const PAIR_RENEW: Duration = Duration::from_millis(750);

/// A lease expiring `ttl` after each write, renewed four times in it (as [`TTL`] and
/// [`RENEW`], [`PAIR_TTL`] and [`PAIR_RENEW`] are).
fn lease_config(ttl: Duration) -> KvLeaseConfig {
    KvLeaseConfig {
        ttl,
        renew_interval: ttl / 4,
        ..KvLeaseConfig::default()
    }
}

async fn connect(server: &NatsServer) -> JetStreamLog {
    JetStreamLog::connect(&server.url(), LogConfig::default())
        .await
        .expect("connect to the test's nats-server")
}

async fn open_bare(log: &JetStreamLog, name: &str, ttl: Duration) -> KvLease {
    KvLease::open(log.context(), log.url(), lease_config(ttl), name.to_string())
        .await
        .expect("the lease bucket")
}

/// Claims `state_dir` and opens its lease. A lock just dropped may stay held for
/// a moment: a test of this binary forking a child process at that instant holds
/// a copy of the descriptor until the child's exec closes it, so the claim is
/// retried for up to a second.
async fn open_claimed(log: &JetStreamLog, state_dir: &Path, ttl: Duration) -> KvLease {
    let deadline = Instant::now() + Duration::from_secs(1);
    let claim = loop {
        match ProjectorIdClaim::claim(state_dir) {
            Ok(claim) => break claim,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(error) => panic!("the state directory is free: {error}"),
        }
    };
    KvLease::open_claimed(log.context(), log.url(), lease_config(ttl), claim)
        .await
        .expect("the lease bucket")
}

/// One lease asked as the projector asks it, with a record of its terms.
struct Holder {
    name: String,
    lease: KvLease,
    started: Instant,
    terms: Vec<Term>,
}

impl Holder {
    fn new(name: impl Into<String>, lease: KvLease, started: Instant) -> Holder {
        Holder {
            name: name.into(),
            lease,
            started,
            terms: Vec::new(),
        }
    }

    /// One `acquire_or_renew`, timed out as the projector times it out; `true`: held.
    async fn ask(&mut self) -> bool {
        let sent = Instant::now();
        let timeout = self.lease.renew_interval().max(Duration::from_secs(1));
        let held = matches!(
            tokio::time::timeout(timeout, self.lease.acquire_or_renew()).await,
            Ok(Ok(true))
        );
        if held {
            let valid_for = self.lease.valid_for().expect("a KV lease expires");
            self.terms.push(Term {
                holder: self.name.clone(),
                from: self.started.elapsed(),
                until: sent + valid_for - self.started,
            });
        }
        held
    }

    /// A crash (no release): its terms end now at the latest; the lease and any claim go.
    fn die(self) -> (Vec<Term>, Duration) {
        let died = self.started.elapsed();
        let terms = self
            .terms
            .into_iter()
            .map(|term| Term {
                until: term.until.min(died),
                ..term
            })
            .collect();
        (terms, died)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projector_restarted_just_before_its_lease_expires_takes_it_back_by_cas_and_the_standby_waits()
 {
    let server = support::nats::start();
    let writes = watch_lease_writes(&server, PAIR_TTL).await;
    let log = connect(&server).await;
    let state = tempfile::tempdir().unwrap();
    let started = Instant::now();

    let mut first = Holder::new("first run", open_claimed(&log, state.path(), PAIR_TTL).await, started);
    let id = projector_id_of(state.path());
    let mut standby = Holder::new("standby", open_bare(&log, "standby", PAIR_TTL).await, started);
    assert!(first.ask().await, "the first run takes the free lease");
    let dead = wait_for_write(&writes, "the first run's write", |_| true).await;
    assert!(dead.value.starts_with(&format!("{id} ")), "the first run's write: {dead:?}");
    assert!(!standby.ask().await, "the standby waits");
    let (mut terms, _) = first.die();

    // Restarted inside the lease time, a renewal interval before the key expires (the
    // lease after the server stored the dead run's write, by its record of that write).
    let mut restarted = Holder::new("restarted", open_claimed(&log, state.path(), PAIR_TTL).await, started);
    tokio::time::sleep((dead.at + PAIR_TTL - PAIR_RENEW).saturating_sub(since_epoch(SystemTime::now()))).await;
    let sent = Instant::now();
    assert!(restarted.ask().await, "the restarted run takes its lease back");
    // By the server's record: its write was a compare-and-set on the dead run's
    // revision, which the server takes only while that write has not expired.
    let taken_back = wait_for_write(&writes, "the restarted run's write", |w| w.revision > dead.revision).await;
    assert!(
        taken_back.value.starts_with(&format!("{id} "))
            && taken_back.value != dead.value
            && taken_back.expected == Some(dead.revision)
            && taken_back.at < dead.at + PAIR_TTL,
        "the restarted run wrote over the dead run's key by a compare-and-set on its revision, \
         before it expired: {dead:?} then {taken_back:?}"
    );
    // The restarted run renews as late as its term allows; the standby asks all along,
    // past where the dead run's write expires and past the restarted run's first term.
    let term = PAIR_TTL - PAIR_RENEW;
    let margin = PAIR_RENEW / 5;
    let mut renew_at = sent + term - margin;
    let mut renewals_refused = 0;
    while Instant::now() < sent + 2 * PAIR_TTL {
        if Instant::now() >= renew_at {
            renew_at = Instant::now() + term - margin;
            renewals_refused += usize::from(!restarted.ask().await);
        }
        standby.ask().await;
        tokio::time::sleep(margin).await;
    }
    terms.extend(restarted.terms);
    terms.extend(standby.terms.iter().cloned());
    assert_never_two_leaders(&terms);
    assert!(standby.terms.is_empty(), "the standby never held: {terms:?}");
    assert_eq!(renewals_refused, 0, "the restarted run renewed within each term");
    // And by the server's record: after the take-back, only the restarted run's
    // renewals, each a compare-and-set on the one before.
    let writes = writes.lock().unwrap().clone();
    let after: Vec<&LeaseWrite> = writes.iter().filter(|w| w.revision >= taken_back.revision).collect();
    assert!(after.len() >= 3, "the restarted run renewed (twice at least): {writes:?}");
    for pair in after.windows(2) {
        assert!(
            pair[1].value == taken_back.value && pair[1].expected == Some(pair[0].revision),
            "only the restarted run wrote, each write on the one before: {:?} then {:?}",
            pair[0],
            pair[1]
        );
    }
    eprintln!(
        "taken back {:?} before the dead run's write expired; renewals {:?} apart (the lease is {PAIR_TTL:?})",
        dead.at + PAIR_TTL - taken_back.at,
        after.windows(2).map(|pair| pair[1].at - pair[0].at).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_projector_stands_by_when_a_standby_took_the_lease_after_it_expired() {
    let server = support::nats::start();
    let writes = watch_lease_writes(&server, PAIR_TTL).await;
    let log = connect(&server).await;
    let state = tempfile::tempdir().unwrap();
    let started = Instant::now();

    let mut first = Holder::new("first run", open_claimed(&log, state.path(), PAIR_TTL).await, started);
    let mut standby = Holder::new("standby", open_bare(&log, "standby", PAIR_TTL).await, started);
    assert!(first.ask().await);
    let dead = wait_for_write(&writes, "the first run's write", |_| true).await;
    let (mut terms, _) = first.die();
    // The standby asks until it holds: once the dead run's write has expired.
    let deadline = Instant::now() + WAIT;
    while !standby.ask().await {
        assert!(Instant::now() < deadline, "the standby took the expired lease: not within {WAIT:?}");
        tokio::time::sleep(PAIR_RENEW / 5).await;
    }
    let created = wait_for_write(&writes, "the standby's write", |w| w.revision > dead.revision).await;
    assert!(
        created.value.starts_with("standby ") && created.expected == Some(0) && created.at >= dead.at + PAIR_TTL,
        "the standby created the key once the dead run's write had expired: {dead:?} then {created:?}"
    );
    let mut restarted = Holder::new("restarted", open_claimed(&log, state.path(), PAIR_TTL).await, started);
    for _ in 0..4 {
        assert!(!restarted.ask().await, "the restarted run stands by");
        assert!(standby.ask().await, "the standby renews");
        tokio::time::sleep(PAIR_RENEW).await;
    }
    terms.extend(restarted.terms);
    terms.extend(standby.terms);
    assert_never_two_leaders(&terms);
    // By the server's record: the restarted run never wrote over the standby's key.
    let writes = writes.lock().unwrap().clone();
    for pair in writes.windows(2).filter(|pair| pair[0].revision >= created.revision) {
        assert!(
            pair[1].value == created.value && pair[1].expected == Some(pair[0].revision),
            "only the standby wrote, renewing: {:?} then {:?}",
            pair[0],
            pair[1]
        );
    }
}

/// Who the racing leases are.
#[derive(Debug, Clone, Copy)]
enum Names {
    /// Every lease, restarts included, under a name of its own.
    Distinct,
    /// Every lease under one bare name (as `gridfold demo` names its projector).
    OneBareName,
    /// Three state directories; a lease that dies is restarted on its own at once.
    ClaimedStateDirs,
}

/// What a holder does after holding [`HOLD_ROUNDS`] renewals in a row.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Dies without releasing, late in its renewal interval; its slot opens a new lease
    /// (restarts) after the next of [`RESTART_AFTER`], all inside the lease time.
    Die,
    /// Freezes for longer than the lease, then goes on asking as if nothing happened.
    Freeze,
}

const HOLD_ROUNDS: u32 = 2;
/// A dead holder's slot restarts at once, or when its key is about to expire (the
/// server drops an entry about 250 ms after its max age, measured on 2.15.1).
const RESTART_AFTER: [Duration; 3] = [
    Duration::ZERO,
    Duration::from_millis(500),
    Duration::from_millis(900),
];
const RACE_FOR: Duration = Duration::from_secs(8);
const SLOTS: usize = 3;

/// `SLOTS` leases ask every `RENEW` for `RACE_FOR`; whoever holds `HOLD_ROUNDS` times
/// in a row then dies or freezes, in turn. Returns every term and every death, and
/// every write to the lease key as the server stored it.
async fn race(names: Names) -> (Vec<Term>, Vec<(String, Duration)>, Vec<LeaseWrite>) {
    let server = support::nats::start();
    let writes = watch_lease_writes(&server, TTL).await;
    let log = connect(&server).await;
    let dirs = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let faults = Arc::new(Mutex::new([Fault::Die, Fault::Freeze].into_iter().cycle()));
    let mut slots = Vec::new();
    for slot in 0..SLOTS {
        let log = log.clone();
        let state_dir = dirs.path().join(format!("slot-{slot}"));
        let faults = Arc::clone(&faults);
        slots.push(tokio::spawn(async move {
            let mut terms = Vec::new();
            let mut deaths = Vec::new();
            // Slots ask at different phases of the renewal interval.
            tokio::time::sleep(RENEW * slot as u32 / SLOTS as u32).await;
            let mut restart_after = RESTART_AFTER.iter().cycle().skip(slot);
            for run in 1.. {
                // Under one bare name, each run is still a holder of its own.
                let name = format!("slot {slot} run {run}");
                let lease = match names {
                    Names::Distinct => open_bare(&log, &name, TTL).await,
                    Names::OneBareName => open_bare(&log, "p", TTL).await,
                    Names::ClaimedStateDirs => open_claimed(&log, &state_dir, TTL).await,
                };
                let mut holder = Holder::new(name, lease, started);
                let mut in_a_row = 0;
                let mut ticks = tokio::time::interval(RENEW);
                let fault = loop {
                    ticks.tick().await;
                    if started.elapsed() >= RACE_FOR {
                        break None;
                    }
                    in_a_row = if holder.ask().await { in_a_row + 1 } else { 0 };
                    if in_a_row < HOLD_ROUNDS {
                        continue;
                    }
                    in_a_row = 0;
                    let fault = faults.lock().unwrap().next().unwrap();
                    match fault {
                        Fault::Die => {
                            tokio::time::sleep(RENEW * 4 / 5).await;
                            break Some(fault);
                        }
                        Fault::Freeze => tokio::time::sleep(TTL * 3 / 2).await,
                    }
                };
                let (run_terms, died) = holder.die();
                terms.extend(run_terms);
                match fault {
                    Some(_) => deaths.push((format!("slot {slot} run {run}"), died)),
                    None => return (terms, deaths),
                }
                let delay = restart_after.next().copied().unwrap_or_default();
                tokio::time::sleep(delay).await;
            }
            unreachable!("a slot returns once the race is over")
        }));
    }
    let mut terms = Vec::new();
    let mut deaths = Vec::new();
    for slot in slots {
        let (slot_terms, slot_deaths) = slot.await.expect("a racing slot");
        terms.extend(slot_terms);
        deaths.extend(slot_deaths);
    }
    let writes = writes.lock().unwrap().clone();
    (terms, deaths, writes)
}

/// The checks every race passes: never two leaders, and the lease changed hands.
fn assert_raced(names: Names, terms: &[Term], deaths: &[(String, Duration)]) {
    assert_never_two_leaders(terms);
    let mut in_order = terms.to_vec();
    in_order.sort_by_key(|term| term.from);
    let handovers = in_order
        .windows(2)
        .filter(|pair| pair[0].holder != pair[1].holder)
        .count();
    eprintln!(
        "{names:?}: {} terms, {handovers} handovers, {} deaths",
        terms.len(),
        deaths.len()
    );
    assert!(
        handovers >= 3,
        "the lease changed hands at least three times: {in_order:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_of_distinct_projectors_racing_never_hold_at_once() {
    let (terms, deaths, _) = race(Names::Distinct).await;
    assert_raced(Names::Distinct, &terms, &deaths);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_under_one_bare_name_racing_never_hold_at_once() {
    let (terms, deaths, _) = race(Names::OneBareName).await;
    assert_raced(Names::OneBareName, &terms, &deaths);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_restarted_on_their_state_directories_racing_never_hold_at_once() {
    let (terms, deaths, writes) = race(Names::ClaimedStateDirs).await;
    assert_raced(Names::ClaimedStateDirs, &terms, &deaths);
    // A dead holder's restart took its lease back before the key could expire: by the
    // server's record, a write of another incarnation under the same projector id by a
    // compare-and-set on the dead one's revision (which the server takes only while
    // that write has not expired).
    let taken_back = writes.windows(2).filter(|pair| {
        let holder = |write: &LeaseWrite| write.value.rsplit_once(' ').map(|(id, _)| id.to_string());
        holder(&pair[0]).is_some()
            && holder(&pair[0]) == holder(&pair[1])
            && pair[0].value != pair[1].value
            && pair[1].expected == Some(pair[0].revision)
    });
    assert!(
        taken_back.count() >= 1,
        "a restarted holder took its lease back before it expired: {deaths:?}\n{writes:#?}"
    );
}

// ---- processes ---------------------------------------------------------------------------

/// `--lease-secs`: the lease bucket's max age; the projector renews every second.
const PROCESS_TTL: Duration = Duration::from_secs(2);
/// Each round kills the leader when its last renewal is `.0` ms old (the projector
/// renews every second: its key then expires `2000 - .0` ms after the kill, and the
/// server drops it about 250 ms later) and restarts it on its state directory `.1` ms
/// after the kill: all within the lease time; one well before the key expires (a
/// take-back: the restarted process has about two seconds to start and write, a
/// loaded machine included), three about when it does (a race with the standby,
/// which asks once a second), one after (the standby's, mostly). Each new leader
/// then lives through a renewal before the next kill.
const ROUNDS_MS: [(u64, u64); 5] = [(100, 0), (900, 1000), (600, 1400), (900, 1150), (900, 1950)];
const WAIT: Duration = Duration::from_secs(20);
const PROJECTOR_LOG: &str = "warn,gridfold::projector::service=info";

/// A `gridfold projector` run and its state directory.
struct Run {
    process: Proc,
    state_dir: PathBuf,
}

impl Run {
    /// Its terms as leader, from its log: `leader:` starts one, `standby:` ends it, and
    /// so does its death.
    fn terms(&self) -> Vec<Term> {
        let mut terms: Vec<Term> = Vec::new();
        for line in self.process.stderr().lines() {
            let leading = terms.last().is_some_and(|term| term.until == Duration::MAX);
            if line.contains(": leader: ") && !leading {
                terms.push(Term {
                    holder: self.process.name.clone(),
                    from: log_time(line),
                    until: Duration::MAX,
                });
            } else if line.contains(": standby: ")
                && leading
                && let Some(term) = terms.last_mut()
            {
                term.until = log_time(line);
            }
        }
        if let (Some(killed_at), Some(term)) = (self.process.killed_at, terms.last_mut()) {
            term.until = term.until.min(since_epoch(killed_at));
        }
        terms
    }

    /// Acting as leader now, by its log.
    fn leads(&self) -> bool {
        self.process.killed_at.is_none()
            && self
                .terms()
                .last()
                .is_some_and(|term| term.until == Duration::MAX)
    }

    /// Has its lease answered yet (leader or standby)?
    fn answered(&self) -> bool {
        let log = self.process.stderr();
        log.contains(": leader: ") || log.contains(": standby: ")
    }
}

fn since_epoch(time: SystemTime) -> Duration {
    time.duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
}

/// The time a `tracing` line starts with, `2026-04-20T10:11:12.123456Z`, since the epoch.
fn log_time(line: &str) -> Duration {
    let stamp = line.split_whitespace().next().unwrap_or_default();
    let parse = || -> Option<Duration> {
        let (date, time) = stamp.strip_suffix('Z')?.split_once('T')?;
        let mut ymd = date.split('-').map(|part| part.parse::<i64>());
        let (y, m, d) = (ymd.next()?.ok()?, ymd.next()?.ok()?, ymd.next()?.ok()?);
        let (hms, fraction) = time.split_once('.').unwrap_or((time, "0"));
        let mut hms = hms.split(':').map(|part| part.parse::<u64>());
        let (h, min, s) = (hms.next()?.ok()?, hms.next()?.ok()?, hms.next()?.ok()?);
        let nanos: u32 = format!("{fraction:0<9}").get(..9)?.parse().ok()?;
        // Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
        let y = if m <= 2 { y - 1 } else { y };
        let era = y.div_euclid(400);
        let year_of_era = y - era * 400;
        let day_of_year = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
        let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
        let days = u64::try_from(era * 146_097 + day_of_era - 719_468).ok()?;
        Some(Duration::new(days * 86_400 + h * 3600 + min * 60 + s, nanos))
    };
    parse().unwrap_or_else(|| panic!("a log line starting with its time: {line:?}"))
}

/// One write to the lease key, as the server stored it.
#[derive(Debug, Clone)]
struct LeaseWrite {
    revision: u64,
    at: Duration,
    value: String,
    /// `KV-Operation` (absent: a put).
    operation: Option<String>,
    /// `Nats-Expected-Last-Subject-Sequence`: the revision the write expected.
    expected: Option<u64>,
}

/// Makes the lease bucket as its holders would (entries expire `ttl` after they were
/// written: `--lease-secs` for processes), then records every write to the key from
/// the first.
async fn watch_lease_writes(server: &NatsServer, ttl: Duration) -> Arc<Mutex<Vec<LeaseWrite>>> {
    let log = connect(server).await;
    let config = KvLeaseConfig {
        ttl,
        renew_interval: ttl / 4,
        ..KvLeaseConfig::default()
    };
    KvLease::open(log.context(), log.url(), config, "the test".into())
        .await
        .expect("the lease bucket");
    let stream = log
        .context()
        .get_stream(format!("KV_{LEASE_BUCKET}"))
        .await
        .expect("the lease bucket's stream");
    let consumer = stream
        .create_consumer(OrderedConfig {
            filter_subject: format!("$KV.{LEASE_BUCKET}.{LEASE_KEY}"),
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .expect("an ordered consumer on the lease key");
    let mut messages = consumer.messages().await.expect("the lease key's writes");
    let writes = Arc::new(Mutex::new(Vec::new()));
    let recorded = Arc::clone(&writes);
    tokio::spawn(async move {
        while let Some(Ok(message)) = messages.next().await {
            let info = message.info().expect("a JetStream message");
            let header = |name: &str| {
                message
                    .headers
                    .as_ref()
                    .and_then(|headers| headers.get(name))
                    .map(|value| value.as_str().to_string())
            };
            let write = LeaseWrite {
                revision: info.stream_sequence,
                at: Duration::from_nanos(
                    u64::try_from(info.published.unix_timestamp_nanos()).expect("after 1970"),
                ),
                value: String::from_utf8_lossy(&message.payload).into_owned(),
                operation: header("KV-Operation"),
                expected: header("Nats-Expected-Last-Subject-Sequence")
                    .map(|value| value.parse().expect("a revision")),
            };
            recorded.lock().unwrap().push(write);
        }
    });
    writes
}

/// The first write [`watch_lease_writes`] recorded that `matches`, waiting for it.
async fn wait_for_write(writes: &Mutex<Vec<LeaseWrite>>, what: &str, matches: impl Fn(&LeaseWrite) -> bool) -> LeaseWrite {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(write) = writes.lock().unwrap().iter().find(|write| matches(write)) {
            return write.clone();
        }
        assert!(Instant::now() < deadline, "waiting for {what}: not within {WAIT:?}; the lease key's writes: {:?}", writes.lock().unwrap());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The projector id of a state directory (its holder name in the lease's value).
fn projector_id_of(state_dir: &Path) -> String {
    std::fs::read_to_string(state_dir.join("projector-id"))
        .expect("a projector id")
        .trim()
        .to_string()
}

fn wait_until(what: &str, runs: &[Run], mut done: impl FnMut(&[Run]) -> bool) {
    let started = Instant::now();
    while !done(runs) {
        if started.elapsed() > WAIT {
            let logs: Vec<String> = runs
                .iter()
                .map(|run| format!("--- {}:\n{}", run.process.name, run.process.stderr()))
                .collect();
            panic!("waiting for {what}: not within {WAIT:?}\n{}", logs.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_leader_killed_and_restarted_inside_its_lease_time_never_leads_alongside_the_standby() {
    let server = support::nats::start();
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let writes = runtime.block_on(watch_lease_writes(&server, PROCESS_TTL));
    let url = server.url();
    let lease_secs = PROCESS_TTL.as_secs().to_string();
    let start = |runs: &mut Vec<Run>, state_dir: PathBuf| {
        let base = state_dir.file_name().unwrap().to_string_lossy().into_owned();
        let restarts = runs.iter().filter(|run| run.state_dir == state_dir).count();
        let name = format!("{base}-{}", restarts + 1);
        let state = state_dir.display().to_string();
        let args = [
            "projector",
            "--nats",
            &url,
            "--state",
            &state,
            "--lease-secs",
            &lease_secs,
        ];
        let process = Proc::spawn_logging(dir.path(), &name, &args, PROJECTOR_LOG);
        runs.push(Run { process, state_dir });
        runs.len() - 1
    };

    let mut runs = Vec::new();
    let a = start(&mut runs, dir.path().join("a"));
    wait_until("a to lead", &runs, |runs| runs[a].leads());
    let b = start(&mut runs, dir.path().join("b"));
    wait_until("b to stand by", &runs, |runs| runs[b].answered());
    let mut taken_back = 0;
    for (age_ms, delay_ms) in ROUNDS_MS {
        // Whoever leads has lived through a renewal since it took over: by the server's
        // record, a write under its projector id after its `leader:` line.
        let mut leader = None;
        wait_until("one leader, renewed since it took over", &runs, |runs| {
            let leaders: Vec<usize> = (0..runs.len()).filter(|&run| runs[run].leads()).collect();
            let [one] = leaders[..] else {
                if leaders.len() > 1 {
                    assert_never_two_leaders(&runs.iter().flat_map(Run::terms).collect::<Vec<_>>());
                    panic!("one leader before each kill: {leaders:?}");
                }
                return false;
            };
            let led_from = runs[one].terms().last().map(|term| term.from).unwrap_or_default();
            let id = projector_id_of(&runs[one].state_dir);
            let renewed = writes
                .lock()
                .unwrap()
                .iter()
                .any(|write| write.at > led_from && write.value.starts_with(&format!("{id} ")));
            leader = Some(one);
            renewed
        });
        let leader = leader.expect("a leader");
        // Its last renewal: its last write to the key, or its becoming leader if later.
        let age = Duration::from_millis(age_ms);
        let led_from = runs[leader].terms().last().map(|term| term.from).unwrap_or_default();
        wait_until("the leader's last renewal to age", &runs, |_| {
            let writes = writes.lock().unwrap();
            let renewed = writes.last().map_or(led_from, |last| last.at.max(led_from));
            since_epoch(SystemTime::now()) >= renewed + age
        });
        let killed_at = since_epoch(runs[leader].process.kill9());
        std::thread::sleep(Duration::from_millis(delay_ms));
        let state_dir = runs[leader].state_dir.clone();
        let restarted = start(&mut runs, state_dir);
        wait_until(
            "one leader after the kill, and the restarted run's lease answered",
            &runs,
            |runs| {
                let new_leaders: Vec<&Run> = runs
                    .iter()
                    .filter(|run| {
                        run.leads() && run.terms().last().is_some_and(|t| t.from > killed_at)
                    })
                    .collect();
                new_leaders.len() == 1 && runs[restarted].answered()
            },
        );
        let took_back = runs[restarted].leads();
        taken_back += usize::from(took_back);
        eprintln!(
            "killed {} {age_ms} ms after its last renewal, restarted {delay_ms} ms later: {} leads",
            runs[leader].process.name,
            if took_back { "the restarted run" } else { "the standby" }
        );
    }
    // Whoever leads now holds on, alone, for longer than a lease: by the server's
    // record, a write more than a lease after the last `leader:` line.
    let last_start = |runs: &[Run]| runs.iter().flat_map(Run::terms).map(|term| term.from).max().unwrap_or_default();
    wait_until("the last leader to renew for longer than a lease", &runs, |runs| {
        let held_from = last_start(runs);
        writes.lock().unwrap().last().is_some_and(|last| last.at > held_from + PROCESS_TTL)
    });
    let writes = writes.lock().unwrap().clone();
    runtime.shutdown_background();

    let terms: Vec<Term> = runs.iter().flat_map(Run::terms).collect();
    assert_never_two_leaders(&terms);
    let leaders: Vec<&str> = runs
        .iter()
        .filter(|run| run.leads())
        .map(|run| run.process.name.as_str())
        .collect();
    assert_eq!(leaders.len(), 1, "exactly one leader at the end: {leaders:?}");
    let last_start = last_start(&runs);
    let last = writes.last().expect("the lease was written");
    assert!(
        last.at.checked_sub(last_start).is_some_and(|held| held > PROCESS_TTL),
        "the last leader has held for longer than a lease: {terms:?}; last write {last:?}"
    );
    assert!(
        taken_back >= 1,
        "in at least one round the restarted run took its lease back (before the standby could)"
    );
    eprintln!(
        "{} rounds: {taken_back} taken back by the restarted run, {} by the standby; {} terms; {} writes to the lease key",
        ROUNDS_MS.len(),
        ROUNDS_MS.len() - taken_back,
        terms.len(),
        writes.len()
    );

    let projector_id = |name: &str| projector_id_of(&dir.path().join(name));
    let kills: Vec<(String, Duration)> = runs
        .iter()
        .filter_map(|run| {
            let id = projector_id(&run.state_dir.file_name()?.to_string_lossy());
            Some((id, since_epoch(run.process.killed_at?)))
        })
        .collect();
    assert_lease_writes_chain(&writes, &kills, &[projector_id("a"), projector_id("b")]);
    let leader_dir = runs
        .iter()
        .find(|run| run.leads())
        .map(|run| run.state_dir.clone())
        .expect("a leader");
    let leader_id = projector_id_of(&leader_dir);
    // The leader renews: every write since it took over is its own, each within a
    // lease of the one before, the last naming it.
    let renewals: Vec<&LeaseWrite> = writes.iter().filter(|write| write.at > last_start).collect();
    for pair in renewals.windows(2) {
        assert!(
            pair[1].at - pair[0].at < PROCESS_TTL,
            "the leader renews: {:?} then {:?}",
            pair[0],
            pair[1]
        );
    }
    for write in &renewals {
        assert!(
            write.value.starts_with(&format!("{leader_id} ")),
            "the key names the leader {leader_id}: {write:?}"
        );
    }
}

/// Every write to the lease key is a put of `<projector id> <incarnation>` by a
/// compare-and-set (the revision it expected is stored with it); it expected the
/// previous write's revision, or 0 once that had expired. The holder changes only
/// when the previous one's lease had expired (another projector) or it had been
/// killed (its restart, on the same state directory).
fn assert_lease_writes_chain(writes: &[LeaseWrite], kills: &[(String, Duration)], ids: &[String]) {
    assert!(!writes.is_empty(), "the lease was written");
    let mut previous: Option<&LeaseWrite> = None;
    for write in writes {
        assert!(
            write.operation.as_deref().is_none_or(|op| op == "PUT"),
            "only puts (nobody released): {write:?}"
        );
        let (id, incarnation) = write
            .value
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("`<id> <incarnation>`: {write:?}"));
        assert!(ids.iter().any(|known| known == id), "a projector's id: {write:?}");
        assert!(!incarnation.is_empty(), "{write:?}");
        let expected = write
            .expected
            .unwrap_or_else(|| panic!("a compare-and-set, not a plain put: {write:?}"));
        let Some(before) = previous else {
            assert_eq!(expected, 0, "the first write creates the key: {write:?}");
            previous = Some(write);
            continue;
        };
        let expired = write.at >= before.at + PROCESS_TTL;
        assert!(
            expected == before.revision || (expected == 0 && expired),
            "expected the previous revision, or 0 once it had expired: {before:?} then {write:?}"
        );
        if write.value != before.value {
            let (before_id, _) = before.value.rsplit_once(' ').unwrap_or_default();
            if before_id == id {
                assert!(
                    kills
                        .iter()
                        .any(|(killed, at)| killed == id && *at > before.at && *at < write.at),
                    "a projector took its id's lease over only after that run was killed: {before:?} then {write:?}"
                );
            } else {
                assert!(
                    expired && expected == 0,
                    "another projector took the lease only once it had expired: {before:?} then {write:?}"
                );
            }
        }
        previous = Some(write);
    }
}
