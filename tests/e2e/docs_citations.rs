//! The documentation cites tests by name (`docs/reliability.md` most of all): every name it
//! cites must be a function of the test code or the core, so that a renamed or removed test
//! cannot leave a claim without its proof. No worker is started.

use std::fs;
use std::path::Path;

use crate::support::worker::repo_root;

/// Every `fn name` in the Rust files under `dir`.
fn functions_under(dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            functions_under(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = fs::read_to_string(&path).unwrap_or_default();
            for part in text.split("fn ").skip(1) {
                let name: String =
                    part.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                out.push(name);
            }
        }
    }
}

/// The test names a document cites: backticked `module::name` paths whose name has three
/// words or more, and backticked snake_case names of four words or more (shorter ones are
/// variables, members and methods).
fn cited_names(text: &str) -> Vec<String> {
    // Fenced code blocks (three backticks) would upset the pairing of inline ones.
    let mut prose = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    let mut names = Vec::new();
    for (i, quoted) in prose.split('`').enumerate() {
        if i % 2 == 0 {
            continue;
        }
        let name = quoted.rsplit("::").next().unwrap_or_default();
        let snake = name.starts_with(|c: char| c.is_ascii_lowercase())
            && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        let qualified = quoted.contains("::")
            && quoted.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
        let words = name.matches('_').count() + 1;
        if snake && ((qualified && words >= 3) || words >= 4) {
            names.push(name.to_string());
        }
    }
    names
}

#[test]
fn every_test_the_docs_cite_exists() {
    let root = repo_root();
    let mut functions = Vec::new();
    functions_under(&root.join("src"), &mut functions);
    functions_under(&root.join("tests"), &mut functions);
    let mut documents = vec![root.join("README.md")];
    documents.extend(fs::read_dir(root.join("docs")).expect("docs/").flatten().map(|e| e.path()));
    let mut cited = 0;
    let mut missing = Vec::new();
    for document in documents.iter().filter(|p| p.extension().is_some_and(|e| e == "md")) {
        let text = fs::read_to_string(document).unwrap_or_default();
        for name in cited_names(&text) {
            cited += 1;
            if !functions.contains(&name) {
                missing.push(format!(
                    "{}: `{name}`",
                    document.strip_prefix(&root).unwrap_or(document).display()
                ));
            }
        }
    }
    assert!(cited >= 20, "docs/reliability.md cites its tests; found only {cited} names");
    assert!(missing.is_empty(), "cited but no such fn:\n{}", missing.join("\n"));
}
