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
//!   `techila`, `FbsngHold`), but the event schema (`event/`, whose policy
//!   sections and options are the families' schema), outside test code: the
//!   shared reasons, `why`, the filters, the dispatch loop and the policy's
//!   limits ask the seam;
//! - nothing under `src` is left as `todo!` or `unimplemented!`;
//! - no circle of files: the files of `src/core` (but for test files and
//!   test-only items) form an acyclic graph of imports, so each file can be
//!   read knowing only the files it names (see [`import_graph`] for what an
//!   import is and which file it names).
//!
//! Comments are not code: each line is read up to its first `//`.

use std::collections::{BTreeMap, BTreeSet};
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
    let schema = |path: &Path| path.parent().is_some_and(|dir| dir.ends_with("core/event"));
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

// ---- no circle of files ---------------------------------------------------

/// A file of `src/core` by its path below `src/core` (`state/store.rs`).
type FileName = String;

/// The module a file of `src/core` is, as the path of its segments below
/// `core`: `state/store.rs` is `[state, store]`, `state/mod.rs` is `[state]`,
/// `mod.rs` is `[]`.
fn module_of(file: &str) -> Vec<String> {
    let mut segments: Vec<String> = file.trim_end_matches(".rs").split('/').map(str::to_string).collect();
    if segments.last().is_some_and(|last| last == "mod") {
        segments.pop();
    }
    segments
}

/// The file that holds module `segments`, if one of `files` does.
fn file_of<'a>(files: &'a BTreeMap<FileName, String>, segments: &[String]) -> Option<&'a FileName> {
    if segments.is_empty() {
        return files.get_key_value("mod.rs").map(|(name, _)| name);
    }
    let joined = segments.join("/");
    files.get_key_value(&format!("{joined}.rs")).or_else(|| files.get_key_value(&format!("{joined}/mod.rs"))).map(|(name, _)| name)
}

