//! The cluster an engine belongs to, as CiGri reads it.

use crate::core::state::Engine;

/// The cluster an engine belongs to: its custom property `cluster`, or `""`.
pub fn cluster_of(engine: &Engine) -> &str {
    engine.props.custom.get("cluster").map_or("", String::as_str)
}
