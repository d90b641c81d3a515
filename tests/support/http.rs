//! A small std-only HTTP/1.1 client (one request per connection, `Connection: close`) and
//! the message parsing shared with the test origin.
//!
//! Every request identifies its caller, as real clients do (the worker answers 401
//! `missing-credential` to a covered request without one): unless the test sets its own
//! `Authorization`, it is [`DEFAULT_CREDENTIAL`]. [`Request::anonymous`] sends none.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Default time a request may take, end to end. Generous: the slowest legitimate answer in
/// the suite (origin timeout) comes after about 12 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(90);

/// The `Authorization` value of a request that sets none (and is not [`Request::anonymous`]).
pub const DEFAULT_CREDENTIAL: &str = "Bearer e2e-default-caller";

/// A request to send. Header values are bytes so that tests can send non-ASCII or control
/// characters.
#[derive(Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
    /// Send the body with `Transfer-Encoding: chunked` instead of `Content-Length`.
    pub chunked: bool,
    /// Total time allowed for connecting, sending and reading the whole response.
    pub timeout: Duration,
    /// Send no `Authorization` unless the test set one (no [`DEFAULT_CREDENTIAL`]).
    pub anonymous: bool,
}

impl Request {
    pub fn new(method: &str, path: &str) -> Request {
        Request {
            method: method.to_string(),
            path: path.to_string(),
            headers: Vec::new(),
            body: Vec::new(),
            chunked: false,
            timeout: DEFAULT_TIMEOUT,
            anonymous: false,
        }
    }

    pub fn post(path: &str) -> Request {
        Request::new("POST", path)
    }

    pub fn get(path: &str) -> Request {
        Request::new("GET", path)
    }

    /// Adds a header line (repeated names give repeated lines).
    pub fn header(mut self, name: &str, value: impl AsRef<[u8]>) -> Request {
        self.headers.push((name.to_string(), value.as_ref().to_vec()));
        self
    }

    /// Replaces every header line of this name (case-insensitively) with one.
    pub fn set_header(self, name: &str, value: impl AsRef<[u8]>) -> Request {
        self.without_header(name).header(name, value)
    }

    /// Removes every header line of this name (case-insensitively).
    pub fn without_header(mut self, name: &str) -> Request {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self
    }

    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Request {
        self.body = body.into();
        self
    }

    /// A JSON body with `Content-Type: application/json`.
    pub fn json(self, body: &str) -> Request {
        self.header("Content-Type", "application/json").body(body.as_bytes())
    }

    pub fn chunked(mut self) -> Request {
        self.chunked = true;
        self
    }

    /// Sends no credential: no [`DEFAULT_CREDENTIAL`].
    pub fn anonymous(mut self) -> Request {
        self.anonymous = true;
        self
    }

    pub fn timeout(mut self, timeout: Duration) -> Request {
        self.timeout = timeout;
        self
    }

    fn encode(&self, addr: SocketAddr) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(format!("{} {} HTTP/1.1\r\n", self.method, self.path).as_bytes());
        // A test may name another host (route mode: the request's own URL is the origin).
        if !self.headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("host")) {
            out.extend_from_slice(format!("Host: {addr}\r\n").as_bytes());
        }
        for (name, value) in &self.headers {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        let has_credential = self.headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("authorization"));
        if !has_credential && !self.anonymous {
            out.extend_from_slice(format!("Authorization: {DEFAULT_CREDENTIAL}\r\n").as_bytes());
        }
        out.extend_from_slice(b"Connection: close\r\n");
        if self.chunked {
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
            for chunk in self.body.chunks(1000) {
                out.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                out.extend_from_slice(chunk);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"0\r\n\r\n");
        } else {
            let needs_length = !self.body.is_empty()
                || !matches!(self.method.as_str(), "GET" | "HEAD" | "DELETE" | "OPTIONS");
            if needs_length {
                out.extend_from_slice(format!("Content-Length: {}\r\n", self.body.len()).as_bytes());
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(&self.body);
        }
        out
    }

    /// Sends the request and reads the whole response. Fails with `TimedOut` when the
    /// response is not complete within `timeout` (the stream is then dropped, as a client
    /// that gives up would).
    pub fn send(&self, addr: SocketAddr) -> io::Result<Response> {
        send_raw(addr, &self.encode(addr), self.timeout)
    }
}

/// Sends `request` exactly as given (a whole HTTP/1.1 message, however malformed) and reads
/// one response, with the same rules as [`Request::send`]. For framing a well-formed
/// request cannot express: a lying `Content-Length`, conflicting framing headers.
pub fn send_raw(addr: SocketAddr, request: &[u8], timeout: Duration) -> io::Result<Response> {
    exchange(addr, request, timeout, false)
}

/// [`send_raw`], then closes the sending half of the connection: the server sees the end
/// of the stream right after `request` (a client that declared more than it sent).
pub fn send_raw_then_close(addr: SocketAddr, request: &[u8], timeout: Duration) -> io::Result<Response> {
    exchange(addr, request, timeout, true)
}

