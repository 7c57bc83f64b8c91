//! A job's urgency (sge_priority(5)): `wtcontr + dlcontr + rrcontr`, in thousandths.
//! - waiting time: `weight_waiting_time` per second since submission;
//! - deadline (`qsub -dl`, the job's initiation deadline): `weight_deadline /
//!   seconds left`, at least one second, so it grows as the deadline nears
//!   and stays at `weight_deadline` once it has passed; none without a deadline;
//! - resources: `slot_urgency` per slot a task asks for (Grid Engine's `slots`
//!   complex, urgency 1000 by default).

use crate::core::event::SgePolicy;
use crate::core::state::Job;

pub fn of_job(sge: &SgePolicy, job: &Job, now_ms: u64) -> i64 {
    contributions(sge, job.submitted_ms, job.deadline_ms(), job.slots_per_task, now_ms).total()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Urgency {
    pub waiting_time_milli: i64,
    pub deadline_milli: i64,
    pub resources_milli: i64,
}

impl Urgency {
    pub fn total(&self) -> i64 {
        self.waiting_time_milli.saturating_add(self.deadline_milli).saturating_add(self.resources_milli)
    }
}

pub fn contributions(sge: &SgePolicy, submitted_ms: u64, deadline_ms: Option<u64>, slots: u32, now_ms: u64) -> Urgency {
    let waited_s = now_ms.saturating_sub(submitted_ms) / 1000;
    let waiting_time_milli = i64::try_from(u128::from(sge.weight_waiting_time_milli) * u128::from(waited_s)).unwrap_or(i64::MAX);
    let deadline_milli = match deadline_ms {
        None => 0,
        Some(deadline) => {
            let left_s = (deadline.saturating_sub(now_ms) / 1000).max(1);
            (i64::from(sge.weight_deadline) * 1000) / left_s as i64
        }
    };
    let resources_milli = i64::from(sge.slot_urgency) * i64::from(slots) * 1000;
    Urgency { waiting_time_milli, deadline_milli, resources_milli }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_urgency_grows_as_the_deadline_nears_and_holds_past_it() {
        let sge = SgePolicy { weight_deadline: 3_600_000, ..SgePolicy::default() };
        let at = |now_ms| contributions(&sge, 0, Some(7_200_000), 1, now_ms).deadline_milli;
        assert_eq!(at(0), 3_600_000 * 1000 / 7200);
        assert_eq!(at(3_600_000), 3_600_000 * 1000 / 3600);
        assert_eq!(at(7_199_500), 3_600_000 * 1000);
        assert_eq!(at(9_000_000), 3_600_000 * 1000);
        assert!(at(0) < at(3_600_000));
    }

    #[test]
    fn waiting_time_and_slots_add_their_weights() {
        let sge = SgePolicy { weight_waiting_time_milli: 278, slot_urgency: 1000, ..SgePolicy::default() };
        let urgency = contributions(&sge, 1_000, None, 4, 61_000);
        assert_eq!(urgency, Urgency { waiting_time_milli: 278 * 60, deadline_milli: 0, resources_milli: 4_000_000 });
    }
}
