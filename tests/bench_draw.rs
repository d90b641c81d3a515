//! The benchmark's own node tests, run by the suite so that none is a test that nothing runs:
//! `bench/draw.test.mjs` (the SVG writer against a result shaped as `bench/run.mjs` writes
//! it) and `bench/wasm.test.mjs` (the measuring tools' wasm-opt settings against
//! `scripts/build.sh`'s).

use std::path::Path;

#[path = "javascript/node.rs"]
mod node;

/// Runs `node --test file` from the repository root and asserts that it ran tests and none
/// failed.
fn node_tests_pass(file: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let run = node::node().current_dir(root).args(["--test", file]).output().expect("run node");
    let report = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "node --test {file} failed:\n{report}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(report.contains("# fail 0") && !report.contains("# pass 0"), "{report}");
}

#[test]
fn the_benchmark_draws_a_result_as_its_tests_expect() {
    node_tests_pass("bench/draw.test.mjs");
}

#[test]
fn the_measuring_tools_optimise_the_wasm_as_the_build_does() {
    node_tests_pass("bench/wasm.test.mjs");
}
