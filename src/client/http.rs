//! The built-in [`Transport`]: HTTP/1.1 over a plain `std::net::TcpStream`, for `http://`
//! URLs only. One request per connection (`Connection: close`), the body sent with
//! `Content-Length`, the answer read as chunked, length-delimited or up to EOF.
//!
//! There is no TLS here on purpose: it would be the client's only dependency. For
//! `https://`, implement [`Transport`] over the HTTP client you already use (its one method
//! sends one request with a timeout); this transport answers an `https://` URL with a
//! [`TransportErrorKind::Fatal`] error.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::{Request, Response, Transport, TransportError, TransportErrorKind};

/// Largest response head accepted.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// HTTP/1.1 over TCP, std only. See the module doc.
#[derive(Clone, Debug)]
pub struct HttpTransport {
    max_response_bytes: usize,
}

impl Default for HttpTransport {
    fn default() -> Self {
        HttpTransport { max_response_bytes: 64 * 1024 * 1024 }
    }
}

impl HttpTransport {
    pub fn new() -> Self {
        HttpTransport::default()
    }

    /// Largest response body accepted (default 64 MiB); a larger one is a `Fatal` error.
    pub fn with_max_response_bytes(mut self, limit: usize) -> Self {
        self.max_response_bytes = limit;
        self
    }
}

impl Transport for HttpTransport {
    fn send(&self, request: &Request<'_>, timeout: Duration) -> Result<Response, TransportError> {
        let deadline = Instant::now() + timeout;
        let target = Target::parse(request.url)?;
        let head = encode_head(request, &target)?;

        let mut stream = connect(&target, deadline)?;
        stream.set_nodelay(true).ok();
        set_timeout(&stream, deadline, timeout, TcpStream::set_write_timeout)?;
        // A server may answer (413, say) and close before it read the whole body: then the
        // write fails, but the answer is there to read.
        let write_error = stream
            .write_all(&head)
            .and_then(|_| stream.write_all(request.body))
            .and_then(|_| stream.flush())
            .err();

        let head_only = request.method.eq_ignore_ascii_case("HEAD");
        let mut reader = ResponseReader::new(head_only, self.max_response_bytes);
        let mut chunk = [0u8; 16 * 1024];
        loop {
            set_timeout(&stream, deadline, timeout, TcpStream::set_read_timeout)?;
            match stream.read(&mut chunk) {
                Ok(0) => return reader.finish(),
                Ok(n) => {
                    if let Some(response) = reader.push(&chunk[..n])? {
                        return Ok(response);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if classify(&e) == TransportErrorKind::Timeout => return Err(timed_out(timeout)),
                Err(e) => {
                    if let Ok(response) = reader.finish() {
                        return Ok(response);
                    }
                    return Err(match write_error {
                        Some(write_error) => io_error("sending the request", &write_error),
                        None => io_error("receiving the response", &e),
                    });
                }
            }
        }
    }
}

/// Sets a socket timeout to the time left before `deadline`; a `Timeout` error when none is.
fn set_timeout(
    stream: &TcpStream,
    deadline: Instant,
    timeout: Duration,
    set: fn(&TcpStream, Option<Duration>) -> io::Result<()>,
) -> Result<(), TransportError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(timed_out(timeout));
    }
    set(stream, Some(left)).map_err(|e| io_error("setting a socket timeout", &e))
}

fn timed_out(timeout: Duration) -> TransportError {
    let message = format!("no complete response within the {} ms attempt timeout", timeout.as_millis());
    TransportError::new(TransportErrorKind::Timeout, message)
}

fn connect(target: &Target, deadline: Instant) -> Result<TcpStream, TransportError> {
    let addrs: Vec<SocketAddr> = (target.host.as_str(), target.port)
        .to_socket_addrs()
        .map_err(|e| {
            TransportError::new(TransportErrorKind::Other, format!("resolving {}: {e}", target.host))
        })?
        .collect();
    let mut last = None;
    for addr in addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match TcpStream::connect_timeout(&addr, left) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(e) => io_error(&format!("connecting to {}", target.authority), &e),
        None if Instant::now() >= deadline => {
            TransportError::new(TransportErrorKind::Timeout, "no time left to connect")
        }
        None => TransportError::new(TransportErrorKind::Other, format!("{} has no address", target.host)),
    })
}

