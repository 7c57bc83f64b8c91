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

mod eval;
mod lexer;
mod parser;
mod print;
#[cfg(test)]
mod tests;

use super::event::EngineProps;
use parser::parse_within;

/// Longest expression source accepted, in bytes.
pub const SOURCE_BYTES_MAX: usize = 4096;
/// Deepest nesting accepted: each `(` and each `!` (or `not`) is a level.
pub const DEPTH_MAX: usize = 64;
/// Most nodes in one expression: conditions, `!`, `&&`/`||` chains and list values.
pub const NODES_MAX: usize = 256;
/// Longest printed form [`parse_printed`] reads. Printing at most doubles a
/// source (spaces around operators and after list commas, parentheses around a
/// negated comparison); four times leaves room, and [`parse`] checks it anyway.
pub const PRINTED_BYTES_MAX: usize = 4 * SOURCE_BYTES_MAX;
/// Deepest printed form [`parse_printed`] reads: printing adds at most one `(`
/// per `!`, so at most doubles the depth.
pub const PRINTED_DEPTH_MAX: usize = 2 * DEPTH_MAX;

/// The bounds one parse is held to.
#[derive(Debug, Clone, Copy)]
struct Limits {
    bytes: usize,
    depth: usize,
}

impl Limits {
    const SOURCE: Limits = Limits { bytes: SOURCE_BYTES_MAX, depth: DEPTH_MAX };
    const PRINTED: Limits = Limits { bytes: PRINTED_BYTES_MAX, depth: PRINTED_DEPTH_MAX };
}

/// A parsed expression. Trees returned by [`parse`] are canonical (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Expr {
    /// `true` or `false`. The empty expression parses to `Bool(true)`: any engine.
    Bool(bool),
    /// A custom property standing alone as a condition, e.g. `has_gpu`.
    Flag(Prop),
    /// `prop op value`; a built-in property's kind matches the value's.
    Compare {
        prop: Prop,
        op: CmpOp,
        value: Value,
    },
    /// `prop in [values]`.
    In {
        prop: Prop,
        values: ValueList,
    },
    Not(Box<Expr>),
    /// At least two children, none of them an `And`.
    And(Vec<Expr>),
    /// At least two children, none of them an `Or`.
    Or(Vec<Expr>),
}

/// A property of an engine that an expression can read.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Prop {
    Os,
    Arch,
    Site,
    Cores,
    MemoryMb,
    DiskMb,
    Mflops,
    /// The slots the engine declared at login, passed to [`Expr::eval`].
    Slots,
    /// Any other name, looked up in [`EngineProps::custom`]. Never a built-in name or a keyword.
    Custom(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// A value written in an expression.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Value {
    Int(i64),
    Str(String),
}

/// The values of an `in` list: never empty, all of one kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ValueList {
    Ints(Vec<i64>),
    Strs(Vec<String>),
}

/// Why an expression was refused, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at byte {position}: {message}")]
pub struct ExprError {
    /// Byte offset into the source; the source's length when the error is at its end.
    pub position: usize,
    pub message: String,
}

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

impl Expr {
    /// Nodes as counted against [`NODES_MAX`]: every `Expr` node and every list value.
    pub fn node_count(&self) -> usize {
        match self {
            Expr::Bool(_) | Expr::Flag(_) | Expr::Compare { .. } => 1,
            Expr::In {
                values: ValueList::Ints(values),
                ..
            } => 1 + values.len(),
            Expr::In {
                values: ValueList::Strs(values),
                ..
            } => 1 + values.len(),
            Expr::Not(inner) => 1 + inner.node_count(),
            Expr::And(children) | Expr::Or(children) => {
                1 + children.iter().map(Expr::node_count).sum::<usize>()
            }
        }
    }

