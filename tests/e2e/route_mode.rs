//! Route mode end to end: `ORIGIN_URL` is empty, so the worker forwards each request to its
//! own URL, as on a zone route in front of the payment API. Here the request's `Host` names
//! the loopback test origin, so its own URL is the origin's.
//!
//! In route mode the worker cannot probe the origin, so every failed fetch is an unknown
//! outcome: a refused connection too is held, never forwarded again.

use std::sync::OnceLock;

use crate::support::assert::{assert_executed, assert_problem, assert_replay_of};
use crate::support::http::Request;
use crate::support::origin::Origin;
use crate::support::requests::{new_key, new_path, payment};
use crate::support::worker::{free_port, shared, Readiness, Worker, WorkerConfig};

fn origin() -> &'static Origin {
    static ORIGIN: OnceLock<Origin> = OnceLock::new();
    ORIGIN.get_or_init(Origin::start)
}

fn route_mode_worker() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    shared(&CELL, || {
        let vars = [("ORIGIN_URL", String::new()), ("ORIGIN_TIMEOUT_SECONDS", "10".to_string())]
            .into_iter()
            .map(|(n, v)| (n.to_string(), v))
            .collect();
        Worker::start(WorkerConfig {
            name: "route-mode-host".into(),
            vars,
            readiness: Readiness::AnyResponse,
        })
    })
}

/// `request` addressed to the loopback origin on `port` (its `Host`).
fn to_port(request: Request, port: u16) -> Request {
    request.set_header("Host", format!("127.0.0.1:{port}"))
}

#[test]
fn route_mode_executes_once_and_replays() {
    let (w, o) = (route_mode_worker(), origin());
    let key = new_key();
    let path = new_path();
    let req = to_port(payment(&path, &key), o.port());
    let first = w.send(&req);
    let json = assert_executed(&first, 201);
    assert_eq!(json["path"], path.as_str(), "forwarded to the request's own URL: {json}");
    assert_replay_of(&w.send(&req), &first);
    assert_eq!(o.executions(&key), 1);
    let forwarded = o.last_headers(&key).expect("the origin saw the request");
    assert!(
        forwarded.iter().all(|(name, _)| !name.to_ascii_lowercase().starts_with("x-idempotency-edge-")),
        "internal headers are not forwarded: {forwarded:?}"
    );
}

#[test]
fn route_mode_holds_a_refused_connection_as_unknown() {
    let (w, o) = (route_mode_worker(), origin());
    let nothing_listens = free_port();
    let key = new_key();
    let req = to_port(payment(&new_path(), &key), nothing_listens);
    let first = w.send(&req);
    assert_problem(&first, 502, "outcome-unknown");
    // The origin comes up on that port: the key is still held, never forwarded.
    let late = Origin::start_on(nothing_listens).expect("listen on the refused port");
    let retry = w.send(&req);
    assert_problem(&retry, 502, "outcome-unknown");
    assert_eq!(late.executions(&key), 0, "a held key is never forwarded again");
    assert_eq!(o.executions(&key), 0);
}
