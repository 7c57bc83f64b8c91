//! Engine tiers as a policy writes them: `property=value`.

use super::echo;

/// Why an engine tier is not `property=value`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineTierError {
    #[error("engine tier {0} is not written property=value")]
    NoEquals(String),
    #[error("engine tier {0} has an empty property name")]
    EmptyProperty(String),
    #[error(
        "engine tier {tier}: a property name is a letter or '_' and then letters, digits, '_', '.' or '-'; found {found:?} at byte {at}"
    )]
    BadProperty { tier: String, found: char, at: usize },
}

/// Checks that `tier` is `property=value` (see `Policy::engine_tiers`): a
/// property name as requirements expressions write one, `=`, and any value
/// (empty included). The value is everything after the first `=`.
pub fn check_engine_tier(tier: &str) -> Result<(), EngineTierError> {
    let Some((property, _value)) = tier.split_once('=') else {
        return Err(EngineTierError::NoEquals(echo(tier)));
    };
    if property.is_empty() {
        return Err(EngineTierError::EmptyProperty(echo(tier)));
    }
    let bad = property.char_indices().find(|&(at, c)| {
        let allowed = c.is_ascii_alphabetic() || c == '_' || (at > 0 && (c.is_ascii_digit() || c == '.' || c == '-'));
        !allowed
    });
    match bad {
        Some((at, found)) => Err(EngineTierError::BadProperty { tier: echo(tier), found, at }),
        None => Ok(()),
    }
}
