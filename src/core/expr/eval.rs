//! Evaluation: whether an expression holds for one engine. It only borrows:
//! it allocates nothing and walks each node once.

use std::cmp::Ordering;

use super::ast::{CmpOp, Expr, Kind, Prop, Value, ValueList};
use crate::core::event::EngineProps;

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

impl CmpOp {
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
