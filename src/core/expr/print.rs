//! `Display`: the canonical form, which `gridfold why` shows and the state keeps
//! (a category's key). It parses back to an equal tree (see the module doc).

use std::fmt;

use super::ast::{CmpOp, Expr, Prop, Value, ValueList};

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
