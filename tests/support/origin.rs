//! The test origin: a threaded HTTP/1.1 server on loopback that counts executions and is
//! steered by request headers.
//!
//! Control headers (the worker forwards end-to-end headers):
//! - `x-test-delay-ms: N`   sleep N ms before answering (or before closing, with reset);
//! - `x-test-status: N`     answer with status N (default 201 for POST/PATCH, 200 otherwise);
//! - `x-test-retry-after: N` add `Retry-After: N`;
//! - `x-test-reset: 1`      read the request, count it, then close without answering;
//! - `x-test-stall-body-ms: N` send the head and half the body, stall N ms, then close
//!   without sending the rest (the declared `Content-Length` is never reached);
//! - `x-test-released: 1`   add `Idempotency-Released: true` (the origin confirms that it
//!   did not execute the request);
//! - `x-test-pad-bytes: N`  add a `pad` member of N bytes to the JSON body (large answers).
//!
//! [`Origin::stop`] closes the listening socket (connections are refused) and
//! [`Origin::resume`] listens on the same port again, with the same counts.
//!
//! An execution is counted once the whole request has been read, per raw
//! `Idempotency-Key` value as received, per request target, and in total.

use super::http::{decode_chunked, find_head_end, header_value, is_chunked, parse_header_lines, split_lines};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Serial numbers of executions, unique across every origin in the process.
static SERIAL: AtomicU64 = AtomicU64::new(0);

#[derive(Default)]
struct State {
    by_key: HashMap<String, usize>,
    by_target: HashMap<String, usize>,
    headers_by_key: HashMap<String, Vec<(String, String)>>,
    total: usize,
}

#[derive(Clone)]
pub struct Origin {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    listener: Arc<Mutex<Listening>>,
}

/// The accept loop that is running, if any.
#[derive(Default)]
struct Listening {
    stop: Option<Arc<AtomicBool>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Origin {
    /// Starts on a free loopback port.
    pub fn start() -> Origin {
        Origin::start_on(0).expect("test origin: bind 127.0.0.1:0")
    }

    /// Starts on 127.0.0.1:`port`.
    pub fn start_on(port: u16) -> io::Result<Origin> {
        let listener = TcpListener::bind(("127.0.0.1", port))?;
        let addr = listener.local_addr()?;
        let origin = Origin {
            addr,
            state: Arc::new(Mutex::new(State::default())),
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
        let state = self.state.lock().unwrap();
        let quoted = format!("\"{key}\"");
        state.by_key.get(key).copied().unwrap_or(0) + state.by_key.get(&quoted).copied().unwrap_or(0)
    }

    /// Requests received for this exact request target (path and query).
    pub fn executions_at(&self, target: &str) -> usize {
        self.state.lock().unwrap().by_target.get(target).copied().unwrap_or(0)
    }

    pub fn total(&self) -> usize {
        self.state.lock().unwrap().total
    }

    /// Headers of the last request that carried `key` (bare or quoted form).
    pub fn last_headers(&self, key: &str) -> Option<Vec<(String, String)>> {
        let state = self.state.lock().unwrap();
        let quoted = format!("\"{key}\"");
        state.headers_by_key.get(key).or_else(|| state.headers_by_key.get(&quoted)).cloned()
    }

    /// Waits until `key` has at least `n` executions; false if `timeout` passes first.
    pub fn wait_for_executions(&self, key: &str, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.executions(key) >= n {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

struct Received {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body_len: usize,
}

fn read_request(stream: &mut TcpStream) -> io::Result<Option<Received>> {
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

    let body_len = if is_chunked(&headers) {
        loop {
            match decode_chunked(&buf[head_end..]) {
                Some(Ok((body, _))) => break body.len(),
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
        len
    };
    Ok(Some(Received { method, target, headers, body_len }))
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
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

fn handle(mut stream: TcpStream, state: Arc<Mutex<State>>) {
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
    {
        let mut s = state.lock().unwrap();
        s.total += 1;
        *s.by_target.entry(received.target.clone()).or_insert(0) += 1;
        if let Some(key) = &key {
            *s.by_key.entry(key.clone()).or_insert(0) += 1;
            s.headers_by_key.insert(key.clone(), received.headers.clone());
        }
    }

    let control = |name: &str| header_value(&received.headers, name).map(|v| v.trim().to_string());
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
    let body = serde_json::json!({
        "execution": serial,
        "key": key,
        "method": received.method,
        "path": received.target,
        "body_len": received.body_len,
        "pad": "x".repeat(pad),
    })
    .to_string();
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nx-origin-execution: {serial}\r\nset-cookie: sid=abc; Path=/\r\nx-custom: kept\r\n",
        reason(status),
        body.len()
    );
    if let Some(after) = control("x-test-retry-after") {
        head.push_str(&format!("retry-after: {after}\r\n"));
    }
    if control("x-test-released").as_deref() == Some("1") {
        head.push_str("idempotency-released: true\r\n");
    }
    head.push_str("connection: close\r\n\r\n");
    if let Some(ms) = control("x-test-stall-body-ms").and_then(|v| v.parse::<u64>().ok()) {
        let _ = stream.write_all(head.as_bytes());
        let _ = stream.write_all(&body.as_bytes()[..body.len() / 2]);
        let _ = stream.flush();
        thread::sleep(Duration::from_millis(ms));
        let _ = stream.shutdown(Shutdown::Both);
        return;
    }
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body.as_bytes());
    let _ = stream.flush();
    let _ = stream.shutdown(Shutdown::Write);
}
