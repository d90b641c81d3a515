//! The core's layering, read from its sources: no import cycle runs through `src/core`, each
//! layer imports only its own layer and the layers below it, and every module lives in a
//! layer's folder.
//!
//! A module is a layer's direct child with everything under it (`key_rules::machine` holds
//! `key_rules/machine/async_job.rs`), or, outside any layer, a top-level module of the core.
//! Its imports are the `crate::core::…` and `super::…` paths of its non-test code (use
//! declarations and paths written in place), with comments, strings and `#[cfg(test)]`
//! items removed; test-only files (`tests.rs`, `*_tests.rs`, `known_answers.rs`) and the
//! core's test and fuzz helpers (`format_fixtures`, `fuzz_checks`) are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The layers, lowest first. Each folder's `mod.rs` says what the layer owns.
const LAYERS: [&str; 5] = ["primitives", "vocabulary", "formats", "key_rules", "edge_rules"];

/// The core's top-level modules that are neither a layer nor shipped: test and fuzz helpers.
const HELPERS: [&str; 2] = ["format_fixtures", "fuzz_checks"];

fn core_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/core")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("src/core is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn is_test_file(name: &str) -> bool {
    name == "tests.rs" || name.ends_with("_tests.rs") || name == "known_answers.rs"
}

/// The module path of a file under `src/core`: `key_rules/machine.rs` is
/// `[key_rules, machine]`, `key_rules/mod.rs` is `[key_rules]`.
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().expect("a file name");
    if last != "mod.rs" {
        parts.push(last.trim_end_matches(".rs").to_owned());
    }
    parts
}

/// The module a path belongs to: a layer's child, or a top-level module outside the layers.
fn unit_of(path: &[String]) -> Option<String> {
    match path {
        [layer, module, ..] if LAYERS.contains(&layer.as_str()) => Some(format!("{layer}::{module}")),
        [layer] if LAYERS.contains(&layer.as_str()) => None,
        [module, ..] => Some(module.clone()),
        [] => None,
    }
}

