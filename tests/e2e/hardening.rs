//! End-to-end tests of the hardening, in real workerd (`wrangler dev`, local mode):
//!
//! - the signed origin hop (`ORIGIN_AUTH_SECRET`), checked by an origin that verifies every
//!   request with the documented rules and refuses replayed and altered ones;
//! - `TRUSTED_CLIENT_IP`: client-sent forwarding headers never reach the origin;
//! - the rate limit (`[[ratelimits]]` `RATE_LIMITER`): 429 with `Retry-After`, no object;
//! - keyed object names (`OBJECT_NAME_KEY`): the names in the SQLite files are the HMACs;
//! - deletion: an alarm that fails (injected with `ALARM_FAULT_INJECTION`) is retried by
//!   the platform and the record is gone from the SQLite files after TTL + margin; a record
//!   read past its expiry is deleted at once;
//! - refusals: a misspelt variable and a short admin token are 500 `invalid-config`.
//!
//! How the alarm failure is injected: workerd gives no outside handle to make one object's
//! alarm fail, so the worker reads `ALARM_FAULT_INJECTION` (N): the first N alarm runs of
//! each object instance throw before doing anything, exactly as a failed storage call in
//! the handler would. Everything after the throw (the platform's retry with backoff, the
//! second run, the deletion) is workerd's own behaviour.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::support::assert::assert_limited_on_the_third;
use crate::support::http::{
    decode_chunked, find_head_end, header_value, is_chunked, parse_header_lines, send_raw, split_lines,
    Request, Response,
};
use crate::support::requests::{register_secret, secret, unique};
use crate::support::storage::snapshot;
use crate::support::worker::{
    key_object_toml, rate_limit_toml, shared, within_one_rate_limit_period, Readiness, Worker, WorkerConfig,
};
use idempotency_edge::core::edge_rules::message_signature;
use idempotency_edge::core::edge_rules::origin_auth::{verify, DEFAULT_TOLERANCE_SECONDS};
use idempotency_edge::core::formats::fingerprint::{object_name, Scope};
use idempotency_edge::core::formats::keyed_name::keyed_object_name;

const CALLER: &str = "Bearer test-caller";
const ORIGIN_SECRET: &str = "origin-auth-secret-for-e2e-0123456789abcdef";
const NAME_KEY: &str = "object-name-key-for-e2e-0123456789abcdef";
const ADMIN_TOKEN: &str = "e2e-admin-token-0123456789abcdef0123456789";
const BODY: &str = r#"{"amount":1200,"currency":"eur"}"#;

// ---------------------------------------------------------------------------------------
// An origin that verifies the signature, as docs/operations.md tells an origin to.

/// One request the verifying origin received.
#[derive(Clone, Debug)]
struct Seen {
    target: String,
    headers: Vec<(String, String)>,
    /// The whole request as received, to replay it.
    raw: Vec<u8>,
    /// The nonce, or why the request was refused (`Replayed`, or a `Refusal` by name).
    verdict: Result<String, String>,
    /// What the verified signature says of the edge's protection (`protected`, `passed`).
    protection: Option<&'static str>,
    /// The format the request was signed in: `rfc9421`, or `v2` (`ORIGIN_AUTH_FORMAT`).
    format: &'static str,
}

#[derive(Clone)]
struct VerifyingOrigin {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl VerifyingOrigin {
    fn start() -> VerifyingOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the verifying origin");
        let addr = listener.local_addr().expect("origin address");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let nonces = Arc::new(Mutex::new(HashSet::new()));
        let state = seen.clone();
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (seen, nonces) = (state.clone(), nonces.clone());
                thread::spawn(move || serve(stream, &seen, &nonces));
            }
        });
        VerifyingOrigin { addr, seen }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The requests that carried `marker` (a unique value in the path).
    fn seen_at(&self, marker: &str) -> Vec<Seen> {
        self.seen.lock().unwrap().iter().filter(|s| s.target.contains(marker)).cloned().collect()
    }
}

