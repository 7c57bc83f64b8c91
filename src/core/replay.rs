//! Replay and the audit of decisions.
//!
//! Plain replay folds every entry and never runs `schedule`, so it stays valid
//! whatever version of the scheduling code replays it. Verification rebuilds the
//! state each batch was based on, runs `schedule` with the same orders in flight
//! (the batches the projector had published but not read back: exactly those on
//! the log between `based_on_seq` and the batch itself) and compares.

use std::collections::{BTreeMap, BTreeSet};

use super::event::{Entry, Event, Order, OrderBatch, Origin, Payload};
use super::fold::{check_seal, fold};
use super::ids::Seq;
use super::schedule::{schedule, InFlight, ALGORITHM_VERSION};
use super::state::State;

#[derive(Debug, Clone, Default)]
pub struct ReplayOptions {
    /// Re-derive every order batch and compare.
    pub verify: bool,
    /// Stop after folding this sequence (`--at`).
    pub stop_at: Option<Seq>,
    /// Run `State::check_invariants` after every entry (tests, the simulator).
    pub check_invariants: bool,
}

#[derive(Debug, Clone, Default)]
pub struct ReplayReport {
    pub entries_folded: u64,
    pub rejected_entries: u64,
    /// Applied batches re-derived and compared with their orders.
    pub batches_verified: u64,
    /// Applied batches made by another algorithm or version than this build
    /// runs (all of [`ReplayReport::other_algorithms`]): not re-derivable here.
    pub batches_not_verifiable: u64,
    /// [`ReplayReport::batches_not_verifiable`] by the algorithm and version
    /// each batch names.
    pub other_algorithms: BTreeMap<(String, u32), u64>,
    /// Applied batches of this build's algorithm that could not be re-derived:
    /// based on a sequence this replay did not fold before them (before its
    /// start, in a gap of the log, at or after the batch itself), or sealed by a
    /// key that was not registered yet on the state they were based on.
    pub batches_unchecked: u64,
    /// Batches on the orders subject that are not the projector's (no valid seal
    /// from a registered key): the fold refuses them, so there is nothing to re-derive.
    pub batches_refused: u64,
    /// Batches of the projector's reports of deliveries the broker refused
    /// (`Order::Undeliverable` alone): not decisions, so not re-derived.
    pub batches_of_delivery_reports: u64,
    pub first_divergence: Option<Divergence>,
}

/// Why a verified replay does not hold: what an auditor is told, and why the
/// command exits 1.
#[derive(Debug, Clone, PartialEq)]
pub enum NotVerified {
    /// An applied batch's orders are not the ones this build re-derives.
    Diverged(Divergence),
    /// Applied batches were made by algorithm versions not accepted, so nobody
    /// re-derived them: how many, by (algorithm, version).
    OtherVersions { batches: u64, versions: Vec<((String, u32), u64)> },
    /// Applied batches of this build's algorithm could not be re-derived
    /// ([`ReplayReport::batches_unchecked`]).
    Unchecked { batches: u64 },
}

impl std::fmt::Display for NotVerified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotVerified::Diverged(divergence) => write!(f, "{divergence}"),
            NotVerified::OtherVersions { batches, versions } => {
                let named: Vec<String> =
                    versions.iter().map(|((algorithm, version), n)| format!("{algorithm} version {version}: {n}")).collect();
                let numbers: BTreeSet<u32> = versions.iter().map(|((_, version), _)| *version).collect();
                let accept: Vec<String> = numbers.iter().map(|version| format!("--accept-version {version}")).collect();
                write!(
                    f,
                    "{batches} applied batch(es) were made by another algorithm version than this build's ({ALGORITHM_VERSION}) and were not re-derived ({}); \
                     replay them with the gridfold that made them, or accept them unchecked with {}",
                    named.join(", "),
                    accept.join(" ")
                )
            }
            NotVerified::Unchecked { batches } => write!(
                f,
                "{batches} applied batch(es) could not be re-derived: based on a sequence the replay did not fold before them, \
                 or sealed by a key not yet registered then"
            ),
        }
    }
}