/// The source without comments, string and character literals, and `#[cfg(test)]` items.
fn code_only(source: &str) -> String {
    let bytes = source.as_bytes();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &source[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            let mut depth = 0;
            while i < bytes.len() {
                if source[i..].starts_with("/*") {
                    depth += 1;
                    i += 2;
                } else if source[i..].starts_with("*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if rest.starts_with("r#\"") || rest.starts_with("r\"") {
            let hashes = rest[1..].bytes().take_while(|&b| b == b'#').count();
            let close = format!("\"{}", "#".repeat(hashes));
            let body = 2 + hashes;
            i += body + rest[body..].find(&close).map_or(rest.len() - body, |end| end + close.len());
            out.push_str("\"\"");
        } else if bytes[i] == b'"' {
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if bytes[i] == b'\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if bytes.get(i + 1) == Some(&b'\\') {
                i += 2 + rest[2..].find('\'').map_or(0, |end| end + 1);
            } else if bytes.get(i + 2) == Some(&b'\'') {
                i += 3;
            } else if rest.chars().nth(2) == Some('\'') {
                i += 1 + rest[1..].find('\'').map_or(0, |end| end + 1);
            } else {
                out.push('\'');
                i += 1;
            }
        } else if rest.starts_with("#[cfg(test)]") {
            i += "#[cfg(test)]".len();
            // Skip the item: up to its `;`, or through its first brace block.
            while i < bytes.len() && bytes[i] != b';' && bytes[i] != b'{' {
                i += 1;
            }
            if i < bytes.len() && bytes[i] == b'{' {
                let mut depth = 0;
                while i < bytes.len() {
                    match bytes[i] {
                        b'{' => depth += 1,
                        b'}' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
            }
            i += 1;
        } else {
            let ch = rest.chars().next().expect("a character");
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The first two segments of every path a use tree starting at `at` names, each appended to
/// `prefix` (`super::{a, b::{c, d}}` names `a` and `b`).
fn tree_heads(code: &str, at: usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let bytes = code.as_bytes();
    let mut i = at;
    let mut path = prefix.to_vec();
    loop {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i < bytes.len() && bytes[i] == b'{' {
            // A group: each branch up to the matching brace, split at top-level commas.
            let mut depth = 0;
            let mut start = i + 1;
            while i < bytes.len() {
                match bytes[i] {
                    b'{' => depth += 1,
                    b'}' | b',' if depth == 1 => {
                        tree_heads(code, start, &path, out);
                        start = i + 1;
                        if bytes[i] == b'}' {
                            return;
                        }
                    }
                    b'}' => depth -= 1,
                    _ => {}
                }
                i += 1;
            }
            return;
        }
        let start = i;
        while i < bytes.len() && is_ident_byte(bytes[i]) {
            i += 1;
        }
        let segment = &code[start..i];
        if segment.is_empty() || segment == "self" {
            break;
        }
        if segment == "super" {
            path.pop();
        } else {
            path.push(segment.to_owned());
        }
        if !code[i..].starts_with("::") {
            break;
        }
        i += 2;
    }
    out.push(path);
}

/// Every module of the core with the modules it imports.
fn import_graph() -> BTreeMap<String, BTreeSet<String>> {
    let core = core_dir();
    let mut files = Vec::new();
    rust_files(&core, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(&core).expect("under src/core").to_path_buf();
        let name = relative.file_name().expect("a file name").to_string_lossy().into_owned();
        let path = module_path(&relative);
        if is_test_file(&name) || path.first().is_some_and(|m| HELPERS.contains(&m.as_str())) {
            continue;
        }
        let Some(unit) = unit_of(&path) else { continue };
        let imports = graph.entry(unit.clone()).or_default();
        let code = code_only(&fs::read_to_string(&file).expect("a readable source"));
        let bytes = code.as_bytes();
        for (needle, base) in [("crate::core::", Vec::new()), ("super::", path[..path.len() - 1].to_vec())] {
            let mut from = 0;
            while let Some(found) = code[from..].find(needle) {
                let at = from + found;
                from = at + needle.len();
                if at > 0 && (is_ident_byte(bytes[at - 1]) || bytes[at - 1] == b':') {
                    continue;
                }
                let mut heads = Vec::new();
                tree_heads(&code, at + needle.len(), &base, &mut heads);
                for head in heads {
                    if let Some(target) = unit_of(&head) {
                        if target != unit && !HELPERS.contains(&target.as_str()) {
                            imports.insert(target);
                        }
                    }
                }
            }
        }
    }
    // Only modules that exist: a path may end in an item of a layer's `mod.rs`.
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for imports in graph.values_mut() {
        imports.retain(|target| modules.contains(target));
    }
    graph
}

/// Strongly connected components (Tarjan), each sorted.
fn components(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(state: &mut State<'a>, v: &'a str) {
        let next = state.index.len();
        state.index.insert(v, next);
        state.low.insert(v, next);
        state.stack.push(v);
        state.on_stack.insert(v);
        for w in &state.graph[v] {
            if !state.index.contains_key(w.as_str()) {
                visit(state, w);
                let low = state.low[v].min(state.low[w.as_str()]);
                state.low.insert(v, low);
            } else if state.on_stack.contains(w.as_str()) {
                let low = state.low[v].min(state.index[w.as_str()]);
                state.low.insert(v, low);
            }
        }
        if state.low[v] == state.index[v] {
            let mut component = Vec::new();
            loop {
                let w = state.stack.pop().expect("v is on the stack");
                state.on_stack.remove(w);
                component.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            component.sort();
            state.out.push(component);
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !state.index.contains_key(v.as_str()) {
            visit(&mut state, v);
        }
    }
    state.out
}

#[test]
fn no_import_cycle_runs_through_the_core() {
    let graph = import_graph();
    // The reader finds the imports it should: a graph without edges would pass vacuously.
    let edges: usize = graph.values().map(BTreeSet::len).sum();
    assert!(
        graph.len() >= 30 && edges >= 80,
        "{} modules, {edges} imports: the reader lost them",
        graph.len()
    );
    let cycles: Vec<String> = components(&graph)
        .into_iter()
        .filter(|component| component.len() > 1)
        .map(|component| {
            let edges: Vec<String> = component
                .iter()
                .map(|m| {
                    let inside: Vec<&str> =
                        graph[m].iter().filter(|t| component.contains(t)).map(String::as_str).collect();
                    format!("  {m} -> {}", inside.join(", "))
                })
                .collect();
            format!("{} modules import each other:\n{}", component.len(), edges.join("\n"))
        })
        .collect();
    assert!(cycles.is_empty(), "import cycles in src/core:\n{}", cycles.join("\n"));
}

#[test]
fn each_layer_imports_only_itself_and_the_layers_below() {
    let graph = import_graph();
    let rank = |unit: &str| LAYERS.iter().position(|layer| unit.split("::").next() == Some(layer));
    let mut upward = Vec::new();
    for (module, imports) in &graph {
        let Some(from) = rank(module) else { continue };
        for target in imports {
            if rank(target).is_none_or(|to| to > from) {
                upward.push(format!("{module} -> {target}"));
            }
        }
    }
    assert!(upward.is_empty(), "imports of a higher layer (or of no layer):\n  {}", upward.join("\n  "));
}

#[test]
fn every_core_module_lives_in_a_layer() {
    let mut outside = Vec::new();
    for entry in fs::read_dir(core_dir()).expect("src/core is readable") {
        let path = entry.expect("a directory entry").path();
        let name = path.file_name().expect("a name").to_string_lossy().into_owned();
        let allowed = if path.is_dir() {
            LAYERS.contains(&name.as_str()) || name == "testdata"
        } else {
            name == "mod.rs" || HELPERS.iter().any(|helper| name == format!("{helper}.rs"))
        };
        if !allowed {
            outside.push(name);
        }
    }
    outside.sort();
    assert!(outside.is_empty(), "src/core entries outside the layers {LAYERS:?}: {outside:?}");
    for layer in LAYERS {
        let doc = fs::read_to_string(core_dir().join(layer).join("mod.rs")).expect("each layer has a mod.rs");
        assert!(
            doc.starts_with("//!") && doc.contains("May import"),
            "{layer}/mod.rs says what it may import"
        );
    }
}
