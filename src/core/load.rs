//! Layer 3 service: engines' named load values and Grid Engine's `load_formula`.
//!
//! An engine reports named load values with each heartbeat (Grid Engine's load
//! parameters, complex(5): `np_load_avg`, `mem_used`, ...), each an integer in
//! milli-units (`np_load_avg = 0.75` is 750; memory is in MB, so 2 GB used is
//! `mem_used = 2048`, 2,048,000 milli). The policy's load formula weighs them
//! into one load index.
//!
//! # The formula (sched_conf(5) `load_formula`)
//!
//! Grid Engine's grammar is `{w1|load_val1[*w1]}[{+|-}{w2|load_val2[*w2]}[...]]`:
//! a sum of terms, each a constant or a load value times a weight. gridfold reads
//! the same, and also accepts the weight first (`0.5 * mem_used`):
//!
//! ```text
//! formula := ["-"] term (("+" | "-") term)*
//! term    := weight | name | name "*" weight | weight "*" name
//! weight  := digits ["." digits]          (at most 3 decimals: held in thousandths)
//! name    := [A-Za-z_][A-Za-z0-9_]*
//! ```
//!
//! Its value on an engine, in milli-units, is the sum of `weight * value` over the
//! terms (a constant term adds its weight), computed in integers and saturated,
//! so every replay ranks alike. A name the engine has not reported makes the
//! whole formula unknown for that engine ([`LoadExpr::eval`] returns `None`):
//! Grid Engine sorts a host without load values last, and so does gridfold.
//! Two reported figures stand in for names an engine does not report itself:
//! `np_load_avg` (the heartbeat's load per core) and `mem_free` (its free memory).
//!
//! # Limits
//!
//! At most [`FORMULA_BYTES_MAX`] bytes and [`FORMULA_TERMS_MAX`] terms; weights at
//! most [`WEIGHT_MAX`] in magnitude; at most [`LOAD_VALUES_MAX`] named values per
//! heartbeat, names of at most [`LOAD_NAME_BYTES_MAX`] bytes, values at most
//! [`LOAD_VALUE_MILLI_MAX`] in magnitude.

use std::collections::BTreeMap;

/// Load figures an engine reports with each heartbeat, as integers so that the
/// load formula is exact on every replay.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct EngineLoad {
    /// One-minute load average divided by cores, times 1000 (1000 = every core busy).
    pub load_per_core_milli: u32,
    pub memory_free_mb: u64,
    /// Named load values (Grid Engine's load parameters: `np_load_avg`,
    /// `mem_used`, ...), in milli-units, for the load formula and suspend
    /// thresholds; see [`crate::core::load`].
    pub values_milli: BTreeMap<String, i64>,
}

pub const FORMULA_BYTES_MAX: usize = 1_024;
pub const FORMULA_TERMS_MAX: usize = 32;
/// Largest weight, in units (held as thousandths).
pub const WEIGHT_MAX: i64 = 1_000_000;
pub const LOAD_VALUES_MAX: usize = 64;
pub const LOAD_NAME_BYTES_MAX: usize = 64;
/// Largest magnitude of a reported value, in milli-units (10^15: a petabyte in MB).
pub const LOAD_VALUE_MILLI_MAX: i64 = 1_000_000_000_000_000_000;
/// Largest queue sequence number (queue_conf(5) `seq_no`) an engine may declare.
pub const SEQ_NO_MAX: u64 = 9_999_999;

/// One term: a weight (thousandths) times a named value, or a constant.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LoadTerm {
    /// The load value, or `None` for a constant term.
    pub name: Option<String>,
    pub weight_milli: i64,
}

/// A parsed load formula; empty adds nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct LoadExpr {
    pub terms: Vec<LoadTerm>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    #[error("the load formula is {0} bytes long; at most {FORMULA_BYTES_MAX}")]
    FormulaTooLong(usize),
    #[error("the load formula has more than {FORMULA_TERMS_MAX} terms")]
    TooManyTerms,
    #[error("the load formula is not Grid Engine's `w | name [* w]` terms joined by + or - at byte {at}: {what}")]
    Syntax { at: usize, what: &'static str },
    #[error("a weight in the load formula has more than 3 decimals or exceeds {WEIGHT_MAX}, at byte {at}")]
    BadWeight { at: usize },
    #[error("a load value name is empty, longer than {LOAD_NAME_BYTES_MAX} bytes or not [A-Za-z_][A-Za-z0-9_]*")]
    BadName,
    #[error("more than {LOAD_VALUES_MAX} load values")]
    TooManyValues,
    #[error("load value {name} is {value} milli, beyond {LOAD_VALUE_MILLI_MAX} in magnitude")]
    ValueOutOfRange { name: String, value: i64 },
    #[error("seq_no must be an integer from 0 to {SEQ_NO_MAX}")]
    BadSeqNo,
}

