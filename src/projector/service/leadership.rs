//! Leadership: renewing the lease, becoming leader (read to the end of the log,
//! send the recent deliveries again) and stepping down. The lease says who should
//! write; the fence (`publishing.rs`) makes sure only one can.

use std::time::{Duration, Instant};

use super::publishing::Hold;
use super::{Lease, LeaseError, OrderSink, Shell};
use crate::log::EventLog;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Leadership {
    Standby,
    /// Holds the lease; surely until `valid_until` (`None`: until released).
    Leader {
        valid_until: Option<Instant>,
    },
}

impl<L, S, A> Shell<L, S, A>
where
    L: EventLog + Clone + 'static,
    S: OrderSink,
    A: Lease,
{
    pub(super) async fn renew_lease(&mut self) {
        let sent_at = Instant::now();
        let timeout = self.lease.renew_interval().max(Duration::from_secs(1));
        let answer = match tokio::time::timeout(timeout, self.lease.acquire_or_renew()).await {
            Ok(answer) => answer,
            Err(_) => Err(LeaseError::Unavailable {
                location: self.lease.location(),
                detail: format!("no answer within {}", crate::human::duration(timeout)),
            }),
        };
        let first_answer = !self.lease_answered;
        self.lease_answered |= answer.is_ok();
        match answer {
            Ok(true) => {
                let valid_until = self.lease.valid_for().map(|valid_for| sent_at + valid_for);
                match self.leadership {
                    Leadership::Standby => self.become_leader(valid_until),
                    Leadership::Leader { .. } => {
                        self.leadership = Leadership::Leader { valid_until }
                    }
                }
            }
            Ok(false) => {
                if self.is_leader() {
                    self.step_down("another projector holds the lease");
                } else if first_answer {
                    tracing::info!(
                        "standby: another projector holds the lease; folding and answering queries, not publishing"
                    );
                }
            }
            Err(err) => {
                if self.warn_lease.ready() {
                    tracing::warn!("{err}");
                }
                if let Leadership::Leader {
                    valid_until: Some(until),
                } = self.leadership
                    && Instant::now() >= until
                {
                    self.step_down("its lease could not be renewed in time");
                }
            }
        }
    }

    fn become_leader(&mut self, valid_until: Option<Instant>) {
        self.leadership = Leadership::Leader { valid_until };
        self.status.leader_terms += 1;
        // Read to the end of the log before deciding, and deliver the recent batches
        // again: the previous leader may have published some it did not deliver.
        self.resync(Hold::UntilLogEnd);
        self.outbox = self
            .recent
            .iter()
            .map(|(_, delivery)| delivery.clone())
            .collect();
        tracing::info!(
            folded_seq = self.machine.state().last_seq.0,
            "leader: reading to the end of the log before deciding; sending the {} deliveries of recent batches again",
            self.outbox.len()
        );
    }

    pub(super) fn step_down(&mut self, reason: &str) {
        self.leadership = Leadership::Standby;
        self.outbox.clear();
        self.abort_sending();
        self.decision_batches = 0;
        self.machine.abandon_pending();
        self.hold = Hold::Open;
        tracing::info!("standby: {reason}; folding and answering queries, not publishing");
    }
}