impl ReplayReport {
    /// What keeps this verified replay from holding, accepting without
    /// re-deriving them the batches made by `accepted_versions`: empty when
    /// every applied batch was re-derived (or accepted) and none diverged.
    pub fn not_verified(&self, accepted_versions: &[u32]) -> Vec<NotVerified> {
        let mut problems = Vec::new();
        if let Some(divergence) = &self.first_divergence {
            problems.push(NotVerified::Diverged(divergence.clone()));
        }
        let versions: Vec<((String, u32), u64)> = self
            .other_algorithms
            .iter()
            .filter(|((_, version), _)| !accepted_versions.contains(version))
            .map(|(named, n)| (named.clone(), *n))
            .collect();
        if !versions.is_empty() {
            problems.push(NotVerified::OtherVersions { batches: versions.iter().map(|(_, n)| n).sum(), versions });
        }
        if self.batches_unchecked > 0 {
            problems.push(NotVerified::Unchecked { batches: self.batches_unchecked });
        }
        problems
    }
}

/// The first batch whose orders this build does not re-derive.
#[derive(Debug, Clone, PartialEq)]
pub struct Divergence {
    pub batch_seq: Seq,
    pub based_on_seq: Seq,
    /// Index of the first differing order (or the shorter length).
    pub order_index: usize,
    pub recorded: Option<Order>,
    pub rederived: Option<Order>,
}

impl std::fmt::Display for Divergence {
    /// `batch at seq 12 (based on seq 11) differs at order 0: recorded dispatch j/0 #1 -> e1, re-derived none`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let order = |order: &Option<Order>| order.as_ref().map_or_else(|| "none".to_string(), Order::to_string);
        write!(
            f,
            "batch at seq {} (based on seq {}) differs at order {}: recorded {}, re-derived {}",
            self.batch_seq.0,
            self.based_on_seq.0,
            self.order_index,
            order(&self.recorded),
            order(&self.rederived)
        )
    }
}

fn projector_batch(entry: &Entry) -> Option<&OrderBatch> {
    match (&entry.origin, &entry.payload) {
        (Origin::Projector, Payload::Event(envelope)) => match &envelope.event {
            Event::OrderBatch(batch) => Some(batch),
            _ => None,
        },
        _ => None,
    }
}

/// What verification made of a batch on the state it was based on, kept until
/// the fold reaches the batch.
enum Rederived {
    /// This build's algorithm: the orders it decides there.
    Orders(Vec<Order>),
    /// Another algorithm or version than this build's (as the policy then named it).
    OtherAlgorithm,
    /// Not sealed by a key registered then: not re-derived.
    NotSealedThen,
}

/// A batch of the projector's reports of refused deliveries, not of decisions
/// (see [`Order::Undeliverable`]).
pub fn is_delivery_report(batch: &OrderBatch) -> bool {
    !batch.orders.is_empty() && batch.orders.iter().all(|order| matches!(order, Order::Undeliverable { .. }))
}

/// Folds `entries` in order into a fresh state (or `start`), verifying if asked.
/// `progress` is called with the number of entries folded so far, every 65,536 entries.
///
/// Verification re-derives a batch on the state at its `based_on_seq` and
/// judges it when the fold reaches it, as the fold does: a batch the fold
/// refuses (no valid seal from a key registered by then) is counted refused;
/// every batch it applies is either re-derived and compared, or counted as
/// made by another algorithm version, or as unchecked. None is passed over.
pub fn replay(
    start: State,
    entries: &[Entry],
    options: &ReplayOptions,
    progress: &mut dyn FnMut(u64),
) -> (State, ReplayReport) {
    let mut state = start;
    let mut report = ReplayReport::default();
    // based_on_seq -> positions of the batches decided on it.
    let mut decided_on: BTreeMap<Seq, Vec<usize>> = BTreeMap::new();
    if options.verify {
        for (at, entry) in entries.iter().enumerate() {
            if let Some(batch) = projector_batch(entry) {
                decided_on.entry(batch.based_on_seq).or_default().push(at);
            }
        }
    }
    // Batches re-derived and not folded yet, by position.
    let mut rederived: BTreeMap<usize, Rederived> = BTreeMap::new();
    let rederive_here = |state: &State, folded_up_to: usize, rederived: &mut BTreeMap<usize, Rederived>| {
        let Some(batches) = decided_on.get(&state.last_seq) else { return };
        // A batch already folded was based on its own sequence or later: unchecked.
        for &at in batches.iter().filter(|&&at| at >= folded_up_to) {
            let batch = projector_batch(&entries[at]).expect("indexed as a batch");
            // The projector's reports of refused deliveries decide nothing: none to re-derive.
            if is_delivery_report(batch) {
                continue;
            }
            let made = if check_seal(state, &entries[at]).is_err() {
                Rederived::NotSealedThen
            } else if batch.algorithm != state.policy.algorithm.name() || batch.algorithm_version != ALGORITHM_VERSION {
                Rederived::OtherAlgorithm
            } else {
                let in_flight = InFlight::from_batches(
                    state,
                    entries[folded_up_to..at]
                        .iter()
                        .filter(|entry| check_seal(state, entry).is_ok())
                        .filter_map(projector_batch),
                );
                Rederived::Orders(schedule(state, &in_flight))
            };
            rederived.insert(at, made);
        }
    };
    if options.verify {
        rederive_here(&state, 0, &mut rederived);
    }
    for (at, entry) in entries.iter().enumerate() {
        if options.stop_at.is_some_and(|stop| entry.seq > stop) {
            break;
        }
        if entry.seq <= state.last_seq {
            continue;
        }
        if options.verify
            && let Some(batch) = projector_batch(entry)
        {
            judge(&state, entry, batch, rederived.remove(&at), &mut report);
        }
        let rejections = fold(&mut state, entry);
        report.entries_folded += 1;
        report.rejected_entries += u64::from(!rejections.is_empty());
        if options.check_invariants {
            state.check_invariants();
        }
        if options.verify {
            rederive_here(&state, at + 1, &mut rederived);
        }
        if report.entries_folded % 65_536 == 0 {
            progress(report.entries_folded);
        }
    }
    progress(report.entries_folded);
    (state, report)
}

