//! Node, for the suite's tests of the project's JavaScript: a missing Node fails the test
//! with the command that installs what it needs, never a quiet skip.

use std::process::Command;

pub fn node() -> Command {
    let probe = Command::new("node").arg("--version").output();
    assert!(
        probe.is_ok_and(|out| out.status.success()),
        "these tests need Node 20: run ./scripts/setup.sh (the base image has it), or ./scripts/test.sh"
    );
    Command::new("node")
}