/// The code of a file as the graph reads it: each line up to its first `//`,
/// without test-only items (an item under `#[cfg(test)]`, from the attribute
/// to the `;` or the brace that closes it) and without the visibilities
/// `pub(in ...)`, `pub(super)` and `pub(self)` (a visibility names a module
/// but imports nothing).
fn code_of(text: &str) -> String {
    let lines: Vec<&str> = text.lines().map(|line| line.split("//").next().unwrap_or("")).collect();
    let mut code = String::new();
    let mut at = 0;
    while at < lines.len() {
        if lines[at].trim_start().starts_with("#[cfg(test)]") {
            at += 1;
            while at < lines.len() && lines[at].trim_start().starts_with("#[") {
                at += 1;
            }
            let mut depth = 0i64;
            let mut opened = false;
            while at < lines.len() {
                let line = lines[at];
                at += 1;
                for c in line.chars() {
                    match c {
                        '{' => (depth, opened) = (depth + 1, true),
                        '}' => depth -= 1,
                        _ => {}
                    }
                }
                if (opened && depth <= 0) || (!opened && line.trim_end().ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        code.push_str(lines[at]);
        code.push('\n');
        at += 1;
    }
    while let Some(start) = code.find("pub(in ") {
        let end = code[start..].find(')').map_or(code.len(), |end| start + end + 1);
        code.replace_range(start..end, "pub");
    }
    code.replace("pub(super)", "pub").replace("pub(self)", "pub")
}

/// The paths of a `use` tree (`a::{b, c::{d as e, self}}`), each as its
/// segments: a rename is dropped, and `self` in a group names its prefix.
fn use_paths(tree: &str) -> Vec<Vec<String>> {
    fn expand(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
        let mut depth = 0;
        let mut start = 0;
        let mut parts = Vec::new();
        for (at, c) in tree.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&tree[start..at]);
                    start = at + 1;
                }
                _ => {}
            }
        }
        parts.push(&tree[start..]);
        for part in parts.into_iter().map(str::trim).filter(|part| !part.is_empty()) {
            if let Some(open) = part.find('{') {
                let mut path = prefix.to_vec();
                path.extend(part[..open].split("::").map(str::trim).filter(|s| !s.is_empty()).map(str::to_string));
                let inner = part[open + 1..].trim_end();
                let inner = inner.strip_suffix('}').unwrap_or(inner);
                expand(&path, inner, out);
            } else {
                let part = part.split(" as ").next().unwrap_or(part);
                let mut path = prefix.to_vec();
                path.extend(part.split("::").map(str::trim).filter(|s| !s.is_empty() && *s != "self").map(str::to_string));
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    let flat: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    expand(&[], &flat, &mut out);
    out
}

/// Every path written in `code`: those of its `use` declarations, and every
/// other run of `segment::segment...` (a call, a type, a pattern).
fn paths_in(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut rest = String::with_capacity(code.len());
    let mut tail = code;
    while let Some(at) = find_declaration(tail, "use") {
        rest.push_str(&tail[..at]);
        let after = &tail[at + 3..];
        let end = after.find(';').unwrap_or(after.len());
        paths.extend(use_paths(&after[..end]));
        tail = &after[(end + 1).min(after.len())..];
    }
    rest.push_str(tail);
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let chars: Vec<char> = rest.chars().collect();
    let mut at = 0;
    while at < chars.len() {
        if !is_ident(chars[at]) || (at > 0 && (is_ident(chars[at - 1]) || chars[at - 1] == ':')) {
            at += 1;
            continue;
        }
        let mut path = Vec::new();
        loop {
            let start = at;
            while at < chars.len() && is_ident(chars[at]) {
                at += 1;
            }
            path.push(chars[start..at].iter().collect::<String>());
            if at + 2 < chars.len() && chars[at] == ':' && chars[at + 1] == ':' && is_ident(chars[at + 2]) {
                at += 2;
            } else {
                break;
            }
        }
        if path.len() > 1 {
            paths.push(path);
        }
    }
    paths
}

/// Where `word` opens a declaration in `code`: a whole word at the start of
/// a line, after at most a visibility (so not the word inside a string).
fn find_declaration(code: &str, word: &str) -> Option<usize> {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    code.match_indices(word).map(|(at, _)| at).find(|&at| {
        let line_start = code[..at].rfind('\n').map_or(0, |newline| newline + 1);
        matches!(code[line_start..at].trim(), "" | "pub" | "pub(crate)" | "pub(super)")
            && !code[at + word.len()..].chars().next().is_some_and(is_ident)
    })
}

/// The file of `src/core` a path written in `file` names, if any: see [`import_graph`].
fn resolve<'a>(files: &'a BTreeMap<FileName, String>, file: &str, path: &[String]) -> Option<&'a FileName> {
    let mut module = module_of(file);
    let mut segments = path;
    match segments.first().map(String::as_str) {
        Some("crate") => {
            if segments.get(1).map(String::as_str) != Some("core") {
                return None;
            }
            module.clear();
            segments = &segments[2..];
        }
        Some("super" | "self") => {
            while let Some(first) = segments.first().filter(|s| *s == "super" || *s == "self") {
                if first == "super" {
                    module.pop()?;
                }
                segments = &segments[1..];
            }
        }
        Some(first) => {
            let mut child = module.clone();
            child.push(first.to_string());
            file_of(files, &child)?;
        }
        None => return None,
    }
    let mut target = file_of(files, &module)?;
    for segment in segments {
        module.push(segment.clone());
        match file_of(files, &module) {
            Some(deeper) => target = deeper,
            None => break,
        }
    }
    Some(target)
}

