//! Techila's priorities and the draw's arithmetic: a project's and a user's
//! priority, a ranking from them, tickets from rankings, and the seeded draw.

use crate::core::rng::SplitMix64;
use crate::core::state::{Job, State};

pub const PRIORITY_HIGHEST: u32 = 1;
pub const PRIORITY_NORMAL: u32 = 4;
pub const PRIORITY_LOWEST: u32 = 7;

/// A project's priority, 1 (Highest) to 7 (Lowest); 0 in the job file is 4.
pub fn project_priority(job: &Job) -> u32 {
    match job.options.project_priority {
        0 => PRIORITY_NORMAL,
        p => p.clamp(PRIORITY_HIGHEST, PRIORITY_LOWEST),
    }
}

/// The owner's priority from the policy's table; 4 for a user not named.
pub fn user_priority(state: &State, job: &Job) -> u32 {
    state
        .policy
        .techila
        .user_priorities
        .get(&job.owner)
        .copied()
        .unwrap_or(PRIORITY_NORMAL)
        .clamp(PRIORITY_HIGHEST, PRIORITY_LOWEST)
}

/// The inputs of one project's ranking, as of a cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankingInputs {
    pub user_priority: u32,
    pub project_priority: u32,
    pub wall_clock_ms: u64,
    pub cpu_ms_completed: u64,
    pub running_tasks: u32,
    /// 0 for the earliest created entrant of the draw.
    pub creation_rank: u32,
    pub benchmark_sum_mflops: u64,
}

/// The ranking formula of the module doc: lower ranks win more tickets.
pub fn ranking(inputs: &RankingInputs) -> u128 {
    let cpu_rate_milli = u128::from(inputs.cpu_ms_completed) * 1000 / (u128::from(inputs.wall_clock_ms) + 60_000);
    let consumption = 1000 + 1000 * u128::from(inputs.running_tasks) + u128::from(inputs.benchmark_sum_mflops) + cpu_rate_milli;
    u128::from(inputs.user_priority.max(1))
        * u128::from(inputs.project_priority.max(1))
        * consumption
        * (1000 + u128::from(inputs.creation_rank))
}

/// The tickets' fixed numerator, 2^96: a project holds `2^96 / ranking`
/// tickets (module doc, "The tickets").
pub const TICKETS_NUMERATOR: u128 = 1 << 96;

/// Tickets per entrant: the fixed numerator over its own ranking (at least 1).
pub fn tickets(rankings: &[u128]) -> Vec<u128> {
    rankings.iter().map(|&own| tickets_of(own)).collect()
}

/// One project's tickets: `TICKETS_NUMERATOR / ranking` (at least 1).
pub(super) fn tickets_of(own: u128) -> u128 {
    (TICKETS_NUMERATOR / own.max(1)).max(1)
}

/// Draws one ticket: the position of the entrant holding it.
pub fn draw(tickets: &[u128], rng: &mut SplitMix64) -> usize {
    assert!(!tickets.is_empty(), "a draw has entrants");
    let total: u128 = tickets.iter().fold(0u128, |sum, &t| sum.saturating_add(t));
    let mut ticket = below(rng, total);
    for (at, &t) in tickets.iter().enumerate() {
        if ticket < t {
            return at;
        }
        ticket -= t;
    }
    tickets.len() - 1
}

/// Uniform in `0..bound` (bound > 0) from the seeded generator, without
/// modulo bias: one `below` when the bound fits 64 bits, else 128-bit draws.
pub(crate) fn below(rng: &mut SplitMix64, bound: u128) -> u128 {
    assert!(bound > 0, "a draw has tickets");
    if let Ok(bound) = u64::try_from(bound) {
        return u128::from(rng.below(bound));
    }
    let zone = u128::MAX - (u128::MAX % bound);
    loop {
        let draw = (u128::from(rng.next_u64()) << 64) | u128::from(rng.next_u64());
        if draw < zone {
            return draw % bound;
        }
    }
}
