//! How each kind of origin answer is stored, released and replayed, and the configuration
//! answers not covered elsewhere: a custom or empty `SCOPE_HEADER`, a custom
//! `ADMIN_PATH_PREFIX`, and client-sent internal headers.

use std::sync::OnceLock;

use crate::basics::{main_worker, origin, ADMIN_PREFIX};
use crate::support::assert::{
    assert_executed, assert_from_origin, assert_problem, assert_replay_of, is_problem,
};
use crate::support::requests::{covered, new_credential, new_key, new_path, payment, request, secret};
use crate::support::worker::{shared, Readiness, Worker, WorkerConfig};

#[test]
fn statuses_502_and_504_are_stored_as_final_and_replayed() {
    let (w, o) = (main_worker(), origin());
    for status in [502u16, 504] {
        let key = new_key();
        let req = payment(&new_path(), &key);
        let first = w.send(&req.clone().header("x-test-status", status.to_string()));
        assert_executed(&first, status);
        // Without the control header the origin would answer 201: a replay never asks it.
        assert_replay_of(&w.send(&req), &first);
        assert_eq!(o.executions(&key), 1, "{status} is final");
    }
}

#[test]
fn statuses_408_409_and_425_are_passed_on_and_release_the_key() {
    let (w, o) = (main_worker(), origin());
    for status in [408u16, 409, 425] {
        let key = new_key();
        let req = payment(&new_path(), &key);
        let first = w.send(&req.clone().header("x-test-status", status.to_string()));
        assert_executed(&first, status);
        assert!(!is_problem(&first), "the origin's own {status}, not the worker's: {first:?}");
        let retry = w.send(&req);
        assert_executed(&retry, 201);
        assert_eq!(o.executions(&key), 2, "{status} released the key");
        assert_replay_of(&w.send(&req), &retry);
    }
}

#[test]
fn a_204_and_a_303_are_replayed_as_they_were() {
    let (w, o) = (main_worker(), origin());
    let key = new_key();
    let req = payment(&new_path(), &key).header("x-test-status", "204");
    let first = w.send(&req);
    assert_executed(&first, 204);
    let replay = w.send(&req);
    assert_replay_of(&replay, &first);
    assert!(replay.body.is_empty(), "{replay:?}");

    let key = new_key();
    let req = payment(&new_path(), &key)
        .header("x-test-status", "303")
        .header("x-test-response-headers", "Location: /v1/payments/elsewhere");
    let first = w.send(&req);
    assert_executed(&first, 303);
    assert_eq!(
        first.header("location"),
        Some("/v1/payments/elsewhere"),
        "a redirect is not followed: {first:?}"
    );
    assert_replay_of(&w.send(&req), &first);
    assert_eq!(o.executions(&key), 1);
}

/// Repeated header lines are replayed as the executing caller got them; `Set-Cookie` lines
/// reach only that caller; headers that `Connection` names are hop-by-hop and reach nobody.
#[test]
fn repeated_headers_cookies_and_connection_named_headers() {
    let (w, o) = (main_worker(), origin());
    let key = new_key();
    let req = payment(&new_path(), &key)
        .header(
            "x-test-response-headers",
            "X-Multi: one | X-Multi: two | Set-Cookie: a=1; Path=/ | Set-Cookie: b=2; Path=/ | X-Hop: hop-value",
        )
        .header("x-test-connection", "x-hop");
    let first = w.send(&req);
    assert_executed(&first, 201);
    let multi = first.header_all("x-multi").join(", ");
    assert_eq!(multi, "one, two", "both lines, in order: {first:?}");
    let cookies = first.header_all("set-cookie");
    for cookie in ["sid=abc; Path=/", "a=1; Path=/", "b=2; Path=/"] {
        assert!(cookies.contains(&cookie), "the executing caller gets every Set-Cookie line: {first:?}");
    }
    assert!(!first.has_header("x-hop"), "a header named by Connection is hop-by-hop: {first:?}");

    let replay = w.send(&req);
    assert_replay_of(&replay, &first);
    assert_eq!(replay.header_all("x-multi").join(", "), "one, two", "{replay:?}");
    assert!(!replay.has_header("x-hop"), "{replay:?}");
    assert_eq!(o.executions(&key), 1);
}