fn now_seconds() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn serve(mut stream: TcpStream, seen: &Mutex<Vec<Seen>>, nonces: &Mutex<HashSet<String>>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let (head_end, headers, request_line) = loop {
        if let Some(end) = find_head_end(&buf) {
            let lines = split_lines(&buf[..end - 4]);
            let request_line = String::from_utf8_lossy(lines[0]).into_owned();
            break (end, parse_header_lines(&lines[1..]), request_line);
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let body = loop {
        let rest = &buf[head_end..];
        if is_chunked(&headers) {
            if let Some(Ok((body, _))) = decode_chunked(rest) {
                break body;
            }
        } else {
            let length: usize =
                header_value(&headers, "content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
            if rest.len() >= length {
                break rest[..length].to_vec();
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let mut parts = request_line.split(' ');
    let method = parts.next().unwrap_or("").to_owned();
    let target = parts.next().unwrap_or("").to_owned();
    // Under /v1/request-id/ the origin's API takes its keys in X-Request-Id (the route's
    // key_header), so that is the key it checks the signature against.
    let key_header = if target.starts_with("/v1/request-id/") { "x-request-id" } else { "idempotency-key" };
    // RFC 9421 unless the request carries the version 2 header (ORIGIN_AUTH_FORMAT = v2).
    let (verified, format) = match header_value(&headers, "idempotency-edge-signature") {
        Some(signature) => (
            verify(
                ORIGIN_SECRET.as_bytes(),
                Some(signature),
                &method,
                &target,
                header_value(&headers, key_header),
                &body,
                now_seconds(),
                DEFAULT_TOLERANCE_SECONDS,
            )
            .map(|v| (v.nonce, v.protection))
            .map_err(|refusal| format!("{refusal:?}")),
            "v2",
        ),
        None => (
            message_signature::verify(
                ORIGIN_SECRET.as_bytes(),
                &|name: &str| header_value(&headers, name).map(str::to_owned),
                &method,
                // The target URI as this origin knows it: its scheme, the Host it was asked for.
                &format!("http://{}{target}", header_value(&headers, "host").unwrap_or_default()),
                key_header,
                &body,
                now_seconds(),
                DEFAULT_TOLERANCE_SECONDS,
            )
            .map(|v| (v.nonce, v.protection))
            .map_err(|refusal| format!("{refusal:?}")),
            "rfc9421",
        ),
    };
    let protection = verified.as_ref().ok().map(|(_, protection)| protection.as_str());
    let mut verdict = verified.map(|(nonce, _)| nonce);
    // A nonce seen before is a replay.
    if let Ok(nonce) = &verdict {
        if !nonces.lock().unwrap().insert(nonce.clone()) {
            verdict = Err("Replayed".to_owned());
        }
    }
    let (status, answer) = match &verdict {
        Ok(_) => {
            (if method == "GET" { 200 } else { 201 }, format!(r#"{{"id":"{}","ok":true}}"#, unique("ch")))
        }
        Err(refusal) => (401, format!(r#"{{"refused":"{refusal}"}}"#)),
    };
    seen.lock().unwrap().push(Seen { target, headers, raw: buf.clone(), verdict, protection, format });
    let response = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\nx-origin-execution: 1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
        answer.len()
    );
    let _ = stream.write_all(response.as_bytes());
}

// ---------------------------------------------------------------------------------------
// Instances.

fn verifying_origin() -> &'static VerifyingOrigin {
    static ORIGIN: OnceLock<VerifyingOrigin> = OnceLock::new();
    ORIGIN.get_or_init(VerifyingOrigin::start)
}

fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
}

/// The hardened worker: signed hop, trusted client IP, keyed names, a rate limit on
/// `/v1/limited/*` and (with a binding of its own) `/v1/random-credentials/*` only, a 2-second TTL on `/v1/short/*`, and one failing alarm run per
/// object instance.
fn hardened() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    shared(&CELL, || {
        let routes = r#"[{"pattern":"/v1/limited/*"},
            {"pattern":"/v1/random-credentials/*","rate_limit":"RATE_LIMITER_IP"},
            {"pattern":"/v1/limited-callers/*","rate_limit":"RATE_LIMITER_CALLERS"},
            {"pattern":"/v1/limited-anonymous/*","rate_limit":"RATE_LIMITER_ANONYMOUS","anonymous":"allow"},
            {"pattern":"/v1/short/*","ttl_seconds":2,"rate_limit":false},
            {"pattern":"/v1/observed/*","mode":"observe","rate_limit":false},
            {"pattern":"/v1/request-id/*","key_header":"X-Request-Id","rate_limit":false},
            {"pattern":"/*","rate_limit":false}]"#;
        Worker::start_with_config(
            WorkerConfig {
                name: "hardened".into(),
                vars: vars(&[
                    ("ORIGIN_URL", &verifying_origin().url()),
                    ("ORIGIN_AUTH_SECRET", ORIGIN_SECRET),
                    ("TRUSTED_CLIENT_IP", "true"),
                    ("OBJECT_NAME_KEY", NAME_KEY),
                    ("ALARM_FAULT_INJECTION", "1"),
                    ("IDEMPOTENCY_ROUTES", routes),
                ]),
                readiness: Readiness::OriginAnswers,
            },
            &key_object_toml(
                "hardened",
                &[
                    rate_limit_toml("RATE_LIMITER", 1001, 2),
                    rate_limit_toml("RATE_LIMITER_IP", 1002, 2),
                    rate_limit_toml("RATE_LIMITER_CALLERS", 1003, 2),
                    rate_limit_toml("RATE_LIMITER_ANONYMOUS", 1004, 2),
                ]
                .concat(),
            ),
        )
    })
}

/// `SCOPE_HEADER = X-Api-Key-Id`: a scope from a key id, no secret, so each key is bound to
/// its caller's `Authorization`; `RATE_LIMITER` at two calls a minute on every route.
fn key_id_limited() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    shared(&CELL, || {
        Worker::start_with_config(
            WorkerConfig {
                name: "key-id-limited".into(),
                vars: vars(&[
                    ("ORIGIN_URL", &verifying_origin().url()),
                    ("ORIGIN_AUTH_SECRET", ORIGIN_SECRET),
                    ("SCOPE_HEADER", "X-Api-Key-Id"),
                ]),
                readiness: Readiness::OriginAnswers,
            },
            &key_object_toml("key-id-limited", &rate_limit_toml("RATE_LIMITER", 1005, 2)),
        )
    })
}

/// Every alarm fails, so a record stays in storage past its expiry until something reads it.
fn alarms_fail() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    shared(&CELL, || {
        Worker::start(WorkerConfig {
            name: "alarms-fail".into(),
            vars: vars(&[
                ("ORIGIN_URL", &verifying_origin().url()),
                ("ORIGIN_AUTH_SECRET", ORIGIN_SECRET),
                ("IDEMPOTENCY_TTL_SECONDS", "2"),
                ("ALARM_FAULT_INJECTION", "1000"),
                ("ADMIN_TOKEN", ADMIN_TOKEN),
            ]),
            readiness: Readiness::OriginAnswers,
        })
    })
}

fn refusing(
    cell: &'static OnceLock<Result<Worker, String>>,
    name: &str,
    extra: (&str, &str),
) -> &'static Worker {
    shared(cell, || {
        Worker::start(WorkerConfig {
            name: name.into(),
            vars: vars(&[
                ("ORIGIN_URL", &verifying_origin().url()),
                ("ORIGIN_AUTH_SECRET", ORIGIN_SECRET),
                extra,
            ]),
            readiness: Readiness::AnyResponse,
        })
    })
}

fn payment(path: &str, key: &str) -> Request {
    Request::post(path)
        .header("Idempotency-Key", key)
        .header("Authorization", CALLER)
        .json(BODY)
        .timeout(Duration::from_secs(120))
}

fn problem_type(r: &Response) -> String {
    r.json()["type"].as_str().unwrap_or_default().to_string()
}

/// The keyed name the hardened worker gives `key`'s object (what miniflare stores as
/// `__miniflare_do_name`).
fn keyed_name(key: &str) -> String {
    keyed_object_name(
        Some(NAME_KEY.as_bytes()),
        object_name(Scope::from_header(Some(CALLER.as_bytes())), key),
    )
}

fn poll<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        thread::sleep(Duration::from_millis(250));
    }
}

