//! A payment origin that verifies the edge's RFC 9421 signature with an implementation not
//! ours: `signature_origin.py`, on Python's `http-message-signatures` (which
//! `scripts/setup.sh` installs under `.tools/python`), started for one instance and stopped
//! when dropped. It refuses (401) every request whose signature does not verify, and
//! reports what it concluded of each ([`SignatureOrigin::verdicts`]).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use super::http::Request;
use super::worker::repo_root;

pub struct SignatureOrigin {
    child: Child,
    addr: SocketAddr,
    /// The origin's stdin, never written: it exits when this closes, which the test
    /// process's end does even where nothing drops this value (a shared origin in a
    /// `static`).
    _alive: ChildStdin,
}

/// What the origin concluded of one request.
#[derive(Clone, Debug)]
pub struct Verdict {
    pub method: String,
    pub path: String,
    /// Whether the signature verified (and its nonce was new).
    pub ok: bool,
    /// Why not, as the library said.
    pub why: Option<String>,
    /// The protection the verified request carried (`protected`, `passed`).
    pub protection: Option<String>,
    /// The key header's value, or the lookup's key.
    pub key: Option<String>,
}

impl SignatureOrigin {
    /// Starts `python3 tests/support/signature_origin.py SECRET` on a free loopback port.
    pub fn start(secret: &str) -> SignatureOrigin {
        let root = repo_root();
        let mut child = Command::new("python3")
            .arg(root.join("tests/support/signature_origin.py"))
            .arg(secret)
            .env("PYTHONPATH", root.join(".tools/python"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("the RFC 9421 verifying origin needs python3 on PATH: {e}"));
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped stdout");
        BufReader::new(stdout).read_line(&mut line).expect("read the origin's port");
        let Ok(port) = line.trim().parse::<u16>() else {
            let mut why = String::new();
            if let Some(stderr) = child.stderr.take() {
                let _ = BufReader::new(stderr).read_line(&mut why);
            }
            panic!(
                "tests/support/signature_origin.py did not start ({why:?}): it needs Python's \
                 http-message-signatures under .tools/python; run ./scripts/setup.sh"
            );
        };
        let alive = child.stdin.take().expect("piped stdin");
        SignatureOrigin { child, addr: SocketAddr::from(([127, 0, 0, 1], port)), _alive: alive }
    }

    /// `http://127.0.0.1:PORT`, for `ORIGIN_URL`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The lookup's template, for a route's `reconcile_url`.
    pub fn reconcile_url(&self) -> String {
        format!("{}/v1/lookup?idempotency_key={{key}}", self.url())
    }

    /// What it concluded of every request so far.
    pub fn verdicts(&self) -> Vec<Verdict> {
        let r = Request::get("/__verdicts")
            .timeout(Duration::from_secs(60))
            .send(self.addr)
            .unwrap_or_else(|e| panic!("ask the verifying origin for its verdicts: {e}"));
        let all: Vec<serde_json::Value> = serde_json::from_slice(&r.body)
            .unwrap_or_else(|e| panic!("its verdicts are not JSON ({e}): {r:?}"));
        let text = |v: &serde_json::Value, name: &str| v[name].as_str().map(str::to_owned);
        all.iter()
            .map(|v| Verdict {
                method: text(v, "method").unwrap_or_default(),
                path: text(v, "path").unwrap_or_default(),
                ok: v["ok"].as_bool().unwrap_or(false),
                why: text(v, "why"),
                protection: text(v, "protection"),
                key: text(v, "key"),
            })
            .collect()
    }
}

impl Drop for SignatureOrigin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
