//! Operator commands on the state: hold and release a job, drain and resume an
//! engine, cancel one task. `fold` decides whether each applies; these apply it
//! and keep the indexes (`runnable`, `to_cancel`) true.
//!
//! A held job and a job awaiting its parts stay out of `runnable` (see
//! [`super::Job::is_runnable`]); a drained engine leaves `free_engines`, so
//! nothing that offers work to free engines (dispatch, whatever the family;
//! library syncs) reaches it, and `why` names the reason
//! (`filters::not_drained`).


use crate::core::ids::{EngineIdx, JobIdx, TaskKey};
use super::job::{TaskState, TaskStatus};
use super::store::State;

impl State {
    /// Holds or releases a job.
    pub(crate) fn set_job_held(&mut self, idx: JobIdx, held: bool) {
        let was_runnable = self.jobs[idx.0 as usize].is_runnable();
        self.jobs[idx.0 as usize].held = held;
        self.refresh_runnable(idx, was_runnable);
    }

    /// Drains or resumes an engine.
    pub(crate) fn set_engine_drained(&mut self, e: EngineIdx, drained: bool) {
        self.engines[e.0 as usize].drained = drained;
        self.refresh_free(e);
    }

    /// Cancels one task of an active job: a waiting one at once; a live one's
    /// attempts (copies included) await a Cancel order, and its waiting copy is
    /// dropped. When it was the job's last unended task the job ends.
    pub(crate) fn cancel_task(&mut self, key: TaskKey) {
        let was_runnable = self.jobs[key.job.0 as usize].is_runnable();
        let status = self.task(key).status;
        match status {
            TaskStatus::Waiting => {
                self.jobs[key.job.0 as usize].cancel_waiting(key.index);
            }
            TaskStatus::Dispatched | TaskStatus::Running => {
                let job = &mut self.jobs[key.job.0 as usize];
                job.tasks[key.index as usize].flags |= TaskState::CANCEL_REQUESTED;
                job.drop_copy(key.index);
                let attempts: Vec<_> = self.live_attempts_of(key).iter().map(|live| (key, live.attempt)).collect();
                self.to_cancel.extend(attempts);
            }
            TaskStatus::Done | TaskStatus::Failed | TaskStatus::Cancelled => {
                unreachable!("fold cancels only unended tasks")
            }
        }
        self.refresh_runnable(key.job, was_runnable);
        self.finish_job_if_ended(key.job);
    }
}