// ---------------------------------------------------------------------------------------
// The signed hop.

/// On a route that takes its key from `X-Request-Id` (`key_header`), the signature's key
/// line is that header, on the protected forward and on a pass-through alike: an origin
/// that deduplicates by its own header can trust the key the edge deduplicated by. The
/// `Idempotency-Key` beside it is an ordinary header: another value on the retry changes
/// nothing.
#[test]
fn the_signature_covers_the_routes_key_header() {
    let (w, o) = (hardened(), verifying_origin());
    let marker = unique("request-id");
    let path = format!("/v1/request-id/{marker}");
    let id = unique("rid");
    register_secret(&id);
    let keyed = || {
        Request::post(&path)
            .header("X-Request-Id", &id)
            .header("Idempotency-Key", unique("ordinary"))
            .header("Authorization", CALLER)
            .json(BODY)
            .timeout(Duration::from_secs(120))
    };
    let first = w.send(&keyed());
    assert_eq!(first.status, 201, "the origin verified the key line against X-Request-Id: {first:?}");
    let retry = w.send(&keyed());
    assert!(retry.is_replayed(), "{retry:?}");
    let get = w.send(&Request::get(&path).header("X-Request-Id", &id));
    assert_eq!(get.status, 200, "{get:?}");
    let seen = o.seen_at(&marker);
    assert_eq!(seen.len(), 2, "one protected forward and one pass-through: {seen:?}");
    assert!(seen.iter().all(|s| s.verdict.is_ok()), "{seen:?}");
    assert_eq!(seen[0].protection, Some("protected"), "{seen:?}");
    assert_eq!(seen[1].protection, Some("passed"), "{seen:?}");
}

/// workerd's own socket for `w`'s Worker, past wrangler dev's proxy. The proxy drops a
/// client's `Connection` header before the Worker sees it; workerd itself hands it to the
/// Worker, as a front end that passes it on would. The socket is a listening one of the
/// instance's workerd (in the instance's process group: the supervisor starts wrangler with
/// `setsid`) whose entry is bound to port 0 (the proxy's workerd has the instance's port),
/// and the one that answers a pass-through from the origin.
fn past_the_dev_proxy(w: &Worker) -> SocketAddr {
    let group = std::fs::read_to_string(w.dir().join("wrangler.pid")).expect("the instance's pid");
    let group = group.trim();
    let mut inodes: Vec<String> = Vec::new();
    for process in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(stat) = std::fs::read_to_string(process.path().join("stat")) else { continue };
        // `pid (comm) state ppid pgrp …`: the fields after the command's closing parenthesis.
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        if after.split_whitespace().nth(2) != Some(group) {
            continue;
        }
        let cmdline = std::fs::read(process.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        if !(cmdline.contains("workerd") && cmdline.contains("entry=127.0.0.1:0")) {
            continue;
        }
        for fd in std::fs::read_dir(process.path().join("fd")).into_iter().flatten().flatten() {
            let link = std::fs::read_link(fd.path()).unwrap_or_default();
            let link = link.to_string_lossy();
            if let Some(inode) = link.strip_prefix("socket:[").and_then(|rest| rest.strip_suffix(']')) {
                inodes.push(inode.to_owned());
            }
        }
    }
    // `/proc/net/tcp`: local address (hex IP:port), state (0A: listening), …, inode.
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let ports: Vec<u16> = tcp
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let listening = fields.get(3) == Some(&"0A");
            let ours = fields.get(9).is_some_and(|inode| inodes.iter().any(|i| i == inode));
            let port = fields.get(1)?.rsplit_once(':')?.1;
            (listening && ours).then(|| u16::from_str_radix(port, 16).ok()).flatten()
        })
        .collect();
    for port in &ports {
        let addr = SocketAddr::from(([127, 0, 0, 1], *port));
        let probe =
            Request::get(&format!("/v1/charges/{}", unique("direct"))).timeout(Duration::from_secs(10));
        if probe.send(addr).is_ok_and(|r| r.status == 200 && r.has_header("x-origin-execution")) {
            return addr;
        }
    }
    panic!("no socket of the instance's workerd answers as the Worker (listening: {ports:?})");
}