/// Whether `name` may name a load value.
pub fn check_name(name: &str) -> Result<(), LoadError> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || name.len() > LOAD_NAME_BYTES_MAX || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(LoadError::BadName);
    }
    Ok(())
}

/// Checks a heartbeat's named values against the limits.
pub fn check_values(values: &BTreeMap<String, i64>) -> Result<(), LoadError> {
    if values.len() > LOAD_VALUES_MAX {
        return Err(LoadError::TooManyValues);
    }
    for (name, &value) in values {
        check_name(name)?;
        if value.unsigned_abs() > LOAD_VALUE_MILLI_MAX as u64 {
            return Err(LoadError::ValueOutOfRange { name: name.clone(), value });
        }
    }
    Ok(())
}

/// An engine's queue sequence number (queue_conf(5) `seq_no`): its `seq_no`
/// property, 0 when it has none (the wire refuses a login with one that is not
/// an integer up to [`SEQ_NO_MAX`]).
pub fn seq_no(custom: &BTreeMap<String, String>) -> u64 {
    custom.get("seq_no").and_then(|value| value.parse::<u64>().ok()).unwrap_or(0).min(SEQ_NO_MAX)
}

/// Checks a declared `seq_no` property, if any.
pub fn check_seq_no(custom: &BTreeMap<String, String>) -> Result<(), LoadError> {
    match custom.get("seq_no") {
        Some(value) if !value.bytes().all(|b| b.is_ascii_digit()) || value.is_empty() => Err(LoadError::BadSeqNo),
        Some(value) if !value.parse::<u64>().is_ok_and(|n| n <= SEQ_NO_MAX) => Err(LoadError::BadSeqNo),
        _ => Ok(()),
    }
}

/// A named value of one engine's last heartbeat, in milli-units.
pub fn value(load: &EngineLoad, name: &str) -> Option<i64> {
    if let Some(&value) = load.values_milli.get(name) {
        return Some(value);
    }
    match name {
        "np_load_avg" => Some(i64::from(load.load_per_core_milli)),
        "mem_free" => Some(i64::try_from(load.memory_free_mb).unwrap_or(i64::MAX).saturating_mul(1000)),
        _ => None,
    }
}

impl LoadExpr {
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Its value on an engine, in milli-units; `None` when the engine has not
    /// reported a value it names.
    pub fn eval(&self, load: &EngineLoad) -> Option<i64> {
        let mut sum: i128 = 0;
        for term in &self.terms {
            let value = match &term.name {
                Some(name) => i128::from(value(load, name)?),
                None => 1000,
            };
            sum += i128::from(term.weight_milli) * value / 1000;
        }
        Some(sum.clamp(i128::from(i64::MIN / 4), i128::from(i64::MAX / 4)) as i64)
    }
}

impl std::fmt::Display for LoadExpr {
    /// The canonical form, which parses back to an equal formula: `np_load_avg + 0.5*mem_used`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (at, term) in self.terms.iter().enumerate() {
            let negative = term.weight_milli < 0;
            match (at, negative) {
                (0, true) => f.write_str("-")?,
                (0, false) => {}
                (_, true) => f.write_str(" - ")?,
                (_, false) => f.write_str(" + ")?,
            }
            let magnitude = term.weight_milli.unsigned_abs();
            let weight = if magnitude % 1000 == 0 {
                format!("{}", magnitude / 1000)
            } else {
                format!("{}.{:03}", magnitude / 1000, magnitude % 1000).trim_end_matches('0').to_string()
            };
            match &term.name {
                Some(name) if magnitude == 1000 => f.write_str(name)?,
                Some(name) => write!(f, "{name}*{weight}")?,
                None => f.write_str(&weight)?,
            }
        }
        Ok(())
    }
}

