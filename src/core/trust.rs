//! The fold's rules an engine applies to single log entries without folding:
//! which projector keys are registered ([`KeyRing`], from the entries on the
//! keys' subject), and whether an entry on its login subject is a login the
//! fold accepts ([`check_login_entry`]). The fold uses the same functions
//! ([`admit_key`], [`check_login`]), so an engine and every replay agree.
//!
//! Pure, like the rest of `core`.

use std::collections::BTreeMap;

use ed25519_dalek::VerifyingKey;

use super::event::{Entry, EntrySeal, Event, Origin, Payload};
use super::ids::EngineId;
use super::reject::{Rejection, SealProblem};

/// Most projector keys registered at once (a leader and its standbys, with
/// room for rotation).
pub const PROJECTOR_KEYS_MAX: usize = 64;

/// Whether an operator may register `key` named `name` while `registered` are:
/// the key decompressed when it may, else the fold's rejection.
pub fn admit_key(registered: &BTreeMap<[u8; 32], String>, key: &[u8; 32], name: &str) -> Result<VerifyingKey, Rejection> {
    let refuse = |problem: &str| Rejection::InvalidKey { key: hex::encode(key), problem: problem.to_string() };
    if name.is_empty() || name.len() > 64 || name.chars().any(char::is_control) {
        return Err(refuse("a key's name is 1 to 64 printable characters"));
    }
    let Ok(verifying) = VerifyingKey::from_bytes(key) else {
        return Err(refuse("not an ed25519 public key"));
    };
    if registered.contains_key(key) {
        return Err(refuse("already registered"));
    }
    if registered.len() == PROJECTOR_KEYS_MAX {
        return Err(refuse(&format!("{PROJECTOR_KEYS_MAX} keys are registered already; revoke one first")));
    }
    Ok(verifying)
}

/// Whether `seal` holds over `message` under `key`: strictly (no malleable signatures).
pub fn verify_seal(key: &VerifyingKey, seal: &EntrySeal, message: &[u8]) -> Result<(), SealProblem> {
    let signature = ed25519_dalek::Signature::from_bytes(&seal.signature);
    key.verify_strict(message, &signature).map_err(|_| SealProblem::BadSignature)
}

/// The projector keys the log registers, learnt from the entries on the keys'
/// subject in log order with the fold's rules: what an engine checks a
/// delivery's seal against.
#[derive(Debug, Clone, Default)]
pub struct KeyRing {
    names: BTreeMap<[u8; 32], String>,
    verifying: BTreeMap<[u8; 32], VerifyingKey>,
}

impl KeyRing {
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one entry as the fold would: an operator's registration or
    /// revocation changes the ring; anything else is refused with the fold's
    /// rejection and changes nothing.
    pub fn apply(&mut self, entry: &Entry) -> Result<(), Rejection> {
        let envelope = match &entry.payload {
            Payload::Event(envelope) => envelope,
            Payload::Undecodable { detail } => return Err(Rejection::Undecodable { detail: detail.clone() }),
        };
        let event = &envelope.event;
        let wrong_publisher = || Rejection::WrongPublisher { event: event.kind_name().to_string() };
        if entry.origin != Origin::Operator {
            return Err(wrong_publisher());
        }
        // As the fold: an operator's key event on any other subject is not one.
        if !super::subject::is_subject_for(&entry.subject, event, &entry.origin) {
            return Err(Rejection::WrongSubject {
                event: event.kind_name().to_string(),
                subject: super::reject::truncated(&entry.subject, super::reject::REJECTED_TEXT_BYTES_MAX),
            });
        }
        match event {
            Event::ProjectorKeyRegistered { key, name } => self.register(key, name),
            Event::ProjectorKeyRevoked { key } => self.revoke(key),
            _ => Err(wrong_publisher()),
        }
    }

    pub fn register(&mut self, key: &[u8; 32], name: &str) -> Result<(), Rejection> {
        let verifying = admit_key(&self.names, key, name)?;
        self.names.insert(*key, name.to_string());
        self.verifying.insert(*key, verifying);
        Ok(())
    }