    /// Whether this tree has the shape [`parse`] guarantees (module doc, "Canonical form").
    fn is_canonical(&self) -> bool {
        match self {
            Expr::Bool(_) => true,
            Expr::Flag(prop) => prop.kind().is_none(),
            Expr::Compare { prop, value, .. } => prop.accepts(value.kind()),
            Expr::In { prop, values } => {
                let (kind, len) = match values {
                    ValueList::Ints(values) => (Kind::Int, values.len()),
                    ValueList::Strs(values) => (Kind::Text, values.len()),
                };
                len > 0 && prop.accepts(kind)
            }
            Expr::Not(inner) => inner.is_canonical(),
            Expr::And(children) => {
                children.len() >= 2
                    && children
                        .iter()
                        .all(|c| !matches!(c, Expr::And(_)) && c.is_canonical())
            }
            Expr::Or(children) => {
                children.len() >= 2
                    && children
                        .iter()
                        .all(|c| !matches!(c, Expr::Or(_)) && c.is_canonical())
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Int,
    Text,
}

impl Prop {
    /// The property a name denotes: a built-in, or else a custom property.
    /// Callers building an `Expr` by hand must not pass a keyword.
    pub fn from_name(name: &str) -> Prop {
        match name {
            "os" => Prop::Os,
            "arch" => Prop::Arch,
            "site" => Prop::Site,
            "cores" => Prop::Cores,
            "memory_mb" => Prop::MemoryMb,
            "disk_mb" => Prop::DiskMb,
            "mflops" => Prop::Mflops,
            "slots" => Prop::Slots,
            _ => Prop::Custom(name.to_owned()),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Prop::Os => "os",
            Prop::Arch => "arch",
            Prop::Site => "site",
            Prop::Cores => "cores",
            Prop::MemoryMb => "memory_mb",
            Prop::DiskMb => "disk_mb",
            Prop::Mflops => "mflops",
            Prop::Slots => "slots",
            Prop::Custom(name) => name,
        }
    }

    /// The kind of a built-in; `None` for a custom property, which takes the kind of its value.
    fn kind(&self) -> Option<Kind> {
        match self {
            Prop::Os | Prop::Arch | Prop::Site => Some(Kind::Text),
            Prop::Cores | Prop::MemoryMb | Prop::DiskMb | Prop::Mflops | Prop::Slots => {
                Some(Kind::Int)
            }
            Prop::Custom(_) => None,
        }
    }

    fn accepts(&self, kind: Kind) -> bool {
        self.kind().is_none_or(|own| own == kind)
    }

    /// Why this property cannot be compared with a value of `kind`, if it cannot.
    fn mismatch(&self, kind: Kind) -> Option<String> {
        if self.accepts(kind) {
            return None;
        }
        let name = self.name();
        Some(match kind {
            Kind::Int => {
                format!("`{name}` is text; compare it with a \"quoted string\", not a number")
            }
            Kind::Text => format!("`{name}` is a number; compare it with a number, not a string"),
        })
    }
}

impl CmpOp {
    pub fn as_str(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }

    /// The operator that says the same with its operands swapped: `a < b` is `b > a`.
    pub fn mirrored(self) -> CmpOp {
        match self {
            CmpOp::Eq | CmpOp::Ne => self,
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::Le => CmpOp::Ge,
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::Ge => CmpOp::Le,
        }
    }
}

impl Value {
    fn kind(&self) -> Kind {
        match self {
            Value::Int(_) => Kind::Int,
            Value::Str(_) => Kind::Text,
        }
    }
}

impl ExprError {
    fn new(position: usize, message: impl Into<String>) -> Self {
        ExprError {
            position,
            message: message.into(),
        }
    }

    /// The error with the line of `source` it is on and a caret under its
    /// position, for the command line:
    ///
    /// ```text
    /// at byte 12: `os` is text; compare it with a "quoted string", not a number
    ///   os == 3 && os > 3
    ///                   ^
    /// ```
    ///
    /// A source of several lines also gets the line and column (in characters).
    pub fn render(&self, source: &str) -> String {
        let mut at = self.position.min(source.len());
        while !source.is_char_boundary(at) {
            at -= 1;
        }
        let line_start = source[..at].rfind('\n').map_or(0, |newline| newline + 1);
        let line_end = source[at..]
            .find('\n')
            .map_or(source.len(), |newline| at + newline);
        let line = source[line_start..line_end].trim_end_matches('\r');
        let header = if source.contains('\n') {
            let line_no = source[..line_start].matches('\n').count() + 1;
            let column = source[line_start..at].chars().count() + 1;
            format!(
                "at byte {} (line {line_no}, column {column}): {}",
                self.position, self.message
            )
        } else {
            self.to_string()
        };
        let pad: String = source[line_start..at]
            .chars()
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        format!("{header}\n  {line}\n  {pad}^")
    }
}