/// Records, for the leak scans, the value of every key and credential header in the head of
/// `request` (a whole message as it goes on the wire, the default credential included):
/// every request the suite sends goes through here, whoever made its key.
fn register_secret_headers(request: &[u8]) {
    let head = find_head_end(request).map_or(request, |end| &request[..end]);
    for line in head.split(|&b| b == b'\n').skip(1) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(colon) = line.iter().position(|&b| b == b':') {
            let name = String::from_utf8_lossy(&line[..colon]);
            super::requests::register_sent_header(name.trim(), &line[colon + 1..]);
        }
    }
}

fn exchange(addr: SocketAddr, request: &[u8], timeout: Duration, half_close: bool) -> io::Result<Response> {
    InFlight::open(addr, request, timeout, half_close)?.finish()
}

impl Request {
    /// Sends the request and returns without waiting for the answer: the test decides
    /// when to read it ([`InFlight::finish`]) or to give up on it ([`InFlight::abandon`]),
    /// for example once the test origin reports that the request arrived.
    pub fn start(&self, addr: SocketAddr) -> io::Result<InFlight> {
        InFlight::open(addr, &self.encode(addr), self.timeout, false)
    }
}

/// A request that has been sent and whose answer has not been read yet.
pub struct InFlight {
    stream: TcpStream,
    deadline: Instant,
    write_error: Option<io::Error>,
}

impl InFlight {
    fn open(addr: SocketAddr, request: &[u8], timeout: Duration, half_close: bool) -> io::Result<InFlight> {
        register_secret_headers(request);
        let deadline = Instant::now() + timeout;
        let mut stream = TcpStream::connect_timeout(&addr, timeout.min(Duration::from_secs(10)))?;
        stream.set_nodelay(true).ok();
        stream.set_write_timeout(Some(timeout))?;
        // A server may answer (413, say) and close before reading the whole body; then the
        // write fails but the response is still there to read.
        let write_error = stream.write_all(request).and_then(|_| stream.flush()).err();
        if half_close {
            let _ = stream.shutdown(std::net::Shutdown::Write);
        }
        Ok(InFlight { stream, deadline, write_error })
    }

    /// Closes the connection without reading the answer: a client that gave up.
    pub fn abandon(self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }

    /// Reads the whole answer, until the request's deadline.
    pub fn finish(self) -> io::Result<Response> {
        let InFlight { mut stream, deadline, write_error } = self;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 16 * 1024];
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "response not complete before the client timeout",
                ));
            }
            stream.set_read_timeout(Some(deadline - now))?;
            match stream.read(&mut chunk) {
                Ok(0) => {
                    return match parse_response(&buf, true) {
                        Some(Ok(response)) => Ok(response),
                        Some(Err(e)) => Err(io::Error::new(io::ErrorKind::InvalidData, e)),
                        None => Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "connection closed before a response",
                        )),
                    };
                }
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    match parse_response(&buf, false) {
                        Some(Ok(response)) => return Ok(response),
                        Some(Err(e)) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
                        None => {}
                    }
                }
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "response not complete before the client timeout",
                    ));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    if let Some(Ok(response)) = parse_response(&buf, true) {
                        return Ok(response);
                    }
                    return Err(write_error.unwrap_or(e));
                }
            }
        }
    }
}

/// A complete response. Header names are kept as received; lookups ignore case.
#[derive(Clone)]
pub struct Response {
    pub status: u16,
    pub reason: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of a header, case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// Every value of a header, in order.
    pub fn header_all(&self, name: &str) -> Vec<&str> {
        self.headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str()).collect()
    }

    pub fn has_header(&self, name: &str) -> bool {
        self.header(name).is_some()
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// `Idempotent-Replayed: true` is present.
    pub fn is_replayed(&self) -> bool {
        self.header_all("idempotent-replayed").iter().any(|v| v.trim().eq_ignore_ascii_case("true"))
    }

    /// The body as JSON; panics (with the response) when it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        match serde_json::from_slice(&self.body) {
            Ok(v) => v,
            Err(e) => panic!("response body is not JSON ({e}): {self:?}"),
        }
    }
}

impl fmt::Debug for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.text();
        let shown: String = text.chars().take(600).collect();
        write!(f, "HTTP {} {}", self.status, self.reason)?;
        for (n, v) in &self.headers {
            write!(f, "\n  {n}: {v}")?;
        }
        write!(f, "\n  body ({} bytes): {shown}", self.body.len())
    }
}

/// Position just past the blank line ending a message head.
pub fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

/// Parses header lines (`Name: value`), keeping repeats and order.
pub fn parse_header_lines(lines: &[&[u8]]) -> Vec<(String, String)> {
    lines
        .iter()
        .filter(|l| !l.is_empty())
        .filter_map(|line| {
            let colon = line.iter().position(|&b| b == b':')?;
            let name = String::from_utf8_lossy(&line[..colon]).trim().to_string();
            let value = String::from_utf8_lossy(&line[colon + 1..]).trim().to_string();
            Some((name, value))
        })
        .collect()
}

