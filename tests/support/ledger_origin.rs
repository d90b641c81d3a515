//! A payment origin that answers "did operation X happen?", for reconciliation (issue
//! 25.1): a threaded HTTP/1.1 server on loopback with a ledger. It behaves as a real
//! payment API does: it verifies the edge's signature on every request, lookups included
//! (`core::edge_rules::message_signature::verify`, RFC 9421, with a fresh nonce each time; a lookup
//! signed `protected`), and answers 401 without
//! doing anything when it fails; it answers 404 to a path it does not serve.
//!
//! - `POST /v1/…/charges` (`/v1/charges`, and the other routes' `/v1/<name>/charges`)
//!   charges once per (`Authorization`, `Idempotency-Key`) and answers 201 with the
//!   charge, unless the test planned otherwise for the key's next charge
//!   ([`LedgerOrigin::plan_next`], per key, so that tests sharing the origin in parallel
//!   never take each other's plans): charge, then stall past the worker's timeout and close
//!   (executed, reply lost); stall, then close without charging (never executed); hold the
//!   request until the worker's connection dies, then charge (executed while the worker was
//!   killed) or not (never executed); or refuse the caller with a status (401, 403).
//! - `GET /v1/charges?idempotency_key=K` is the lookup, as docs/operations.md asks: it
//!   answers only for a charge made at or after the claim's time, `Idempotency-Claimed-At`
//!   (less [`CLOCK_SKEW_MS`]; a lookup without it, as an edge sent before the header
//!   existed, is answered from the whole ledger, which keeps keys longer than the edge's
//!   records last, as a payment API's does): 200 with the charge the caller (its
//!   `Authorization`) made under `K`, marked `Idempotency-Lookup: executed`, or 404 marked
//!   `Idempotency-Lookup: not-executed`. `GET /v1/gone/charges?…` is the same lookup whose
//!   "not found" is 410 (a route's `reconcile_not_found`). The test may make a key's next
//!   lookups fail with 503 ([`LedgerOrigin::fail_next_lookups`]) or wait a while before they
//!   answer ([`LedgerOrigin::hang_next_lookups`]: past the origin timeout, or still running
//!   when retries arrive). Lookups are counted as they arrive. `GET /v1/operations/K` is
//!   the same lookup with the key in the path (K one segment).
//! - The key is the header's value exactly as it came (a quoted key stays quoted), as a
//!   Stripe-like API keeps it; a lookup's `K` is percent-decoded and compared with it.
//!   Charges are taken at `POST /v1/…/charges`, `/v1/operations` and `/v1/resent`.
//! - Any other path answers 404 without the marker, as a router does (counted per key when
//!   its query names one: [`LedgerOrigin::strays`]).
//!
//! Every answer carries `x-origin-execution`, as the harness's readiness probe expects.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use idempotency_edge::core::edge_rules::message_signature::verify;
use idempotency_edge::core::edge_rules::origin_auth::{Protection, DEFAULT_TOLERANCE_SECONDS};

use super::http::header_value;
use super::origin::{peer_closed, read_request, Shared};

/// How far the edge's clock may be ahead of this origin's: a charge made this much before
/// the claim's time still counts as the claim's (the edge and this origin share one clock
/// here; a real origin allows for the skew between its clock and Cloudflare's).
pub const CLOCK_SKEW_MS: u64 = 1_000;

/// What the origin does with the next charge.
#[derive(Clone, Copy, Debug)]
pub enum Plan {
    /// Charge, stall this long, then close without answering: executed, reply lost.
    ChargeThenStall(Duration),
    /// Stall this long, then close without charging: never executed.
    StallThenDrop(Duration),
    /// Hold the request until the worker closes the connection, then charge.
    ChargeWhenAbandoned,
    /// Hold the request until the worker closes the connection, then drop it uncharged.
    DropWhenAbandoned,
    /// Refuse the caller with this status (401, 403) and charge nothing.
    Refuse(u16),
    /// Charge nothing and answer 400 `idempotency_error`, as a Stripe-like API refuses a
    /// request it will not run under the key.
    RefuseAsReused,
    /// Answer 201 with the charge already made under the key (none made), as an origin that
    /// deduplicates by key answers a re-send.
    ReplayCharge,
}

