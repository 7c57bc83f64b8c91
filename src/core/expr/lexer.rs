//! The lexer: source text into tokens, each with its byte span, so every error
//! can point at the byte it is about.

use super::ast::{CmpOp, ExprError};

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
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
pub(super) struct Token {
    pub(super) tok: Tok,
    pub(super) start: usize,
    pub(super) end: usize,
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_ident_continue(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')
}

pub(super) struct Lexer<'s> {
    pub(super) source: &'s str,
    pub(super) pos: usize,
}

impl<'s> Lexer<'s> {
    fn byte(&self, at: usize) -> Option<u8> {
        self.source.as_bytes().get(at).copied()
    }

    fn char_at(&self, at: usize) -> char {
        // Only called at a char boundary inside the source; should that ever not
        // hold, the error names a replacement character rather than panic.
        self.source.get(at..).and_then(|rest| rest.chars().next()).unwrap_or(char::REPLACEMENT_CHARACTER)
    }

    pub(super) fn next_token(&mut self) -> Result<Token, ExprError> {
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
        let tok = match self.source.get(start..end).unwrap_or_default() {
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
