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

use std::cmp::Ordering;
use std::fmt;

use super::event::EngineProps;

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

fn parse_within(source: &str, limits: Limits) -> Result<Expr, ExprError> {
    if source.len() > limits.bytes {
        return Err(ExprError::new(
            limits.bytes,
            format!(
                "the expression is {} bytes long; at most {} are allowed",
                source.len(),
                limits.bytes
            ),
        ));
    }
    let mut parser = Parser::new(source, limits.depth)?;
    let expr = if parser.peeked.tok == Tok::Eof {
        parser.add_node(0)?;
        Expr::Bool(true)
    } else {
        let expr = parser.parse_or()?;
        if parser.peeked.tok != Tok::Eof {
            return Err(parser.unexpected("`&&`, `||` or the end of the expression"));
        }
        expr
    };
    assert_eq!(parser.depth, 0);
    assert!(expr.node_count() <= parser.nodes && parser.nodes <= NODES_MAX);
    debug_assert!(
        expr.is_canonical(),
        "parse produced a non-canonical tree: {expr:?}"
    );
    Ok(expr)
}

impl std::str::FromStr for Expr {
    type Err = ExprError;
    fn from_str(source: &str) -> Result<Self, ExprError> {
        parse(source)
    }
}

impl Expr {
    /// Whether the expression holds for an engine with these properties and
    /// `slots` slots (as declared at login). Allocates nothing.
    pub fn eval(&self, props: &EngineProps, slots: u32) -> bool {
        match self {
            Expr::Bool(value) => *value,
            Expr::Flag(prop) => flag_holds(prop, props, slots),
            Expr::Compare {
                prop,
                op,
                value: Value::Int(value),
            } => int_of(prop, props, slots)
                .is_some_and(|have| op.holds(have.cmp(&i128::from(*value)))),
            Expr::Compare {
                prop,
                op,
                value: Value::Str(value),
            } => str_of(prop, props).is_some_and(|have| op.holds(have.cmp(value.as_str()))),
            Expr::In {
                prop,
                values: ValueList::Ints(values),
            } => int_of(prop, props, slots)
                .is_some_and(|have| values.iter().any(|value| have == i128::from(*value))),
            Expr::In {
                prop,
                values: ValueList::Strs(values),
            } => str_of(prop, props).is_some_and(|have| values.iter().any(|value| value == have)),
            Expr::Not(inner) => !inner.eval(props, slots),
            Expr::And(children) => children.iter().all(|child| child.eval(props, slots)),
            Expr::Or(children) => children.iter().any(|child| child.eval(props, slots)),
        }
    }

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

fn int_of(prop: &Prop, props: &EngineProps, slots: u32) -> Option<i128> {
    match prop {
        Prop::Cores => Some(props.cores.into()),
        Prop::MemoryMb => Some(props.memory_mb.into()),
        Prop::DiskMb => Some(props.disk_mb.into()),
        Prop::Mflops => Some(props.mflops.into()),
        Prop::Slots => Some(slots.into()),
        Prop::Custom(name) => props
            .custom
            .get(name.as_str())?
            .parse::<i64>()
            .ok()
            .map(i128::from),
        Prop::Os | Prop::Arch | Prop::Site => None,
    }
}

fn str_of<'p>(prop: &Prop, props: &'p EngineProps) -> Option<&'p str> {
    match prop {
        Prop::Os => Some(&props.os),
        Prop::Arch => Some(&props.arch),
        Prop::Site => Some(&props.site),
        Prop::Custom(name) => props.custom.get(name.as_str()).map(String::as_str),
        Prop::Cores | Prop::MemoryMb | Prop::DiskMb | Prop::Mflops | Prop::Slots => None,
    }
}

/// Truthiness of a flag. `parse` only makes flags of custom properties; a
/// hand-built flag on a built-in number holds when it is not zero, on built-in
/// text by the same rule as a custom value.
fn flag_holds(prop: &Prop, props: &EngineProps, slots: u32) -> bool {
    if prop.kind() == Some(Kind::Int) {
        return int_of(prop, props, slots).is_some_and(|number| number != 0);
    }
    str_of(prop, props).is_some_and(|value| {
        !(value.is_empty()
            || value == "0"
            || value.eq_ignore_ascii_case("false")
            || value.eq_ignore_ascii_case("no"))
    })
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

    /// Whether `have <op> wanted` holds, given `have.cmp(wanted)`.
    fn holds(self, ordering: Ordering) -> bool {
        match self {
            CmpOp::Eq => ordering.is_eq(),
            CmpOp::Ne => ordering.is_ne(),
            CmpOp::Lt => ordering.is_lt(),
            CmpOp::Le => ordering.is_le(),
            CmpOp::Gt => ordering.is_gt(),
            CmpOp::Ge => ordering.is_ge(),
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

// ---------------------------------------------------------------------------
// Display: the canonical form.

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Bool(value) => write!(f, "{value}"),
            Expr::Flag(prop) => write!(f, "{prop}"),
            Expr::Compare { prop, op, value } => write!(f, "{prop} {} {value}", op.as_str()),
            Expr::In { prop, values } => {
                write!(f, "{prop} in [")?;
                match values {
                    ValueList::Ints(values) => write_list(f, values.iter().map(|v| Value::Int(*v))),
                    ValueList::Strs(values) => write_list(f, values.iter().map(|v| StrLit(v))),
                }?;
                f.write_str("]")
            }
            Expr::Not(inner) => match **inner {
                Expr::Bool(_) | Expr::Flag(_) | Expr::Not(_) => write!(f, "!{inner}"),
                _ => write!(f, "!({inner})"),
            },
            Expr::And(children) => {
                for (child_idx, child) in children.iter().enumerate() {
                    if child_idx > 0 {
                        f.write_str(" && ")?;
                    }
                    if matches!(child, Expr::Or(_)) {
                        write!(f, "({child})")?;
                    } else {
                        write!(f, "{child}")?;
                    }
                }
                Ok(())
            }
            Expr::Or(children) => {
                for (child_idx, child) in children.iter().enumerate() {
                    if child_idx > 0 {
                        f.write_str(" || ")?;
                    }
                    write!(f, "{child}")?;
                }
                Ok(())
            }
        }
    }
}

fn write_list<T: fmt::Display>(
    f: &mut fmt::Formatter<'_>,
    values: impl Iterator<Item = T>,
) -> fmt::Result {
    for (value_idx, value) in values.enumerate() {
        if value_idx > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{value}")?;
    }
    Ok(())
}

impl fmt::Display for Prop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for CmpOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Int(value) => write!(f, "{value}"),
            Value::Str(value) => write!(f, "{}", StrLit(value)),
        }
    }
}

