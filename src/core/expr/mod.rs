//! Requirements expressions: the small language in which a job says which
//! engines may run it, and which later serves affinity (a preference that adds
//! to an engine's score) and discriminators.
//!
//! ```text
//! os == "linux" && memory_mb >= 4096 && (site == "lyon" || has_gpu)
//! site in ["lyon", "grenoble"] && !(gpus > 0)
//! ```
//!
//! A job's expression is parsed once, at submission; a bad one is refused there
//! with the byte position of the error ([`ExprError`], [`ExprError::render`]
//! draws a caret under it). [`Expr::eval`] then answers, for one engine, whether
//! the expression holds. [`Expr`]'s `Display` is the canonical form that
//! `gridfold why` shows; it parses back to an equal `Expr`.
//!
//! # Grammar
//!
//! ```text
//! expr       := or                          (empty or blank source: `true`, any engine)
//! or         := and  (("||" | "or")  and)*
//! and        := unary (("&&" | "and") unary)*
//! unary      := ("!" | "not") unary | primary
//! primary    := "(" expr ")" | "true" | "false"
//!             | property                                  a flag, e.g. `has_gpu`
//!             | property cmp value | value cmp property   a comparison
//!             | property ["not"] "in" "[" value ("," value)* [","] "]"
//! cmp        := "==" | "!=" | "<" | "<=" | ">" | ">="
//! property   := [A-Za-z_][A-Za-z0-9_.-]*   (not a keyword)
//! value      := integer | string
//! integer    := ["-"] [0-9][0-9_]*          (64-bit signed; `_` separates digits: 4_096)
//! string     := '"' ... '"'                 (escapes: \" and \\ only; no control characters)
//! ```
//!
//! `!` binds tightest, then comparisons, then `&&`, then `||`. The keywords
//! `and or not in true false` are reserved and lowercase. There is no
//! arithmetic, no comparison of one property with another, no regular
//! expression and no unit suffix (`4g`): memory is written in MB.
//!
//! # Properties
//!
//! | name | kind | from |
//! |---|---|---|
//! | `os`, `arch`, `site` | text | [`EngineProps`] |
//! | `cores`, `memory_mb`, `disk_mb`, `mflops` | number | [`EngineProps`] |
//! | `slots` | number | the slots the engine declared at login |
//! | any other name | text, read as a number when compared with one | [`EngineProps::custom`] |
//!
//! A custom property that shares its name with a built-in or a keyword cannot be reached.
//!
//! # Meaning
//!
//! - A comparison has a property on one side and a value on the other. A value on
//!   the left is turned around: `4096 <= memory_mb` is `memory_mb >= 4096`.
//! - A built-in property has a kind, checked at parse time: `os > 3` and
//!   `cores == "4"` are refused with the position of the offending value. A bare
//!   built-in (`cores`) is refused as a condition: compare it.
//! - Numbers compare exactly (built-ins are unsigned 64-bit, literals signed
//!   64-bit; neither overflows).
//! - Text compares exactly and case-sensitively with `==` and `!=`; `<`, `<=`,
//!   `>`, `>=` compare the UTF-8 bytes (`"Z" < "a"`).
//! - A custom property compared with a number is read as a decimal integer
//!   (an optional sign then digits, nothing else: no spaces, no `_`). If it does
//!   not read, the comparison is false. Compared with a string, it is text.
//! - **A property the engine does not have makes every comparison on it false,
//!   `!=` included**, and `in` as well. So on an engine with no `gpus` property,
//!   `gpus == 0`, `gpus != 0` and `gpus > 0` are all false, while `!(gpus > 0)`
//!   is true. The same holds for a custom value that is not a number when
//!   compared with a number. To require that a number be present, write
//!   `gpus >= 0` (or whatever bound applies).
//! - `p in [v1, v2, ...]` holds when `p == v` holds for some `v` in the list. The
//!   list is non-empty and holds values of one kind. `p not in [...]` is
//!   `!(p in [...])`, so it is true when `p` is missing.
//! - A custom property standing alone as a condition (`has_gpu`) holds when the
//!   engine has it and its value is not `""`, `"0"`, `"false"` or `"no"` (the last
//!   two in any case).
//!
//! # Limits
//!
//! Everything is bounded, so that no submission can exhaust the projector:
//! at most [`SOURCE_BYTES_MAX`] bytes of source, [`DEPTH_MAX`] levels of nesting
//! (each `(` and each `!`/`not` is a level) and [`NODES_MAX`] nodes (every
//! condition, `!`, `&&`/`||` chain and list value counts one). Beyond them,
//! parsing fails with a positioned error, never with a stack overflow.
//!
//! # Canonical form and invariants
//!
//! [`parse`] returns a canonical tree: `&&` and `||` chains are flattened (each
//! `And`/`Or` has at least two children, none of the same operator), parentheses
//! leave no trace, values are on the right of comparisons and flags are custom
//! properties only. `Display` prints it with symbols (`&&`, `||`, `!`), minimal
//! parentheses, and parentheses around a negated comparison (`!(gpus > 0)`), and
//! `parse_printed(&expr.to_string()) == Ok(expr)` for every parsed `expr`.
//!
//! The printed form is what the state keeps (a category's key) and reads back
//! from a snapshot, and it may be longer and deeper than the source it came
//! from (`a>1` prints `a > 1`, `!a>1` prints `!(a > 1)`): so [`parse_printed`]
//! allows [`PRINTED_BYTES_MAX`] bytes and [`PRINTED_DEPTH_MAX`] levels, and
//! [`parse`] refuses an expression whose printed form would not read back, so a
//! snapshot never holds an expression it cannot load.
//!
//! Like the rest of `core` this module does no IO and reads no clock.
//! Evaluation only borrows: it allocates nothing, walks at most [`NODES_MAX`]
//! nodes and looks custom properties up in a `BTreeMap`.
//!
//! # Where things are
//!
//! This file holds the tree, its limits, the entry points ([`parse`],
//! [`parse_printed`]) and [`ExprError`]. `lexer.rs` turns source into tokens;
//! `parser.rs` turns tokens into a canonical tree, holding the limits; `eval.rs`
//! answers for one engine; `print.rs` writes the canonical form (`Display`).
//! `tests.rs` checks all of them through the entry points.

mod ast;
mod eval;
mod lexer;
mod parser;
mod print;
#[cfg(test)]
mod tests;

pub use ast::*;
use parser::parse_within;

/// Parses an expression. Empty or blank source means any engine: `Expr::Bool(true)`.
///
/// An expression within the limits whose printed form [`parse_printed`] would
/// refuse is refused too (it cannot happen with today's printer; the check
/// keeps it so whatever the printer becomes).
pub fn parse(source: &str) -> Result<Expr, ExprError> {
    let expr = parse_within(source, Limits::SOURCE)?;
    let printed = expr.to_string();
    match parse_within(&printed, Limits::PRINTED) {
        Ok(again) if again == expr => Ok(expr),
        Ok(_) => Err(ExprError::new(0, "its printed form reads back as another expression")),
        Err(error) => Err(ExprError::new(0, format!("its printed form does not read back: {}", error.message))),
    }
}

/// Parses the printed form of an expression [`parse`] accepted (a category's
/// key, read back from a snapshot), under the printed-form limits.
pub fn parse_printed(printed: &str) -> Result<Expr, ExprError> {
    parse_within(printed, Limits::PRINTED)
}

impl std::str::FromStr for Expr {
    type Err = ExprError;
    fn from_str(source: &str) -> Result<Self, ExprError> {
        parse(source)
    }
}