/// A client's `Connection` that names the key header or the credential takes neither off
/// the forward: the edge keyed and scoped the request by them, so the origin
/// receives the key the edge keyed by, the signature's key line is that key (the origin
/// checks it against the header it received), and the origin sees the caller the edge
/// scoped. Another header named there is still dropped as hop-by-hop. Sent to workerd's
/// own socket: wrangler dev's proxy would drop the `Connection` header on the way.
#[test]
fn connection_never_takes_the_key_or_the_caller_off_the_forward() {
    let (w, o) = (hardened(), verifying_origin());
    let direct = past_the_dev_proxy(w);
    for (prefix, key_header) in [("/v1/charges/", "Idempotency-Key"), ("/v1/request-id/", "X-Request-Id")] {
        let marker = unique("hop");
        let path = format!("{prefix}{marker}");
        let key = unique("hop-key");
        register_secret(&key);
        let request = || {
            Request::post(&path)
                .header(key_header, &key)
                .header("Authorization", CALLER)
                .header("X-Hop-Only", "for the edge")
                .header("Connection", format!("{key_header}, Authorization, X-Hop-Only"))
                .json(BODY)
                .timeout(Duration::from_secs(120))
        };
        let first = request().send(direct).expect("the first attempt's answer");
        assert_eq!(first.status, 201, "{key_header}: {first:?}");
        let retry = request().send(direct).expect("the retry's answer");
        assert!(retry.is_replayed(), "{key_header}: {retry:?}");
        let seen = o.seen_at(&marker);
        assert_eq!(seen.len(), 1, "{key_header}: one forward: {seen:?}");
        let headers = &seen[0].headers;
        assert_eq!(
            header_value(headers, key_header),
            Some(key.as_str()),
            "the origin receives the key the edge keyed by: {headers:?}"
        );
        assert_eq!(seen[0].verdict.as_ref().err(), None, "the signature's key line is that key: {seen:?}");
        assert_eq!(seen[0].protection, Some("protected"), "{seen:?}");
        assert_eq!(
            header_value(headers, "authorization"),
            Some(CALLER),
            "the caller the edge scoped: {headers:?}"
        );
        assert_eq!(
            header_value(headers, "x-hop-only"),
            None,
            "another named header stays hop-by-hop: {headers:?}"
        );
    }
}

/// One key, one spelling at the origin: a quoted key reaches the origin bare, and the
/// signature's key line is that spelling (the origin verifies it against the header it
/// received); a bare retry replays.
#[test]
fn a_quoted_key_is_forwarded_and_signed_in_its_one_spelling() {
    let (w, o) = (hardened(), verifying_origin());
    let marker = unique("spelled");
    let path = format!("/v1/charges/{marker}");
    let key = unique("k");
    let first = w.send(&payment(&path, &format!("\"{key}\"")));
    assert_eq!(first.status, 201, "the origin verified the signature: {first:?}");
    let retry = w.send(&payment(&path, &key));
    assert!(retry.is_replayed(), "{retry:?}");
    let seen = o.seen_at(&marker);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].verdict.is_ok(), "{seen:?}");
    assert_eq!(header_value(&seen[0].headers, "idempotency-key"), Some(key.as_str()), "{seen:?}");
}

/// `ORIGIN_AUTH_FORMAT = v2`, the migration: the earlier `Idempotency-Edge-Signature`
/// instead of RFC 9421, verified by the origin's v2 verifier, protection and key included.
#[test]
fn the_v2_signature_is_still_sent_when_asked_for() {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    let w = shared(&CELL, || {
        Worker::start(WorkerConfig {
            name: "signed-v2".into(),
            vars: vars(&[
                ("ORIGIN_URL", &verifying_origin().url()),
                ("ORIGIN_AUTH_SECRET", ORIGIN_SECRET),
                ("ORIGIN_AUTH_FORMAT", "v2"),
            ]),
            readiness: Readiness::OriginAnswers,
        })
    });
    let o = verifying_origin();
    let marker = unique("v2");
    let key = unique("k");
    let first = w.send(&payment(&format!("/v1/charges/{marker}"), &key));
    assert_eq!(first.status, 201, "the origin verified the v2 signature: {first:?}");
    assert!(w.send(&payment(&format!("/v1/charges/{marker}"), &key)).is_replayed());
    let seen = o.seen_at(&marker);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!((seen[0].format, seen[0].protection), ("v2", Some("protected")), "{seen:?}");
    assert!(seen[0].verdict.is_ok(), "{seen:?}");
    assert_eq!(header_value(&seen[0].headers, "signature-input"), None, "no RFC 9421 fields: {seen:?}");
}

