//! `bench/draw.test.mjs` (the benchmark's SVG writer against a result shaped as
//! `bench/run.mjs` writes it, on node's own test runner), run by the suite so that it is
//! never a test that nothing runs.

use std::path::Path;

#[path = "javascript/node.rs"]
mod node;

#[test]
fn the_benchmark_draws_a_result_as_its_tests_expect() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let run =
        node::node().current_dir(root).args(["--test", "bench/draw.test.mjs"]).output().expect("run node");
    let report = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "node --test bench/draw.test.mjs failed:\n{report}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(report.contains("# fail 0") && !report.contains("# pass 0"), "{report}");
}
