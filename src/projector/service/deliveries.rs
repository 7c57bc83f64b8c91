//! Deliveries: the outbox the leader sends from (one send under way at a time, so
//! they reach the sink in order), and the deliveries of recent batches every
//! projector remembers, to send again when it becomes leader.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinError;

use super::sink::Refused;
use super::snapshot::EncodedDelivery;
use super::tasks::task_done;
use super::{Lease, OUTBOX_WAIT_AT, OrderSink, RECENT_DELIVERIES_MAX, SHUTDOWN_STEP_TIMEOUT, Shell};
use crate::log::{EventLog, LogError};
use crate::core::event::Order;
use crate::wire::delivery::{Delivery, DeliveryKind};

/// Deliveries of the recent batches, oldest first, by the log time of their batch;
/// each also encoded once, as every snapshot that keeps it writes it.
#[derive(Debug, Default)]
pub(super) struct RecentDeliveries {
    items: VecDeque<(Delivery, EncodedDelivery)>,
    window_ms: u64,
    dropped: u64,
}

impl RecentDeliveries {
    pub(super) fn new(window: Duration, items: Vec<(u64, Delivery)>) -> Self {
        let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        let mut recent = RecentDeliveries {
            items: VecDeque::new(),
            window_ms,
            dropped: 0,
        };
        for (time_ms, delivery) in items {
            recent.push(time_ms, delivery);
        }
        recent
    }

    pub(super) fn push(&mut self, time_ms: u64, delivery: Delivery) {
        let encoded = EncodedDelivery::new(time_ms, &delivery);
        self.items.push_back((delivery, encoded));
        if self.items.len() > RECENT_DELIVERIES_MAX {
            self.items.pop_front();
            self.dropped += 1;
        }
    }

    /// Forgets the deliveries of batches older than the window before `now_ms`.
    pub(super) fn prune(&mut self, now_ms: u64) {
        let oldest_kept_ms = now_ms.saturating_sub(self.window_ms);
        while self
            .items
            .front()
            .is_some_and(|(_, encoded)| encoded.time_ms < oldest_kept_ms)
        {
            self.items.pop_front();
        }
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, &Delivery)> {
        self.items
            .iter()
            .map(|(delivery, encoded)| (encoded.time_ms, delivery))
    }

    pub(super) fn encoded(&self) -> impl Iterator<Item = &EncodedDelivery> {
        self.items.iter().map(|(_, encoded)| encoded)
    }
}

/// Deliveries handed to the sink, and what it answered (the messages it
/// refused); from the task that sent them.
pub(super) type DeliveryOutcome = (Vec<Delivery>, Result<Vec<Refused>, LogError>);

