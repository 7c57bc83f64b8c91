//! Placeholder until the requirements language lands: accepts only the empty expression.
use crate::core::event::EngineProps;
#[derive(Debug, Clone, PartialEq)]
pub struct Expr;
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("at byte {position}: {message}")]
pub struct ExprError { pub position: usize, pub message: String }
pub fn parse(source: &str) -> Result<Expr, ExprError> {
    if source.trim().is_empty() || source.trim() == "true" { Ok(Expr) } else { Err(ExprError { position: 0, message: "expressions are not supported yet".into() }) }
}
impl Expr { pub fn eval(&self, _props: &EngineProps, _slots: u32) -> bool { true } }
impl std::fmt::Display for Expr { fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str("true") } }