/// The transport error kind of an I/O error.
pub fn classify(e: &io::Error) -> TransportErrorKind {
    use io::ErrorKind as K;
    match e.kind() {
        K::TimedOut | K::WouldBlock => TransportErrorKind::Timeout,
        K::ConnectionRefused => TransportErrorKind::ConnectionRefused,
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof => {
            TransportErrorKind::ConnectionReset
        }
        _ => TransportErrorKind::Other,
    }
}

fn io_error(doing: &str, e: &io::Error) -> TransportError {
    TransportError::new(classify(e), format!("{doing}: {e}"))
}

fn fatal(message: impl Into<String>) -> TransportError {
    TransportError::new(TransportErrorKind::Fatal, message)
}

/// Splits an absolute `http://` or `https://` URL into its base (`scheme://authority`) and
/// its path and query (`/` when empty), for [`super::RetryingClient::new`] and
/// [`super::Operation`]. The fragment is dropped.
pub fn split_url(url: &str) -> Result<(String, String), String> {
    let scheme_end = url.find("://").ok_or_else(|| format!("{url:?} is not an absolute URL"))?;
    let scheme = &url[..scheme_end];
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(format!("{url:?}: only http:// and https:// URLs are supported"));
    }
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    if authority_end == 0 {
        return Err(format!("{url:?} has no host"));
    }
    let base = format!("{}://{}", scheme.to_ascii_lowercase(), &rest[..authority_end]);
    let rest = &rest[authority_end..];
    let rest = rest.split('#').next().unwrap_or("");
    let path = if rest.is_empty() {
        "/".to_string()
    } else if rest.starts_with('?') {
        format!("/{rest}")
    } else {
        rest.to_string()
    };
    Ok((base, path))
}

/// Where an `http://` URL points.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    /// For name resolution: no brackets around an IPv6 address.
    host: String,
    port: u16,
    /// `host[:port]` as written, for the `Host` header and messages.
    authority: String,
    /// Path and query, starting with `/`.
    path: String,
}

impl Target {
    fn parse(url: &str) -> Result<Target, TransportError> {
        if url.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(fatal("the URL contains whitespace or control characters"));
        }
        let (base, path) = split_url(url).map_err(fatal)?;
        let authority = match base.strip_prefix("http://") {
            Some(authority) => authority.to_string(),
            None => {
                return Err(fatal(
                    "the built-in transport speaks plain HTTP only; for https:// supply a Transport that wraps an HTTPS-capable client",
                ))
            }
        };
        if authority.contains('@') {
            return Err(fatal("user information in the URL is not supported; send an Authorization header"));
        }
        let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
            let (host, after) =
                bracketed.split_once(']').ok_or_else(|| fatal("unterminated IPv6 address in the URL"))?;
            let port = match after {
                "" => None,
                port => Some(port.strip_prefix(':').ok_or_else(|| fatal("bad port in the URL"))?),
            };
            (host.to_string(), port)
        } else {
            match authority.split_once(':') {
                Some((host, port)) => (host.to_string(), Some(port)),
                None => (authority.clone(), None),
            }
        };
        let port = match port {
            None | Some("") => 80,
            Some(port) => port.parse().map_err(|_| fatal(format!("bad port {port:?} in the URL")))?,
        };
        if host.is_empty() {
            return Err(fatal("the URL has no host"));
        }
        Ok(Target { host, port, authority, path })
    }
}

fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Whether a header value can be sent as is: no CR, LF or NUL (no header injection).
pub fn is_valid_header_value(value: &str) -> bool {
    !value.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0))
}

/// Whether a header name is an HTTP token.
pub fn is_valid_header_name(name: &str) -> bool {
    is_token(name)
}

/// Whether a method is an HTTP token.
pub fn is_valid_method(method: &str) -> bool {
    is_token(method)
}

/// Headers this transport writes itself; a caller's copy is refused.
const OWN_HEADERS: [&str; 4] = ["host", "content-length", "transfer-encoding", "connection"];

