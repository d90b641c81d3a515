//! A payment origin that answers "did operation X happen?", for reconciliation (issue
//! 25.1): a threaded HTTP/1.1 server on loopback with a ledger.
//!
//! - `POST /v1/charges` charges once per (`Authorization`, `Idempotency-Key`) and answers
//!   201 with the charge, unless the test planned otherwise for the key's next charge
//!   ([`LedgerOrigin::plan_next`], per key, so that tests sharing the origin in parallel
//!   never take each other's plans): charge, then stall past the worker's timeout and close
//!   (executed, reply lost); stall, then close without charging (never executed); or hold
//!   the request until the worker's connection dies, then charge (executed while the
//!   worker was killed).
//! - `GET /v1/charges?idempotency_key=K` is the lookup: 200 with the charge the caller
//!   (its `Authorization`) made under `K`, 404 when there is none. The test may make a
//!   key's next lookups fail with 503 ([`LedgerOrigin::fail_next_lookups`]).
//!   `GET /v1/operations/K` is the same lookup with the key in the path (K one segment).
//! - The key is the header's value exactly as it came (a quoted key stays quoted), as a
//!   Stripe-like API keeps it; a lookup's `K` is percent-decoded and compared with it.
//! - `GET /__e2e/ready` answers 200 (the harness's readiness probe); any other `GET` 404,
//!   as a router answers a path it does not serve.
//!
//! Every answer carries `x-origin-execution`, as the harness's probe expects.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::http::header_value;
use super::origin::{peer_closed, read_request, Shared};

/// What the origin does with the next charge.
#[derive(Clone, Copy, Debug)]
pub enum Plan {
    /// Charge, stall this long, then close without answering: executed, reply lost.
    ChargeThenStall(Duration),
    /// Stall this long, then close without charging: never executed.
    StallThenDrop(Duration),
    /// Hold the request until the worker closes the connection, then charge.
    ChargeWhenAbandoned,
    /// Charge nothing and answer 400 `idempotency_error`, as a Stripe-like API refuses a
    /// request it will not run under the key.
    RefuseAsReused,
    /// Answer 201 with the charge already made under the key (none made), as an origin that
    /// deduplicates by key answers a re-send.
    ReplayCharge,
}

#[derive(Default)]
struct State {
    /// (authorization, key) → the charge's JSON.
    ledger: HashMap<(String, String), String>,
    charges_by_key: HashMap<String, usize>,
    arrivals_by_key: HashMap<String, usize>,
    lookups_by_key: HashMap<String, usize>,
    /// Per key: the headers of its latest lookup (per key, like every record here, so
    /// that tests sharing the origin in parallel never read each other's).
    lookup_headers: HashMap<String, Vec<(String, String)>>,
    /// Per key: how many of its next lookups fail.
    failing_lookups: HashMap<String, usize>,
    /// Per key: what its next charges do.
    plans: HashMap<String, VecDeque<Plan>>,
    serial: u64,
}

pub struct LedgerOrigin {
    addr: SocketAddr,
    shared: Arc<Shared<State>>,
}

impl LedgerOrigin {
    pub fn start() -> LedgerOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let addr = listener.local_addr().expect("its address");
        let shared = Arc::new(Shared::<State>::default());
        let accepting = shared.clone();
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let shared = accepting.clone();
                thread::spawn(move || handle(stream, &shared));
            }
        });
        LedgerOrigin { addr, shared }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The route option: the lookup's URL template.
    pub fn reconcile_url(&self) -> String {
        format!("{}/v1/charges?idempotency_key={{key}}", self.url())
    }

    /// The route option for a lookup with the key in the path.
    pub fn reconcile_path_url(&self) -> String {
        format!("{}/v1/operations/{{key}}", self.url())
    }

    /// Charge requests that arrived with `key` as their header's value.
    pub fn arrivals(&self, key: &str) -> usize {
        self.shared.lock().arrivals_by_key.get(key).copied().unwrap_or(0)
    }

    /// What the next charge under `key` does.
    pub fn plan_next(&self, key: &str, plan: Plan) {
        self.shared.update(|s| s.plans.entry(key.to_owned()).or_default().push_back(plan));
    }

    /// The next `n` lookups of `key` answer 503 (per key, so that tests sharing the origin
    /// do not take each other's failures).
    pub fn fail_next_lookups(&self, key: &str, n: usize) {
        self.shared.update(|s| s.failing_lookups.insert(key.to_owned(), n));
    }

    /// Charges made under `key` (executions).
    pub fn charges(&self, key: &str) -> usize {
        self.shared.lock().charges_by_key.get(key).copied().unwrap_or(0)
    }

    pub fn lookups(&self, key: &str) -> usize {
        self.shared.lock().lookups_by_key.get(key).copied().unwrap_or(0)
    }

    /// The headers of the latest lookup of `key`.
    pub fn last_lookup_headers(&self, key: &str) -> Vec<(String, String)> {
        self.shared.lock().lookup_headers.get(key).cloned().unwrap_or_default()
    }

    /// Waits until `done` holds of (charges, arrivals, lookups) for `key`, at most
    /// `timeout`; whether it held.
    pub fn wait_for(&self, key: &str, timeout: Duration, done: impl Fn(usize, usize, usize) -> bool) -> bool {
        let count = |map: &HashMap<String, usize>| map.get(key).copied().unwrap_or(0);
        self.shared.wait_until(timeout, |state| {
            done(count(&state.charges_by_key), count(&state.arrivals_by_key), count(&state.lookups_by_key))
        })
    }
}

