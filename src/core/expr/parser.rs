//! The parser: recursive descent with one token of lookahead. Recursion happens
//! only at `(` and `!`, both counted against the depth limit (`DEPTH_MAX`); `&&`/`||` chains loop.
//! Every tree it returns is canonical (see the module doc).

use super::lexer::{Lexer, Tok, Token};
use super::ast::{Expr, ExprError, Kind, Limits, NODES_MAX, Prop, Value, ValueList};

/// Parses `source` held to `limits`: [`super::parse`] and [`super::parse_printed`] call it.
pub(super) fn parse_within(source: &str, limits: Limits) -> Result<Expr, ExprError> {
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
                let token = self.bump()?;
                match token.tok {
                    Tok::Str(text) => Ok(Value::Str(text)),
                    _ => Err(ExprError::new(token.start, "expected a quoted string")),
                }
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
pub(super) fn push_flattened(children: &mut Vec<Expr>, child: Expr, same_operator: fn(&Expr) -> bool) {
    if same_operator(&child) {
        match child {
            Expr::And(inner) | Expr::Or(inner) => children.extend(inner),
            _ => unreachable!("same_operator matches only And or Or"),
        }
    } else {
        children.push(child);
    }
}