fn encode_head(request: &Request<'_>, target: &Target) -> Result<Vec<u8>, TransportError> {
    if !is_valid_method(request.method) {
        return Err(fatal(format!("invalid method {:?}", request.method)));
    }
    let mut head = format!("{} {} HTTP/1.1\r\nHost: {}\r\n", request.method, target.path, target.authority);
    for (name, value) in request.headers {
        if !is_valid_header_name(name) || !is_valid_header_value(value) {
            return Err(fatal(format!("invalid header {name:?}")));
        }
        if OWN_HEADERS.iter().any(|own| name.eq_ignore_ascii_case(own)) {
            return Err(fatal(format!("the transport sets {name} itself")));
        }
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let bodiless = matches!(request.method, "GET" | "HEAD" | "DELETE" | "OPTIONS" | "TRACE");
    if !request.body.is_empty() || !bodiless {
        head.push_str(&format!("Content-Length: {}\r\n", request.body.len()));
    }
    head.push_str("Connection: close\r\n\r\n");
    Ok(head.into_bytes())
}

/// How the body of a response ends.
#[derive(Clone, Copy, Debug)]
enum Framing {
    Empty,
    Length(usize),
    Chunked,
    UntilClose,
}

/// An incremental HTTP/1.1 response parser.
struct ResponseReader {
    head_only: bool,
    max_body: usize,
    buf: Vec<u8>,
    /// The final (non-1xx) head, once parsed.
    head: Option<Head>,
}

/// A parsed response head.
#[derive(Clone)]
struct Head {
    /// Where the body starts in `buf`.
    end: usize,
    status: u16,
    headers: Vec<(String, String)>,
    framing: Framing,
}

impl ResponseReader {
    fn new(head_only: bool, max_body: usize) -> Self {
        ResponseReader { head_only, max_body, buf: Vec::new(), head: None }
    }

    /// Adds received bytes; the response once it is complete.
    fn push(&mut self, bytes: &[u8]) -> Result<Option<Response>, TransportError> {
        self.buf.extend_from_slice(bytes);
        self.parse_head()?;
        let Some(Head { end: head_end, framing, .. }) = &self.head else { return Ok(None) };
        let body_len = self.buf.len() - head_end;
        if body_len > self.max_body.saturating_add(64 * 1024) {
            return Err(fatal(format!("the response body is over the {}-byte limit", self.max_body)));
        }
        let body = match framing {
            Framing::Empty => Some(Vec::new()),
            Framing::Length(len) if body_len >= *len => Some(self.buf[*head_end..head_end + len].to_vec()),
            Framing::Length(_) | Framing::UntilClose => None,
            Framing::Chunked => decode_chunked(&self.buf[*head_end..])
                .map_err(|e| TransportError::new(TransportErrorKind::Other, e))?,
        };
        body.map(|body| self.complete(body)).transpose()
    }

    /// The connection ended: the response, if what arrived is one.
    fn finish(&mut self) -> Result<Response, TransportError> {
        self.parse_head()?;
        let cut = |what: &str| TransportError::new(TransportErrorKind::ConnectionReset, what.to_string());
        let Some(Head { end: head_end, framing, .. }) = &self.head else {
            return Err(cut(if self.buf.is_empty() {
                "the connection closed without a response"
            } else {
                "the connection closed in the middle of the response head"
            }));
        };
        let body = &self.buf[*head_end..];
        let body = match framing {
            Framing::Empty => Vec::new(),
            Framing::Length(len) if body.len() >= *len => body[..*len].to_vec(),
            Framing::Length(len) => {
                return Err(cut(&format!("the connection closed after {} of {len} body bytes", body.len())))
            }
            Framing::UntilClose => body.to_vec(),
            Framing::Chunked => match decode_chunked(body) {
                Ok(Some(body)) => body,
                Ok(None) => return Err(cut("the connection closed in the middle of a chunked body")),
                Err(e) => return Err(TransportError::new(TransportErrorKind::Other, e)),
            },
        };
        self.complete(body)
    }

    fn complete(&self, body: Vec<u8>) -> Result<Response, TransportError> {
        if body.len() > self.max_body {
            return Err(fatal(format!("the response body is over the {}-byte limit", self.max_body)));
        }
        let Head { status, headers, .. } = self.head.clone().expect("complete() after the head");
        Ok(Response { status, headers, body })
    }

    /// Parses the final head once it is in `buf`, skipping interim (1xx) responses.
    fn parse_head(&mut self) -> Result<(), TransportError> {
        let bad = |what: String| TransportError::new(TransportErrorKind::Other, what);
        let mut start = 0;
        while self.head.is_none() {
            let rest = &self.buf[start..];
            let Some(end) = rest.windows(4).position(|w| w == b"\r\n\r\n") else {
                if rest.len() > MAX_HEAD_BYTES {
                    return Err(bad("the response head is too large".into()));
                }
                // Keep what is left unparsed (an interim response is dropped).
                self.buf.drain(..start);
                return Ok(());
            };
            let text = String::from_utf8_lossy(&rest[..end]).into_owned();
            let mut lines = text.split("\r\n");
            let status_line = lines.next().unwrap_or("");
            let mut parts = status_line.splitn(3, ' ');
            let version = parts.next().unwrap_or("");
            let status: u16 = parts
                .next()
                .filter(|s| s.len() == 3)
                .and_then(|s| s.parse().ok())
                .filter(|s| (100..600).contains(s))
                .ok_or_else(|| bad(format!("bad status line {status_line:?}")))?;
            if !version.starts_with("HTTP/1.") {
                return Err(bad(format!("bad status line {status_line:?}")));
            }
            let mut headers = Vec::new();
            for line in lines {
                let (name, value) =
                    line.split_once(':').ok_or_else(|| bad(format!("bad header line {line:?}")))?;
                headers.push((name.trim().to_string(), value.trim().to_string()));
            }
            let head_end = start + end + 4;
            if (100..200).contains(&status) && status != 101 {
                start = head_end;
                continue;
            }
            let framing = framing(status, &headers, self.head_only).map_err(bad)?;
            self.buf.drain(..start);
            self.head = Some(Head { end: head_end - start, status, headers, framing });
        }
        Ok(())
    }
}

fn framing(status: u16, headers: &[(String, String)], head_only: bool) -> Result<Framing, String> {
    if head_only || status == 204 || status == 304 {
        return Ok(Framing::Empty);
    }
    let values = |name: &'static str| {
        headers.iter().filter(move |(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v)
    };
    if values("transfer-encoding").any(|v| v.to_ascii_lowercase().contains("chunked")) {
        return Ok(Framing::Chunked);
    }
    let lengths: Vec<&String> = values("content-length").collect();
    match lengths.as_slice() {
        [] => Ok(Framing::UntilClose),
        [first, rest @ ..] => {
            let len: usize = first.trim().parse().map_err(|_| format!("bad Content-Length {first:?}"))?;
            if rest.iter().any(|other| other.trim() != first.trim()) {
                return Err("conflicting Content-Length headers".into());
            }
            Ok(Framing::Length(len))
        }
    }
}

/// Decodes a chunked body: `Ok(None)` while incomplete.
fn decode_chunked(buf: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let line_end = |from: usize| buf[from..].windows(2).position(|w| w == b"\r\n").map(|p| from + p);
    let mut body = Vec::new();
    let mut pos = 0;
    loop {
        let Some(end) = line_end(pos) else { return Ok(None) };
        let line = String::from_utf8_lossy(&buf[pos..end]);
        let size_text = line.split(';').next().unwrap_or("").trim();
        let size =
            usize::from_str_radix(size_text, 16).map_err(|_| format!("bad chunk size line {line:?}"))?;
        pos = end + 2;
        if size == 0 {
            // Trailers, then an empty line.
            loop {
                let Some(end) = line_end(pos) else { return Ok(None) };
                if end == pos {
                    return Ok(Some(body));
                }
                pos = end + 2;
            }
        }
        if buf.len() - pos < size.saturating_add(2) {
            return Ok(None);
        }
        let data_end = pos + size;
        if &buf[data_end..data_end + 2] != b"\r\n" {
            return Err("a chunk does not end with CRLF".into());
        }
        body.extend_from_slice(&buf[pos..data_end]);
        pos = data_end + 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Shutdown, TcpListener};
    use std::thread;

    /// A one-shot server: reads the request head (and a Content-Length body), then runs
    /// `answer`. Returns the URL and a handle giving back the raw request.
    fn server(answer: impl FnOnce(&mut TcpStream) + Send + 'static) -> (String, thread::JoinHandle<Vec<u8>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1/charges?x=1", listener.local_addr().unwrap());
        let handle = thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            loop {
                if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                    let len = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map(|v| v.trim().parse::<usize>().unwrap())
                        .unwrap_or(0);
                    if buf.len() >= end + 4 + len {
                        break;
                    }
                }
                let n = stream.read(&mut chunk).unwrap();
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            answer(&mut stream);
            buf
        });
        (url, handle)
    }

    fn post<'a>(url: &'a str, headers: &'a [(String, String)]) -> Request<'a> {
        Request { method: "POST", url, headers, body: br#"{"amount":1000}"# }
    }

    fn send(url: &str, timeout: Duration) -> Result<Response, TransportError> {
        let headers = [("Idempotency-Key".to_string(), "order-1-charge".to_string())];
        HttpTransport::new().send(&post(url, &headers), timeout)
    }

    fn reply(bytes: &'static [u8]) -> impl FnOnce(&mut TcpStream) + Send + 'static {
        move |s: &mut TcpStream| {
            s.write_all(bytes).unwrap();
            s.shutdown(Shutdown::Write).ok();
        }
    }

    #[test]
    fn sends_the_request_and_reads_a_length_delimited_answer() {
        let (url, server) = server(reply(
            b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nIdempotent-Replayed: true\r\nContent-Length: 11\r\n\r\n{\"id\":\"c\"}\nEXTRA",
        ));
        let r = send(&url, Duration::from_secs(5)).unwrap();
        assert_eq!(r.status, 201);
        assert_eq!(r.body, b"{\"id\":\"c\"}\n");
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert!(r.is_replayed());
        let request = String::from_utf8(server.join().unwrap()).unwrap();
        let port = url.split(':').nth(2).unwrap().split('/').next().unwrap();
        assert!(request.starts_with("POST /v1/charges?x=1 HTTP/1.1\r\n"), "{request}");
        assert!(request.contains(&format!("Host: 127.0.0.1:{port}\r\n")), "{request}");
        assert!(request.contains("Idempotency-Key: order-1-charge\r\n"), "{request}");
        assert!(request.contains("Content-Length: 15\r\n"), "{request}");
        assert!(request.contains("Connection: close\r\n"), "{request}");
        assert!(request.ends_with("\r\n\r\n{\"amount\":1000}"), "{request}");
    }

    #[test]
    fn reads_a_chunked_answer_after_an_interim_one() {
        let (url, _server) = server(reply(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\nabcd\r\n3\r\nefg\r\n0\r\nTrailer: x\r\n\r\n",
        ));
        let r = send(&url, Duration::from_secs(5)).unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b"abcdefg");
    }

    #[test]
    fn reads_to_eof_without_a_length() {
        let (url, _server) = server(reply(b"HTTP/1.1 409 Conflict\r\nRetry-After: 3\r\n\r\nuntil close"));
        let r = send(&url, Duration::from_secs(5)).unwrap();
        assert_eq!(r.status, 409);
        assert_eq!(r.header("Retry-After"), Some("3"));
        assert_eq!(r.body, b"until close");
    }

    #[test]
    fn a_silent_server_is_a_timeout() {
        let (url, server) = server(|_s: &mut TcpStream| thread::sleep(Duration::from_millis(800)));
        let started = Instant::now();
        let e = send(&url, Duration::from_millis(200)).unwrap_err();
        assert_eq!(e.kind, TransportErrorKind::Timeout, "{e}");
        assert!(started.elapsed() < Duration::from_millis(700), "{:?}", started.elapsed());
        server.join().unwrap();
    }

    #[test]
    fn a_closed_port_is_refused() {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let e = send(&format!("http://127.0.0.1:{port}/"), Duration::from_secs(5)).unwrap_err();
        assert_eq!(e.kind, TransportErrorKind::ConnectionRefused, "{e}");
    }

    #[test]
    fn a_close_without_an_answer_or_a_cut_body_is_a_reset() {
        let (url, _server) = server(|s: &mut TcpStream| {
            s.shutdown(Shutdown::Both).ok();
        });
        let e = send(&url, Duration::from_secs(5)).unwrap_err();
        assert_eq!(e.kind, TransportErrorKind::ConnectionReset, "{e}");

        let (url, _server) = server(reply(b"HTTP/1.1 201 Created\r\nContent-Length: 100\r\n\r\nshort"));
        let e = send(&url, Duration::from_secs(5)).unwrap_err();
        assert_eq!(e.kind, TransportErrorKind::ConnectionReset, "{e}");
    }

    #[test]
    fn garbage_is_an_other_error() {
        let (url, _server) = server(reply(b"SMTP ready\r\n\r\n"));
        let e = send(&url, Duration::from_secs(5)).unwrap_err();
        assert_eq!(e.kind, TransportErrorKind::Other, "{e}");
    }

    #[test]
    fn a_body_over_the_limit_is_fatal() {
        let (url, _server) = server(reply(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789"));
        let e = HttpTransport::new()
            .with_max_response_bytes(4)
            .send(&post(&url, &[]), Duration::from_secs(5))
            .unwrap_err();
        assert_eq!(e.kind, TransportErrorKind::Fatal, "{e}");
    }

    #[test]
    fn unsupported_urls_and_unsafe_headers_are_fatal() {
        let t = HttpTransport::new();
        for url in ["https://example.com/v1", "ftp://x/", "http:///x", "http://user@host/", "http://h:99999/"]
        {
            let e = t.send(&post(url, &[]), Duration::from_secs(1)).unwrap_err();
            assert_eq!(e.kind, TransportErrorKind::Fatal, "{url}: {e}");
        }
        let e = t.send(&post("https://example.com/", &[]), Duration::from_secs(1)).unwrap_err();
        assert!(e.message.contains("Transport"), "the error says what to do: {e}");
        for (name, value) in [("X-A", "b\r\nX-Injected: 1"), ("Bad Name", "v"), ("Content-Length", "1")] {
            let headers = [(name.to_string(), value.to_string())];
            let e = t.send(&post("http://127.0.0.1:9/", &headers), Duration::from_secs(1)).unwrap_err();
            assert_eq!(e.kind, TransportErrorKind::Fatal, "{name}: {e}");
        }
    }

    #[test]
    fn urls() {
        let split = |u: &str| split_url(u).map(|(b, p)| format!("{b} {p}"));
        assert_eq!(split("http://127.0.0.1:8787/v1/charges").unwrap(), "http://127.0.0.1:8787 /v1/charges");
        assert_eq!(split("HTTPS://api.example.com").unwrap(), "https://api.example.com /");
        assert_eq!(split("http://h?x=1#frag").unwrap(), "http://h /?x=1");
        assert_eq!(split("http://[::1]:8787/a/b?c").unwrap(), "http://[::1]:8787 /a/b?c");
        assert!(split("127.0.0.1:8787/v1").is_err());
        assert!(split("file:///etc").is_err());

        let t = Target::parse("http://[::1]:8787/x").unwrap();
        assert_eq!((t.host.as_str(), t.port, t.authority.as_str()), ("::1", 8787, "[::1]:8787"));
        let t = Target::parse("http://localhost").unwrap();
        assert_eq!((t.host.as_str(), t.port, t.path.as_str()), ("localhost", 80, "/"));
    }

    #[test]
    fn chunked_decoding() {
        assert_eq!(decode_chunked(b"3\r\nabc\r\n0\r\n\r\n"), Ok(Some(b"abc".to_vec())));
        assert_eq!(decode_chunked(b"3\r\nabc\r\n"), Ok(None));
        assert_eq!(decode_chunked(b"3\r\nab"), Ok(None));
        assert_eq!(decode_chunked(b"0\r\n"), Ok(None));
        assert!(decode_chunked(b"zz\r\n").is_err());
        assert!(decode_chunked(b"3\r\nabcX\r\n").is_err());
        assert!(decode_chunked(b"ffffffffffffffffff\r\n").is_err(), "over usize");
        assert_eq!(
            decode_chunked(b"ffffffffffffffff\r\nab"),
            Ok(None),
            "a huge chunk waits (the size limit ends it)"
        );
    }
}
