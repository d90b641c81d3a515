//! Node, for the suite's tests of the project's JavaScript: a missing Node fails the test
//! with the command that installs what it needs, never a quiet skip.

use std::path::Path;
use std::process::Command;

pub fn node() -> Command {
    let probe = Command::new("node").arg("--version").output();
    assert!(
        probe.is_ok_and(|out| out.status.success()),
        "these tests need Node 20: run ./scripts/setup.sh (the base image has it), or ./scripts/test.sh"
    );
    Command::new("node")
}

/// Runs `node --test file` from the repository root and asserts that it ran tests and none
/// failed.
#[allow(dead_code)] // each test binary that includes this file uses what it needs
pub fn node_tests_pass(file: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let run = node().current_dir(root).args(["--test", file]).output().expect("run node");
    let report = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "node --test {file} failed:\n{report}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(report.contains("# fail 0") && !report.contains("# pass 0"), "{report}");
}
