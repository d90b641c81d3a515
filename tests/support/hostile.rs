//! Hostile requests that must be refused before anything is claimed or forwarded, with the
//! answer each one must get. Shared by `reliability.rs` (one assertion per case), the
//! storage test and `reliability_run.rs` (counted in the run's summary).
//!
//! Every case uses its own path, so "nothing forwarded" is checked exactly: the test
//! origin counts requests per path.

use super::assert::{check_problem, is_problem};
use super::http::{send_raw, Request, Response};
use super::origin::Origin;
use super::requests::{request, secret, unique, DEFAULT_CREDENTIAL};
use super::worker::past_dev_proxy;
use std::net::SocketAddr;
use std::time::Duration;

/// How a case is put on the wire.
#[derive(Clone)]
pub enum Wire {
    Request(Request),
    /// A whole HTTP/1.1 message, for framing a well-formed request cannot express.
    Raw(Vec<u8>),
}

/// The answer a case must get.
#[derive(Clone, Copy, Debug)]
pub enum Expect {
    /// The worker's own refusal: this status, `application/problem+json`, this kind.
    Problem(u16, &'static str),
    /// Refused by the HTTP server in front of the worker (workerd's parser), before the
    /// worker runs: one of these statuses, not a problem+json body (the worker never saw it).
    HttpLayer(&'static [u16]),
}

#[derive(Clone)]
pub struct BadInput {
    pub label: &'static str,
    pub path: String,
    pub wire: Wire,
    pub expect: Expect,
}

impl BadInput {
    /// Sends the case once and checks the answer and that the origin saw nothing at this
    /// path. `Err` says what was wrong (never the raw key or body).
    pub fn check(&self, addr: SocketAddr, origin: &Origin) -> Result<(), String> {
        let answer = self.send(addr);
        let result = match (&answer, self.expect) {
            (Err(e), _) => Err(format!("{}: no answer ({e})", self.label)),
            (Ok(r), Expect::Problem(status, kind)) => check_problem(r, status, kind),
            (Ok(r), Expect::HttpLayer(statuses)) => {
                if !statuses.contains(&r.status) {
                    Err(format!("expected one of {statuses:?} from the HTTP layer, got HTTP {}", r.status))
                } else if is_problem(r) {
                    Err(format!("expected the HTTP layer to refuse it, but the worker answered {}", r.status))
                } else {
                    Ok(())
                }
            }
        };
        let result = result.map_err(|e| format!("{}: {e}", self.label));
        let forwarded = origin.executions_at(&self.path);
        if forwarded != 0 {
            return Err(format!("{}: forwarded to the origin {forwarded} time(s)", self.label));
        }
        result
    }

    /// Sends the case, past wrangler dev's proxy's own 503 (`past_dev_proxy`): the worker
    /// never had that request, and a hostile case is refused without a claim, so sending it
    /// again changes nothing the check counts.
    pub fn send(&self, addr: SocketAddr) -> std::io::Result<Response> {
        match &self.wire {
            Wire::Request(r) => past_dev_proxy(addr, self.label, || r.send(addr)),
            Wire::Raw(bytes) => {
                past_dev_proxy(addr, self.label, || send_raw(addr, bytes, Duration::from_secs(60)))
            }
        }
    }
}

fn path(tag: &str) -> String {
    format!("/v1/hostile/{}", unique(tag))
}

fn post(path: &str) -> Request {
    request("POST", path).json(r#"{"amount":1}"#)
}

fn with_key(path: &str, key: &[u8]) -> Request {
    post(path).header("Idempotency-Key", key)
}

/// Every hostile case, for a worker whose `MAX_BODY_BYTES` is `max_body`.
pub fn bad_inputs(max_body: usize) -> Vec<BadInput> {
    let invalid = Expect::Problem(400, "invalid-key");
    let too_large = Expect::Problem(413, "body-too-large");
    let mut cases = Vec::new();
    let mut add = |label: &'static str, path: String, wire: Wire, expect: Expect| {
        cases.push(BadInput { label, path, wire, expect });
    };

    // Keys.
    let p = path("missing");
    add("no Idempotency-Key", p.clone(), Wire::Request(post(&p)), Expect::Problem(400, "missing-key"));
    let p = path("empty");
    add("empty key", p.clone(), Wire::Request(with_key(&p, b"")), invalid);
    let p = path("blank");
    add("whitespace-only key", p.clone(), Wire::Request(with_key(&p, b"   \t  ")), invalid);
    let p = path("long");
    let long = format!("{}{}", secret("k"), "k".repeat(256));
    add("key over 255 characters", p.clone(), Wire::Request(with_key(&p, long.as_bytes())), invalid);
    let p = path("huge");
    let huge = format!("{}{}", secret("k"), "k".repeat(8000));
    add("key of 8 KB", p.clone(), Wire::Request(with_key(&p, huge.as_bytes())), invalid);
    for (label, byte) in
        [("control character 0x01 in key", 0x01u8), ("DEL in key", 0x7f), ("ESC in key", 0x1b)]
    {
        let p = path("ctl");
        let key = [secret("k").as_bytes(), &[byte], b"x"].concat();
        add(label, p.clone(), Wire::Request(with_key(&p, &key)), invalid);
    }
    let p = path("tab");
    add(
        "tab inside key",
        p.clone(),
        Wire::Request(with_key(&p, format!("{}\tx", secret("k")).as_bytes())),
        invalid,
    );
    // NUL and a bare CR are not valid in an HTTP field: the HTTP server refuses them.
    let p = path("nul");
    let key = [secret("k").as_bytes(), b"\0x"].concat();
    add("NUL in key", p.clone(), Wire::Request(with_key(&p, &key)), Expect::HttpLayer(&[400]));
    let p = path("cr");
    let key = [secret("k").as_bytes(), b"\rx"].concat();
    add("bare CR in key", p.clone(), Wire::Request(with_key(&p, &key)), Expect::HttpLayer(&[400]));
    let p = path("utf8");
    add(
        "non-ASCII key (UTF-8)",
        p.clone(),
        Wire::Request(with_key(&p, format!("{}-clé", secret("k")).as_bytes())),
        invalid,
    );
    let p = path("latin1");
    let key = [secret("k").as_bytes(), b"-cl\xe9"].concat();
    add("non-ASCII key (Latin-1 byte)", p.clone(), Wire::Request(with_key(&p, &key)), invalid);
    let p = path("esc");
    add("sf-string with a bad escape", p.clone(), Wire::Request(with_key(&p, br#""abc\x""#)), invalid);
    let p = path("esc2");
    add("sf-string ending in a backslash", p.clone(), Wire::Request(with_key(&p, b"\"abc\\\"")), invalid);
    let p = path("unterminated");
    let key = format!("\"{}", secret("k"));
    add("unterminated sf-string", p.clone(), Wire::Request(with_key(&p, key.as_bytes())), invalid);
    let p = path("comma");
    let key = format!("{},x", secret("k"));
    add("bare key with a comma", p.clone(), Wire::Request(with_key(&p, key.as_bytes())), invalid);
    let p = path("two");
    let req = post(&p).header("Idempotency-Key", secret("k")).header("Idempotency-Key", secret("k"));
    add("two Idempotency-Key headers", p.clone(), Wire::Request(req), invalid);
    let p = path("twosame");
    let k = secret("k");
    let req = post(&p).header("Idempotency-Key", &k).header("Idempotency-Key", &k);
    add("the same key twice", p.clone(), Wire::Request(req), invalid);
    let p = path("many");
    let mut req = post(&p);
    for _ in 0..50 {
        req = req.header("Idempotency-Key", secret("k"));
    }
    add("fifty Idempotency-Key headers", p.clone(), Wire::Request(req), invalid);

    // Bodies over the limit.
    let p = path("big");
    let req = request("POST", &p)
        .header("Idempotency-Key", secret("k"))
        .header("Content-Type", "application/json")
        .body(vec![b' '; max_body + 1]);
    add("body over the limit, Content-Length", p.clone(), Wire::Request(req), too_large);
    let p = path("bigchunked");
    let req = request("POST", &p)
        .header("Idempotency-Key", secret("k"))
        .header("Content-Type", "text/plain")
        .body(vec![b'x'; max_body + 2000])
        .chunked();
    add("body over the limit, chunked", p.clone(), Wire::Request(req), too_large);
    let p = path("clte");
    let mut raw = format!(
        "POST {p} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {DEFAULT_CREDENTIAL}\r\nIdempotency-Key: {}\r\nContent-Type: text/plain\r\nContent-Length: 10\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        secret("k")
    )
    .into_bytes();
    for chunk in vec![b'y'; max_body + 2000].chunks(1000) {
        raw.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        raw.extend_from_slice(chunk);
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    add("chunked body over the limit with a small Content-Length too", p.clone(), Wire::Raw(raw), too_large);
    cases
}