/// A string written as a literal: quoted, with `"` and `\` escaped.
struct StrLit<'a>(&'a str);

impl fmt::Display for StrLit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"")?;
        for c in self.0.chars() {
            match c {
                '"' => f.write_str("\\\"")?,
                '\\' => f.write_str("\\\\")?,
                _ => write!(f, "{c}")?,
            }
        }
        f.write_str("\"")
    }
}

// ---------------------------------------------------------------------------
// Errors.

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

// ---------------------------------------------------------------------------
// Lexer.

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident,
    Int(i64),
    Str(String),
    True,
    False,
    And,
    Or,
    Not,
    In,
    Cmp(CmpOp),
    LParen,
    RParen,
    LBracket,
    RBracket,
    Comma,
    Eof,
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    start: usize,
    end: usize,
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_ident_continue(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')
}

struct Lexer<'s> {
    source: &'s str,
    pos: usize,
}

impl<'s> Lexer<'s> {
    fn byte(&self, at: usize) -> Option<u8> {
        self.source.as_bytes().get(at).copied()
    }

    fn char_at(&self, at: usize) -> char {
        self.source[at..]
            .chars()
            .next()
            .expect("a position inside the source")
    }

    fn next_token(&mut self) -> Result<Token, ExprError> {
        while let Some(c) = self.source[self.pos..].chars().next()
            && c.is_whitespace()
        {
            self.pos += c.len_utf8();
        }
        let start = self.pos;
        let Some(b) = self.byte(start) else {
            return Ok(Token {
                tok: Tok::Eof,
                start,
                end: start,
            });
        };
        let next = self.byte(start + 1);
        let (tok, len) = match b {
            b'(' => (Tok::LParen, 1),
            b')' => (Tok::RParen, 1),
            b'[' => (Tok::LBracket, 1),
            b']' => (Tok::RBracket, 1),
            b',' => (Tok::Comma, 1),
            b'=' if next == Some(b'=') => (Tok::Cmp(CmpOp::Eq), 2),
            b'=' => {
                return Err(ExprError::new(
                    start,
                    "`=` alone is not an operator; compare with `==`",
                ));
            }
            b'!' if next == Some(b'=') => (Tok::Cmp(CmpOp::Ne), 2),
            b'!' => (Tok::Not, 1),
            b'<' if next == Some(b'=') => (Tok::Cmp(CmpOp::Le), 2),
            b'<' => (Tok::Cmp(CmpOp::Lt), 1),
            b'>' if next == Some(b'=') => (Tok::Cmp(CmpOp::Ge), 2),
            b'>' => (Tok::Cmp(CmpOp::Gt), 1),
            b'&' if next == Some(b'&') => (Tok::And, 2),
            b'&' => {
                return Err(ExprError::new(
                    start,
                    "`&` alone is not an operator; write `&&`",
                ));
            }
            b'|' if next == Some(b'|') => (Tok::Or, 2),
            b'|' => {
                return Err(ExprError::new(
                    start,
                    "`|` alone is not an operator; write `||`",
                ));
            }
            b'"' => return self.string(start),
            b'0'..=b'9' => return self.integer(start, start),
            b'-' if next.is_some_and(|n| n.is_ascii_digit()) => {
                return self.integer(start, start + 1);
            }
            b'-' => {
                return Err(ExprError::new(
                    start,
                    "unexpected `-`: there is no arithmetic (a negative number is written `-5`)",
                ));
            }
            _ if is_ident_start(b) => return Ok(self.ident(start)),
            _ => {
                let c = self.char_at(start);
                return Err(ExprError::new(start, format!("unexpected character {c:?}")));
            }
        };
        self.pos = start + len;
        Ok(Token {
            tok,
            start,
            end: self.pos,
        })
    }

    fn ident(&mut self, start: usize) -> Token {
        let mut end = start + 1;
        while self.byte(end).is_some_and(is_ident_continue) {
            end += 1;
        }
        self.pos = end;
        let tok = match &self.source[start..end] {
            "and" => Tok::And,
            "or" => Tok::Or,
            "not" => Tok::Not,
            "in" => Tok::In,
            "true" => Tok::True,
            "false" => Tok::False,
            _ => Tok::Ident,
        };
        Token { tok, start, end }
    }

    /// An integer starting at `start` (its `-`, if negative) whose digits start at `digits`.
    fn integer(&mut self, start: usize, digits: usize) -> Result<Token, ExprError> {
        let mut end = digits;
        let mut magnitude: Option<u64> = Some(0);
        while let Some(b) = self.byte(end)
            && (b.is_ascii_digit() || b == b'_')
        {
            if b != b'_' {
                magnitude = magnitude
                    .and_then(|m| m.checked_mul(10))
                    .and_then(|m| m.checked_add(u64::from(b - b'0')));
            }
            end += 1;
        }
        if let Some(b) = self.byte(end)
            && (is_ident_continue(b) || !b.is_ascii())
        {
            let c = self.char_at(end);
            return Err(ExprError::new(
                end,
                format!(
                    "unexpected {c:?} right after a number: numbers are whole and take no unit (memory is in MB)"
                ),
            ));
        }
        let negative = digits > start;
        let value = magnitude
            .map(i128::from)
            .map(|m| if negative { -m } else { m });
        let Some(value) = value.and_then(|v| i64::try_from(v).ok()) else {
            return Err(ExprError::new(
                start,
                format!(
                    "number out of range: numbers lie between {} and {}",
                    i64::MIN,
                    i64::MAX
                ),
            ));
        };
        self.pos = end;
        Ok(Token {
            tok: Tok::Int(value),
            start,
            end,
        })
    }

    fn string(&mut self, start: usize) -> Result<Token, ExprError> {
        let mut text = String::new();
        let mut chars = self.source[start + 1..]
            .char_indices()
            .map(|(i, c)| (start + 1 + i, c));
        while let Some((at, c)) = chars.next() {
            match c {
                '"' => {
                    self.pos = at + 1;
                    return Ok(Token {
                        tok: Tok::Str(text),
                        start,
                        end: self.pos,
                    });
                }
                '\\' => match chars.next() {
                    Some((_, escaped @ ('"' | '\\'))) => text.push(escaped),
                    Some((_, other)) => {
                        return Err(ExprError::new(
                            at,
                            format!(
                                "unknown escape `\\{}` in a string: only `\\\"` and `\\\\` are allowed",
                                other.escape_debug()
                            ),
                        ));
                    }
                    None => break,
                },
                '\n' | '\r' => {
                    return Err(ExprError::new(
                        at,
                        "line break inside a string (is its closing `\"` missing?)",
                    ));
                }
                _ if c.is_control() => {
                    return Err(ExprError::new(
                        at,
                        format!(
                            "control character {c:?} inside a string; strings hold printable text only"
                        ),
                    ));
                }
                _ => text.push(c),
            }
        }
        Err(ExprError::new(
            start,
            "unterminated string: no closing `\"`",
        ))
    }
}