#[test]
fn every_forward_is_signed_and_the_origin_refuses_replays_and_alterations() {
    let (w, o) = (hardened(), verifying_origin());
    let marker = unique("signed");
    let path = format!("/v1/charges/{marker}?expand=customer");
    let key = unique("k");
    let first = w.send(&payment(&path, &key));
    assert_eq!(first.status, 201, "the origin accepted the worker's signature: {first:?}");
    let replay = w.send(&payment(&path, &key));
    assert!(replay.is_replayed(), "{replay:?}");
    // An uncovered method passes through, signed too.
    let get = w.send(&Request::get(&format!("/v1/charges/{marker}")));
    assert_eq!(get.status, 200, "{get:?}");
    let seen = o.seen_at(&marker);
    assert_eq!(seen.len(), 2, "one covered forward and one pass-through: {seen:?}");
    assert!(seen.iter().all(|s| s.verdict.is_ok()), "{seen:?}");
    // The signature (RFC 9421) tells the origin which requests the edge protected; it covers
    // the Idempotency-Key too (the verifier checks it against the header received).
    assert!(seen.iter().all(|s| s.format == "rfc9421"), "{seen:?}");
    assert_eq!(seen[0].protection, Some("protected"), "the object's forward: {seen:?}");
    assert_eq!(seen[1].protection, Some("passed"), "the pass-through: {seen:?}");
    // A route in observe mode forwards from the Worker itself: signed as well.
    let observed_marker = unique("observed");
    let observed = w.send(&payment(&format!("/v1/observed/{observed_marker}"), &unique("k")));
    assert_eq!(observed.status, 201, "{observed:?}");
    let observed_seen = o.seen_at(&observed_marker);
    assert_eq!(observed_seen.len(), 1, "{observed_seen:?}");
    assert!(observed_seen[0].verdict.is_ok(), "{observed_seen:?}");
    assert_eq!(observed_seen[0].protection, Some("passed"), "observed, not protected: {observed_seen:?}");

    // An attacker who captured a request replays it verbatim: refused (nonce seen).
    let captured = &seen[0].raw;
    let replayed = send_raw(o.addr, captured, Duration::from_secs(30)).expect("replay to the origin");
    assert_eq!(replayed.status, 401, "a replayed signed request is refused: {replayed:?}");
    // ... or alters the body (same length, another amount): refused, its Content-Digest no
    // longer the body's. (The signature is checked before the nonce, so the reason is the
    // body.)
    let text = String::from_utf8_lossy(captured).into_owned();
    assert!(text.contains("1200"), "the captured request holds the body");
    let altered = text.replacen("1200", "9900", 1);
    let altered_response = send_raw(o.addr, altered.as_bytes(), Duration::from_secs(30)).expect("altered");
    assert_eq!(altered_response.status, 401, "an altered request is refused: {altered_response:?}");
    // ... or moves it to another Idempotency-Key (the body unchanged): refused, as the
    // signature covers the key.
    let rekeyed_key = unique("k");
    assert_eq!(rekeyed_key.len(), key.len());
    let rekeyed = text.replacen(&key, &rekeyed_key, 1);
    assert_ne!(rekeyed, text, "the captured request holds the key");
    let rekeyed_response = send_raw(o.addr, rekeyed.as_bytes(), Duration::from_secs(30)).expect("rekeyed");
    assert_eq!(
        rekeyed_response.status, 401,
        "a request moved to another key is refused: {rekeyed_response:?}"
    );
    // ... or sends without any signature: refused.
    let unsigned = Request::post(&format!("/v1/charges/{marker}")).json(BODY).send(o.addr).expect("unsigned");
    assert_eq!(unsigned.status, 401);
    let refusals: Vec<_> = o.seen_at(&marker).into_iter().filter_map(|s| s.verdict.err()).collect();
    assert_eq!(refusals, vec!["Replayed", "Digest", "Mismatch", "Missing"]);
}

#[test]
fn client_sent_forwarding_headers_are_replaced_by_the_connecting_ip() {
    let (w, o) = (hardened(), verifying_origin());
    let marker = unique("xff");
    let r = w.send(
        &payment(&format!("/v1/charges/{marker}"), &unique("k"))
            .header("X-Forwarded-For", "203.0.113.66")
            .header("X-Real-IP", "203.0.113.66")
            .header("Forwarded", "for=203.0.113.66"),
    );
    assert_eq!(r.status, 201, "{r:?}");
    let seen = o.seen_at(&marker);
    assert_eq!(seen.len(), 1);
    let headers = &seen[0].headers;
    assert!(
        !headers.iter().any(|(_, v)| v.contains("203.0.113.66")),
        "no client-sent address reaches the origin: {headers:?}"
    );
    assert_eq!(header_value(headers, "forwarded"), None, "{headers:?}");
    // In local workerd the connecting IP is the loopback client's.
    let forwarded_for = header_value(headers, "x-forwarded-for");
    assert_eq!(forwarded_for, header_value(headers, "x-real-ip"), "{headers:?}");
    assert_eq!(forwarded_for, Some("127.0.0.1"), "the test connects from loopback: {headers:?}");
}

/// Only the edge sets a claim's time, on its lookups: one a client sends never reaches the
/// origin under the edge's signature, on a covered request or a passed-through one.
#[test]
fn a_clients_own_claim_time_never_reaches_the_origin() {
    let (w, o) = (hardened(), verifying_origin());
    let marker = unique("claimed-at");
    let covered = w
        .send(&payment(&format!("/v1/charges/{marker}"), &unique("k")).header("Idempotency-Claimed-At", "1"));
    assert_eq!(covered.status, 201, "{covered:?}");
    let passed = w.send(
        &Request::get(&format!("/v1/charges/{marker}/lookup"))
            .header("Authorization", CALLER)
            .header("Idempotency-Claimed-At", "1")
            .timeout(Duration::from_secs(120)),
    );
    assert_eq!(passed.status, 200, "{passed:?}");
    let seen = o.seen_at(&marker);
    assert_eq!(seen.len(), 2, "{seen:?}");
    for request in &seen {
        assert!(request.verdict.is_ok(), "signed and verified: {request:?}");
        assert_eq!(header_value(&request.headers, "idempotency-claimed-at"), None, "{request:?}");
    }
}

/// Observe mode's forward of a streamed body over `MAX_BODY_BYTES` (never read whole, so
/// sent unsigned) carries the connecting IP too, never an address the client chose.
#[test]
fn an_observed_streamed_body_over_the_limit_carries_no_client_sent_address() {
    let (w, o) = (hardened(), verifying_origin());
    let marker = unique("xff-observed");
    let over_the_limit = "x".repeat(1_048_576 + 4096);
    let r = w.send(
        &Request::post(&format!("/v1/observed/{marker}"))
            .header("Idempotency-Key", unique("k"))
            .header("Authorization", CALLER)
            .header("X-Forwarded-For", "203.0.113.67")
            .header("X-Real-IP", "203.0.113.67")
            .header("Forwarded", "for=203.0.113.67")
            .json(&over_the_limit)
            .chunked()
            .timeout(Duration::from_secs(120)),
    );
    let seen = o.seen_at(&marker);
    assert_eq!(seen.len(), 1, "forwarded once, whatever the origin answered ({}): {r:?}", r.status);
    let headers = &seen[0].headers;
    assert!(
        !headers.iter().any(|(_, v)| v.contains("203.0.113.67")),
        "no client-sent address reaches the origin: {headers:?}"
    );
    assert_eq!(header_value(headers, "forwarded"), None, "{headers:?}");
    assert_eq!(header_value(headers, "x-forwarded-for"), Some("127.0.0.1"), "{headers:?}");
}

