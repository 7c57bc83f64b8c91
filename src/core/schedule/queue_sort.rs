//! Grid Engine's queue selection (sched_conf(5) `queue_sort_method` and
//! `load_formula`, queue_conf(5) `seq_no`), read for gridfold's engines: an
//! engine is one queue instance.
//!
//! Among the engines a task may go to, after the engine tier and the score
//! ([`super::dispatch`]), the engine's **sort key** decides:
//! - `queue_sort_method = load` (Grid Engine's default): the lowest load index
//!   first; the sequence number is the second criterion, considered only when
//!   two engines have the same load index;
//! - `queue_sort_method = seqno`: the lowest sequence number first; the load
//!   index second;
//! - in both, the engine id last, so every tie is broken.
//!
//! The load index ([`load_index`]) is the policy's `load_formula`: its two
//! weights (slots in use, reported load per core) plus its expression over the
//! engine's named load values ([`crate::core::load`]). An engine that has not
//! reported a value the expression names has the index [`LOAD_UNKNOWN`] and so
//! comes after every engine that has (Grid Engine sorts hosts without load
//! values last). The sequence number is the engine's `seq_no` property, 0 when
//! it declares none (Grid Engine's default).
//!
//! During a run a key only rises (booking a slot raises the slots part of the
//! index; nothing else in it changes within a run), which the dispatch loop's
//! lazily re-filed queues rely on.

use crate::core::event::{LoadFormula, QueueSort};
use crate::core::state::Engine;

/// The load index of an engine that has not reported a value the formula names.
pub const LOAD_UNKNOWN: i64 = i64::MAX / 2;

/// An engine's place in the queue sort, least first (the engine id comes after).
pub type SortKey = (i64, i64);

/// Grid Engine's load formula, in milli-units: lower is chosen first. Saturates
/// (at [`LOAD_UNKNOWN`] and its negation) rather than overflow.
pub fn load_index(formula: &LoadFormula, engine: &Engine, used_slots: u32) -> i64 {
    let Some(expression) = formula.expression.eval(&engine.load) else { return LOAD_UNKNOWN };
    let slots_part = i128::from(used_slots) * 1000 / i128::from(engine.slots.max(1));
    let index = i128::from(formula.slots_weight) * slots_part
        + i128::from(formula.load_weight) * i128::from(engine.load.load_per_core_milli)
        + i128::from(expression);
    index.clamp(-i128::from(LOAD_UNKNOWN) + 1, i128::from(LOAD_UNKNOWN) - 1) as i64
}

/// The engine's queue sequence number (queue_conf(5) `seq_no`), read at login.
pub fn seq_no(engine: &Engine) -> i64 {
    engine.seq_no as i64
}

/// The engine's sort key under the policy's method, with `used_slots` in use.
pub fn sort_key(method: QueueSort, formula: &LoadFormula, engine: &Engine, used_slots: u32) -> SortKey {
    let load = load_index(formula, engine, used_slots);
    match method {
        QueueSort::Load => (load, seq_no(engine)),
        QueueSort::Seqno => (seq_no(engine), load),
    }
}