#[derive(Default)]
struct State {
    /// (authorization, key) → the charge's JSON and when it was made (Unix milliseconds).
    ledger: HashMap<(String, String), (String, u64)>,
    charges_by_key: HashMap<String, usize>,
    /// Per key: when each charge request (a POST) arrived, charged or not.
    arrivals_by_key: HashMap<String, Vec<Instant>>,
    /// Per key: when each lookup arrived, and the status it got.
    lookups_by_key: HashMap<String, Vec<(Instant, u16)>>,
    /// Per key: the headers of its latest lookup (per key, like every record here, so
    /// that tests sharing the origin in parallel never read each other's).
    lookup_headers: HashMap<String, Vec<(String, String)>>,
    /// Per key: how many of its next lookups fail.
    failing_lookups: HashMap<String, usize>,
    /// Per key: how many of its next lookups hang, and for how long, before they answer.
    hanging_lookups: HashMap<String, (usize, Duration)>,
    /// Per key: lookups that arrived, answered or not yet.
    lookups_arrived: HashMap<String, usize>,
    /// Per key: requests for a path this origin does not serve.
    strays: HashMap<String, usize>,
    /// Per key: what its next charges do.
    plans: HashMap<String, VecDeque<Plan>>,
    /// Nonces of verified signatures: a second use is a replay.
    nonces: HashSet<String>,
    /// Requests refused because their signature did not verify.
    refused: usize,
    serial: u64,
}

pub struct LedgerOrigin {
    addr: SocketAddr,
    shared: Arc<Shared<State>>,
}

impl LedgerOrigin {
    /// An origin that verifies the edge's signature under `secret` (`ORIGIN_AUTH_SECRET`).
    pub fn start(secret: &str) -> LedgerOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let addr = listener.local_addr().expect("its address");
        let shared = Arc::new(Shared::<State>::default());
        let accepting = shared.clone();
        let secret: Arc<[u8]> = secret.as_bytes().into();
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let shared = accepting.clone();
                let secret = secret.clone();
                thread::spawn(move || handle(stream, &shared, &secret));
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

    /// The lookup whose "not found" is 410.
    pub fn gone_reconcile_url(&self) -> String {
        format!("{}/v1/gone/charges?idempotency_key={{key}}", self.url())
    }

    /// The route option for a lookup with the key in the path.
    pub fn reconcile_path_url(&self) -> String {
        format!("{}/v1/operations/{{key}}", self.url())
    }