/// Observe mode never answers for the origin: a body whose `Content-Length` is over
/// `MAX_BODY_BYTES` is forwarded as it came, unsigned (it is never read whole), and the
/// caller gets the origin's answer; an origin that checks every signature refuses it.
#[test]
fn an_observed_declared_body_over_the_limit_reaches_the_origin_unsigned() {
    let (w, o) = (hardened(), verifying_origin());
    let marker = unique("observed-declared");
    let over_the_limit = "x".repeat(1_048_576 + 4096);
    let r = w.send(
        &Request::post(&format!("/v1/observed/{marker}"))
            .header("Idempotency-Key", unique("k"))
            .header("Authorization", CALLER)
            .json(&over_the_limit)
            .timeout(Duration::from_secs(120)),
    );
    let seen = o.seen_at(&marker);
    assert_eq!(seen.len(), 1, "forwarded once: {r:?}");
    assert_eq!(
        seen[0].verdict.clone().err().as_deref(),
        Some("Missing"),
        "sent unsigned: {:?}",
        seen[0].verdict
    );
    assert_eq!(r.status, 401, "the origin's own refusal, not the edge's 413: {r:?}");
}

// ---------------------------------------------------------------------------------------
// Rate limits and keyed names.

#[test]
fn over_the_rate_limit_is_429_with_retry_after_and_creates_no_object() {
    let w = hardened();
    within_one_rate_limit_period();
    let keys: Vec<String> = (0..3).map(|_| unique("limited")).collect();
    let answers: Vec<Response> =
        keys.iter().map(|key| w.send(&payment(&format!("/v1/limited/{key}"), key))).collect();
    assert_eq!(answers[0].status, 201, "{:?}", answers[0]);
    assert_eq!(answers[1].status, 201, "{:?}", answers[1]);
    let limited = &answers[2];
    assert_eq!(limited.status, 429, "the third call in a minute is over `limit = 2`: {limited:?}");
    assert_eq!(problem_type(limited), "urn:idempotency-edge:problem:rate-limited");
    assert!(limited.header("content-type").is_some_and(|t| t.contains("problem+json")));
    assert!(
        limited.header("retry-after").and_then(|v| v.parse::<u64>().ok()).is_some_and(|s| s > 0),
        "{limited:?}"
    );

    // The two allowed keys have objects under their keyed names; the limited one has none.
    let stored = poll("the allowed keys' objects in the SQLite files", Duration::from_secs(30), || {
        let snap = snapshot(w.persist_dir());
        let names: Vec<String> = snap.objects.iter().filter_map(|o| o.name.clone()).collect();
        (names.contains(&keyed_name(&keys[0])) && names.contains(&keyed_name(&keys[1]))).then_some(names)
    });
    assert!(!stored.contains(&keyed_name(&keys[2])), "a limited request creates no object");
    // Keyed names are not the plain hashes.
    let plain = object_name(Scope::from_header(Some(CALLER.as_bytes())), &keys[0]);
    assert!(!stored.contains(&plain), "the stored names are keyed: {stored:?}");

    // Other routes are not limited (rate_limit: false).
    for _ in 0..3 {
        let key = unique("free");
        assert_eq!(w.send(&payment(&format!("/v1/charges/{key}"), &key)).status, 201);
    }
}

/// A client that sends a new random `Authorization` with every request is still one
/// client: a credential's scope is counted per `CF-Connecting-IP` too.
#[test]
fn a_new_random_credential_per_request_does_not_dodge_the_rate_limit() {
    let w = hardened();
    within_one_rate_limit_period();
    let answers: Vec<Response> = (0..3)
        .map(|_| {
            let key = unique("random");
            let credential = format!("Bearer {}", unique("random-credential"));
            w.send(
                &Request::post(&format!("/v1/random-credentials/{key}"))
                    .header("Idempotency-Key", &key)
                    .header("Authorization", &credential)
                    .json(BODY),
            )
        })
        .collect();
    assert_limited_on_the_third(&answers);
}

/// One caller over the limit limits only itself: another credential from another IP is
/// still served, while the limited credential stays limited from a new IP (its scope is
/// counted on its own).
#[test]
fn one_caller_over_the_limit_does_not_limit_another() {
    let w = hardened();
    within_one_rate_limit_period();
    let send = |credential: &str, ip: &str| {
        let key = unique("callers");
        w.send(
            &Request::post(&format!("/v1/limited-callers/{key}"))
                .header("Idempotency-Key", &key)
                .header("Authorization", credential)
                .header("CF-Connecting-IP", ip)
                .json(BODY),
        )
    };
    let (alice, bob) = (format!("Bearer {}", unique("alice")), format!("Bearer {}", unique("bob")));
    let answers: Vec<Response> = (0..3).map(|_| send(&alice, "127.0.0.2")).collect();
    assert_limited_on_the_third(&answers);
    let other = send(&bob, "127.0.0.3");
    assert_eq!(other.status, 201, "bob, from his own IP, is not limited by alice: {other:?}");
    let moved = send(&alice, "127.0.0.4");
    assert_eq!(moved.status, 429, "alice from a new IP is still alice: {moved:?}");
    assert_eq!(problem_type(&moved), "urn:idempotency-edge:problem:rate-limited");
}

