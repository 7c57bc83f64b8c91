//! What active jobs hold, per user (a job's `owner`) and over the grid: the
//! counts the policy's caps ([`crate::core::event::CapsPolicy`]) are checked
//! against when a job is submitted or given more tasks.
//!
//! Derived from the jobs, so not in a snapshot: kept by the fold where a job
//! is added, gains tasks and leaves the active jobs (`State::add_job`,
//! `add_tasks`, `leave_job`), and rebuilt from the jobs when a snapshot loads;
//! `State::check_invariants` recounts it.


use super::accounts::AccountIdx;

/// Active jobs and the tasks they hold, whatever each task's status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    pub jobs: u64,
    pub tasks: u64,
}

/// [`Held`] over the grid and per user account.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holdings {
    pub grid: Held,
    /// By [`AccountIdx`] of the users' accounts (accounts are never removed).
    per_user: Vec<Held>,
}

impl Holdings {
    /// What a user holds: nothing for a user the state has never seen.
    pub fn of_user(&self, user: Option<AccountIdx>) -> Held {
        user.and_then(|user| self.per_user.get(user.0 as usize)).copied().unwrap_or_default()
    }

    pub(crate) fn add(&mut self, user: AccountIdx, jobs: u64, tasks: u64) {
        let at = user.0 as usize;
        if self.per_user.len() <= at {
            self.per_user.resize(at + 1, Held::default());
        }
        for held in [&mut self.grid, &mut self.per_user[at]] {
            held.jobs += jobs;
            held.tasks += tasks;
        }
    }

    pub(crate) fn remove(&mut self, user: AccountIdx, jobs: u64, tasks: u64) {
        let held = &mut self.per_user[user.0 as usize];
        assert!(held.jobs >= jobs && held.tasks >= tasks, "a user's active jobs leave once");
        held.jobs -= jobs;
        held.tasks -= tasks;
        self.grid.jobs -= jobs;
        self.grid.tasks -= tasks;
    }

    /// The figures without the users that hold nothing: for comparing a kept
    /// count with a recount (which never lists those).
    pub(crate) fn held_by_users(&self) -> Vec<(AccountIdx, Held)> {
        self.per_user
            .iter()
            .enumerate()
            .filter(|(_, held)| **held != Held::default())
            .map(|(at, held)| (AccountIdx(at as u32), *held))
            .collect()
    }
}
