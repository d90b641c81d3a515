//! The test origin: a threaded HTTP/1.1 server on loopback that counts executions and is
//! steered by request headers.
//!
//! Control headers (the worker forwards end-to-end headers):
//! - `x-test-delay-ms: N`   sleep N ms before answering (or before closing, with reset);
//! - `x-test-status: N`     answer with status N (default 201 for POST/PATCH, 200 otherwise);
//! - `x-test-retry-after: N` add `Retry-After: N`;
//! - `x-test-response-headers: A: 1 | B: 2` add these header lines, in order (one request
//!   header, since a runtime may join repeated ones with `", "`);
//! - `x-test-connection: a, b` answer `Connection: close, a, b` (naming more hop-by-hop
//!   headers);
//! - `x-test-reset: 1`      read the request, count it, then close without answering;
//! - `x-test-stall-body-ms: N` send the head and half the body, stall N ms, then close
//!   without sending the rest (the declared `Content-Length` is never reached);
//! - `x-test-stall-body-at-gate: NAME` the same, but the stall lasts until the gate NAME is
//!   released (the gate reports when the worker gave up and closed the connection);
//! - `x-test-released: 1`   add `Idempotency-Released: true` (the origin confirms that it
//!   did not execute the request);
//! - `x-test-pad-bytes: N`  add a `pad` member of N bytes to the JSON body (large answers);
//! - `x-test-answer-bytes: N` answer exactly N bytes of `application/octet-stream` instead of
//!   JSON: pseudo-random, drawn from the execution's serial number (see [`answer_bytes`]), so
//!   two executions never answer alike and a moved or repeated chunk shows;
//! - `x-test-hold: NAME`    hold the request at the gate NAME (see [`Gate`]) until the test
//!   releases it, then carry on with the other control headers.
//!
//! A [`Gate`] is how a test knows, without sleeping, where a request is: the origin reports
//! every arrival at the gate (a condition variable, [`Gate::wait_arrived`]), holds the
//! request for as long as the test wants, and reports when the worker gave up on a held
//! request and closed its connection ([`Gate::wait_abandoned`]). The origin also reports
//! every answer it has written ([`Origin::wait_for_answers`]).
//!
//! [`Origin::stop`] closes the listening socket (connections are refused) and
//! [`Origin::resume`] listens on the same port again, with the same counts.
//!
//! An execution is counted once the whole request has been read, per raw
//! `Idempotency-Key` value as received, per request target, and in total.

use super::http::{decode_chunked, find_head_end, header_value, is_chunked, parse_header_lines, split_lines};
use super::worker::bind_free_port;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

/// Serial numbers of executions, unique across every origin in the process.
static SERIAL: AtomicU64 = AtomicU64::new(0);

/// Gates: serial numbers of gates, unique across every origin in the process.
static GATES: AtomicU64 = AtomicU64::new(0);

/// The longest a request is held at a gate that is never released: a failed test must not
/// leave connections hanging for ever.
const LONGEST_HOLD: Duration = Duration::from_secs(300);

#[derive(Default)]
struct State {
    by_key: HashMap<String, usize>,
    by_target: HashMap<String, usize>,
    headers_by_key: HashMap<String, Vec<(String, String)>>,
    /// Answers written (whole head and body sent), per key as for `by_key`.
    answered_by_key: HashMap<String, usize>,
    gates: HashMap<String, GateState>,
    total: usize,
}

#[derive(Default)]
struct GateState {
    arrived: usize,
    /// Held now.
    held: usize,
    /// Held requests whose connection the worker closed while they were held.
    abandoned: usize,
    released: bool,
}

/// A test origin's state, and a condition variable that is notified on every change (this
/// origin's counts, and `ledger_origin`'s ledger).
pub(super) struct Shared<S> {
    state: Mutex<S>,
    changed: Condvar,
}

impl<S: Default> Default for Shared<S> {
    fn default() -> Self {
        Shared { state: Mutex::default(), changed: Condvar::new() }
    }
}