/// Anonymous callers share one scope, so they are counted per `CF-Connecting-IP`: one
/// client over the limit does not limit an anonymous client at another address.
#[test]
fn anonymous_callers_are_limited_per_ip() {
    let w = hardened();
    within_one_rate_limit_period();
    let send = |ip: &str| {
        let key = unique("anonymous");
        w.send(
            &Request::post(&format!("/v1/limited-anonymous/{key}"))
                .anonymous()
                .header("Idempotency-Key", &key)
                .header("CF-Connecting-IP", ip)
                .json(BODY),
        )
    };
    let answers: Vec<Response> = (0..3).map(|_| send("127.0.0.5")).collect();
    assert_limited_on_the_third(&answers);
    let elsewhere = send("127.0.0.6");
    assert_eq!(elsewhere.status, 201, "an anonymous caller at another IP is not limited: {elsewhere:?}");
    assert_eq!(send("127.0.0.5").status, 429, "the first IP stays limited");
}

/// One IP cannot hold another caller at the rate limit by sending its key id.
/// With a key id for `SCOPE_HEADER`, anyone may send the victim's key id: the IP is asked
/// first, so a client over its own IP's limit spends nothing more, and the scope's count
/// is kept per replay credential, so a stranger who moves to a new IP spends only its own.
/// The victim, from its own IP with its own credential, keeps its whole limit.
#[test]
fn one_ip_cannot_spend_the_rate_limit_of_a_key_id_it_sends() {
    let w = key_id_limited();
    within_one_rate_limit_period();
    let key_id = unique("kid");
    let send = |authorization: &str, ip: &str| {
        let key = unique("kid-limit");
        w.send(
            &Request::post(&format!("/v1/charges/{key}"))
                .header("Idempotency-Key", &key)
                .header("X-Api-Key-Id", &key_id)
                .header("Authorization", authorization)
                .header("CF-Connecting-IP", ip)
                .json(BODY),
        )
    };
    let stranger = format!("Signature {}", secret("stranger-sig"));
    let victim = format!("Signature {}", secret("victim-sig"));
    // The stranger, from one IP, goes past that IP's limit, and on.
    let answers: Vec<Response> = (0..3).map(|_| send(&stranger, "127.0.0.7")).collect();
    assert_limited_on_the_third(&answers);
    assert_eq!(send(&stranger, "127.0.0.7").status, 429);
    // From a new IP, the stranger's own count under that key id is spent already.
    let moved = send(&stranger, "127.0.0.9");
    assert_eq!(moved.status, 429, "a stranger's count follows its credential: {moved:?}");
    // The victim is served its whole limit, and limited past it.
    let own: Vec<Response> = (0..3).map(|_| send(&victim, "127.0.0.8")).collect();
    assert_limited_on_the_third(&own);
}

// ---------------------------------------------------------------------------------------
// Deletion.

#[test]
fn an_alarm_that_fails_is_retried_and_the_record_is_gone_after_ttl() {
    let w = hardened();
    let key = unique("short");
    let path = format!("/v1/short/{key}");
    let name = keyed_name(&key);
    assert_eq!(w.send(&payment(&path, &key)).status, 201);
    let stored_at = Instant::now();
    poll("the record in the SQLite files", Duration::from_secs(30), || {
        snapshot(w.persist_dir())
            .objects
            .iter()
            .any(|o| o.name.as_deref() == Some(&name) && o.records() == 1)
            .then_some(())
    });
    // TTL 2 s; the first alarm run fails on purpose, the platform retries it with backoff.
    poll("the injected alarm failure in the log", Duration::from_secs(60), || {
        w.log_contents().contains("ALARM_FAULT_INJECTION: run 1 fails on purpose").then_some(())
    });
    poll("no record of the key in the SQLite files (TTL + margin)", Duration::from_secs(90), || {
        let snap = snapshot(w.persist_dir());
        let left =
            snap.objects.iter().filter(|o| o.name.as_deref() == Some(&name)).map(|o| o.rows()).sum::<u64>();
        (left == 0).then_some(())
    });
    assert!(stored_at.elapsed() >= Duration::from_secs(2), "deleted no earlier than the TTL");
    let again = w.send(&payment(&path, &key));
    assert_eq!(again.status, 201);
    assert!(!again.is_replayed(), "after the TTL the key executes again: {again:?}");
}

#[test]
fn a_record_read_past_its_expiry_is_deleted() {
    let w = alarms_fail();
    let o = verifying_origin();
    let marker = unique("expiry");
    let key = unique("k");
    let path = format!("/v1/charges/{marker}");
    assert_eq!(w.send(&payment(&path, &key)).status, 201);
    let seen_before = o.seen_at(&marker).len();
    // Find the object id from the log line of the execution.
    let object = poll("the executed log line", Duration::from_secs(30), || {
        crate::support::logs::decision_lines(&w.log_contents())
            .into_iter()
            .rev()
            .filter(|line| line["decision"] == "executed")
            .find_map(|line| line["object"].as_str().map(str::to_owned))
    });
    // Every alarm fails here, so past the TTL the record is still in the file...
    thread::sleep(Duration::from_secs(4));
    let records = |id: &str| {
        snapshot(w.persist_dir()).objects.iter().filter(|o| o.id == id).map(|o| o.records()).sum::<u64>()
    };
    assert_eq!(records(&object), 1, "the failing alarm left the record behind");
    // ... until something reads it: the read deletes it and sees nothing.
    let view = w.send(
        &Request::get(&format!("/__idempotency/records/{object}"))
            .header("Authorization", format!("Bearer {ADMIN_TOKEN}")),
    );
    assert_eq!(view.status, 200, "{view:?}");
    assert_eq!(view.json()["state"], "absent");
    poll("the expired record gone from the file", Duration::from_secs(30), || {
        (records(&object) == 0).then_some(())
    });
    assert!(w.log_contents().contains("\"event\":\"expired-on-read\""));
    assert_eq!(o.seen_at(&marker).len(), seen_before, "reading executed nothing");
}