/// Headers in the worker's internal namespace sent by a client never reach the origin and
/// change nothing: a forged fingerprint does not make another payload replay, and a forged
/// "answered" marker does not make anything look like the object's answer.
#[test]
fn client_sent_internal_headers_are_stripped_end_to_end() {
    let (w, o) = (main_worker(), origin());
    let key = new_key();
    let path = new_path();
    let forged = |req: crate::support::http::Request| {
        req.header("x-idempotency-edge-fingerprint", "0".repeat(64))
            .header("x-idempotency-edge-timing", "1,1,1")
            .header("x-idempotency-edge-answered", "1")
            .header("x-idempotency-edge-admin", "purge-force")
    };
    let first = w.send(&forged(payment(&path, &key)));
    assert_executed(&first, 201);
    let seen = o.last_headers(&key).expect("the origin saw the request");
    assert!(
        seen.iter().all(|(name, _)| !name.to_ascii_lowercase().starts_with("x-idempotency-edge-")),
        "internal headers reached the origin: {seen:?}"
    );
    let other = w.send(&forged(covered("POST", &path, &key, r#"{"amount":1}"#)));
    assert_problem(&other, 422, "key-reused");
    assert_replay_of(&w.send(&forged(payment(&path, &key))), &first);
    // A pass-through request keeps none either.
    let get_path = new_path();
    let got = w.send(&forged(request("GET", &get_path)));
    assert_from_origin(&got, 200);
    assert_eq!(o.executions(&key), 1);
}

/// `ADMIN_PATH_PREFIX` moves the admin API: the main instance serves it under its custom
/// prefix only, and the default prefix is ordinary traffic there.
#[test]
fn a_custom_admin_prefix_moves_the_admin_api() {
    let (w, o) = (main_worker(), origin());
    let req = payment(&new_path(), &new_key());
    let id = crate::basics::fresh_object(w, &req, crate::basics::admin);
    let custom = w.send(&crate::basics::admin("GET", &id, ""));
    assert_eq!(custom.status, 200, "{custom:?}");
    assert_eq!(custom.json()["state"], "absent", "purged: {custom:?}");
    assert!(ADMIN_PREFIX != "/__idempotency/");
    let default_path = format!("/__idempotency/records/{id}");
    let passed = w.send(&request("GET", &default_path));
    assert_from_origin(&passed, 200);
    assert_eq!(o.executions_at(&default_path), 1);
}

fn scoped_worker() -> &'static Worker {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    shared(&CELL, || {
        let vars = [("ORIGIN_URL", origin().url()), ("SCOPE_HEADER", "X-Api-Key".to_string())]
            .map(|(n, v)| (n.to_string(), v));
        Worker::start(WorkerConfig {
            name: "scoped".into(),
            vars: vars.to_vec(),
            readiness: Readiness::OriginAnswers,
        })
    })
}

/// With `SCOPE_HEADER: X-Api-Key` the caller is that header: two API keys are two scopes.
/// `Authorization` is not part of the scope, but it is the default replay credential
/// (`REPLAY_CREDENTIAL_HEADERS`): a request under the same `X-Api-Key` with
/// another `Authorization` gets neither the answer nor an execution.
#[test]
fn a_custom_scope_header_names_the_caller() {
    let (w, o) = (scoped_worker(), origin());
    let key = new_key();
    let path = new_path();
    let as_caller = |api_key: &str, auth: &str| {
        payment(&path, &key).header("X-Api-Key", api_key).set_header("Authorization", auth)
    };
    let (one, two) = (secret("api-key"), secret("api-key"));
    let credential = new_credential("a");
    let first = w.send(&as_caller(&one, &credential));
    assert_executed(&first, 201);
    assert_replay_of(&w.send(&as_caller(&one, &credential)), &first);
    assert_problem(&w.send(&as_caller(&one, &new_credential("b"))), 422, "key-reused");
    let other = w.send(&as_caller(&two, &credential));
    assert_executed(&other, 201);
    assert_eq!(o.executions(&key), 2, "one execution per X-Api-Key, none for another Authorization");
}

/// An empty `SCOPE_HEADER` is not a header name: the worker refuses everything with 500
/// invalid-config naming it, and forwards nothing.
#[test]
fn an_empty_scope_header_is_invalid_configuration() {
    static CELL: OnceLock<Result<Worker, String>> = OnceLock::new();
    let w = shared(&CELL, || {
        let vars = [("ORIGIN_URL", origin().url()), ("SCOPE_HEADER", String::new())]
            .map(|(n, v)| (n.to_string(), v));
        Worker::start(WorkerConfig {
            name: "empty-scope".into(),
            vars: vars.to_vec(),
            readiness: Readiness::AnyResponse,
        })
    });
    let path = new_path();
    let r = w.send(&payment(&path, &new_key()));
    assert_problem(&r, 500, "invalid-config");
    assert!(r.json()["detail"].as_str().unwrap_or_default().contains("SCOPE_HEADER"), "{r:?}");
    assert_eq!(origin().executions_at(&path), 0);
}