impl<S> Shared<S> {
    pub(super) fn lock(&self) -> MutexGuard<'_, S> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn update<T>(&self, change: impl FnOnce(&mut S) -> T) -> T {
        let out = change(&mut self.lock());
        self.changed.notify_all();
        out
    }

    /// Waits until `done` holds, at most `timeout`; returns whether it held.
    pub(super) fn wait_until(&self, timeout: Duration, done: impl Fn(&S) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.lock();
        loop {
            if done(&state) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            state = self.changed.wait_timeout(state, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

#[derive(Clone)]
pub struct Origin {
    addr: SocketAddr,
    state: Arc<Shared<State>>,
    listener: Arc<Mutex<Listening>>,
}

/// The accept loop that is running, if any.
#[derive(Default)]
struct Listening {
    stop: Option<Arc<AtomicBool>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Origin {
    /// Starts on a free loopback port, one that no other process is handed while this
    /// origin is paused ([`bind_free_port`]).
    pub fn start() -> Origin {
        Origin::serving(bind_free_port()).unwrap_or_else(|e| panic!("test origin: serve: {e}"))
    }

    /// Starts on 127.0.0.1:`port`.
    pub fn start_on(port: u16) -> io::Result<Origin> {
        Origin::serving(TcpListener::bind(("127.0.0.1", port))?)
    }

    fn serving(listener: TcpListener) -> io::Result<Origin> {
        let addr = listener.local_addr()?;
        let origin = Origin {
            addr,
            state: Arc::new(Shared::<State>::default()),
            listener: Arc::new(Mutex::new(Listening::default())),
        };
        origin.serve(listener)?;
        Ok(origin)
    }

    fn serve(&self, listener: TcpListener) -> io::Result<()> {
        let shared = self.state.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread =
            thread::Builder::new().name(format!("origin-{}", self.addr.port())).spawn(move || {
                for stream in listener.incoming() {
                    if stopping.load(Ordering::SeqCst) {
                        // Returning drops the listener: from now on connections are refused.
                        return;
                    }
                    let Ok(stream) = stream else { continue };
                    let state = shared.clone();
                    let _ = thread::Builder::new()
                        .name("origin-conn".to_string())
                        .spawn(move || handle(stream, state));
                }
            })?;
        *self.listener.lock().unwrap() = Listening { stop: Some(stop), thread: Some(thread) };
        Ok(())
    }

    /// Stops listening: until [`Origin::resume`], connecting to the origin is refused.
    /// Connections already accepted finish normally.
    pub fn stop(&self) {
        let mut listening = self.listener.lock().unwrap();
        let Some(stop) = listening.stop.take() else { return };
        stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so that it sees the flag and drops the socket.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(5));
        if let Some(thread) = listening.thread.take() {
            let _ = thread.join();
        }
    }

    /// Listens on the same port again (retrying for a while if the port is still busy).
    pub fn resume(&self) -> io::Result<()> {
        if self.listener.lock().unwrap().stop.is_some() {
            return Ok(());
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match TcpListener::bind(self.addr) {
                Ok(listener) => return self.serve(listener),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `http://127.0.0.1:PORT`, for `ORIGIN_URL`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.addr.port())
    }

    /// Executions received for `key`, whether it was forwarded bare (`abc`) or as an
    /// sf-string (`"abc"`). Keys in the tests are plain tokens, so both forms are exact.
    pub fn executions(&self, key: &str) -> usize {
        count_for_key(&self.state.lock().by_key, key)
    }

    /// Answers the origin has finished writing for `key` (bare or quoted form).
    pub fn answers(&self, key: &str) -> usize {
        count_for_key(&self.state.lock().answered_by_key, key)
    }

    /// Requests received for this exact request target (path and query).
    pub fn executions_at(&self, target: &str) -> usize {
        self.state.lock().by_target.get(target).copied().unwrap_or(0)
    }

    pub fn total(&self) -> usize {
        self.state.lock().total
    }

    /// Headers of the last request that carried `key` (bare or quoted form).
    pub fn last_headers(&self, key: &str) -> Option<Vec<(String, String)>> {
        let state = self.state.lock();
        let quoted = format!("\"{key}\"");
        state.headers_by_key.get(key).or_else(|| state.headers_by_key.get(&quoted)).cloned()
    }

    /// Waits (on the origin's notifications, no polling) until `key` has at least `n`
    /// executions; false if `timeout` passes first.
    pub fn wait_for_executions(&self, key: &str, n: usize, timeout: Duration) -> bool {
        self.state.wait_until(timeout, |state| count_for_key(&state.by_key, key) >= n)
    }

    /// Waits until the origin has written at least `n` whole answers for `key`.
    pub fn wait_for_answers(&self, key: &str, n: usize, timeout: Duration) -> bool {
        self.state.wait_until(timeout, |state| count_for_key(&state.answered_by_key, key) >= n)
    }

    /// A new gate on this origin (see [`Gate`]).
    pub fn gate(&self) -> Gate {
        let name = format!("gate-{}", GATES.fetch_add(1, Ordering::SeqCst) + 1);
        self.state.update(|state| {
            state.gates.insert(name.clone(), GateState::default());
        });
        Gate { name, shared: self.state.clone() }
    }
}

fn count_for_key(counts: &HashMap<String, usize>, key: &str) -> usize {
    let quoted = format!("\"{key}\"");
    counts.get(key).copied().unwrap_or(0) + counts.get(&quoted).copied().unwrap_or(0)
}

/// A place where the origin holds requests until the test releases them. A request takes
/// part when it carries `x-test-hold: <name>` ([`Gate::on`] adds it). The request is read
/// whole and counted as an execution first, so a held request has reached the origin.
///
/// Released, a gate lets every held request and every later one go on at once. Dropping a
/// gate releases it, so a failing test leaves nothing hanging.
pub struct Gate {
    name: String,
    shared: Arc<Shared<State>>,
}

impl Gate {
    pub const HEADER: &'static str = "x-test-hold";

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `request` with the header that holds it at this gate.
    pub fn on(&self, request: super::http::Request) -> super::http::Request {
        request.header(Self::HEADER, &self.name)
    }

    fn read<T>(&self, get: impl Fn(&GateState) -> T) -> T {
        get(self.shared.lock().gates.get(&self.name).expect("a gate lives as long as its origin"))
    }

    /// Requests that reached the gate so far.
    pub fn arrived(&self) -> usize {
        self.read(|gate| gate.arrived)
    }

    /// Requests held at the gate now.
    pub fn held(&self) -> usize {
        self.read(|gate| gate.held)
    }

    /// Held requests whose connection the worker closed while they were held (it gave up
    /// on the origin: a timeout).
    pub fn abandoned(&self) -> usize {
        self.read(|gate| gate.abandoned)
    }

    /// Waits until at least `n` requests reached the gate; false if `timeout` passes first.
    pub fn wait_arrived(&self, n: usize, timeout: Duration) -> bool {
        self.shared.wait_until(timeout, |state| state.gates.get(&self.name).is_some_and(|g| g.arrived >= n))
    }

    /// Waits until the worker closed the connections of at least `n` held requests.
    pub fn wait_abandoned(&self, n: usize, timeout: Duration) -> bool {
        self.shared.wait_until(timeout, |state| state.gates.get(&self.name).is_some_and(|g| g.abandoned >= n))
    }

    /// Waits until no request is held at the gate (after a release, every held request
    /// has gone on to its answer).
    pub fn wait_none_held(&self, timeout: Duration) -> bool {
        self.shared.wait_until(timeout, |state| state.gates.get(&self.name).is_some_and(|g| g.held == 0))
    }

    /// [`Gate::wait_arrived`] for one request, or a panic naming `what`.
    pub fn expect_arrival(&self, what: &str) {
        assert!(
            self.wait_arrived(1, Duration::from_secs(60)),
            "{what} never reached the test origin (gate {})",
            self.name
        );
    }

    /// Lets every held request go on, and every later one through without holding.
    pub fn release(&self) {
        self.shared.update(|state| {
            if let Some(gate) = state.gates.get_mut(&self.name) {
                gate.released = true;
            }
        });
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.release();
    }
}

/// Holds a request at its gate until the gate is released (or [`LONGEST_HOLD`] passes),
/// noting whether the worker closed the connection meanwhile.
fn hold(stream: &TcpStream, shared: &Shared<State>, name: &str) {
    let known = shared.lock().gates.contains_key(name);
    if !known {
        return;
    }
    shared.update(|state| {
        let gate = state.gates.entry(name.to_string()).or_default();
        gate.arrived += 1;
        gate.held += 1;
    });
    let deadline = Instant::now() + LONGEST_HOLD;
    let mut noticed_close = false;
    loop {
        let released = shared.lock().gates.get(name).is_none_or(|gate| gate.released);
        if released || Instant::now() >= deadline {
            break;
        }
        if !noticed_close && peer_closed(stream) {
            noticed_close = true;
            shared.update(|state| {
                if let Some(gate) = state.gates.get_mut(name) {
                    gate.abandoned += 1;
                }
            });
        }
        let state = shared.lock();
        // Woken by a release; the timeout only paces the check for a closed connection.
        let _ = shared.changed.wait_timeout(state, Duration::from_millis(50));
    }
    shared.update(|state| {
        if let Some(gate) = state.gates.get_mut(name) {
            gate.held -= 1;
        }
    });
}

/// Whether the other end has closed the connection (a read would see the end of stream).
pub(super) fn peer_closed(stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return false;
    }
    let mut byte = [0u8; 1];
    let closed = match stream.peek(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != io::ErrorKind::WouldBlock,
    };
    let _ = stream.set_nonblocking(false);
    closed
}

/// One request as read by [`read_request`].
pub(super) struct Received {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body_len: usize,
    /// FNV-1a (64 bits) of the body's bytes in order, answered as `body_fnv` when the request
    /// asks with `x-test-body-sum: 1`.
    pub body_fnv: u64,
    /// The body's bytes, up to [`KEPT_BODY_BYTES`] (empty above: an origin that verifies the
    /// edge's signature over them is never sent a larger one).
    pub body: Vec<u8>,
}

/// The largest body [`read_request`] keeps whole.
pub(super) const KEPT_BODY_BYTES: usize = 8 * 1024 * 1024;

/// FNV-1a, 64 bits: tells whether a body reached the origin unchanged and in order.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(0x100_0000_01b3))
}

/// Reads one request (its head, and its body by `Content-Length` or chunked); `None` when
/// the connection closed before a head came.
pub(super) fn read_request(stream: &mut TcpStream) -> io::Result<Option<Received>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(end) = find_head_end(&buf) {
            break end;
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let lines = split_lines(&buf[..head_end - 4]);
    let request_line = String::from_utf8_lossy(lines.first().copied().unwrap_or(b"")).to_string();
    let mut parts = request_line.split(' ');
    let method = parts.next().unwrap_or("").to_string();
    let target = parts.next().unwrap_or("").to_string();
    let headers = parse_header_lines(&lines[1..]);

    let kept = |body: &[u8]| if body.len() <= KEPT_BODY_BYTES { body.to_vec() } else { Vec::new() };
    let (body_len, body_fnv, body) = if is_chunked(&headers) {
        loop {
            match decode_chunked(&buf[head_end..]) {
                Some(Ok((body, _))) => break (body.len(), fnv1a(&body), kept(&body)),
                Some(Err(e)) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
                None => {
                    let n = stream.read(&mut chunk)?;
                    if n == 0 {
                        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "chunked body cut short"));
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
            }
        }
    } else {
        let len: usize =
            header_value(&headers, "content-length").and_then(|v| v.trim().parse().ok()).unwrap_or(0);
        while buf.len() - head_end < len {
            let n = stream.read(&mut chunk)?;
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "body cut short"));
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let body = &buf[head_end..head_end + len];
        (len, fnv1a(body), kept(body))
    };
    Ok(Some(Received { method, target, headers, body_len, body_fnv, body }))
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        301 => "Moved Permanently",
        303 => "See Other",
        304 => "Not Modified",
        425 => "Too Early",
        201 => "Created",
        202 => "Accepted",
        400 => "Bad Request",
        404 => "Not Found",
        408 => "Request Timeout",
        409 => "Conflict",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

fn handle(mut stream: TcpStream, state: Arc<Shared<State>>) {
    stream.set_read_timeout(Some(Duration::from_secs(60))).ok();
    let received = match read_request(&mut stream) {
        Ok(Some(r)) => r,
        _ => return,
    };
    let keys: Vec<&str> = received
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("idempotency-key"))
        .map(|(_, v)| v.as_str())
        .collect();
    let key = if keys.is_empty() { None } else { Some(keys.join(", ")) };
    let serial = SERIAL.fetch_add(1, Ordering::SeqCst) + 1;
    state.update(|s| {
        s.total += 1;
        *s.by_target.entry(received.target.clone()).or_insert(0) += 1;
        if let Some(key) = &key {
            *s.by_key.entry(key.clone()).or_insert(0) += 1;
            s.headers_by_key.insert(key.clone(), received.headers.clone());
        }
    });

    let control = |name: &str| header_value(&received.headers, name).map(|v| v.trim().to_string());
    if let Some(gate) = control(Gate::HEADER) {
        hold(&stream, &state, &gate);
    }
    if let Some(ms) = control("x-test-delay-ms").and_then(|v| v.parse::<u64>().ok()) {
        thread::sleep(Duration::from_millis(ms));
    }
    if control("x-test-reset").as_deref() == Some("1") {
        let _ = stream.shutdown(Shutdown::Both);
        return;
    }
    let default_status = if matches!(received.method.as_str(), "POST" | "PATCH") { 201 } else { 200 };
    let status = control("x-test-status").and_then(|v| v.parse::<u16>().ok()).unwrap_or(default_status);
    let pad = control("x-test-pad-bytes").and_then(|v| v.parse::<usize>().ok()).unwrap_or(0);
    let mut json = serde_json::json!({
        "execution": serial,
        "key": key,
        "method": received.method,
        "path": received.target,
        "body_len": received.body_len,
        "pad": "x".repeat(pad),
    });
    if control("x-test-body-sum").as_deref() == Some("1") {
        json["body_fnv"] = format!("{:016x}", received.body_fnv).into();
    }
    // 204 and 304 answers have no body, and say no length.
    let bodiless = matches!(status, 204 | 304);
    let raw = control("x-test-answer-bytes").and_then(|v| v.parse::<usize>().ok());
    let (body, content_type) = match raw {
        _ if bodiless => (Vec::new(), "application/json"),
        Some(n) => (answer_bytes(serial, n), "application/octet-stream"),
        None => (json.to_string().into_bytes(), "application/json"),
    };
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\nx-origin-execution: {serial}\r\nset-cookie: sid=abc; Path=/\r\nx-custom: kept\r\n",
        reason(status)
    );
    if !bodiless {
        head.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    if let Some(after) = control("x-test-retry-after") {
        head.push_str(&format!("retry-after: {after}\r\n"));
    }
    if control("x-test-released").as_deref() == Some("1") {
        head.push_str("idempotency-released: true\r\n");
    }
    for line in control("x-test-response-headers").iter().flat_map(|v| v.split(" | ")) {
        if let Some((name, value)) = line.split_once(':') {
            head.push_str(&format!("{}: {}\r\n", name.trim(), value.trim()));
        }
    }
    match control("x-test-connection") {
        Some(tokens) => head.push_str(&format!("connection: close, {tokens}\r\n\r\n")),
        None => head.push_str("connection: close\r\n\r\n"),
    }
    let stall_ms = control("x-test-stall-body-ms").and_then(|v| v.parse::<u64>().ok());
    let stall_gate = control("x-test-stall-body-at-gate");
    if stall_ms.is_some() || stall_gate.is_some() {
        let _ = stream.write_all(head.as_bytes());
        let _ = stream.write_all(&body[..body.len() / 2]);
        let _ = stream.flush();
        match stall_gate {
            Some(gate) => hold(&stream, &state, &gate),
            None => thread::sleep(Duration::from_millis(stall_ms.unwrap_or(0))),
        }
        let _ = stream.shutdown(Shutdown::Both);
        return;
    }
    let written = stream.write_all(head.as_bytes()).and_then(|_| stream.write_all(&body));
    let _ = stream.flush();
    let _ = stream.shutdown(Shutdown::Write);
    if written.is_ok() {
        if let Some(key) = key {
            state.update(|s| *s.answered_by_key.entry(key).or_insert(0) += 1);
        }
    }
}

/// The `n` bytes an `x-test-answer-bytes: n` answer of execution `serial` carries:
/// xorshift64* from the serial, so a test can tell executions (and chunk order) apart.
pub fn answer_bytes(serial: u64, n: usize) -> Vec<u8> {
    let mut state = serial.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        out.extend_from_slice(&state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(n);
    out
}