    pub fn revoke(&mut self, key: &[u8; 32]) -> Result<(), Rejection> {
        self.verifying.remove(key);
        match self.names.remove(key) {
            Some(_) => Ok(()),
            None => Err(Rejection::UnknownKey { key: hex::encode(key) }),
        }
    }

    pub fn is_registered(&self, key: &[u8; 32]) -> bool {
        self.names.contains_key(key)
    }

    /// The name of a registered key.
    pub fn name(&self, key: &[u8; 32]) -> Option<&str> {
        self.names.get(key).map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Whether `seal` is a registered key's signature of `message`.
    pub fn check(&self, seal: &EntrySeal, message: &[u8]) -> Result<(), SealProblem> {
        let key = self.verifying.get(&seal.signer).ok_or(SealProblem::UnregisteredKey)?;
        verify_seal(key, seal, message)
    }
}

/// Whether a login of `engine` with `slots` slots may open an epoch.
pub fn check_login(engine: &EngineId, slots: u32) -> Result<(), Rejection> {
    if slots == 0 {
        return Err(Rejection::InvalidEngine { engine: engine.clone(), problem: "an engine needs at least one slot".into() });
    }
    Ok(())
}

/// Whether `entry` is a login of `engine` the fold accepts (decoded, an
/// `EngineLoggedIn` of that engine on its own subject, with the slots a login
/// needs): what an engine reading the newest entry on its login subject
/// counts as a newer login of its name. Anything else, the reason it is not.
pub fn check_login_entry(entry: &Entry, engine: &EngineId) -> Result<(), Rejection> {
    let event = match &entry.payload {
        Payload::Event(envelope) => &envelope.event,
        Payload::Undecodable { detail } => return Err(Rejection::Undecodable { detail: detail.clone() }),
    };
    let Event::EngineLoggedIn { engine: logged_in, slots, .. } = event else {
        return Err(Rejection::WrongPublisher { event: event.kind_name().to_string() });
    };
    match &entry.origin {
        Origin::Engine(subject_engine) if subject_engine == logged_in && logged_in == engine => {}
        Origin::Engine(subject_engine) => {
            return Err(Rejection::ForgedEngine { subject_engine: Some(subject_engine.clone()), payload_engine: logged_in.clone() });
        }
        _ => return Err(Rejection::ForgedEngine { subject_engine: None, payload_engine: logged_in.clone() }),
    }
    check_login(logged_in, *slots)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::event::{EngineProps, Envelope};
    use crate::core::ids::Seq;
    use crate::core::testkit::engine_id;
    use ed25519_dalek::{Signer as _, SigningKey};

    fn entry(origin: Origin, event: Event) -> Entry {
        Entry {
            seq: Seq(1),
            time_ms: 0,
            subject: crate::core::subject::subject_for(&event, &origin),
            origin,
            payload: Payload::Event(Envelope { id: [0; 16], source: String::new(), event }),
            stored: Vec::new(),
            seal: None,
        }
    }

    fn registered(key: &SigningKey, name: &str) -> Entry {
        entry(Origin::Operator, Event::ProjectorKeyRegistered { key: key.verifying_key().to_bytes(), name: name.into() })
    }

    fn seal_of(key: &SigningKey, message: &[u8]) -> EntrySeal {
        EntrySeal {
            signer: key.verifying_key().to_bytes(),
            signature: key.sign(message).to_bytes(),
            signed_len: Some(message.len()),
            sealed_here: false,
        }
    }

    #[test]
    fn a_ring_holds_the_keys_operators_registered_and_not_the_revoked() {
        let (a, b) = (SigningKey::from_bytes(&[1; 32]), SigningKey::from_bytes(&[2; 32]));
        let mut ring = KeyRing::new();
        ring.apply(&registered(&a, "a")).unwrap();
        assert!(matches!(ring.apply(&registered(&a, "again")), Err(Rejection::InvalidKey { .. })), "registered once");
        let by_a_client = entry(Origin::User(crate::core::ids::UserName::new("mallory").unwrap()), Event::ProjectorKeyRegistered { key: b.verifying_key().to_bytes(), name: "b".into() });
        assert!(matches!(ring.apply(&by_a_client), Err(Rejection::WrongPublisher { .. })));
        assert!(matches!(ring.apply(&entry(Origin::Operator, Event::Tick)), Err(Rejection::WrongPublisher { .. })));
        assert!(ring.is_registered(&a.verifying_key().to_bytes()) && !ring.is_registered(&b.verifying_key().to_bytes()));

        let message = b"a delivery";
        assert_eq!(ring.check(&seal_of(&a, message), message), Ok(()));
        assert_eq!(ring.check(&seal_of(&a, message), b"another"), Err(SealProblem::BadSignature));
        assert_eq!(ring.check(&seal_of(&b, message), message), Err(SealProblem::UnregisteredKey));

        ring.apply(&entry(Origin::Operator, Event::ProjectorKeyRevoked { key: a.verifying_key().to_bytes() })).unwrap();
        assert_eq!(ring.check(&seal_of(&a, message), message), Err(SealProblem::UnregisteredKey), "revoked");
        assert!(matches!(
            ring.apply(&entry(Origin::Operator, Event::ProjectorKeyRevoked { key: a.verifying_key().to_bytes() })),
            Err(Rejection::UnknownKey { .. })
        ));
        assert!(ring.is_empty());
    }

    #[test]
    fn a_ring_admits_keys_by_the_folds_rule() {
        let mut ring = KeyRing::new();
        for n in 0..PROJECTOR_KEYS_MAX {
            let key = SigningKey::from_bytes(&[n as u8 + 1; 32]);
            ring.register(&key.verifying_key().to_bytes(), &format!("k{n}")).unwrap();
        }
        let one_more = SigningKey::from_bytes(&[200; 32]).verifying_key().to_bytes();
        assert!(matches!(ring.register(&one_more, "late"), Err(Rejection::InvalidKey { .. })));
        let mut fresh = KeyRing::new();
        assert!(matches!(fresh.register(&one_more, ""), Err(Rejection::InvalidKey { .. })), "a name is needed");
        assert!(matches!(fresh.register(&one_more, "a\nb"), Err(Rejection::InvalidKey { .. })));
    }

    #[test]
    fn a_login_counts_only_when_the_fold_would_take_it() {
        let e1 = engine_id("e1");
        let login = |slots| Event::EngineLoggedIn { engine: e1.clone(), slots, props: EngineProps::default() };
        assert_eq!(check_login_entry(&entry(Origin::Engine(e1.clone()), login(2)), &e1), Ok(()));
        assert!(matches!(check_login_entry(&entry(Origin::Engine(e1.clone()), login(0)), &e1), Err(Rejection::InvalidEngine { .. })));
        assert!(matches!(
            check_login_entry(&entry(Origin::Engine(engine_id("e2")), login(2)), &e1),
            Err(Rejection::ForgedEngine { .. })
        ));
        assert!(matches!(check_login_entry(&entry(Origin::User(crate::core::ids::UserName::new("mallory").unwrap()), login(2)), &e1), Err(Rejection::ForgedEngine { .. })));
        let heartbeat = Event::EngineLoggedOut { engine: e1.clone() };
        assert!(check_login_entry(&entry(Origin::Engine(e1.clone()), heartbeat), &e1).is_err());
        let mut undecodable = entry(Origin::Engine(e1.clone()), login(2));
        undecodable.payload = Payload::Undecodable { detail: "not protobuf".into() };
        assert!(matches!(check_login_entry(&undecodable, &e1), Err(Rejection::Undecodable { .. })));
        // Another engine's valid login on this engine's subject is not this engine's.
        let e2 = engine_id("e2");
        let other = Event::EngineLoggedIn { engine: e2.clone(), slots: 1, props: EngineProps::default() };
        assert!(check_login_entry(&entry(Origin::Engine(e2), other), &e1).is_err());
    }
}
