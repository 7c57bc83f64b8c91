//! The expression's tree, its limits and its errors: the data the lexer,
//! parser, printer and evaluator share (see the module docs of `expr`).


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
pub(super) struct Limits {
    pub(super) bytes: usize,
    pub(super) depth: usize,
}

impl Limits {
    pub(super) const SOURCE: Limits = Limits { bytes: SOURCE_BYTES_MAX, depth: DEPTH_MAX };
    pub(super) const PRINTED: Limits = Limits { bytes: PRINTED_BYTES_MAX, depth: PRINTED_DEPTH_MAX };
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
    pub(super) fn is_canonical(&self) -> bool {
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
pub(super) enum Kind {
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
    pub(super) fn kind(&self) -> Option<Kind> {
        match self {
            Prop::Os | Prop::Arch | Prop::Site => Some(Kind::Text),
            Prop::Cores | Prop::MemoryMb | Prop::DiskMb | Prop::Mflops | Prop::Slots => {
                Some(Kind::Int)
            }
            Prop::Custom(_) => None,
        }
    }

    pub(super) fn accepts(&self, kind: Kind) -> bool {
        self.kind().is_none_or(|own| own == kind)
    }

    /// Why this property cannot be compared with a value of `kind`, if it cannot.
    pub(super) fn mismatch(&self, kind: Kind) -> Option<String> {
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
    pub(super) fn kind(&self) -> Kind {
        match self {
            Value::Int(_) => Kind::Int,
            Value::Str(_) => Kind::Text,
        }
    }
}

impl ExprError {
    pub(super) fn new(position: usize, message: impl Into<String>) -> Self {
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