fn respond(stream: &mut TcpStream, status: u16, body: &str) {
    let reason = match status {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        404 => "Not Found",
        _ => "Service Unavailable",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\nx-origin-execution: 0\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).and_then(|_| stream.write_all(body.as_bytes()));
    let _ = stream.flush();
    let _ = stream.shutdown(Shutdown::Write);
}

/// `%XX` decoded (the worker encodes every byte but the unreserved ones).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(byte) = u8::from_str_radix(&text[i + 1..i + 3], 16) {
                out.push(byte);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn handle(mut stream: TcpStream, shared: &Shared<State>) {
    stream.set_read_timeout(Some(Duration::from_secs(60))).ok();
    let Ok(Some(received)) = read_request(&mut stream) else { return };
    let auth = header_value(&received.headers, "authorization").unwrap_or_default().to_string();
    if received.method == "GET" {
        let target = received.target.as_str();
        let key = match (
            target.strip_prefix("/v1/charges?idempotency_key="),
            target.strip_prefix("/v1/operations/"),
        ) {
            (Some(key), _) => percent_decode(key),
            (_, Some(key)) if !key.is_empty() && !key.contains(['/', '?']) => percent_decode(key),
            _ if target == "/__e2e/ready" => return respond(&mut stream, 200, "{}"),
            _ => return respond(&mut stream, 404, r#"{"error":"no such path"}"#),
        };
        let (status, body) = shared.update(|s| {
            *s.lookups_by_key.entry(key.clone()).or_insert(0) += 1;
            s.lookup_headers.insert(key.clone(), received.headers.clone());
            if let Some(failing) = s.failing_lookups.get_mut(&key).filter(|n| **n > 0) {
                *failing -= 1;
                return (503, r#"{"error":"lookup unavailable"}"#.to_owned());
            }
            match s.ledger.get(&(auth.clone(), key.clone())) {
                Some(charge) => (200, charge.clone()),
                None => (404, r#"{"error":"no such charge"}"#.to_owned()),
            }
        });
        return respond(&mut stream, status, &body);
    }
    let key = header_value(&received.headers, "idempotency-key").unwrap_or_default().to_string();
    let plan = shared.update(|s| {
        *s.arrivals_by_key.entry(key.clone()).or_insert(0) += 1;
        s.plans.get_mut(&key).and_then(VecDeque::pop_front)
    });
    let charge = |shared: &Shared<State>| {
        shared.update(|s| {
            s.serial += 1;
            let json = format!(r#"{{"id":"ch_{:04}","amount":1000,"key":"{}"}}"#, s.serial, key);
            s.ledger.insert((auth.clone(), key.clone()), json.clone());
            *s.charges_by_key.entry(key.clone()).or_insert(0) += 1;
            json
        })
    };
    match plan {
        None => {
            let json = charge(shared);
            respond(&mut stream, 201, &json);
        }
        Some(Plan::ChargeThenStall(stall)) => {
            charge(shared);
            thread::sleep(stall);
            let _ = stream.shutdown(Shutdown::Both);
        }
        Some(Plan::RefuseAsReused) => {
            respond(&mut stream, 400, r#"{"error":{"type":"idempotency_error"}}"#);
        }
        Some(Plan::ReplayCharge) => {
            let stored = shared.update(|s| s.ledger.get(&(auth.clone(), key.clone())).cloned());
            let json = stored.unwrap_or_else(|| charge(shared));
            respond(&mut stream, 201, &json);
        }
        Some(Plan::StallThenDrop(stall)) => {
            thread::sleep(stall);
            let _ = stream.shutdown(Shutdown::Both);
        }
        Some(Plan::ChargeWhenAbandoned) => {
            let deadline = Instant::now() + Duration::from_secs(300);
            while !peer_closed(&stream) && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(50));
            }
            charge(shared);
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}