/// The import graph of `files` (each file's path below `src/core`, and its
/// text): for each file, the files it names, each with the first path that
/// names it.
///
/// An *import* is any path written in the file's code (see [`code_of`]): in
/// a `use` declaration (groups expanded, renames dropped) or anywhere else
/// (`crate::core::fold::fold(..)`, a type, a pattern). A `mod` declaration is
/// not one: a parent declaring a child depends on nothing in it.
///
/// A path names a file when it starts at `crate::core`, at `super` or `self`
/// (from the file's own module), or at a child module of the file's module
/// (`mod x; pub use x::Y;`); any other path (`std::`, a crate, a local name)
/// names none. From there it names the file of the deepest module its
/// segments reach, a module being a file `m.rs` or `m/mod.rs`:
/// `crate::core::state::store::State` names `state/store.rs`, and
/// `crate::core::state::State` names `state/mod.rs`, even when that file only
/// re-exports `State`. So an import through a re-export depends on the file
/// that re-exports, which depends on what it re-exports: a file below a
/// `mod.rs` must name its siblings directly. A file naming itself is no edge.
fn import_graph(files: &BTreeMap<FileName, String>) -> BTreeMap<&FileName, BTreeMap<&FileName, String>> {
    let mut graph = BTreeMap::new();
    for (file, text) in files {
        let edges: &mut BTreeMap<&FileName, String> = graph.entry(file).or_default();
        for path in paths_in(&code_of(text)) {
            if let Some(target) = resolve(files, file, &path).filter(|target| *target != file) {
                edges.entry(target).or_insert_with(|| path.join("::"));
            }
        }
    }
    graph
}

/// A circle of the graph, if it has one: each file with the path by which
/// it names the next, the last naming the first.
fn find_circle<'a>(graph: &BTreeMap<&'a FileName, BTreeMap<&'a FileName, String>>) -> Option<Vec<(&'a FileName, String)>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit<'a>(
        graph: &BTreeMap<&'a FileName, BTreeMap<&'a FileName, String>>,
        file: &'a FileName,
        marks: &mut BTreeMap<&'a FileName, Mark>,
        stack: &mut Vec<(&'a FileName, String)>,
    ) -> Option<Vec<(&'a FileName, String)>> {
        marks.insert(file, Mark::Open);
        for (&next, path) in graph.get(file).into_iter().flatten() {
            stack.push((file, path.clone()));
            match marks.get(next) {
                Some(Mark::Open) => {
                    let from = stack.iter().position(|(on, _)| *on == next).expect("an open file is on the stack");
                    return Some(stack[from..].to_vec());
                }
                Some(Mark::Done) => {}
                None => {
                    if let Some(circle) = visit(graph, next, marks, stack) {
                        return Some(circle);
                    }
                }
            }
            stack.pop();
        }
        marks.insert(file, Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for &file in graph.keys() {
        if marks.contains_key(file) {
            continue;
        }
        if let Some(circle) = visit(graph, file, &mut marks, &mut Vec::new()) {
            return Some(circle);
        }
    }
    None
}

/// A circle as a person reads it: `a.rs -> b.rs -> a.rs`, then how each names the next.
fn render_circle(circle: &[(&FileName, String)]) -> String {
    let mut files: Vec<&str> = circle.iter().map(|(file, _)| file.as_str()).collect();
    files.push(circle[0].0);
    let mut shown = files.join(" -> ");
    for (at, (file, path)) in circle.iter().enumerate() {
        let next = circle.get(at + 1).map_or(circle[0].0, |(next, _)| next);
        shown.push_str(&format!("\n  {file} names {next} as `{path}`"));
    }
    shown
}

/// The non-test files of `src/core`, by path below it, with their text.
fn core_files() -> BTreeMap<FileName, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/core");
    let mut paths = Vec::new();
    rust_files(&root, &mut paths);
    paths
        .into_iter()
        .filter(|path| !test_file(path))
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let name = path.strip_prefix(&root).expect("below src/core").to_string_lossy().replace('\\', "/");
            (name, text)
        })
        .collect()
}

#[test]
fn no_circle_of_files_in_core() {
    let files = core_files();
    let graph = import_graph(&files);
    let n_edges: usize = graph.values().map(BTreeMap::len).sum();
    assert!(files.len() > 50 && n_edges > 2 * files.len(), "the graph reads core: {} files, {n_edges} imports", files.len());
    if let Some(circle) = find_circle(&graph) {
        panic!("a circle of files in core (see core/mod.rs for the layers):\n{}", render_circle(&circle));
    }
}

