//! Deliveries as the projector sends them, for tests that play the projector:
//! sealed with a projector key an operator registered on the log (an engine
//! runs nothing else). `register(&log).await` once, then `sealed(&delivery)`.

use gridfold::core::event::{Envelope, Event};
use gridfold::log::{Append, EventLog};
use gridfold::projector::key::ProjectorKey;
use gridfold::wire;
use gridfold::wire::delivery::Delivery;

/// The key the test's projector seals with.
pub fn projector_key() -> ProjectorKey {
    ProjectorKey::from_seed([0x5e; 32])
}

/// An operator's registration of `key` on the log, as `gridfold key register` publishes it.
pub fn registration(key: &ProjectorKey) -> Append {
    let envelope = Envelope {
        id: *uuid::Uuid::new_v4().as_bytes(),
        source: "operator:test".into(),
        event: Event::ProjectorKeyRegistered { key: key.public(), name: "test projector".into() },
    };
    Append::new(wire::default_subject(&envelope.event), wire::encode(&envelope))
}

/// Registers [`projector_key`] on `log`: its log sequence.
pub async fn register<L: EventLog>(log: &L) -> u64 {
    log.append(registration(&projector_key())).await.expect("registering the test projector's key").seq
}

/// `delivery` alone in one message, sealed with [`projector_key`].
pub fn sealed(delivery: &Delivery) -> Vec<u8> {
    sealed_with(&projector_key(), delivery)
}

/// `delivery` alone in one message, sealed with `key`.
pub fn sealed_with(key: &ProjectorKey, delivery: &Delivery) -> Vec<u8> {
    let mut messages = key.delivery_messages(std::slice::from_ref(delivery));
    assert_eq!(messages.len(), 1);
    messages.pop().expect("one message").payload
}