/// Parses a load formula in Grid Engine's form (see the module docs).
pub fn parse(source: &str) -> Result<LoadExpr, LoadError> {
    if source.len() > FORMULA_BYTES_MAX {
        return Err(LoadError::FormulaTooLong(source.len()));
    }
    let mut parser = Parser { bytes: source.as_bytes(), at: 0 };
    let mut terms = Vec::new();
    parser.skip_spaces();
    if parser.at == parser.bytes.len() {
        return Ok(LoadExpr { terms });
    }
    let mut negative = parser.eat(b'-');
    loop {
        if terms.len() == FORMULA_TERMS_MAX {
            return Err(LoadError::TooManyTerms);
        }
        let mut term = parser.term()?;
        if negative {
            term.weight_milli = -term.weight_milli;
        }
        terms.push(term);
        parser.skip_spaces();
        if parser.at == parser.bytes.len() {
            return Ok(LoadExpr { terms });
        }
        negative = if parser.eat(b'+') {
            false
        } else if parser.eat(b'-') {
            true
        } else {
            return Err(LoadError::Syntax { at: parser.at, what: "expected + or -" });
        };
    }
}

struct Parser<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn skip_spaces(&mut self) {
        while self.bytes.get(self.at).is_some_and(|b| b.is_ascii_whitespace()) {
            self.at += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> bool {
        self.skip_spaces();
        if self.bytes.get(self.at) == Some(&byte) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn term(&mut self) -> Result<LoadTerm, LoadError> {
        self.skip_spaces();
        match self.bytes.get(self.at) {
            Some(b) if b.is_ascii_digit() => {
                let weight_milli = self.weight()?;
                if self.eat(b'*') {
                    self.skip_spaces();
                    let name = self.name()?;
                    return Ok(LoadTerm { name: Some(name), weight_milli });
                }
                Ok(LoadTerm { name: None, weight_milli })
            }
            Some(b) if b.is_ascii_alphabetic() || *b == b'_' => {
                let name = self.name()?;
                let weight_milli = if self.eat(b'*') {
                    self.skip_spaces();
                    self.weight()?
                } else {
                    1000
                };
                Ok(LoadTerm { name: Some(name), weight_milli })
            }
            _ => Err(LoadError::Syntax { at: self.at, what: "expected a weight or a load value name" }),
        }
    }

    fn name(&mut self) -> Result<String, LoadError> {
        let start = self.at;
        while self.bytes.get(self.at).is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_') {
            self.at += 1;
        }
        // Only ASCII letters, digits and `_` were taken, so each byte is its own
        // char; built byte by byte so that no input can reach a panic here.
        let name: String = self.bytes.get(start..self.at).unwrap_or_default().iter().map(|&b| char::from(b)).collect();
        let name = name.as_str();
        if name.is_empty() {
            return Err(LoadError::Syntax { at: start, what: "expected a load value name" });
        }
        check_name(name)?;
        Ok(name.to_string())
    }

    fn weight(&mut self) -> Result<i64, LoadError> {
        let start = self.at;
        let mut whole: i64 = 0;
        let mut digits = 0;
        while let Some(b) = self.bytes.get(self.at).filter(|b| b.is_ascii_digit()) {
            whole = whole.saturating_mul(10).saturating_add(i64::from(b - b'0'));
            self.at += 1;
            digits += 1;
        }
        if digits == 0 {
            return Err(LoadError::Syntax { at: start, what: "expected a weight" });
        }
        let mut milli = 0;
        if self.bytes.get(self.at) == Some(&b'.') {
            self.at += 1;
            let mut decimals = 0;
            while let Some(b) = self.bytes.get(self.at).filter(|b| b.is_ascii_digit()) {
                if decimals == 3 {
                    return Err(LoadError::BadWeight { at: start });
                }
                milli = milli * 10 + i64::from(b - b'0');
                decimals += 1;
                self.at += 1;
            }
            if decimals == 0 {
                return Err(LoadError::Syntax { at: self.at, what: "expected digits after the point" });
            }
            milli *= 10_i64.pow(3 - decimals);
        }
        if whole > WEIGHT_MAX || (whole == WEIGHT_MAX && milli > 0) {
            return Err(LoadError::BadWeight { at: start });
        }
        Ok(whole * 1000 + milli)
    }
}

#[cfg(test)]
mod tests {
    /// A formula arrives in a published `PolicySet`: whatever its bytes, parsing
    /// answers with a formula or an error, never a panic.
    #[test]
    fn hostile_formulas_are_refused_or_parsed_and_never_panic() {
        let long_name = "a".repeat(100_000);
        let many_terms = vec!["x"; 10_000].join("+");
        for text in ["np_load_avgé + 1", "é", "load\u{0}avg", "1e999999", "--", "*", "np_load_avg*", "a*b*c", "\u{feff}mem_used", long_name.as_str(), many_terms.as_str()] {
            let _ = super::parse(text);
        }
        assert!(super::parse("np_load_avgé + 1").is_err(), "a name followed by a non-ASCII char is refused");
        assert!(super::parse(&long_name).is_err(), "a name beyond the limit is refused");
        assert!(super::parse(&many_terms).is_err(), "more terms than the limit are refused");
    }