    /// Charge requests that arrived with `key` as their header's value.
    pub fn arrivals(&self, key: &str) -> usize {
        self.shared.lock().arrivals_by_key.get(key).map_or(0, Vec::len)
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

    /// The next `n` lookups of `key` wait `hang` before they answer.
    pub fn hang_next_lookups(&self, key: &str, n: usize, hang: Duration) {
        self.shared.update(|s| s.hanging_lookups.insert(key.to_owned(), (n, hang)));
    }

    /// Charges made under `key` (executions).
    pub fn charges(&self, key: &str) -> usize {
        self.shared.lock().charges_by_key.get(key).copied().unwrap_or(0)
    }

    /// Lookups of `key` that arrived (answered, or under way).
    pub fn lookups(&self, key: &str) -> usize {
        self.shared.lock().lookups_arrived.get(key).copied().unwrap_or(0)
    }

    /// When each lookup of `key` arrived, and the status it got.
    pub fn lookup_log(&self, key: &str) -> Vec<(Instant, u16)> {
        self.shared.lock().lookups_by_key.get(key).cloned().unwrap_or_default()
    }

    /// When each charge request under `key` arrived.
    pub fn arrival_times(&self, key: &str) -> Vec<Instant> {
        self.shared.lock().arrivals_by_key.get(key).cloned().unwrap_or_default()
    }

    /// Requests for a path this origin does not serve, whose query named `key`.
    pub fn strays(&self, key: &str) -> usize {
        self.shared.lock().strays.get(key).copied().unwrap_or(0)
    }

    /// Requests refused (401) because the edge's signature did not verify, over all keys.
    pub fn refused(&self) -> usize {
        self.shared.lock().refused
    }

    /// The headers of the latest lookup of `key`.
    pub fn last_lookup_headers(&self, key: &str) -> Vec<(String, String)> {
        self.shared.lock().lookup_headers.get(key).cloned().unwrap_or_default()
    }

    /// Waits until `done` holds of (charges, arrivals, lookups) for `key`, at most
    /// `timeout`; whether it held.
    pub fn wait_for(&self, key: &str, timeout: Duration, done: impl Fn(usize, usize, usize) -> bool) -> bool {
        self.shared.wait_until(timeout, |state| {
            done(
                state.charges_by_key.get(key).copied().unwrap_or(0),
                state.arrivals_by_key.get(key).map_or(0, Vec::len),
                state.lookups_arrived.get(key).copied().unwrap_or(0),
            )
        })
    }
}

fn respond(stream: &mut TcpStream, status: u16, headers: &[(&str, &str)], body: &str) {
    let reason = match status {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        410 => "Gone",
        _ => "Service Unavailable",
    };
    let extra: String = headers.iter().map(|(name, value)| format!("{name}: {value}\r\n")).collect();
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\nx-origin-execution: 0\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n",
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

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Whether the edge signed this request (its RFC 9421 signature verifies under `secret`,
/// within the tolerance, with a nonce never seen before), and as what: a lookup must be
/// signed `protected`, as only the key's object sends one.
fn signed_by_the_edge(
    received: &super::origin::Received,
    shared: &Shared<State>,
    secret: &[u8],
) -> Option<Protection> {
    // The target URI as this origin knows it: its scheme, the Host it was asked for.
    let host = header_value(&received.headers, "host").unwrap_or_default();
    let verified = verify(
        secret,
        &|name: &str| header_value(&received.headers, name).map(str::to_owned),
        &received.method,
        &format!("http://{host}{}", received.target),
        "idempotency-key",
        &received.body,
        unix_ms() / 1_000,
        DEFAULT_TOLERANCE_SECONDS,
    );
    shared.update(|s| {
        let fresh = verified.ok().filter(|verified| s.nonces.insert(verified.nonce.clone()));
        if fresh.is_none() {
            s.refused += 1;
        }
        fresh.map(|verified| verified.protection)
    })
}

fn handle(mut stream: TcpStream, shared: &Shared<State>, secret: &[u8]) {
    stream.set_read_timeout(Some(Duration::from_secs(60))).ok();
    let Ok(Some(received)) = read_request(&mut stream) else { return };
    let Some(protection) = signed_by_the_edge(&received, shared, secret) else {
        return respond(&mut stream, 401, &[], r#"{"error":"the edge's signature did not verify"}"#);
    };
    let auth = header_value(&received.headers, "authorization").unwrap_or_default().to_string();
    let (path, query) = received.target.split_once('?').unwrap_or((&received.target, ""));
    let queried_key =
        query.split('&').find_map(|pair| pair.strip_prefix("idempotency_key=")).map(percent_decode);
    if received.method == "GET" {
        let not_found = match path {
            "/v1/charges" => 404,
            "/v1/gone/charges" => 410,
            _ => 0,
        };
        // The lookup with the key in the path: one non-empty segment.
        let path_key = path.strip_prefix("/v1/operations/").filter(|k| !k.is_empty() && !k.contains('/'));
        let (queried_key, not_found) = match path_key {
            Some(key) => (Some(percent_decode(key)), 404),
            None => (queried_key, not_found),
        };
        return match queried_key {
            // Only the key's object looks up: a lookup the edge passed on unprotected (a
            // client's own GET of the lookup URL) is refused.
            Some(_) if not_found != 0 && protection != Protection::Protected => {
                respond(&mut stream, 403, &[], r#"{"error":"a lookup must come from the edge's object"}"#)
            }
            Some(key) if not_found != 0 => {
                look_up(&mut stream, shared, &received.headers, &auth, &key, not_found)
            }
            stray => {
                if let Some(key) = stray {
                    shared.update(|s| *s.strays.entry(key).or_insert(0) += 1);
                }
                respond(&mut stream, 404, &[], r#"{"error":"no such path"}"#)
            }
        };
    }
    let charges = (path.starts_with("/v1/") && path.ends_with("/charges"))
        || matches!(path, "/v1/operations" | "/v1/resent");
    if received.method != "POST" || !charges {
        return respond(&mut stream, 404, &[], r#"{"error":"no such path"}"#);
    }
    let key = header_value(&received.headers, "idempotency-key").unwrap_or_default().to_string();
    let plan = shared.update(|s| {
        s.arrivals_by_key.entry(key.clone()).or_default().push(Instant::now());
        s.plans.get_mut(&key).and_then(VecDeque::pop_front)
    });
    let charge = |shared: &Shared<State>| {
        shared.update(|s| {
            s.serial += 1;
            let json = format!(r#"{{"id":"ch_{:04}","amount":1000,"key":"{}"}}"#, s.serial, key);
            s.ledger.insert((auth.clone(), key.clone()), (json.clone(), unix_ms()));
            *s.charges_by_key.entry(key.clone()).or_insert(0) += 1;
            json
        })
    };
    let abandoned = |stream: &TcpStream| {
        let deadline = Instant::now() + Duration::from_secs(300);
        while !peer_closed(stream) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(50));
        }
    };
    match plan {
        None => {
            let json = charge(shared);
            respond(&mut stream, 201, &[], &json);
        }
        Some(Plan::ChargeThenStall(stall)) => {
            charge(shared);
            thread::sleep(stall);
            let _ = stream.shutdown(Shutdown::Both);
        }
        Some(Plan::RefuseAsReused) => {
            respond(&mut stream, 400, &[], r#"{"error":{"type":"idempotency_error"}}"#);
        }
        Some(Plan::ReplayCharge) => {
            let stored =
                shared.update(|s| s.ledger.get(&(auth.clone(), key.clone())).map(|(json, _)| json.clone()));
            let json = stored.unwrap_or_else(|| charge(shared));
            respond(&mut stream, 201, &[], &json);
        }
        Some(Plan::StallThenDrop(stall)) => {
            thread::sleep(stall);
            let _ = stream.shutdown(Shutdown::Both);
        }
        Some(Plan::ChargeWhenAbandoned) => {
            abandoned(&stream);
            charge(shared);
            let _ = stream.shutdown(Shutdown::Both);
        }
        Some(Plan::DropWhenAbandoned) => {
            abandoned(&stream);
            let _ = stream.shutdown(Shutdown::Both);
        }
        Some(Plan::Refuse(status)) => respond(&mut stream, status, &[], r#"{"error":"refused"}"#),
    }
}

/// The lookup of `key` for the caller `auth`, as docs/operations.md asks of an origin: only
/// a charge made at or after the claim's time counts, and only this handler's own answers
/// carry `Idempotency-Lookup`.
fn look_up(
    stream: &mut TcpStream,
    shared: &Shared<State>,
    headers: &[(String, String)],
    auth: &str,
    key: &str,
    not_found: u16,
) {
    let arrived = Instant::now();
    let (failing, hang) = shared.update(|s| {
        // Counted as it arrives, so that a test sees a lookup under way.
        *s.lookups_arrived.entry(key.to_owned()).or_insert(0) += 1;
        s.lookup_headers.insert(key.to_owned(), headers.to_vec());
        let failing = s.failing_lookups.get_mut(key).filter(|n| **n > 0).map(|n| *n -= 1).is_some();
        let hang = s.hanging_lookups.get_mut(key).filter(|(n, _)| *n > 0).map(|(n, hang)| {
            *n -= 1;
            *hang
        });
        (failing, hang)
    });
    let claimed_at = match header_value(headers, "idempotency-claimed-at") {
        None => Some(0),
        Some(value) => value.trim().parse::<u64>().ok(),
    };
    let (status, marker, body) = if failing {
        (503, None, r#"{"error":"lookup unavailable"}"#.to_owned())
    } else if let Some(claimed_at) = claimed_at {
        if let Some(hang) = hang {
            thread::sleep(hang);
        }
        let found = shared.update(|s| {
            s.ledger
                .get(&(auth.to_owned(), key.to_owned()))
                .filter(|(_, charged_at)| charged_at.saturating_add(CLOCK_SKEW_MS) >= claimed_at)
                .map(|(charge, _)| charge.clone())
        });
        match found {
            Some(charge) => (200, Some("executed"), charge),
            None => (not_found, Some("not-executed"), r#"{"error":"no such charge"}"#.to_owned()),
        }
    } else {
        (400, None, r#"{"error":"Idempotency-Claimed-At is not a time"}"#.to_owned())
    };
    shared.update(|s| s.lookups_by_key.entry(key.to_owned()).or_default().push((arrived, status)));
    let marker: Vec<(&str, &str)> = marker.map(|m| ("idempotency-lookup", m)).into_iter().collect();
    respond(stream, status, &marker, &body);
}
