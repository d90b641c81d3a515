//! An origin that deduplicates by `Idempotency-Key` itself, as Stripe-like APIs do: it
//! executes a key once, answers 409 while that execution runs, and replays the stored
//! answer afterwards. Used by `outcomes` (`ORIGIN_DEDUPLICATES`) and `async_accept`.
//!
//! Control headers:
//! - `x-test-delay-ms: N`: the execution takes N ms;
//! - `x-test-drop: 1`: read the request, then close the connection without executing or
//!   answering; `x-test-drop-first: N`: the same for the first N requests with the key;
//! - `x-test-fail-first: N`: the first N requests with the key get 503 with
//!   `Retry-After: 1`, and nothing is executed (an overloaded origin).
//!
//! [`DedupOrigin::stop`] closes the listening socket (connections are refused, as from an
//! origin that is down) and [`DedupOrigin::resume`] listens on the same port again, with
//! the same keys.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::http::{find_head_end, header_value, parse_header_lines, split_lines};
use super::requests::unique;
use super::worker::bind_free_port;

/// What the origin did with one key.
#[derive(Default)]
struct KeyState {
    /// Requests that arrived with the key.
    received: usize,
    /// When each of them arrived.
    arrivals: Vec<Instant>,
    /// Times the key was executed (at most once, by design of this origin).
    executions: usize,
    /// The stored answer, once the execution finished.
    answer: Option<String>,
}

/// The running accept loop: its stop flag and thread.
type Listening = Option<(Arc<AtomicBool>, thread::JoinHandle<()>)>;

#[derive(Clone)]
pub struct DedupOrigin {
    addr: SocketAddr,
    keys: Arc<Mutex<HashMap<String, KeyState>>>,
    /// The running accept loop's stop flag, while listening.
    listening: Arc<Mutex<Listening>>,
}

impl DedupOrigin {
    pub fn start() -> DedupOrigin {
        // A port no other process is handed while this origin is down (`free_port`).
        let listener = bind_free_port();
        let origin = DedupOrigin {
            addr: listener.local_addr().unwrap(),
            keys: Arc::default(),
            listening: Arc::default(),
        };
        origin.serve(listener);
        origin
    }

    fn serve(&self, listener: TcpListener) {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let serving = self.clone();
        let thread = thread::spawn(move || {
            for stream in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    // Returning drops the listener: connections are refused from now on.
                    return;
                }
                let Ok(stream) = stream else { continue };
                let origin = serving.clone();
                thread::spawn(move || origin.handle(stream));
            }
        });
        *self.listening.lock().unwrap() = Some((stop, thread));
    }

    /// Stops listening: until [`DedupOrigin::resume`], connecting is refused.
    pub fn stop(&self) {
        let Some((stop, thread)) = self.listening.lock().unwrap().take() else { return };
        stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so that it sees the flag and drops the socket.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(5));
        let _ = thread.join();
    }

    /// Listens on the same port again (retrying for a while if the port is still busy).
    pub fn resume(&self) {
        if self.listening.lock().unwrap().is_some() {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match TcpListener::bind(self.addr) {
                Ok(listener) => return self.serve(listener),
                Err(e) if Instant::now() >= deadline => panic!("the origin cannot listen again: {e}"),
                Err(_) => thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn executions(&self, key: &str) -> usize {
        self.keys.lock().unwrap().get(key).map_or(0, |k| k.executions)
    }

    pub fn received(&self, key: &str) -> usize {
        self.keys.lock().unwrap().get(key).map_or(0, |k| k.received)
    }

    /// When each request with the key arrived, in order.
    pub fn arrivals(&self, key: &str) -> Vec<Instant> {
        self.keys.lock().unwrap().get(key).map_or_else(Vec::new, |k| k.arrivals.clone())
    }

    fn handle(&self, mut stream: TcpStream) {
        stream.set_read_timeout(Some(Duration::from_secs(60))).ok();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        let head_end = loop {
            if let Some(end) = find_head_end(&buf) {
                break end;
            }
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let lines = split_lines(&buf[..head_end - 4]);
        let headers = parse_header_lines(&lines[1..]);
        let length: usize =
            header_value(&headers, "content-length").and_then(|v| v.trim().parse().ok()).unwrap_or(0);
        while buf.len() - head_end < length {
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let control = |name: &str| header_value(&headers, name).map(|v| v.trim().to_owned());
        let reply = |stream: &mut TcpStream, status: u16, extra: &str, body: &str| {
            let head = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nx-origin-execution: 1\r\n{extra}connection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(body.as_bytes());
            let _ = stream.shutdown(Shutdown::Write);
        };
        let Some(key) = control("idempotency-key") else {
            return reply(&mut stream, 200, "", "{\"keyless\":true}");
        };
        let fail_first = control("x-test-fail-first").and_then(|v| v.parse::<usize>().ok()).unwrap_or(0);
        enum Next {
            Replay(String),
            Busy,
            Overloaded,
            Execute,
        }
        let next = {
            let mut keys = self.keys.lock().unwrap();
            let state = keys.entry(key.clone()).or_default();
            state.received += 1;
            state.arrivals.push(Instant::now());
            let drop_first = control("x-test-drop-first").and_then(|v| v.parse::<usize>().ok()).unwrap_or(0);
            if control("x-test-drop").as_deref() == Some("1") || state.received <= drop_first {
                drop(keys);
                let _ = stream.shutdown(Shutdown::Both);
                return;
            }
            match (&state.answer, state.executions) {
                (Some(answer), _) => Next::Replay(answer.clone()),
                (None, 1) => Next::Busy,
                (None, _) if state.received <= fail_first => Next::Overloaded,
                (None, _) => {
                    state.executions = 1;
                    Next::Execute
                }
            }
        };
        match next {
            Next::Replay(answer) => reply(&mut stream, 201, "", &answer),
            Next::Busy => {
                reply(&mut stream, 409, "", "{\"error\":\"a request with this key is in progress\"}")
            }
            Next::Overloaded => {
                reply(&mut stream, 503, "retry-after: 1\r\n", "{\"error\":\"overloaded, not executed\"}")
            }
            Next::Execute => {
                if let Some(ms) = control("x-test-delay-ms").and_then(|v| v.parse::<u64>().ok()) {
                    thread::sleep(Duration::from_millis(ms));
                }
                let answer = format!("{{\"charge\":\"{}\"}}", unique("ch"));
                self.keys.lock().unwrap().get_mut(&key).unwrap().answer = Some(answer.clone());
                reply(&mut stream, 201, "", &answer);
            }
        }
    }
}