/// Splits a head (without the final blank line) into its lines.
pub fn split_lines(head: &[u8]) -> Vec<&[u8]> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i + 1 < head.len() {
        if head[i] == b'\r' && head[i + 1] == b'\n' {
            lines.push(&head[start..i]);
            i += 2;
            start = i;
        } else {
            i += 1;
        }
    }
    if start < head.len() {
        lines.push(&head[start..]);
    }
    lines
}

pub fn header_value<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

pub fn is_chunked(headers: &[(String, String)]) -> bool {
    headers.iter().any(|(n, v)| {
        n.eq_ignore_ascii_case("transfer-encoding") && v.to_ascii_lowercase().contains("chunked")
    })
}

/// Decodes a chunked body. `None` while incomplete; `Some(Ok((body, consumed)))` once the
/// terminating chunk and trailers are in `buf`.
pub fn decode_chunked(buf: &[u8]) -> Option<Result<(Vec<u8>, usize), String>> {
    // First walk the chunk lines without copying: a large body arriving in many reads is
    // checked for completeness after each one, so that must not copy what came so far.
    if let Err(e) = walk_chunked(buf, &mut |_| {})? {
        return Some(Err(e));
    }
    let mut body = Vec::new();
    Some(walk_chunked(buf, &mut |data| body.extend_from_slice(data))?.map(|consumed| (body, consumed)))
}

/// Walks a chunked body, handing each chunk's data to `data`. `None` while incomplete;
/// `Some(Ok(consumed))` once the terminating chunk and trailers are in `buf`.
fn walk_chunked(buf: &[u8], data: &mut dyn FnMut(&[u8])) -> Option<Result<usize, String>> {
    let mut pos = 0;
    loop {
        let line_end = buf[pos..].windows(2).position(|w| w == b"\r\n")? + pos;
        let line = String::from_utf8_lossy(&buf[pos..line_end]).to_string();
        let size_text = line.split(';').next().unwrap_or("").trim().to_string();
        let size = match usize::from_str_radix(&size_text, 16) {
            Ok(s) => s,
            Err(_) => return Some(Err(format!("bad chunk size line {line:?}"))),
        };
        pos = line_end + 2;
        if size == 0 {
            // Trailers, then a blank line.
            loop {
                let end = buf[pos..].windows(2).position(|w| w == b"\r\n")? + pos;
                let empty = end == pos;
                pos = end + 2;
                if empty {
                    return Some(Ok(pos));
                }
            }
        }
        if buf.len() < pos + size + 2 {
            return None;
        }
        data(&buf[pos..pos + size]);
        pos += size + 2;
    }
}

/// Parses a response from `buf`. `None` while incomplete (with `eof` false).
pub fn parse_response(buf: &[u8], eof: bool) -> Option<Result<Response, String>> {
    if buf.is_empty() {
        return None;
    }
    let mut start = 0;
    loop {
        let rest = &buf[start..];
        let head_end = match find_head_end(rest) {
            Some(e) => e,
            None => {
                return if eof {
                    Some(Err(format!("truncated response head: {:?}", String::from_utf8_lossy(rest))))
                } else {
                    None
                }
            }
        };
        let lines = split_lines(&rest[..head_end - 4]);
        let status_line = String::from_utf8_lossy(lines.first().copied().unwrap_or(b"")).to_string();
        let mut parts = status_line.splitn(3, ' ');
        let _version = parts.next();
        let status: u16 = match parts.next().and_then(|s| s.parse().ok()) {
            Some(s) => s,
            None => return Some(Err(format!("bad status line {status_line:?}"))),
        };
        let reason = parts.next().unwrap_or("").to_string();
        let headers = parse_header_lines(&lines[1..]);
        if (100..200).contains(&status) && status != 101 {
            start += head_end;
            continue;
        }
        let body_bytes = &rest[head_end..];
        let body = if status == 204 || status == 304 {
            Vec::new()
        } else if is_chunked(&headers) {
            match decode_chunked(body_bytes) {
                Some(Ok((body, _))) => body,
                Some(Err(e)) => return Some(Err(e)),
                None if eof => return Some(Err("truncated chunked body".to_string())),
                None => return None,
            }
        } else if let Some(len) = header_value(&headers, "content-length") {
            let len: usize = match len.trim().parse() {
                Ok(l) => l,
                Err(_) => return Some(Err(format!("bad content-length {len:?}"))),
            };
            if body_bytes.len() < len {
                return if eof {
                    Some(Err(format!("truncated body: {} of {len} bytes", body_bytes.len())))
                } else {
                    None
                };
            }
            body_bytes[..len].to_vec()
        } else if eof {
            body_bytes.to_vec()
        } else {
            return None;
        };
        return Some(Ok(Response { status, reason, headers, body }));
    }
}