fn in_memory(files: &[(&str, &str)]) -> BTreeMap<FileName, String> {
    files.iter().map(|(name, text)| (name.to_string(), text.to_string())).collect()
}

#[test]
fn a_circle_of_files_is_found_and_named() {
    let files = in_memory(&[
        ("mod.rs", "pub mod a;\npub mod b;\npub mod c;\n"),
        ("a.rs", "use super::b::B;\npub struct A;\n"),
        ("b.rs", "pub struct B(pub crate::core::c::C);\n"),
        ("c.rs", "pub fn f() -> usize { crate::core::a::size() }\n"),
    ]);
    let circle = find_circle(&import_graph(&files)).expect("a -> b -> c -> a is a circle");
    assert_eq!(
        render_circle(&circle),
        "a.rs -> b.rs -> c.rs -> a.rs\n  a.rs names b.rs as `super::b::B`\n  b.rs names c.rs as `crate::core::c::C`\n  c.rs names a.rs as `crate::core::a::size`"
    );
}

#[test]
fn an_import_through_a_re_export_names_the_mod_rs_that_re_exports() {
    // `x/y.rs` takes `Z` through `x/mod.rs`, which re-exports `y`'s `Y`: a circle.
    // `x/mod.rs` re-exports `Y` and `Z`; `x/y.rs` is `y`.
    let folder = |y: &str| {
        in_memory(&[
            ("mod.rs", "pub mod x;\n"),
            ("x/mod.rs", "mod y;\nmod z;\npub use y::Y;\npub use z::Z;\n"),
            ("x/y.rs", y),
            ("x/z.rs", "pub struct Z;\n"),
        ])
    };
    let through = folder("use super::{Z, z as _unused};\npub struct Y(Z);\n");
    let circle = find_circle(&import_graph(&through)).expect("x/y.rs names x/mod.rs, which names x/y.rs");
    assert_eq!(render_circle(&circle).lines().next(), Some("x/mod.rs -> x/y.rs -> x/mod.rs"));
    // Naming the sibling directly leaves no circle.
    let direct = folder("use super::z::Z;\npub struct Y(Z);\n");
    let graph = import_graph(&direct);
    assert_eq!(find_circle(&graph), None);
    let named: Vec<&str> = graph[&"x/y.rs".to_string()].keys().map(|file| file.as_str()).collect();
    assert_eq!(named, ["x/z.rs"]);
}

#[test]
fn comments_test_items_visibilities_and_other_crates_are_not_imports() {
    let files = in_memory(&[
        ("mod.rs", "pub mod a;\npub mod b;\n"),
        (
            "a.rs",
            "// use crate::core::b::B;\n\
             pub(in crate::core::b) fn f() {}\n\
             pub(super) fn g() {}\n\
             use std::collections::BTreeMap;\n\
             #[cfg(test)]\nmod tests {\n    use crate::core::b::B;\n}\n\
             #[cfg(test)]\nuse crate::core::b::C;\n",
        ),
        ("b.rs", "use crate::core::a::f;\n"),
    ]);
    let graph = import_graph(&files);
    assert_eq!(find_circle(&graph), None);
    assert!(graph[&"a.rs".to_string()].is_empty(), "{:?}", graph[&"a.rs".to_string()]);
    assert_eq!(graph[&"b.rs".to_string()].keys().map(|file| file.as_str()).collect::<Vec<_>>(), ["a.rs"]);
}

#[test]
fn use_trees_expand_to_their_paths() {
    let expanded: BTreeSet<String> =
        use_paths("crate::core::{family::{self as families, data::{X, Y}}, state::State as S}").into_iter().map(|path| path.join("::")).collect();
    let expected: BTreeSet<String> =
        ["crate::core::family", "crate::core::family::data::X", "crate::core::family::data::Y", "crate::core::state::State"].into_iter().map(str::to_string).collect();
    assert_eq!(expanded, expected);
}
