//! Snapshots (postcard, then the suspensions' trailer), the count of
//! holdings rebuilt from the jobs, and the state's digest.

use std::collections::BTreeSet;

use crate::core::digest::Digest;
use crate::core::ids::JobIdx;
use super::engines::compile_tiers;
use super::store::State;

impl State {
    // ---- snapshots and digests -----------------------------------------------

    /// A snapshot of the whole state (postcard). Category expressions are not
    /// stored; [`State::from_snapshot`] re-parses them.
    pub fn to_snapshot(&self) -> Vec<u8> {
        let mut bytes = postcard::to_stdvec(self).expect("the state always serialises");
        bytes.extend(self.suspension_trailer());
        bytes
    }

    pub fn from_snapshot(bytes: &[u8]) -> Result<State, SnapshotError> {
        let (mut state, trailer): (State, _) =
            postcard::take_from_bytes(bytes).map_err(|e| SnapshotError::Decode(e.to_string()))?;
        state.read_suspension_trailer(trailer).map_err(|e| SnapshotError::Decode(format!("suspensions: {e}")))?;
        for category in state.categories.iter_mut().filter(|category| !category.is_vacant()) {
            let expr = crate::core::expr::parse_printed(&category.requirements).map_err(|e| {
                SnapshotError::Decode(format!("category {:?}: {e}", category.requirements))
            })?;
            category.expr = Some(expr);
        }
        let broken = |what: &str, e: crate::core::expr::ExprError| SnapshotError::Decode(format!("{what}: {e}"));
        for job in state.jobs.iter_mut() {
            let preferences = job.affinity.iter_mut().chain(job.conditions.values_mut().flat_map(|c| c.affinity.iter_mut()));
            for preference in preferences {
                preference.rebuild().map_err(|e| broken(&format!("affinity of job {}", job.id), e))?;
            }
            if let Some(soft) = job.soft.as_mut() {
                soft.rebuild().map_err(|e| broken(&format!("soft requests of job {}", job.id), e))?;
            }
        }
        state.tier_exprs = compile_tiers(&state.policy.engine_tiers).map_err(|e| broken("engine tiers", e))?;
        for engine in state.engines.iter_mut() {
            engine.seq_no = crate::core::load::seq_no(&engine.props.custom);
        }
        state.users.rebuild_index();
        state.projects.rebuild_index();
        state.holdings = state.recount_holdings();
        state.site_jobs = state.recount_site_jobs();
        for key in state.projector_keys.keys() {
            let verifying = ed25519_dalek::VerifyingKey::from_bytes(key)
                .map_err(|_| SnapshotError::Decode(format!("projector key {} is not an ed25519 key", hex::encode(key))))?;
            state.verifying_keys.insert(*key, verifying);
        }
        state.check_invariants();
        Ok(state)
    }

    /// The active jobs whose tasks span a site, found by a walk over the jobs.
    pub(super) fn recount_site_jobs(&self) -> BTreeSet<JobIdx> {
        self.jobs
            .iter()
            .filter(|(_, job)| job.is_active() && job.options.span == crate::core::event::Span::Site)
            .map(|(j, _)| j)
            .collect()
    }

    /// What the active jobs hold, counted from the jobs themselves.
    pub(super) fn recount_holdings(&self) -> super::holdings::Holdings {
        let mut holdings = super::holdings::Holdings::default();
        for (_, job) in self.jobs.iter().filter(|(_, job)| job.is_active()) {
            holdings.add(job.user_account, 1, u64::from(job.n_tasks()));
        }
        holdings
    }

    /// What active jobs hold per user and over the grid (the caps' counts).
    pub fn holdings(&self) -> &super::holdings::Holdings {
        &self.holdings
    }

    /// A digest of the whole folded state, for comparing two states on demand.
    pub fn state_digest(&self) -> Digest {
        Digest::of_bytes(&self.to_snapshot())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot does not decode: {0}")]
    Decode(String),
}
