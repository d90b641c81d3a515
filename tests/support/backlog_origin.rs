//! An origin with a small listen backlog: `backlog_origin.py` (Python's `http.server`, as
//! many payment origins run it), started for one test and stopped when dropped. The Rust
//! test origin cannot stand in for it: std's `TcpListener` chooses its own backlog, and an
//! accept loop in Rust drains the queue far faster than Python's.
//!
//! With a full accept queue the kernel drops a new SYN and the client sends it again after
//! 1 s, then 3 s and 7 s: a burst of new connections meets a second's delay, not a refusal.

use super::http::Request;
use super::worker::repo_root;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct BacklogOrigin {
    child: Child,
    addr: SocketAddr,
}

impl BacklogOrigin {
    /// Starts `python3 tests/support/backlog_origin.py BACKLOG` on a free loopback port.
    pub fn start(backlog: u32) -> BacklogOrigin {
        let mut child = Command::new("python3")
            .arg(repo_root().join("tests/support/backlog_origin.py"))
            .arg(backlog.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("the small-backlog origin needs python3 on PATH: {e}"));
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped stdout");
        BufReader::new(stdout).read_line(&mut line).expect("read the origin's port");
        let port: u16 = line.trim().parse().unwrap_or_else(|_| panic!("backlog_origin.py printed {line:?}"));
        BacklogOrigin { child, addr: SocketAddr::from(([127, 0, 0, 1], port)) }
    }

    /// `http://127.0.0.1:PORT`, for `ORIGIN_URL`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Executions per key so far (keys as forwarded, quotes stripped).
    pub fn executions(&self) -> HashMap<String, usize> {
        let r = Request::get("/__executions")
            .timeout(Duration::from_secs(60))
            .send(self.addr)
            .unwrap_or_else(|e| panic!("ask the small-backlog origin for its executions: {e}"));
        serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("its executions are not JSON ({e}): {r:?}"))
    }
}

impl Drop for BacklogOrigin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
