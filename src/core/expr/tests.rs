use std::collections::BTreeMap;

use expect_test::{Expect, expect};
use proptest::prelude::*;

use super::parser::push_flattened;
use super::*;
use crate::core::event::EngineProps;

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