impl<L, S, A> Shell<L, S, A>
where
    L: EventLog + Clone + 'static,
    S: OrderSink,
    A: Lease,
{
    pub(super) fn trim_outbox(&mut self) {
        let excess = self.outbox.len().saturating_sub(RECENT_DELIVERIES_MAX);
        if excess > 0 {
            self.outbox.drain(..excess);
            tracing::error!(
                "{excess} deliveries dropped: more than {RECENT_DELIVERIES_MAX} waited to be sent"
            );
        }
    }

    /// Starts sending what waits in the outbox (leader only), unless a send is under
    /// way: then it goes when that one is answered, in one send with whatever came
    /// meanwhile. The loop does not wait for the sink's answers (see [`Input::Delivered`](super::Input::Delivered)).
    ///
    /// Past [`OUTBOX_WAIT_AT`] deliveries waiting, it waits for the send under way
    /// first, so that a sink slower than the fold holds the loop back rather than letting
    /// the outbox grow to [`RECENT_DELIVERIES_MAX`], where it would drop deliveries.
    pub(super) async fn deliver(&mut self) {
        if !self.is_leader() || self.outbox.is_empty() {
            return;
        }
        if self.sending.is_some() {
            if self.outbox.len() < OUTBOX_WAIT_AT {
                return;
            }
            let outcome = task_done(&mut self.sending).await;
            self.delivery_ended(outcome);
            if !self.is_leader() || self.outbox.is_empty() {
                return;
            }
        }
        let deliveries: Vec<Delivery> = self.outbox.drain(..).collect();
        let sink = Arc::clone(&self.sink);
        let key = self.key.clone();
        self.sending = Some(tokio::spawn(async move {
            let result = sink.deliver(&deliveries, &key).await;
            (deliveries, result)
        }));
    }

    /// What a task that ended without answering (it panicked or was aborted) amounts to.
    pub(super) fn task_ended(&self, url: String, what: &str, err: JoinError) -> LogError {
        LogError::Unavailable {
            url,
            detail: format!("the {what} task ended: {err}"),
        }
    }

    /// Takes the answer of the task that sent deliveries; one that ended without
    /// answering counts as a failed send.
    pub(super) fn delivery_ended(&mut self, outcome: Result<DeliveryOutcome, JoinError>) {
        let outcome = outcome.unwrap_or_else(|err| {
            (
                Vec::new(),
                Err(self.task_ended(self.sink.location(), "delivery", err)),
            )
        });
        self.delivered(outcome);
    }

    /// Takes the sink's answer: on failure the deliveries go back to the front of the
    /// outbox for the next try (their ids make sending them again safe). A
    /// message the broker refused as it is goes nowhere again ([`Self::refused`]).
    fn delivered(&mut self, (deliveries, result): DeliveryOutcome) {
        match result {
            Ok(refused) => {
                self.status.deliveries_sent += deliveries.len().saturating_sub(refused.len()) as u64;
                tracing::debug!(deliveries = deliveries.len(), refused = refused.len(), "delivered");
                for refusal in refused {
                    self.refused(&deliveries, refusal);
                }
            }
            Err(err) => {
                if self.warn_sink.ready() {
                    tracing::warn!(
                        "delivering {} orders to engines: {err}; trying again",
                        deliveries.len()
                    );
                }
                if self.is_leader() {
                    for delivery in deliveries.into_iter().rev() {
                        self.outbox.push_front(delivery);
                    }
                    self.trim_outbox();
                }
            }
        }
    }

    /// A message the broker refused as it is (too large): never sent again, so
    /// it delays no other delivery. A run it carried alone fails its attempt,
    /// through the log: the next batch reports it (`Order::Undeliverable`),
    /// and the fold fails the attempt, so the task is retried or fails as
    /// after any failure, on every replay alike. Anything else it carried
    /// (a run joined with others, a cancel) is dropped, said in the log; a run
    /// so lost is requeued by the dispatch timeout.
    fn refused(&mut self, deliveries: &[Delivery], refusal: Refused) {
        let run = deliveries.iter().find(|delivery| delivery.id == refusal.message_id).and_then(|delivery| match &delivery.kind {
            DeliveryKind::Run(run) => Some((delivery, run)),
            _ => None,
        });
        let Some((delivery, run)) = run else {
            tracing::error!(message = %refusal.message_id, "the broker refused a delivery message: {}; dropped", refusal.detail);
            return;
        };
        tracing::warn!(
            task = %run.task,
            attempt = run.attempt,
            engine = %delivery.engine,
            "the broker refused the run order ({}); the attempt fails",
            refusal.detail
        );
        self.machine.report_undeliverable(Order::Undeliverable {
            task: run.task.clone(),
            attempt: run.attempt,
            engine: delivery.engine.clone(),
            bytes: refusal.bytes,
            max: refusal.max,
        });
        self.dirty = true;
    }

    /// Stops the send under way, if any (this projector no longer delivers).
    pub(super) fn abort_sending(&mut self) {
        if let Some(task) = self.sending.take() {
            task.abort();
        }
    }

    /// Waits (bounded) for the send under way, then sends what is left: at shutdown.
    pub(super) async fn flush_deliveries(&mut self) {
        if self.sending.is_some() {
            match tokio::time::timeout(SHUTDOWN_STEP_TIMEOUT, task_done(&mut self.sending)).await {
                Ok(Ok(outcome)) => self.delivered(outcome),
                Ok(Err(_)) => {}
                Err(_) => {
                    self.abort_sending();
                    return;
                }
            }
        }
        if !self.is_leader() || self.outbox.is_empty() {
            return;
        }
        let deliveries: Vec<Delivery> = self.outbox.drain(..).collect();
        let result =
            match tokio::time::timeout(SHUTDOWN_STEP_TIMEOUT, self.sink.deliver(&deliveries, &self.key)).await
            {
                Ok(result) => result,
                Err(_) => Err(LogError::Unavailable {
                    url: self.sink.location(),
                    detail: format!("no answer within {SHUTDOWN_STEP_TIMEOUT:?}"),
                }),
            };
        self.delivered((deliveries, result));
    }
}