    use super::*;

    fn load(values: &[(&str, i64)]) -> EngineLoad {
        EngineLoad { values_milli: values.iter().map(|(n, v)| (n.to_string(), *v)).collect(), ..EngineLoad::default() }
    }

    #[test]
    fn grid_engine_formulas_parse_print_back_and_weigh_in_milli_units() {
        let expr = parse("np_load_avg + 0.5 * mem_used").unwrap();
        assert_eq!(expr.to_string(), "np_load_avg + mem_used*0.5");
        assert_eq!(parse(&expr.to_string()).unwrap(), expr);
        assert_eq!(expr.eval(&load(&[("np_load_avg", 750), ("mem_used", 2_000)])), Some(1_750));
        let sge = parse("np_load_avg*2-mem_free*0.001+3").unwrap();
        assert_eq!(sge.to_string(), "np_load_avg*2 - mem_free*0.001 + 3");
        assert_eq!(sge.eval(&load(&[("np_load_avg", 500), ("mem_free", 4_000_000)])), Some(1_000 - 4_000 + 3_000));
        assert_eq!(parse("-slots_x").unwrap().eval(&load(&[("slots_x", 9)])), Some(-9));
        assert_eq!(parse("  ").unwrap(), LoadExpr::default());
    }

    #[test]
    fn a_value_the_engine_did_not_report_leaves_the_formula_unknown_and_heartbeat_figures_stand_in() {
        let expr = parse("np_load_avg + mem_used").unwrap();
        assert_eq!(expr.eval(&load(&[("np_load_avg", 1)])), None);
        let built_in = EngineLoad { load_per_core_milli: 250, memory_free_mb: 3, ..EngineLoad::default() };
        assert_eq!(parse("np_load_avg + mem_free").unwrap().eval(&built_in), Some(3_250));
        // A reported value wins over the stand-in.
        let mut reported = built_in.clone();
        reported.values_milli.insert("np_load_avg".into(), 900);
        assert_eq!(parse("np_load_avg").unwrap().eval(&reported), Some(900));
    }

    #[test]
    fn bad_formulas_are_refused_with_where_and_why() {
        assert!(matches!(parse("np_load_avg +"), Err(LoadError::Syntax { at: 13, .. })));
        assert!(matches!(parse("np_load_avg mem"), Err(LoadError::Syntax { at: 12, .. })));
        assert!(matches!(parse("0.1234*a"), Err(LoadError::BadWeight { at: 0 })));
        assert!(matches!(parse("a*1000001"), Err(LoadError::BadWeight { .. })));
        assert!(matches!(parse("a*99999999999999999999999"), Err(LoadError::BadWeight { .. })));
        assert!(matches!(parse("a+".repeat(40).trim_end_matches('+')), Err(LoadError::TooManyTerms)));
        assert!(matches!(parse(&"a".repeat(2_000)), Err(LoadError::FormulaTooLong(2_000))));
        assert!(matches!(parse(&"a".repeat(65)), Err(LoadError::BadName)));
        assert!(matches!(parse("a**2"), Err(LoadError::Syntax { .. })));
        assert!(matches!(parse("é"), Err(LoadError::Syntax { at: 0, .. })));
    }

    #[test]
    fn reported_values_and_seq_no_beyond_their_limits_are_refused() {
        let too_many: BTreeMap<String, i64> = (0..65).map(|i| (format!("v{i}"), 0)).collect();
        assert_eq!(check_values(&too_many), Err(LoadError::TooManyValues));
        let bad_name: BTreeMap<String, i64> = [("mem used".to_string(), 0)].into();
        assert_eq!(check_values(&bad_name), Err(LoadError::BadName));
        let huge: BTreeMap<String, i64> = [("m".to_string(), i64::MIN)].into();
        assert!(matches!(check_values(&huge), Err(LoadError::ValueOutOfRange { .. })));
        for bad in ["-1", "x", "", "10000000", "1 "] {
            let custom: BTreeMap<String, String> = [("seq_no".to_string(), bad.to_string())].into();
            assert_eq!(check_seq_no(&custom), Err(LoadError::BadSeqNo), "{bad}");
        }
        let good: BTreeMap<String, String> = [("seq_no".to_string(), "42".to_string())].into();
        assert_eq!((check_seq_no(&good), seq_no(&good)), (Ok(()), 42));
        assert_eq!(seq_no(&BTreeMap::new()), 0);
    }
}
