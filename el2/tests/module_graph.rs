//! The portable core's modules form a directed acyclic graph: a module
//! never depends, directly or through others, on a module that depends on
//! it. The graph is read from the sources the way a reader follows them:
//! every `crate::<module>` path and `crate::{...}` group in production
//! code (test modules, the fuzzing harnesses, the arch layer and comments
//! excluded).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Top-level modules that are not part of the graph: the binary's
/// hardware layer (which uses everything) and the test-only harnesses.
const OUTSIDE: [&str; 4] = ["arch", "fuzzing", "lib", "main"];

/// The folders that only group modules (their `mod.rs` declares them and
/// holds no code): each module inside is a node of its own,
/// `folder::module`.
const FOLDERS: [&str; 5] = ["bringup", "devices", "memory", "services", "trap"];

/// `name`, or `name::next` when `name` is a folder and `rest` (what
/// follows `name` in the path) names a module in it.
fn node(name: String, rest: &str) -> String {
    match rest.strip_prefix("::") {
        Some(inner) if FOLDERS.contains(&name.as_str()) => {
            let module: String = inner
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if module.is_empty() {
                name
            } else {
                format!("{name}::{module}")
            }
        }
        _ => name,
    }
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("el2/src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The production text of a source file: up to its first test module,
/// without comment lines.
fn production_code(text: &str) -> String {
    let end = text.find("#[cfg(test)]").unwrap_or(text.len());
    text[..end]
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules a piece of code names through `crate::`.
fn named_modules(code: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect()
    };
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a, b::c, d::{e, f}}`: the names at depth one.
            let mut depth = 1;
            let mut expect_name = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => expect_name = true,
                    c if expect_name && depth == 1 && c.is_ascii_lowercase() => {
                        let name = ident(&group[i..]);
                        let after = &group[i + name.len()..];
                        named.insert(node(name, after));
                        expect_name = false;
                    }
                    c if !c.is_whitespace() => expect_name = false,
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                let after = &rest[name.len()..];
                named.insert(node(name, after));
            }
        }
    }
    named
}

fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(&root).expect("under src");
        let mut parts = relative
            .components()
            .filter_map(|c| c.as_os_str().to_str())
            .map(|p| p.trim_end_matches(".rs").to_string());
        let first = parts.next().expect("a UTF-8 path");
        let module = match parts.next() {
            Some(second) if FOLDERS.contains(&first.as_str()) && second != "mod" => {
                format!("{first}::{second}")
            }
            _ => first,
        };
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if OUTSIDE.contains(&module.as_str()) || name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let text = fs::read_to_string(&file).expect("a readable source file");
        let edges = graph.entry(module.clone()).or_default();
        for target in named_modules(&production_code(&text)) {
            if target != module && !OUTSIDE.contains(&target.as_str()) {
                edges.insert(target);
            }
        }
    }
    graph
}

/// A cycle reachable from `start`, as the path that closes it.
fn cycle_from(
    graph: &BTreeMap<String, BTreeSet<String>>,
    node: &str,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(at) = path.iter().position(|n| n == node) {
        let mut cycle = path[at..].to_vec();
        cycle.push(node.to_string());
        return Some(cycle);
    }
    if done.contains(node) {
        return None;
    }
    path.push(node.to_string());
    for next in graph.get(node).into_iter().flatten() {
        if let Some(cycle) = cycle_from(graph, next, path, done) {
            return Some(cycle);
        }
    }
    path.pop();
    done.insert(node.to_string());
    None
}

#[test]
fn the_portable_modules_form_a_dag() {
    let graph = module_graph();
    // The spine is there: the reader found the modules and their uses.
    assert!(graph.len() > 15, "{graph:?}");
    assert!(
        graph["services::smccc"].contains("services::pv"),
        "{graph:?}"
    );
    let mut done = BTreeSet::new();
    for module in graph.keys() {
        if let Some(cycle) = cycle_from(&graph, module, &mut Vec::new(), &mut done) {
            panic!(
                "import cycle in el2: {} (every edge: {graph:?})",
                cycle.join(" -> ")
            );
        }
    }
}

#[test]
fn the_reader_sees_paths_and_groups() {
    let code = "use crate::a::B;\nuse crate::{b, c::D, d::{e, f}};\nfn g() { crate::h::i(); }";
    let named: Vec<String> = named_modules(code).into_iter().collect();
    assert_eq!(named, ["a", "b", "c", "d", "h"]);
    // A module inside a grouping folder is a node of its own.
    let code = "use crate::services::pv::X;\nuse crate::trap::{exit, esr};\nuse crate::sched::Y;";
    let named: Vec<String> = named_modules(code).into_iter().collect();
    assert_eq!(named, ["sched", "services::pv", "trap"]);
    let code = "use crate::x;\n// use crate::y;\n#[cfg(test)]\nmod tests { use crate::z; }";
    let named: Vec<String> = named_modules(&production_code(code)).into_iter().collect();
    assert_eq!(named, ["x"]);
    // A cycle is found and named.
    let mut graph = BTreeMap::new();
    for (from, to) in [("p", "q"), ("q", "r"), ("r", "p"), ("s", "p")] {
        graph
            .entry(from.to_string())
            .or_insert_with(BTreeSet::new)
            .insert(to.to_string());
    }
    let cycle = cycle_from(&graph, "s", &mut Vec::new(), &mut BTreeSet::new());
    assert_eq!(cycle.expect("a cycle").join(" -> "), "p -> q -> r -> p");
}