/// Counts a batch as the fold is about to take it (`state` is the one before
/// it): refused, re-derived (diverging or not), another version's, or unchecked.
fn judge(state: &State, entry: &Entry, batch: &OrderBatch, rederived: Option<Rederived>, report: &mut ReplayReport) {
    if check_seal(state, entry).is_err() {
        report.batches_refused += 1;
        return;
    }
    if is_delivery_report(batch) {
        report.batches_of_delivery_reports += 1;
        return;
    }
    let other_algorithm = |report: &mut ReplayReport| {
        report.batches_not_verifiable += 1;
        *report.other_algorithms.entry((batch.algorithm.clone(), batch.algorithm_version)).or_default() += 1;
    };
    match rederived {
        Some(Rederived::Orders(orders)) => {
            report.batches_verified += 1;
            if report.first_divergence.is_none() && orders != batch.orders {
                let order_index = orders.iter().zip(&batch.orders).take_while(|(a, b)| a == b).count();
                report.first_divergence = Some(Divergence {
                    batch_seq: entry.seq,
                    based_on_seq: batch.based_on_seq,
                    order_index,
                    recorded: batch.orders.get(order_index).cloned(),
                    rederived: orders.get(order_index).cloned(),
                });
            }
        }
        Some(Rederived::OtherAlgorithm) => other_algorithm(report),
        // Never re-derived: another version's all the same when it names one.
        _ if batch.algorithm_version != ALGORITHM_VERSION => other_algorithm(report),
        Some(Rederived::NotSealedThen) | None => report.batches_unchecked += 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::schedule::decide;
    use crate::core::testkit::*;

    /// Two engines and a job of three tasks, then the projector's batch for it
    /// (as `alter` leaves batch 0, sealed with the registered test key), then
    /// the next decision (batch 1) the same way: the log and the sequences of both batches.
    fn log_with_batches(alter: impl Fn(usize, &mut OrderBatch)) -> (Vec<Entry>, [Seq; 2]) {
        let mut log = LogBuilder::new();
        let mut state = State::new();
        log.login("e1", 2, linux_props("lyon", 8192));
        log.login("e2", 2, linux_props("lyon", 8192));
        log.submit(job_spec("j", 3, ""));
        let mut batch_seqs = Vec::new();
        for round in 0..2 {
            if round == 1 {
                log.completed("j", 0, 1, "e1");
                log.completed("j", 1, 1, "e2");
                log.submit(job_spec("k", 2, ""));
            }
            for entry in &log.entries[state.last_seq.0 as usize..] {
                fold(&mut state, entry);
            }
            let mut batch = decide(&state, &InFlight::new()).expect("something to dispatch");
            alter(round, &mut batch);
            let entry = log.orders(batch);
            fold(&mut state, &entry);
            batch_seqs.push(entry.seq);
        }
        (log.entries, [batch_seqs[0], batch_seqs[1]])
    }

    fn verify(entries: &[Entry]) -> ReplayReport {
        let options = ReplayOptions { verify: true, stop_at: None, check_invariants: true };
        replay(State::new(), entries, &options, &mut |_| {}).1
    }

    #[test]
    fn every_applied_batch_is_re_derived_and_a_true_log_is_verified() {
        let (entries, _) = log_with_batches(|_, _| {});
        let report = verify(&entries);
        assert_eq!((report.batches_verified, report.batches_not_verifiable, report.batches_unchecked), (2, 0, 0));
        assert_eq!(report.not_verified(&[]), []);
        // Without --verify nothing is re-derived, and nothing is said verified.
        let plain = replay(State::new(), &entries, &ReplayOptions::default(), &mut |_| {}).1;
        assert_eq!(plain.batches_verified, 0);
    }

    #[test]
    fn a_validly_sealed_batch_whose_orders_were_altered_diverges_at_its_sequence() {
        let swap = |engine: &mut crate::core::ids::EngineId| {
            *engine = engine_id(if engine.as_str() == "e1" { "e2" } else { "e1" });
        };
        let (entries, [first, _]) = log_with_batches(|round, batch| {
            if let (0, Some(Order::Dispatch { engine, .. })) = (round, batch.orders.first_mut()) {
                swap(engine);
            }
        });
        let report = verify(&entries);
        let divergence = report.first_divergence.clone().expect("the altered batch diverges");
        assert_eq!((divergence.batch_seq, divergence.order_index), (first, 0));
        let (recorded, rederived) = (divergence.recorded.expect("an order"), divergence.rederived.expect("an order"));
        assert!(matches!((&recorded, &rederived), (Order::Dispatch { engine: a, .. }, Order::Dispatch { engine: b, .. }) if a != b));
        assert_eq!(report.batches_refused, 0, "its seal is valid: the fold applied it");
        let problems = report.not_verified(&[]);
        assert!(matches!(problems.as_slice(), [NotVerified::Diverged(_)]), "{problems:?}");
        assert!(problems[0].to_string().starts_with(&format!("batch at seq {} ", first.0)), "{}", problems[0]);
        assert!(!report.not_verified(&[ALGORITHM_VERSION - 1]).is_empty(), "accepting a version accepts no divergence");
    }

    #[test]
    fn a_batch_of_another_algorithm_version_is_not_verified_unless_that_version_is_accepted() {
        let older = ALGORITHM_VERSION - 1;
        let (entries, _) = log_with_batches(|round, batch| {
            if round == 0 {
                batch.algorithm_version = older;
            }
        });
        let report = verify(&entries);
        assert_eq!((report.batches_verified, report.batches_not_verifiable, report.first_divergence.is_none()), (1, 1, true));
        assert_eq!(report.other_algorithms, [(("sge-plain".to_string(), older), 1)].into());
        let problems = report.not_verified(&[]);
        assert_eq!(problems, [NotVerified::OtherVersions { batches: 1, versions: vec![(("sge-plain".into(), older), 1)] }]);
        let said = problems[0].to_string();
        assert!(said.contains(&format!("sge-plain version {older}: 1")) && said.contains(&format!("--accept-version {older}")), "{said}");
        assert_eq!(report.not_verified(&[older]), [], "accepted: verified");
        assert_eq!(report.not_verified(&[older + 7]).len(), 1, "another version accepted accepts nothing here");
    }

    #[test]
    fn an_applied_batch_based_on_a_sequence_never_folded_before_it_is_unchecked_and_an_unsealed_one_refused() {
        // Based on a sequence after its own: the replay never holds that state before the batch.
        let (entries, [_, second]) = log_with_batches(|round, batch| {
            if round == 1 {
                batch.based_on_seq = Seq(batch.based_on_seq.0 + 100);
            }
        });
        let report = verify(&entries);
        assert_eq!((report.batches_verified, report.batches_unchecked), (1, 1));
        assert_eq!(report.not_verified(&[]), [NotVerified::Unchecked { batches: 1 }]);
        assert_eq!(report.not_verified(&[ALGORITHM_VERSION - 1]).len(), 1, "no version accepts an unchecked batch");

        // Without its seal the same batch is refused by the fold: nothing was applied, nothing to verify.
        let mut unsealed = entries.clone();
        let at = unsealed.iter().position(|entry| entry.seq == second).expect("the batch");
        unsealed[at].seal = None;
        let report = verify(&unsealed);
        assert_eq!((report.batches_verified, report.batches_unchecked, report.batches_refused), (1, 0, 1));
        assert_eq!(report.not_verified(&[]), []);
    }
}
