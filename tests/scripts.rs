//! The repository's own scripts, tested through Node's test runner so that none is a test
//! that nothing runs: `scripts/release.test.mjs` (the release and deploy flow of
//! `scripts/release.mjs` against stand-ins for wrangler, the conformance checker and the
//! Analytics Engine SQL API on loopback).

use std::path::Path;

#[path = "javascript/node.rs"]
mod node;

#[test]
fn the_release_script_promotes_rolls_back_and_refuses_as_docs_deploy_says() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let file = "scripts/release.test.mjs";
    let run = node::node().current_dir(root).args(["--test", file]).output().expect("run node");
    let report = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "node --test {file} failed:\n{report}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(report.contains("# fail 0") && !report.contains("# pass 0"), "{report}");
}