// ---------------------------------------------------------------------------
// Parser: recursive descent with one token of lookahead. Recursion happens
// only at `(` and `!`, both counted against DEPTH_MAX; `&&`/`||` chains loop.

struct Parser<'s> {
    lexer: Lexer<'s>,
    peeked: Token,
    depth: usize,
    depth_max: usize,
    nodes: usize,
}

impl<'s> Parser<'s> {
    fn new(source: &'s str, depth_max: usize) -> Result<Self, ExprError> {
        let mut lexer = Lexer { source, pos: 0 };
        let peeked = lexer.next_token()?;
        Ok(Parser {
            lexer,
            peeked,
            depth: 0,
            depth_max,
            nodes: 0,
        })
    }

    fn bump(&mut self) -> Result<Token, ExprError> {
        let next = self.lexer.next_token()?;
        Ok(std::mem::replace(&mut self.peeked, next))
    }

    fn text(&self, token: &Token) -> &'s str {
        &self.lexer.source[token.start..token.end]
    }

    /// How the next token is named in a message.
    fn describe_peeked(&self) -> String {
        if self.peeked.tok == Tok::Eof {
            return "the end of the expression".to_owned();
        }
        let text = self.text(&self.peeked);
        if text.chars().count() > 24 {
            let head: String = text.chars().take(20).collect();
            format!("`{head}…`")
        } else {
            format!("`{text}`")
        }
    }

    fn unexpected(&self, expected: &str) -> ExprError {
        ExprError::new(
            self.peeked.start,
            format!("expected {expected}, found {}", self.describe_peeked()),
        )
    }

    fn add_node(&mut self, at: usize) -> Result<(), ExprError> {
        self.nodes += 1;
        if self.nodes > NODES_MAX {
            return Err(ExprError::new(
                at,
                format!(
                    "too many terms: an expression holds at most {NODES_MAX} (conditions, operators and list values)"
                ),
            ));
        }
        Ok(())
    }

    fn enter(&mut self, at: usize) -> Result<(), ExprError> {
        self.depth += 1;
        if self.depth > self.depth_max {
            return Err(ExprError::new(
                at,
                format!("nested too deeply: at most {} levels of `(` and `!`", self.depth_max),
            ));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    fn parse_or(&mut self) -> Result<Expr, ExprError> {
        let start = self.peeked.start;
        let first = self.parse_and()?;
        if self.peeked.tok != Tok::Or {
            return Ok(first);
        }
        self.add_node(start)?;
        let mut children = Vec::new();
        push_flattened(&mut children, first, |e| matches!(e, Expr::Or(_)));
        while self.peeked.tok == Tok::Or {
            self.bump()?;
            let next = self.parse_and()?;
            push_flattened(&mut children, next, |e| matches!(e, Expr::Or(_)));
        }
        Ok(Expr::Or(children))
    }

    fn parse_and(&mut self) -> Result<Expr, ExprError> {
        let start = self.peeked.start;
        let first = self.parse_unary()?;
        if self.peeked.tok != Tok::And {
            return Ok(first);
        }
        self.add_node(start)?;
        let mut children = Vec::new();
        push_flattened(&mut children, first, |e| matches!(e, Expr::And(_)));
        while self.peeked.tok == Tok::And {
            self.bump()?;
            let next = self.parse_unary()?;
            push_flattened(&mut children, next, |e| matches!(e, Expr::And(_)));
        }
        Ok(Expr::And(children))
    }

    fn parse_unary(&mut self) -> Result<Expr, ExprError> {
        if self.peeked.tok != Tok::Not {
            return self.parse_primary();
        }
        let not = self.bump()?;
        self.enter(not.start)?;
        self.add_node(not.start)?;
        let inner = self.parse_unary()?;
        self.leave();
        Ok(Expr::Not(Box::new(inner)))
    }

    fn parse_primary(&mut self) -> Result<Expr, ExprError> {
        match self.peeked.tok {
            Tok::LParen => {
                let open = self.bump()?;
                self.enter(open.start)?;
                let inner = self.parse_or()?;
                if self.peeked.tok != Tok::RParen {
                    let expected =
                        format!("`&&`, `||` or `)` to close the `(` at byte {}", open.start);
                    return Err(self.unexpected(&expected));
                }
                self.bump()?;
                self.leave();
                Ok(inner)
            }
            Tok::True | Tok::False => {
                let token = self.bump()?;
                self.add_node(token.start)?;
                self.refuse_comparison_of_condition(&token)?;
                Ok(Expr::Bool(token.tok == Tok::True))
            }
            Tok::Ident => self.parse_property_condition(),
            Tok::Int(_) | Tok::Str(_) => self.parse_reversed_comparison(),
            _ => Err(self.unexpected("a condition (a property, a comparison, `!` or `(`)")),
        }
    }

    /// After `true`, `false` or a complete comparison: a comparison operator
    /// here would compare a condition, which the language does not do.
    fn refuse_comparison_of_condition(&self, token: &Token) -> Result<(), ExprError> {
        let Tok::Cmp(op) = self.peeked.tok else {
            return Ok(());
        };
        let message = match token.tok {
            Tok::True | Tok::False => format!(
                "`{}` is a condition, not a value, and cannot be compared with `{op}`",
                self.text(token)
            ),
            _ => format!(
                "comparisons do not chain: join them with `&&`, e.g. `a > 1 && a < 5` (found `{op}`)"
            ),
        };
        Err(ExprError::new(self.peeked.start, message))
    }

    /// `prop`, `prop op value`, `prop in [..]` or `prop not in [..]`.
    fn parse_property_condition(&mut self) -> Result<Expr, ExprError> {
        let name_token = self.bump()?;
        let prop = Prop::from_name(self.text(&name_token));
        self.add_node(name_token.start)?;
        match self.peeked.tok {
            Tok::Cmp(op) => {
                self.bump()?;
                let value_at = self.peeked.start;
                let value = self.parse_value(&format!("after `{op}`"))?;
                if let Some(message) = prop.mismatch(value.kind()) {
                    return Err(ExprError::new(value_at, message));
                }
                self.refuse_comparison_of_condition(&name_token)?;
                Ok(Expr::Compare { prop, op, value })
            }
            Tok::In => {
                self.bump()?;
                self.parse_list(prop)
            }
            Tok::Not => {
                let not = self.bump()?;
                if self.peeked.tok != Tok::In {
                    return Err(self.unexpected(&format!("`in` after `{} not`", prop)));
                }
                self.bump()?;
                self.add_node(not.start)?;
                Ok(Expr::Not(Box::new(self.parse_list(prop)?)))
            }
            _ => match prop.kind() {
                None => Ok(Expr::Flag(prop)),
                Some(kind) => {
                    let example = match kind {
                        Kind::Int => format!("`{prop} >= 1`"),
                        Kind::Text => format!("`{prop} == \"...\"`"),
                    };
                    let what = match kind {
                        Kind::Int => "a number",
                        Kind::Text => "text",
                    };
                    Err(ExprError::new(
                        name_token.start,
                        format!(
                            "`{prop}` is {what} and cannot stand alone as a condition; compare it, e.g. {example}"
                        ),
                    ))
                }
            },
        }
    }

    /// `value op prop`, turned around into `prop op' value`.
    fn parse_reversed_comparison(&mut self) -> Result<Expr, ExprError> {
        let value_token = self.peeked.start;
        let value = self.parse_value("")?;
        self.add_node(value_token)?;
        let Tok::Cmp(op) = self.peeked.tok else {
            return Err(self.unexpected(
                "a comparison operator after a value (a value alone is not a condition)",
            ));
        };
        self.bump()?;
        let name_token = self.peeked.clone();
        match name_token.tok {
            Tok::Ident => {}
            Tok::Int(_) | Tok::Str(_) => {
                return Err(ExprError::new(
                    name_token.start,
                    "a comparison needs a property on one side; both sides here are values",
                ));
            }
            _ => return Err(self.unexpected(&format!("a property after `{op}`"))),
        }
        self.bump()?;
        let prop = Prop::from_name(self.text(&name_token));
        if let Some(message) = prop.mismatch(value.kind()) {
            return Err(ExprError::new(name_token.start, message));
        }
        self.refuse_comparison_of_condition(&name_token)?;
        Ok(Expr::Compare {
            prop,
            op: op.mirrored(),
            value,
        })
    }

    /// A number or a string; `context` completes "expected a value ...".
    fn parse_value(&mut self, context: &str) -> Result<Value, ExprError> {
        match &self.peeked.tok {
            Tok::Int(value) => {
                let value = *value;
                self.bump()?;
                Ok(Value::Int(value))
            }
            Tok::Str(_) => {
                let Tok::Str(text) = self.bump()?.tok else {
                    unreachable!("peeked a string")
                };
                Ok(Value::Str(text))
            }
            Tok::Ident => {
                let name = self.text(&self.peeked);
                Err(ExprError::new(
                    self.peeked.start,
                    format!(
                        "`{name}` is a property; a comparison needs a value on one side: a number or a \"quoted string\" (did you mean \"{name}\"?)"
                    ),
                ))
            }
            Tok::True | Tok::False => {
                let word = self.text(&self.peeked);
                Err(ExprError::new(
                    self.peeked.start,
                    format!(
                        "`{word}` is a condition, not a value: test a property with `name` or `!name`"
                    ),
                ))
            }
            _ => {
                let space = if context.is_empty() { "" } else { " " };
                Err(self.unexpected(&format!(
                    "a value (a number or a \"quoted string\"){space}{context}"
                )))
            }
        }
    }

    /// `[v1, v2, ...]` after `prop in`.
    fn parse_list(&mut self, prop: Prop) -> Result<Expr, ExprError> {
        if self.peeked.tok != Tok::LBracket {
            return Err(self.unexpected("`[` to open the list after `in`"));
        }
        let open = self.bump()?;
        if self.peeked.tok == Tok::RBracket {
            return Err(ExprError::new(
                open.start,
                "an empty list matches nothing; give at least one value",
            ));
        }
        let mut ints = Vec::new();
        let mut strs = Vec::new();
        let mut kind = None;
        loop {
            let value_at = self.peeked.start;
            let value = self.parse_value("in the list")?;
            self.add_node(value_at)?;
            let list_kind = *kind.get_or_insert(value.kind());
            if let Some(message) = prop.mismatch(value.kind()) {
                return Err(ExprError::new(value_at, message));
            }
            match value {
                Value::Int(value) if list_kind == Kind::Int => ints.push(value),
                Value::Str(value) if list_kind == Kind::Text => strs.push(value),
                _ => {
                    return Err(ExprError::new(
                        value_at,
                        "a list holds values of one kind: all numbers or all strings",
                    ));
                }
            }
            match self.peeked.tok {
                Tok::Comma => {
                    self.bump()?;
                    if self.peeked.tok == Tok::RBracket {
                        self.bump()?;
                        break;
                    }
                }
                Tok::RBracket => {
                    self.bump()?;
                    break;
                }
                _ => {
                    let expected =
                        format!("`,` or `]` to close the list opened at byte {}", open.start);
                    return Err(self.unexpected(&expected));
                }
            }
        }
        let values = match kind {
            Some(Kind::Int) => ValueList::Ints(ints),
            Some(Kind::Text) => ValueList::Strs(strs),
            None => unreachable!("the loop reads at least one value"),
        };
        Ok(Expr::In { prop, values })
    }
}

/// Pushes `child` onto an `And`/`Or` being built, splicing in its children if it
/// is the same operator (`(a && b) && c` is `a && b && c`).
fn push_flattened(children: &mut Vec<Expr>, child: Expr, same_operator: fn(&Expr) -> bool) {
    if same_operator(&child) {
        match child {
            Expr::And(inner) | Expr::Or(inner) => children.extend(inner),
            _ => unreachable!("same_operator matches only And or Or"),
        }
    } else {
        children.push(child);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use expect_test::{Expect, expect};
    use proptest::prelude::*;

    use super::*;

    /// Parses `source` and shows the canonical form (checking that it re-parses
    /// to the same tree), or the rendered error.
    fn check(source: &str, expect: Expect) {
        let actual = match parse(source) {
            Ok(expr) => {
                let shown = expr.to_string();
                assert_eq!(
                    parse(&shown),
                    Ok(expr),
                    "the canonical form {shown:?} must re-parse"
                );
                shown
            }
            Err(error) => {
                assert!(error.position <= source.len());
                error.render(source)
            }
        };
        expect.assert_eq(&actual);
    }

    fn engine(
        os: &str,
        arch: &str,
        cores: u32,
        memory_mb: u64,
        site: &str,
        custom: &[(&str, &str)],
    ) -> EngineProps {
        EngineProps {
            os: os.to_owned(),
            arch: arch.to_owned(),
            cores,
            memory_mb,
            disk_mb: memory_mb * 8,
            mflops: u64::from(cores) * 2_000,
            site: site.to_owned(),
            custom: custom
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            libraries: Vec::new(),
        }
    }

    /// The sample grid: name, properties, slots.
    fn sample_engines() -> Vec<(&'static str, EngineProps, u32)> {
        vec![
            (
                "lyon-gpu",
                engine(
                    "linux",
                    "x86_64",
                    32,
                    131_072,
                    "lyon",
                    &[("has_gpu", "yes"), ("gpus", "4"), ("gpu_model", "a100")],
                ),
                8,
            ),
            (
                "lyon-cpu",
                engine(
                    "linux",
                    "x86_64",
                    16,
                    65_536,
                    "lyon",
                    &[("has_gpu", "no"), ("rack", "b12")],
                ),
                16,
            ),
            (
                "grenoble-arm",
                engine(
                    "linux",
                    "aarch64",
                    64,
                    262_144,
                    "grenoble",
                    &[("has_gpu", "FALSE"), ("gpus", "many")],
                ),
                64,
            ),
            (
                "paris-mac",
                engine("macos", "arm64", 8, 16_384, "paris", &[]),
                2,
            ),
            (
                "laptop",
                engine(
                    "windows",
                    "x86_64",
                    4,
                    8_192,
                    "",
                    &[("has_gpu", "1"), ("gpus", "0")],
                ),
                1,
            ),
        ]
    }

    /// Evaluates `source` on the sample grid and lists the engines it matches and rejects.
    fn check_eval(source: &str, expect: Expect) {
        let expr = parse(source).unwrap_or_else(|error| panic!("{}", error.render(source)));
        let engines = sample_engines();
        let (matched, rejected): (Vec<_>, Vec<_>) = engines
            .iter()
            .partition(|(_, props, slots)| expr.eval(props, *slots));
        let names = |list: &[&(&str, EngineProps, u32)]| {
            if list.is_empty() {
                "-".to_owned()
            } else {
                list.iter()
                    .map(|(name, _, _)| *name)
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        expect.assert_eq(&format!(
            "match:  {}\nreject: {}",
            names(&matched),
            names(&rejected)
        ));
    }

    #[test]
    fn parse_canonical_forms() {
        check("", expect!["true"]);
        check("  \n\t ", expect!["true"]);
        check(r#"os == "linux""#, expect![[r#"os == "linux""#]]);
        check(
            r#"os == "linux" && memory_mb >= 4096 && (site == "lyon" || has_gpu)"#,
            expect![[r#"os == "linux" && memory_mb >= 4096 && (site == "lyon" || has_gpu)"#]],
        );
        check(
            r#"os=="linux"&&memory_mb>=4_096"#,
            expect![[r#"os == "linux" && memory_mb >= 4096"#]],
        );
        check("(a && b) && (c && d)", expect!["a && b && c && d"]);
        check("a || (b || c) || d", expect!["a || b || c || d"]);
        check("a || b && c", expect!["a || b && c"]);
        check("(a || b) && c", expect!["(a || b) && c"]);
        check("((((has_gpu))))", expect!["has_gpu"]);
        check(
            "!has_gpu && !!x && !(gpus > 0) && !(a || b)",
            expect!["!has_gpu && !!x && !(gpus > 0) && !(a || b)"],
        );
        check("not has_gpu and x or y", expect!["!has_gpu && x || y"]);
        check(
            "4096 <= memory_mb && 8 > cores && \"lyon\" != site",
            expect![[r#"memory_mb >= 4096 && cores < 8 && site != "lyon""#]],
        );
        check(
            "gpus >= -1 && offset > -9223372036854775808",
            expect!["gpus >= -1 && offset > -9223372036854775808"],
        );
        check(
            r#"site in ["lyon", "grenoble",] && gpus in [1, 2]"#,
            expect![[r#"site in ["lyon", "grenoble"] && gpus in [1, 2]"#]],
        );
        check(r#"rack not in ["b12"]"#, expect![[r#"!(rack in ["b12"])"#]]);
        check(
            r#"label == "say \"hi\" \\ bye" && city == "Lyon-Saint-Exupéry""#,
            expect![[r#"label == "say \"hi\" \\ bye" && city == "Lyon-Saint-Exupéry""#]],
        );
        check("true && false || true", expect!["true && false || true"]);
        check(
            "node.role-x == \"compute\" && _private",
            expect![[r#"node.role-x == "compute" && _private"#]],
        );
    }

    #[test]
    fn parse_errors_say_where_and_what() {
        check(
            r#"os == "linux" && (site == "lyon""#,
            expect![[r#"
            at byte 32: expected `&&`, `||` or `)` to close the `(` at byte 17, found the end of the expression
              os == "linux" && (site == "lyon"
                                              ^"#]],
        );
        check(
            r#"os == "linux" site == "lyon""#,
            expect![[r#"
            at byte 14: expected `&&`, `||` or the end of the expression, found `site`
              os == "linux" site == "lyon"
                            ^"#]],
        );
        check(
            "os == linux",
            expect![[r#"
            at byte 6: `linux` is a property; a comparison needs a value on one side: a number or a "quoted string" (did you mean "linux"?)
              os == linux
                    ^"#]],
        );
        check(
            "os > 3",
            expect![[r#"
            at byte 5: `os` is text; compare it with a "quoted string", not a number
              os > 3
                   ^"#]],
        );
        check(
            r#"cores == "x""#,
            expect![[r#"
            at byte 9: `cores` is a number; compare it with a number, not a string
              cores == "x"
                       ^"#]],
        );
        check(
            r#""4" < cores"#,
            expect![[r#"
            at byte 6: `cores` is a number; compare it with a number, not a string
              "4" < cores
                    ^"#]],
        );
        check(
            "cores",
            expect![[r#"
            at byte 0: `cores` is a number and cannot stand alone as a condition; compare it, e.g. `cores >= 1`
              cores
              ^"#]],
        );
        check(
            "os && has_gpu",
            expect![[r#"
            at byte 0: `os` is text and cannot stand alone as a condition; compare it, e.g. `os == "..."`
              os && has_gpu
              ^"#]],
        );
        check(
            "memory_mb >= 4g",
            expect![[r#"
            at byte 14: unexpected 'g' right after a number: numbers are whole and take no unit (memory is in MB)
              memory_mb >= 4g
                            ^"#]],
        );
        check(
            "memory_mb >= 1.5",
            expect![[r#"
            at byte 14: unexpected '.' right after a number: numbers are whole and take no unit (memory is in MB)
              memory_mb >= 1.5
                            ^"#]],
        );
        check(
            "os = \"linux\"",
            expect![[r#"
            at byte 3: `=` alone is not an operator; compare with `==`
              os = "linux"
                 ^"#]],
        );
        check(
            "a & b",
            expect![[r#"
            at byte 2: `&` alone is not an operator; write `&&`
              a & b
                ^"#]],
        );
        check(
            "a | b",
            expect![[r#"
            at byte 2: `|` alone is not an operator; write `||`
              a | b
                ^"#]],
        );
        check(
            "a &&",
            expect![[r#"
            at byte 4: expected a condition (a property, a comparison, `!` or `(`), found the end of the expression
              a &&
                  ^"#]],
        );
        check(
            "!",
            expect![[r#"
            at byte 1: expected a condition (a property, a comparison, `!` or `(`), found the end of the expression
              !
               ^"#]],
        );
        check(
            "()",
            expect![[r#"
            at byte 1: expected a condition (a property, a comparison, `!` or `(`), found `)`
              ()
               ^"#]],
        );
        check(
            "a)",
            expect![[r#"
            at byte 1: expected `&&`, `||` or the end of the expression, found `)`
              a)
               ^"#]],
        );
        check(
            "1 < cores < 8",
            expect![[r#"
            at byte 10: comparisons do not chain: join them with `&&`, e.g. `a > 1 && a < 5` (found `<`)
              1 < cores < 8
                        ^"#]],
        );
        check(
            "has_gpu == true",
            expect![[r#"
            at byte 11: `true` is a condition, not a value: test a property with `name` or `!name`
              has_gpu == true
                         ^"#]],
        );
        check(
            "true == has_gpu",
            expect![[r#"
            at byte 5: `true` is a condition, not a value, and cannot be compared with `==`
              true == has_gpu
                   ^"#]],
        );
        check(
            "4096",
            expect![[r#"
            at byte 4: expected a comparison operator after a value (a value alone is not a condition), found the end of the expression
              4096
                  ^"#]],
        );
        check(
            "1 == 1",
            expect![[r#"
            at byte 5: a comparison needs a property on one side; both sides here are values
              1 == 1
                   ^"#]],
        );
        check(
            "cores > 99999999999999999999",
            expect![[r#"
            at byte 8: number out of range: numbers lie between -9223372036854775808 and 9223372036854775807
              cores > 99999999999999999999
                      ^"#]],
        );
        check(
            "cores > - 1",
            expect![[r#"
            at byte 8: unexpected `-`: there is no arithmetic (a negative number is written `-5`)
              cores > - 1
                      ^"#]],
        );
        check(
            r#"os == "linux"#,
            expect![[r#"
            at byte 6: unterminated string: no closing `"`
              os == "linux
                    ^"#]],
        );
        check(
            r#"os == "a\nb""#,
            expect![[r#"
            at byte 8: unknown escape `\n` in a string: only `\"` and `\\` are allowed
              os == "a\nb"
                      ^"#]],
        );
        check(
            "os == \"a\tb\"",
            expect![[r#"
            at byte 8: control character '\t' inside a string; strings hold printable text only
              os == "a	b"
                      ^"#]],
        );
        check(
            "site € \"x\"",
            expect![[r#"
            at byte 5: unexpected character '€'
              site € "x"
                   ^"#]],
        );
        check(
            "site in []",
            expect![[r#"
            at byte 8: an empty list matches nothing; give at least one value
              site in []
                      ^"#]],
        );
        check(
            r#"site in ["a" "b"]"#,
            expect![[r#"
            at byte 13: expected `,` or `]` to close the list opened at byte 8, found `"b"`
              site in ["a" "b"]
                           ^"#]],
        );
        check(
            r#"gpus in [1, "two"]"#,
            expect![[r#"
            at byte 12: a list holds values of one kind: all numbers or all strings
              gpus in [1, "two"]
                          ^"#]],
        );
        check(
            "cores in [\"4\"]",
            expect![[r#"
            at byte 10: `cores` is a number; compare it with a number, not a string
              cores in ["4"]
                        ^"#]],
        );
        check(
            r#"site in "lyon""#,
            expect![[r#"
            at byte 8: expected `[` to open the list after `in`, found `"lyon"`
              site in "lyon"
                      ^"#]],
        );
        check(
            r#"rack not ["b12"]"#,
            expect![[r#"
            at byte 9: expected `in` after `rack not`, found `[`
              rack not ["b12"]
                       ^"#]],
        );
    }

    #[test]
    fn errors_render_on_their_own_line_of_a_multi_line_source() {
        check(
            "os == \"linux\" &&\n\tcores >= \"4\"",
            expect![[r#"
            at byte 27 (line 2, column 11): `cores` is a number; compare it with a number, not a string
              	cores >= "4"
              	         ^"#]],
        );
        check(
            "a &&\r\n(b ||",
            expect![[r#"
            at byte 11 (line 2, column 6): expected a condition (a property, a comparison, `!` or `(`), found the end of the expression
              (b ||
                   ^"#]],
        );
    }

    #[test]
    fn limits_are_errors_not_overflows() {
        let long = format!("x == \"{}\"", "y".repeat(SOURCE_BYTES_MAX));
        let error = parse(&long).unwrap_err();
        expect!["at byte 4096: the expression is 4103 bytes long; at most 4096 are allowed"]
            .assert_eq(&error.to_string());
        // A multi-byte character across the limit still renders.
        let long = format!("{}é", "a".repeat(SOURCE_BYTES_MAX - 1));
        assert!(parse(&long).unwrap_err().render(&long).ends_with('^'));

        let deep_parens = format!("{}a{}", "(".repeat(DEPTH_MAX), ")".repeat(DEPTH_MAX));
        assert_eq!(parse(&deep_parens), Ok(Expr::Flag(Prop::from_name("a"))));
        let too_deep_parens = format!(
            "{}a{}",
            "(".repeat(DEPTH_MAX + 1),
            ")".repeat(DEPTH_MAX + 1)
        );
        expect!["at byte 64: nested too deeply: at most 64 levels of `(` and `!`"]
            .assert_eq(&parse(&too_deep_parens).unwrap_err().to_string());
        let too_deep_nots = format!("{}a", "!".repeat(1000));
        expect!["at byte 64: nested too deeply: at most 64 levels of `(` and `!`"]
            .assert_eq(&parse(&too_deep_nots).unwrap_err().to_string());
        let stack_buster = "(".repeat(SOURCE_BYTES_MAX);
        expect!["at byte 64: nested too deeply: at most 64 levels of `(` and `!`"]
            .assert_eq(&parse(&stack_buster).unwrap_err().to_string());

        let widest = vec!["a"; NODES_MAX - 1].join(" || ");
        assert_eq!(parse(&widest).map(|e| e.node_count()), Ok(NODES_MAX));
        let too_wide = vec!["a"; NODES_MAX].join(" || ");
        expect!["at byte 1275: too many terms: an expression holds at most 256 (conditions, operators and list values)"].assert_eq(&parse(&too_wide).unwrap_err().to_string());
        let long_list = format!("gpus in [{}]", vec!["1"; NODES_MAX].join(", "));
        expect!["at byte 774: too many terms: an expression holds at most 256 (conditions, operators and list values)"].assert_eq(&parse(&long_list).unwrap_err().to_string());
    }

    #[test]
    fn eval_built_in_properties() {
        check_eval(
            "",
            expect![[r#"
            match:  lyon-gpu, lyon-cpu, grenoble-arm, paris-mac, laptop
            reject: -"#]],
        );
        check_eval(
            "false",
            expect![[r#"
            match:  -
            reject: lyon-gpu, lyon-cpu, grenoble-arm, paris-mac, laptop"#]],
        );
        check_eval(
            r#"os == "linux""#,
            expect![[r#"
            match:  lyon-gpu, lyon-cpu, grenoble-arm
            reject: paris-mac, laptop"#]],
        );
        check_eval(
            r#"os != "linux""#,
            expect![[r#"
            match:  paris-mac, laptop
            reject: lyon-gpu, lyon-cpu, grenoble-arm"#]],
        );
        check_eval(
            r#"os == "Linux""#,
            expect![[r#"
            match:  -
            reject: lyon-gpu, lyon-cpu, grenoble-arm, paris-mac, laptop"#]],
        );
        check_eval(
            "memory_mb >= 65536 && cores < 64",
            expect![[r#"
            match:  lyon-gpu, lyon-cpu
            reject: grenoble-arm, paris-mac, laptop"#]],
        );
        check_eval(
            "slots >= 8",
            expect![[r#"
            match:  lyon-gpu, lyon-cpu, grenoble-arm
            reject: paris-mac, laptop"#]],
        );
        check_eval(
            "mflops > 60000 || disk_mb <= 65536",
            expect![[r#"
            match:  lyon-gpu, grenoble-arm, laptop
            reject: lyon-cpu, paris-mac"#]],
        );
        check_eval(
            r#"site in ["lyon", "paris"]"#,
            expect![[r#"
            match:  lyon-gpu, lyon-cpu, paris-mac
            reject: grenoble-arm, laptop"#]],
        );
        check_eval(
            r#"site == """#,
            expect![[r#"
            match:  laptop
            reject: lyon-gpu, lyon-cpu, grenoble-arm, paris-mac"#]],
        );
        check_eval(
            r#"arch < "b""#,
            expect![[r#"
            match:  grenoble-arm, paris-mac
            reject: lyon-gpu, lyon-cpu, laptop"#]],
        );
        check_eval(
            "cores > -1 && memory_mb < 9223372036854775807",
            expect![[r#"
            match:  lyon-gpu, lyon-cpu, grenoble-arm, paris-mac, laptop
            reject: -"#]],
        );
        check_eval(
            r#"os == "linux" && memory_mb >= 4096 && (site == "lyon" || has_gpu)"#,
            expect![[r#"
                match:  lyon-gpu, lyon-cpu
                reject: grenoble-arm, paris-mac, laptop"#]],
        );
    }

    #[test]
    fn eval_custom_properties() {
        // Flags: present and not "", "0", "false" or "no" in any case.
        check_eval(
            "has_gpu",
            expect![[r#"
            match:  lyon-gpu, laptop
            reject: lyon-cpu, grenoble-arm, paris-mac"#]],
        );
        check_eval(
            "!has_gpu",
            expect![[r#"
            match:  lyon-cpu, grenoble-arm, paris-mac
            reject: lyon-gpu, laptop"#]],
        );
        check_eval(
            "rack",
            expect![[r#"
            match:  lyon-cpu
            reject: lyon-gpu, grenoble-arm, paris-mac, laptop"#]],
        );
        // Compared with a number, a custom value is read as one; "many" is not.
        check_eval(
            "gpus > 0",
            expect![[r#"
            match:  lyon-gpu
            reject: lyon-cpu, grenoble-arm, paris-mac, laptop"#]],
        );
        check_eval(
            "gpus == 0",
            expect![[r#"
            match:  laptop
            reject: lyon-gpu, lyon-cpu, grenoble-arm, paris-mac"#]],
        );
        check_eval(
            "gpus != 0",
            expect![[r#"
            match:  lyon-gpu
            reject: lyon-cpu, grenoble-arm, paris-mac, laptop"#]],
        );
        check_eval(
            "!(gpus > 0)",
            expect![[r#"
            match:  lyon-cpu, grenoble-arm, paris-mac, laptop
            reject: lyon-gpu"#]],
        );
        check_eval(
            "gpus >= 0",
            expect![[r#"
            match:  lyon-gpu, laptop
            reject: lyon-cpu, grenoble-arm, paris-mac"#]],
        );
        check_eval(
            "gpus in [0, 4]",
            expect![[r#"
            match:  lyon-gpu, laptop
            reject: lyon-cpu, grenoble-arm, paris-mac"#]],
        );
        // Compared with a string, a custom value is text.
        check_eval(
            r#"gpus == "many""#,
            expect![[r#"
            match:  grenoble-arm
            reject: lyon-gpu, lyon-cpu, paris-mac, laptop"#]],
        );
        check_eval(
            r#"gpus == "4""#,
            expect![[r#"
            match:  lyon-gpu
            reject: lyon-cpu, grenoble-arm, paris-mac, laptop"#]],
        );
        check_eval(
            r#"gpu_model != "v100""#,
            expect![[r#"
            match:  lyon-gpu
            reject: lyon-cpu, grenoble-arm, paris-mac, laptop"#]],
        );
        check_eval(
            r#"rack not in ["b12"]"#,
            expect![[r#"
            match:  lyon-gpu, grenoble-arm, paris-mac, laptop
            reject: lyon-cpu"#]],
        );
    }

    #[test]
    fn eval_reads_slots_from_its_argument() {
        let expr = parse("slots >= 4").unwrap();
        let props = EngineProps::default();
        assert!(!expr.eval(&props, 3));
        assert!(expr.eval(&props, 4));
        let expr = parse("big_number > 9223372036854775806").unwrap();
        let props = EngineProps {
            custom: BTreeMap::from([("big_number".to_owned(), "9223372036854775807".to_owned())]),
            memory_mb: u64::MAX,
            ..EngineProps::default()
        };
        assert!(expr.eval(&props, 0));
        assert!(
            parse("memory_mb > 9223372036854775807")
                .unwrap()
                .eval(&props, 0)
        );
    }

    // ---- property tests ----

    fn is_keyword(name: &str) -> bool {
        ["and", "or", "not", "in", "true", "false"].contains(&name)
    }

    fn arb_custom_name() -> impl Strategy<Value = String> {
        "[A-Za-z_][A-Za-z0-9_.-]{0,6}"
            .prop_filter("keywords and built-ins are not custom", |name| {
                !is_keyword(name) && matches!(Prop::from_name(name), Prop::Custom(_))
            })
    }

    fn arb_prop() -> impl Strategy<Value = Prop> {
        prop_oneof![
            Just(Prop::Os),
            Just(Prop::Arch),
            Just(Prop::Site),
            Just(Prop::Cores),
            Just(Prop::MemoryMb),
            Just(Prop::DiskMb),
            Just(Prop::Mflops),
            Just(Prop::Slots),
            arb_custom_name().prop_map(Prop::Custom),
            arb_custom_name().prop_map(Prop::Custom),
        ]
    }

    fn arb_text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z\"\\\\ ]{0,6}",
            any::<String>().prop_map(|s| s.chars().filter(|c| !c.is_control()).take(6).collect()),
        ]
    }

    fn arb_op() -> impl Strategy<Value = CmpOp> {
        prop_oneof![
            Just(CmpOp::Eq),
            Just(CmpOp::Ne),
            Just(CmpOp::Lt),
            Just(CmpOp::Le),
            Just(CmpOp::Gt),
            Just(CmpOp::Ge),
        ]
    }

    fn arb_int() -> impl Strategy<Value = i64> {
        prop_oneof![any::<i64>(), -100i64..100, Just(i64::MIN), Just(i64::MAX)]
    }

    fn arb_leaf() -> impl Strategy<Value = Expr> {
        let compare = arb_prop().prop_flat_map(|prop| {
            let value = match prop.kind() {
                Some(Kind::Int) => arb_int().prop_map(Value::Int).boxed(),
                Some(Kind::Text) => arb_text().prop_map(Value::Str).boxed(),
                None => prop_oneof![
                    arb_int().prop_map(Value::Int),
                    arb_text().prop_map(Value::Str)
                ]
                .boxed(),
            };
            (Just(prop), arb_op(), value).prop_map(|(prop, op, value)| Expr::Compare {
                prop,
                op,
                value,
            })
        });
        let member = arb_prop().prop_flat_map(|prop| {
            let ints = prop::collection::vec(arb_int(), 1..4).prop_map(ValueList::Ints);
            let strs = prop::collection::vec(arb_text(), 1..4).prop_map(ValueList::Strs);
            let values = match prop.kind() {
                Some(Kind::Int) => ints.boxed(),
                Some(Kind::Text) => strs.boxed(),
                None => prop_oneof![ints, strs].boxed(),
            };
            (Just(prop), values).prop_map(|(prop, values)| Expr::In { prop, values })
        });
        prop_oneof![
            any::<bool>().prop_map(Expr::Bool),
            arb_custom_name().prop_map(|name| Expr::Flag(Prop::Custom(name))),
            compare,
            member,
        ]
    }

    fn flattened(children: Vec<Expr>, same_operator: fn(&Expr) -> bool) -> Vec<Expr> {
        let mut out = Vec::new();
        for child in children {
            push_flattened(&mut out, child, same_operator);
        }
        out
    }

    /// Canonical trees, as `parse` builds them.
    fn arb_expr() -> impl Strategy<Value = Expr> {
        arb_leaf().prop_recursive(5, 48, 3, |inner| {
            prop_oneof![
                inner.clone().prop_map(|e| Expr::Not(Box::new(e))),
                prop::collection::vec(inner.clone(), 2..4)
                    .prop_map(|c| Expr::And(flattened(c, |e| matches!(e, Expr::And(_))))),
                prop::collection::vec(inner, 2..4)
                    .prop_map(|c| Expr::Or(flattened(c, |e| matches!(e, Expr::Or(_))))),
            ]
        })
    }

    /// Fragments of the language, glued at random: mostly nonsense, some valid.
    fn arb_token_soup() -> impl Strategy<Value = String> {
        let fragment = prop_oneof![
            Just("("),
            Just(")"),
            Just("&&"),
            Just("||"),
            Just("!"),
            Just("not "),
            Just(" in "),
            Just("["),
            Just("]"),
            Just(","),
            Just("=="),
            Just("<"),
            Just(">="),
            Just("!="),
            Just("os"),
            Just("cores"),
            Just("has_gpu"),
            Just("gpus"),
            Just("3"),
            Just("-7"),
            Just("\"lyon\""),
            Just("\""),
            Just("\\"),
            Just(" "),
            Just("true"),
            Just("é"),
        ];
        prop::collection::vec(fragment, 0..24).prop_map(|fragments| fragments.concat())
    }

    /// Found by fuzzing: a category keeps its expression's printed form, which a
    /// snapshot reads back; at the source limits that form is longer or deeper.
    #[test]
    fn the_printed_form_of_an_expression_at_the_limits_reads_back() {
        let deepest = format!("{}a > 0", "!".repeat(DEPTH_MAX));
        let longest = vec!["aaaaaaaaaaaa>1"; 255].join("||");
        assert!(longest.len() <= SOURCE_BYTES_MAX);
        for source in [deepest, longest] {
            let expr = parse(&source).unwrap();
            let printed = expr.to_string();
            assert!(
                printed.len() > SOURCE_BYTES_MAX || parse(&printed).is_err(),
                "the case is at the limit: {printed}"
            );
            assert_eq!(parse_printed(&printed), Ok(expr));
        }
    }

    proptest! {
        #[test]
        fn canonical_form_round_trips(expr in arb_expr()) {
            prop_assert!(expr.is_canonical());
            let shown = expr.to_string();
            if shown.len() <= SOURCE_BYTES_MAX && expr.node_count() <= NODES_MAX {
                prop_assert_eq!(parse(&shown), Ok(expr));
            } else {
                prop_assert!(parse(&shown).is_err());
            }
        }

        #[test]
        fn any_input_parses_or_fails_with_a_position_inside_it(
            source in prop_oneof![arb_token_soup(), any::<String>()]
        ) {
            match parse(&source) {
                Ok(expr) => {
                    prop_assert!(expr.is_canonical());
                    prop_assert_eq!(parse_printed(&expr.to_string()), Ok(expr));
                }
                Err(error) => {
                    prop_assert!(error.position <= source.len());
                    prop_assert!(error.render(&source).ends_with('^'));
                }
            }
        }
    }
}