/// A test-only fault-injection variable never degrades a worker unseen: every
/// isolate start logs an error line naming it, and the admin view shows it.
#[test]
fn a_fault_injection_variable_is_logged_and_shown_to_the_operator() {
    let w = alarms_fail();
    crate::support::logs::wait_for_text(w, "\"event\":\"fault-injection\"");
    let line =
        w.log_contents().lines().find(|l| l.contains("\"event\":\"fault-injection\"")).map(str::to_owned);
    assert!(line.is_some_and(|l| l.contains("\"alarm_failures\":1000") && l.contains("tests only")));
    // Any object of this worker shows it: one of the executions' (the view of an object
    // is the same whichever key it holds).
    let key = unique("fault");
    assert_eq!(w.send(&payment(&format!("/v1/charges/{key}"), &key)).status, 201);
    let object = poll("an executed log line", Duration::from_secs(30), || {
        crate::support::logs::decision_lines(&w.log_contents())
            .into_iter()
            .find_map(|line| {
                (line["decision"] == "executed").then(|| line["object"].as_str().map(str::to_owned))
            })
            .flatten()
    });
    let view = w.send(
        &Request::get(&format!("/__idempotency/records/{object}"))
            .header("Authorization", format!("Bearer {ADMIN_TOKEN}")),
    );
    assert_eq!(view.status, 200, "{view:?}");
    assert_eq!(view.json()["fault_injection"]["alarm_failures"], 1000, "{view:?}");
    assert_eq!(view.json()["fault_injection"]["delete_failures"], 0, "{view:?}");
}

// ---------------------------------------------------------------------------------------
// Refusals.

#[test]
fn a_misspelt_variable_is_500_naming_both_names() {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    let w = refusing(&CELL, "misspelt", ("SCOPE_HEADERS", "X-Api-Key"));
    for detail in invalid_config_details(w, "misspelt") {
        assert!(detail.contains("SCOPE_HEADERS") && detail.contains("SCOPE_HEADER."), "{detail}");
        assert!(!detail.contains("X-Api-Key"), "names, never values: {detail}");
    }
}

/// Sends a covered and an uncovered request, each of which must be refused with 500
/// `invalid-config` and forward nothing; the problems' details.
fn invalid_config_details(w: &Worker, label: &str) -> Vec<String> {
    let marker = unique(label);
    let details =
        [payment(&format!("/v1/charges/{marker}"), &unique("k")), Request::get(&format!("/{marker}"))]
            .iter()
            .map(|request| {
                let r = w.send(request);
                assert_eq!(r.status, 500, "{r:?}");
                assert_eq!(problem_type(&r), "urn:idempotency-edge:problem:invalid-config");
                r.json()["detail"].as_str().unwrap_or_default().to_owned()
            })
            .collect();
    assert!(verifying_origin().seen_at(&marker).is_empty(), "nothing was forwarded");
    details
}

/// A `[vars]` value of the wrong shape (wrangler binds an array as a JSON value) is never
/// taken as unset, its default applying in silence: every request is 500 naming the
/// variable, and nothing is forwarded. (Numbers and booleans mean what they say:
/// `routes::vars_written_as_numbers_booleans_and_tables_mean_what_they_say`.)
#[test]
fn a_var_of_the_wrong_shape_is_500_naming_it_and_forwards_nothing() {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    let w = shared(&CELL, || {
        Worker::start_with_config(
            WorkerConfig {
                name: "not-text".into(),
                vars: vars(&[
                    ("ORIGIN_URL", &verifying_origin().url()),
                    ("ORIGIN_AUTH_SECRET", ORIGIN_SECRET),
                ]),
                readiness: Readiness::AnyResponse,
            },
            &key_object_toml(
                "not-text",
                "\n[vars]\nIDEMPOTENCY_TTL_SECONDS = [604800]\nSCOPE_JWT_REQUIRED = true\n",
            ),
        )
    });
    for detail in invalid_config_details(w, "not-text") {
        assert!(detail.contains("IDEMPOTENCY_TTL_SECONDS"), "{detail}");
        assert!(!detail.contains("604800"), "the value is never echoed: {detail}");
    }
}

#[test]
fn a_short_admin_token_refuses_every_request() {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    let w = refusing(&CELL, "short-token", ("ADMIN_TOKEN", "only-twenty-bytes-xx"));
    let marker = unique("short-token");
    let r = w.send(&payment(&format!("/v1/charges/{marker}"), &unique("k")));
    assert_eq!(r.status, 500, "{r:?}");
    assert_eq!(problem_type(&r), "urn:idempotency-edge:problem:invalid-config");
    let detail = r.json()["detail"].as_str().unwrap_or_default().to_owned();
    assert!(detail.contains("ADMIN_TOKEN") && detail.contains("32"), "{detail}");
    assert!(!detail.contains("only-twenty"), "the token is never echoed: {detail}");
    assert!(!w.log_contents().contains("only-twenty-bytes"), "nor logged");
    assert!(verifying_origin().seen_at(&marker).is_empty(), "nothing was forwarded");
}

/// The shipped Wasm names no directory of the machine that built it: `scripts/build.sh`
/// remaps the registry crates' source paths (which panic messages carry), so the artefact
/// no longer depends on where that machine's cargo keeps the registry (its home directory
/// among it).
#[test]
fn the_shipped_wasm_names_no_directory_of_the_build_machine() {
    crate::support::worker::require_build();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/build/index_bg.wasm");
    let wasm = std::fs::read(path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    let cargo_home = std::env::var("CARGO_HOME")
        .unwrap_or_else(|_| format!("{}/.cargo", std::env::var("HOME").expect("HOME is set")));
    let registry = format!("{cargo_home}/registry/src");
    let names = |needle: &[u8]| wasm.windows(needle.len()).any(|window| window == needle);
    assert!(!names(registry.as_bytes()), "the Wasm names {registry}: see scripts/build.sh's remap");
}
