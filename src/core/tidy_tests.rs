//! Tidy tests (as rust-analyzer has): the layering the module docs describe,
//! checked on the source text, so a change that breaks it fails the suite.
//!
//! - `core` is pure: no file under `src/core` names an outer layer of the
//!   crate (`log`, `projector`, `engine`, `cli`, `wire`, `sim`, `web`,
//!   `files`) or an IO crate (`tokio`, `async_nats`, `sled`), but for test
//!   files, which may borrow the wire's generators;
//! - `state` is the bottom layer: no file under `src/core/state` names
//!   `schedule` or `fold`;
//! - a family is a folder: no file under `src/core` outside `src/core/family`
//!   names a family's module (`cigri::`, `techila::`, `fbsng::`, `sgeee::`,
//!   `sge_plain::`); `family/mod.rs`, the seam, is the one place that does;
//! - nor does any name a family at all, in any case (`Unfit::CigriSink`,
//!   `techila`, `FbsngHold`), but the event schema (`event.rs`, whose
//!   policy sections and options are the families' schema), outside test
//!   code: the shared reasons, `why`, the filters, the dispatch loop and the
//!   policy's limits ask the seam;
//! - nothing under `src` is left as `todo!` or `unimplemented!`.
//!
//! Comments are not code: each line is read up to its first `//`.

use std::path::{Path, PathBuf};

/// The outer layers and IO crates `core` may not name.
const OUTER: &[&str] = &[
    "crate::log::", "crate::projector::", "crate::engine::", "crate::cli::", "crate::wire::", "crate::sim::",
    "crate::web::", "crate::files::", "tokio::", "async_nats::", "sled::",
];
/// The layers above `state`.
const ABOVE_STATE: &[&str] = &["schedule::", "fold::"];
/// The families' modules.
const FAMILIES: &[&str] = &["cigri::", "techila::", "fbsng::", "sgeee::", "sge_plain::"];
/// What no file may leave behind.
const UNFINISHED: &[&str] = &["todo!", "unimplemented!"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).map(|e| e.expect("entry").path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// Where `needle` occurs in `code` as a path (not the tail of a longer name).
fn names(code: &str, needle: &str) -> bool {
    code.match_indices(needle).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// The violations of `rules` in the files below `dir` (skipping `skip`): one line each.
fn violations(dir: &str, rules: &[&str], skip: impl Fn(&Path) -> bool) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join(dir), &mut files);
    let mut found = Vec::new();
    for path in files.iter().filter(|path| !skip(path)) {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for rule in rules.iter().filter(|rule| names(code, rule)) {
                let shown = path.strip_prefix(root).unwrap_or(path).display();
                found.push(format!("{shown}:{}: names `{rule}`: {}", n + 1, line.trim()));
            }
        }
    }
    found
}

fn this_file(path: &Path) -> bool {
    path.ends_with("core/tidy_tests.rs")
}

/// A test file (`*tests.rs`, or below a `tests` folder): it may borrow the
/// outer layers' generators (`wire::testing`), as no build but `cargo test` has it.
fn test_file(path: &Path) -> bool {
    path.file_name().is_some_and(|name| name.to_string_lossy().ends_with("tests.rs"))
        || path.components().any(|c| c.as_os_str() == "tests")
}

#[test]
fn core_names_no_outer_layer_and_no_io_crate() {
    let found = violations("src/core", OUTER, |path| this_file(path) || test_file(path));
    assert!(found.is_empty(), "core is pure (see core/mod.rs):\n{}", found.join("\n"));
}

#[test]
fn state_names_neither_schedule_nor_fold() {
    let found = violations("src/core/state", ABOVE_STATE, |_| false);
    assert!(found.is_empty(), "state is the bottom layer (see state/mod.rs):\n{}", found.join("\n"));
}

#[test]
fn only_the_family_folders_name_a_family() {
    let found = violations("src/core", FAMILIES, |path| this_file(path) || path.components().any(|c| c.as_os_str() == "family"));
    assert!(found.is_empty(), "a family is named only in its folder and in family/mod.rs (see family/mod.rs):\n{}", found.join("\n"));
}

/// The families' names, as any identifier or text may hold them (lowercase).
const FAMILY_NAMES: &[&str] = &["cigri", "techila", "fbsng", "sgeee", "sge_plain", "sgeplain"];

#[test]
fn outside_the_folders_the_seam_and_the_schema_core_code_names_no_family_at_all() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src/core"), &mut files);
    let schema = |path: &Path| path.ends_with("core/event.rs");
    let mut found = Vec::new();
    for path in files.iter().filter(|path| {
        !this_file(path) && !test_file(path) && !schema(path) && !path.components().any(|c| c.as_os_str() == "family")
    }) {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // A file's own tests follow its code: they may name the families they set up.
        let code_part = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
        for (n, line) in code_part.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("").to_lowercase();
            if let Some(name) = FAMILY_NAMES.iter().find(|name| code.contains(*name)) {
                let shown = path.strip_prefix(root).unwrap_or(path).display();
                found.push(format!("{shown}:{}: names `{name}`: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "only the family folders, family/ (the seam) and the event schema name a family:\n{}", found.join("\n"));
}

#[test]
fn nothing_is_left_unfinished() {
    let found = violations("src", UNFINISHED, this_file);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_rules_see_a_path_but_not_a_longer_name() {
    assert!(names("use crate::core::family::cigri::sink;", "cigri::"));
    assert!(names("cigri::filter(state)", "cigri::"));
    assert!(!names("let x = my_cigri::y;", "cigri::"));
    assert!(!names("Unfit::CigriSink", "cigri::"));
    assert!(names("    crate::wire::subject_for(", "crate::wire::"));
}
