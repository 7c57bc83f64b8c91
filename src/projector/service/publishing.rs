//! Deciding and publishing: when the machine is asked for a batch, the fence each
//! batch is published behind, the projector's key, and what each answer of the
//! log calls for (see "One writer" and "Publish only from a complete view" in the
//! module doc).

use std::time::Instant;

use super::leadership::Leadership;
use super::{BATCHES_PER_DECISION_MAX, Lease, OrderSink, ProjectorError, Shell, Throttle};
use crate::core::event::{Envelope, Event};
use crate::log::{Append, Appended, EventLog, LogError};
use crate::projector::record::batch_envelope;
use crate::wire::{self, ORDERS_SUBJECT};

/// What must be folded before the next publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Hold {
    Open,
    /// Fold through this sequence first.
    UntilSeq(u64),
    /// Fold through whatever the log holds now (ask it) first.
    UntilLogEnd,
}

/// The number of orders of a batch published, and what the log answered.
pub(super) type PublishOutcome = (usize, Result<Appended, LogError>);

impl<L, S, A> Shell<L, S, A>
where
    L: EventLog + Clone + 'static,
    S: OrderSink,
    A: Lease,
{
    /// Decides and starts publishing the batch if there is news, it is time, this
    /// projector may write and no publish is under way (then the decision waits for its
    /// answer: see [`Input::Published`](super::Input::Published)). A decision that produced a batch goes on when
    /// the publish is answered, as if it had waited for it, up to
    /// [`BATCHES_PER_DECISION_MAX`] batches.
    pub(super) async fn decide_and_publish(&mut self) -> Result<(), ProjectorError> {
        if self.publishing.is_some() {
            return Ok(());
        }
        let continuing = self.decision_batches > 0;
        if !continuing {
            let due = (self.caught_up && self.window.is_due(std::time::Instant::now()))
                || self.window.entries() >= self.config.schedule_every_entries;
            if !self.dirty || !due {
                return Ok(());
            }
        }
        if !self.may_publish().await || !self.key_registered().await {
            self.decision_batches = 0;
            self.window.set_aside();
            return Ok(());
        }
        if !continuing {
            self.dirty = false;
            self.window.decided();
        }
        match self.machine.poll_batch() {
            Some(batch) => {
                self.decision_batches += 1;
                self.start_publish(batch);
            }
            None => {
                // Decided on everything folded so far, the entries folded while
                // the last batch was being published included.
                self.decision_batches = 0;
                self.dirty = false;
                self.window.decided();
            }
        }
        Ok(())
    }

    /// When the loop is to decide on the entries waiting: the coalescing
    /// window's end, even when passed (a past instant fires at once); `None`
    /// when none wait, while a publish is under way (its answer decides
    /// again), or while the log is still being caught up with (the read that
    /// catches up decides).
    pub(super) fn decide_at(&self) -> Option<std::time::Instant> {
        if self.publishing.is_some() || !self.caught_up {
            return None;
        }
        self.window.deadline()
    }

    /// Whether the log holds this projector's key, so that its batches will be
    /// accepted. If not, it decides nothing (a batch the fold refuses would be
    /// decided again, identically, for ever) and says so, with the remedy; with
    /// `register_key` it registers the key itself, once, and waits to fold it.
    async fn key_registered(&mut self) -> bool {
        if self.machine.state().projector_keys.contains_key(&self.key.public()) {
            return true;
        }
        if !self.config.register_key {
            if self.warn_key.ready() {
                tracing::warn!(
                    key = %self.key.public_hex(),
                    "this projector's key is not registered on the log, so it publishes no orders: \
                     register it with `gridfold key register {} --name NAME`",
                    self.key.public_hex()
                );
            }
            return false;
        }
        if !self.registration_sent {
            let name = format!("projector {}", self.lease.location());
            let name: String = name.chars().filter(|c| !c.is_control()).take(64).collect();
            let event = Event::ProjectorKeyRegistered { key: self.key.public(), name };
            let id = uuid::Uuid::new_v4();
            let envelope = Envelope { id: *id.as_bytes(), source: "gridfold-projector".into(), event };
            let append = Append::new(wire::default_subject(&envelope.event), wire::encode(&envelope)).with_msg_id(id.to_string());
            // Tried once per process: on a broker that gives projectors no right to
            // the keys subject the publish waits out its timeout, and retrying it
            // on every loop would stall the projector for good.
            self.registration_sent = true;
            self.warn_key = Throttle(Some(Instant::now()));
            match self.log.append(append).await {
                Ok(appended) => {
                    tracing::info!(key = %self.key.public_hex(), seq = appended.seq, "registered this projector's key on the log");
                }
                Err(err) => tracing::warn!(
                    "could not register this projector's key ({err}); an operator registers it with \
                     `gridfold key register {} --name NAME`",
                    self.key.public_hex()
                ),
            }
        } else if self.warn_key.ready() {
            tracing::warn!(
                key = %self.key.public_hex(),
                "this projector's key is still not registered on the log, so it publishes no orders: \
                 register it with `gridfold key register {} --name NAME`",
                self.key.public_hex()
            );
        }
        false
    }

    /// Publishes one batch behind the fence, from a task of its own.
    fn start_publish(&mut self, batch: crate::core::event::OrderBatch) {
        let orders = batch.orders.len();
        let envelope = batch_envelope(batch);
        let sealed = bytes::Bytes::from(self.key.seal(&envelope));
        self.machine.published_as(sealed.clone());
        let append = Append::new(ORDERS_SUBJECT, sealed)
            .with_msg_id(hex::encode(envelope.id))
            .with_expected_last_subject_seq(self.last_orders_seq);
        let log = self.log.clone();
        self.publishing = Some(tokio::spawn(
            async move { (orders, log.append(append).await) },
        ));
    }

    /// Leader, lease still surely ours, and everything the hold asks for folded.
    async fn may_publish(&mut self) -> bool {
        match self.leadership {
            Leadership::Standby => return false,
            Leadership::Leader {
                valid_until: Some(until),
            } if Instant::now() >= until => {
                self.step_down("its lease was not renewed in time");
                return false;
            }
            Leadership::Leader { .. } => {}
        }
        loop {
            match self.hold {
                Hold::Open => return true,
                Hold::UntilSeq(seq) if self.machine.state().last_seq.0 >= seq => {
                    tracing::debug!("folded through sequence {seq}: publishing again");
                    self.hold = Hold::Open;
                }
                Hold::UntilSeq(_) => return false,
                Hold::UntilLogEnd => match self.log.last_seq().await {
                    Ok(end) => self.hold = Hold::UntilSeq(end),
                    Err(err) => {
                        if self.warn_log.ready() {
                            tracing::warn!("asking the log where it ends: {err}");
                        }
                        return false;
                    }
                },
            }
        }
    }

    /// Takes the log's answer to the publish of a batch. Stored: the decision under way
    /// goes on; otherwise it ends, and what the answer calls for is done.
    pub(super) async fn published(&mut self, (orders, answer): PublishOutcome) -> Result<(), ProjectorError> {
        let go_on = self.publish_answered(orders, answer).await?;
        if !go_on || self.decision_batches >= BATCHES_PER_DECISION_MAX {
            self.decision_batches = 0;
        }
        Ok(())
    }

    /// `Ok(true)`: stored, go on deciding.
    async fn publish_answered(
        &mut self,
        orders: usize,
        answer: Result<Appended, LogError>,
    ) -> Result<bool, ProjectorError> {
        match answer {
            Ok(Appended {
                seq,
                duplicate: false,
            }) => {
                // The loop may have folded the batch already, and more after it.
                self.last_orders_seq = self.last_orders_seq.max(seq);
                self.published_through = self.published_through.max(seq);
                self.status.batches_published += 1;
                tracing::debug!(seq, orders, "published a batch");
                Ok(true)
            }
            Ok(Appended {
                seq,
                duplicate: true,
            }) => {
                // Stored before (by us, before a restart): the log will give it back.
                tracing::debug!(seq, "the batch was already on the log");
                self.resync(Hold::UntilLogEnd);
                Ok(false)
            }
            Err(LogError::WrongLastSequence {
                actual, expected, ..
            }) => {
                self.status.publishes_fenced += 1;
                tracing::warn!(
                    expected,
                    actual = ?actual,
                    "another writer appended orders first: holding until that is folded and the lease confirmed"
                );
                let hold = match actual {
                    Some(actual) => Hold::UntilSeq(actual.max(self.published_through)),
                    None => Hold::UntilLogEnd,
                };
                self.resync(hold);
                self.renew_lease().await;
                Ok(false)
            }
            Err(err @ LogError::Unavailable { .. }) => {
                if self.warn_log.ready() {
                    tracing::warn!("publishing orders: {err}; deciding again once the log is back");
                }
                self.resync(Hold::UntilLogEnd);
                Ok(false)
            }
            Err(err) => Err(err.into()),
        }
    }

    /// Forgets what is in flight; publishes again only after folding what `hold` says.
    pub(super) fn resync(&mut self, hold: Hold) {
        self.machine.abandon_pending();
        self.hold = hold;
        self.dirty = true;
    }
}
