//! `sge-plain`: Grid Engine's SGE mode (sched_conf(5), seed 002). Jobs are
//! examined by `-p` priority (highest first); between equal priorities, first
//! come first served, or with `user_sort` the user with the fewest running
//! tasks first and FCFS between users with as many. With `user_sort` the order
//! moves within a run as tasks are booked, as Grid Engine's access tree does:
//! after each booking the user counts one more running task.
//!
//! A user's running tasks are its live attempts (dispatched or running, copies
//! included) as folded ([`crate::core::state::accounts`]), plus its dispatches in
//! flight and those booked earlier in the run. Grid Engine counts running jobs;
//! a gridfold task is what a Grid Engine array task is, so tasks are counted.

use std::cmp::Reverse;

use super::data::OrderKey;
use crate::core::state::{JobIdx, State};

/// `-p` first, then fewer running tasks of the owner, then submission.
pub fn user_sort_key(state: &State, j: JobIdx, owner_booked: u32) -> OrderKey {
    let job = state.job(j);
    let running = state.users().get(job.user_account).live_tasks + owner_booked;
    OrderKey { primary: i64::from(job.priority), secondary: -i64::from(running), submitted: Reverse(job.submit_seq) }
}
