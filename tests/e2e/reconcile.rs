//! Reconciliation of unknown outcomes (issue 25.1, route option `reconcile_url`): an origin
//! that answers "did operation X happen?" settles what would otherwise stay
//! `outcome-unknown` until the TTL. The test origin (`support::ledger_origin`) keeps a
//! ledger and offers the lookup; every test counts its charges, so "one execution" is the
//! origin's word, not the worker's.

use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::assert::{assert_problem, check_problem};
use crate::support::http::{Request, Response};
use crate::support::ledger_origin::{LedgerOrigin, Plan};
use crate::support::logs::wait_for_line;
use crate::support::requests::{new_credential, new_key, register_secret, unique};
use crate::support::worker::{shared, Readiness, Worker, WorkerConfig};

/// Short, so that a stalled charge becomes unknown quickly; the lease is this plus 10 s.
const ORIGIN_TIMEOUT_SECONDS: u64 = 2;
/// Longer than the origin timeout: the worker gives up first.
const STALL: Duration = Duration::from_secs(4);

/// 32 bytes 0..31 in standard base64: a test key, never a real one.
const STORAGE_KEYS: &str =
    r#"[{"id":"reconcile-test","key":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}]"#;

const CHARGE: &str = r#"{"amount":1000,"currency":"eur"}"#;

/// The admin API's token here (a test value, never a real one).
const ADMIN_TOKEN: &str = "reconcile-admin-token-for-tests-only-0123456789";

fn vars(origin: &LedgerOrigin) -> Vec<(String, String)> {
    let routes = format!(
        r#"[{{"pattern":"/v1/charges","reconcile_url":"{}"}},{{"pattern":"/v1/operations","reconcile_url":"{}"}},{{"pattern":"/v1/resent","origin_deduplicates":true}}]"#,
        origin.reconcile_url(),
        origin.reconcile_path_url()
    );
    let secret = crate::support::requests::secret("origin-auth");
    register_secret(&secret);
    register_secret(ADMIN_TOKEN);
    [
        ("ORIGIN_URL", origin.url()),
        ("ORIGIN_TIMEOUT_SECONDS", ORIGIN_TIMEOUT_SECONDS.to_string()),
        ("IDEMPOTENCY_TTL_SECONDS", "600".to_owned()),
        ("IDEMPOTENCY_ROUTES", routes),
        ("STORAGE_ENCRYPTION_KEYS", STORAGE_KEYS.to_owned()),
        ("ORIGIN_AUTH_SECRET", secret),
        ("ADMIN_TOKEN", ADMIN_TOKEN.to_owned()),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_owned(), v))
    .collect()
}

fn start(name: &str) -> Result<(LedgerOrigin, Worker), String> {
    let origin = LedgerOrigin::start();
    let w = Worker::start(WorkerConfig {
        name: name.into(),
        vars: vars(&origin),
        readiness: Readiness::OriginAnswers,
    })?;
    Ok((origin, w))
}

fn reconciling() -> &'static (LedgerOrigin, Worker) {
    static CELL: OnceLock<Result<(LedgerOrigin, Worker), String>> = OnceLock::new();
    shared(&CELL, || start("reconcile"))
}

/// A charge under `key` from the caller `credential`.
fn charge(key: &str, credential: &str) -> Request {
    Request::post("/v1/charges")
        .header("Authorization", credential)
        .header("Idempotency-Key", key)
        .json(CHARGE)
        .timeout(Duration::from_secs(120))
}

/// `request`, named: its line's `request_id` is the `cf-ray` it carries, as on Cloudflare.
fn named(request: Request, name: &str) -> Request {
    request.header("cf-ray", name)
}

/// The key's object, from the line of the request `named` as `name`.
fn object_of(w: &Worker, name: &str) -> String {
    let line = wait_for_line(w, "the named request's line", |line| line["request_id"] == name);
    line["object"].as_str().unwrap_or_else(|| panic!("no object in {line}")).to_owned()
}

/// A `cf-ray`-shaped name for one request.
fn ray() -> String {
    format!("{:016x}-TST", rand_u64())
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(Instant::now())
}

/// A first attempt, named, that the origin charged and whose reply it lost (502
/// `outcome-unknown`), with the key's next `failing_lookups` lookups answering 503: its key,
/// its caller's credential and its name.
fn charged_then_lost(o: &LedgerOrigin, w: &Worker, failing_lookups: usize) -> (String, String, String) {
    let (key, credential) = (new_key(), new_credential("reconcile"));
    o.plan_next(&key, Plan::ChargeThenStall(STALL));
    o.fail_next_lookups(&key, failing_lookups);
    let name = ray();
    assert_problem(&w.send(&named(charge(&key, &credential), &name)), 502, "outcome-unknown");
    (key, credential, name)
}

/// The reconciled answer: the lookup's 200, replayed and marked reconciled.
fn assert_reconciled(r: &Response, key: &str) -> serde_json::Value {
    assert_eq!(r.status, 200, "the lookup's answer: {r:?}");
    assert!(r.is_replayed(), "a reconciled answer is a replay: {r:?}");
    assert_eq!(r.header("idempotency-reconciled"), Some("true"), "{r:?}");
    let body = r.json();
    assert_eq!(body["key"], key, "the lookup's charge: {r:?}");
    body
}

#[test]
fn a_timeout_resolved_as_executed_gives_the_retry_the_lookups_answer() {
    let (o, w) = reconciling();
    let (key, credential, name) = charged_then_lost(o, w, 0);
    assert_eq!(o.charges(&key), 1, "the origin charged, then its reply was lost");

    let retry = w.send(&charge(&key, &credential));
    let reconciled = assert_reconciled(&retry, &key);
    assert_eq!(o.charges(&key), 1, "reconciled, not executed again");
    // Asked once, as the caller (its own credential), and signed by the edge.
    let asked = o.lookups(&key);
    assert!(asked >= 1, "the retry looked the outcome up");
    let headers = o.last_lookup_headers(&key);
    let header =
        |name: &str| headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone());
    assert_eq!(header("authorization").as_deref(), Some(credential.as_str()), "the caller's scope headers");
    assert!(header("idempotency-edge-signature").is_some(), "the edge's signature: {headers:?}");

    // From now on it is a stored answer: replayed unchanged, never looked up again.
    let again = w.send(&charge(&key, &credential));
    assert_eq!(assert_reconciled(&again, &key), reconciled);
    assert_eq!(o.lookups(&key), asked, "a stored answer is not looked up");
    assert_eq!(o.charges(&key), 1);
    // Another payload under the key is still refused.
    let other = w.send(&charge(&key, &credential).json(r#"{"amount":1}"#));
    assert_problem(&other, 422, "key-reused");

    let object = object_of(w, &name);
    wait_for_line(w, "reconciled-executed", |line| {
        line["object"] == object.as_str()
            && line["decision"] == "reconciled-executed"
            && line["origin_status"] == 200
    });
}

#[test]
fn a_timeout_resolved_as_not_executed_lets_a_retry_execute_once() {
    let (o, w) = reconciling();
    let (key, credential) = (new_key(), new_credential("reconcile"));
    o.plan_next(&key, Plan::StallThenDrop(STALL));
    let first = w.send(&charge(&key, &credential));
    let answered = Instant::now();
    assert_problem(&first, 502, "outcome-unknown");
    assert_eq!(o.charges(&key), 0, "the origin dropped it without charging");

    // "Not found" is believed only once the origin had its timeout again since the outcome
    // became unknown (it might still be working on a request it has not committed): a retry
    // right away is told the outcome is unknown, and the key is asked about again later.
    let started = answered.elapsed();
    let soon = w.send(&charge(&key, &credential));
    if started < Duration::from_millis(300) && answered.elapsed() < Duration::from_secs(1) {
        assert_problem(&soon, 502, "outcome-unknown");
        assert_eq!(o.charges(&key), 0);
    }
    // Then not found releases the key, and a retry executes, once.
    let deadline = Instant::now() + Duration::from_secs(60);
    let retry = loop {
        let r = w.send(&charge(&key, &credential));
        if r.status == 201 {
            break r;
        }
        assert_problem(&r, 502, "outcome-unknown");
        assert!(Instant::now() < deadline, "not released a minute after: {r:?}");
        thread::sleep(Duration::from_millis(500));
    };
    assert!(!retry.is_replayed(), "not executed: the retry is forwarded: {retry:?}");
    assert_eq!(o.charges(&key), 1, "executed once");
    assert!(o.lookups(&key) >= 2, "asked again after the first, too early, not found");

    let again = w.send(&charge(&key, &credential));
    assert_eq!(again.status, 201);
    assert!(again.is_replayed(), "{again:?}");
    assert_eq!(again.json(), retry.json());
    assert_eq!(o.charges(&key), 1);
}

#[test]
fn a_lookup_that_fails_is_asked_again_from_the_alarm_until_it_answers() {
    let (o, w) = reconciling();
    let (key, credential, name) = charged_then_lost(o, w, 1);

    // Nobody retries: the alarm asks (a second after the outcome became unknown), gets
    // 503, and asks again after its backoff, which answers.
    assert!(
        o.wait_for(&key, Duration::from_secs(60), |_, _, lookups| lookups >= 2),
        "the alarm asked {} time(s) in a minute",
        o.lookups(&key)
    );
    let object = object_of(w, &name);
    wait_for_line(w, "reconcile-failed", |line| {
        line["object"] == object.as_str() && line["decision"] == "reconcile-failed"
    });
    wait_for_line(w, "reconciled-executed", |line| {
        line["object"] == object.as_str() && line["decision"] == "reconciled-executed"
    });
    let asked = o.lookups(&key);

    let retry = w.send(&charge(&key, &credential));
    assert_reconciled(&retry, &key);
    assert_eq!(o.lookups(&key), asked, "settled by the alarm: the retry asked nothing");
    assert_eq!(o.charges(&key), 1);
}

#[test]
fn a_lookup_for_another_caller_finds_nothing_of_this_one() {
    // The lookup carries the retrying caller's credential: a key that another caller used
    // is another object, and its charge is never this caller's answer.
    let (o, w) = reconciling();
    let key = new_key();
    let (alice, mallory) = (new_credential("alice"), new_credential("mallory"));
    o.plan_next(&key, Plan::ChargeThenStall(STALL));
    assert_problem(&w.send(&charge(&key, &alice)), 502, "outcome-unknown");
    let theirs = w.send(&charge(&key, &mallory));
    assert_eq!(theirs.status, 201, "mallory's own first attempt: {theirs:?}");
    assert!(!theirs.is_replayed());
    assert_ne!(theirs.json()["id"], serde_json::Value::Null);
    let alices = w.send(&charge(&key, &alice));
    let body = assert_reconciled(&alices, &key);
    assert_ne!(body["id"], theirs.json()["id"], "each caller gets its own charge");
    assert_eq!(o.charges(&key), 2, "one charge per caller");
}

#[test]
fn sigkill_mid_send_then_the_unknown_outcome_is_reconciled() {
    static CELL: OnceLock<Result<(LedgerOrigin, Worker), String>> = OnceLock::new();
    let (o, w) = shared(&CELL, || start("reconcile-crash"));
    let (key, credential) = (new_key(), new_credential("reconcile"));
    o.plan_next(&key, Plan::ChargeWhenAbandoned);
    let first = charge(&key, &credential).start(w.addr).expect("send");
    assert!(
        o.wait_for(&key, Duration::from_secs(60), |_, arrived, _| arrived == 1),
        "the charge reached the origin"
    );
    let at_origin = Instant::now();
    w.crash();
    assert!(first.finish().is_err(), "the caller's connection dies with workerd");
    assert!(
        o.wait_for(&key, Duration::from_secs(60), |charges, _, _| charges == 1),
        "the origin charged as workerd died"
    );
    w.restart(Readiness::OriginAnswers).unwrap_or_else(|e| panic!("restart on the same state: {e}"));

    // During the lease a retry is told to wait; once it ends, the outcome is looked up
    // (by the alarm set for the lease's end, or by the retry itself) and the retry gets the
    // charge the origin made.
    let lease = Duration::from_secs(ORIGIN_TIMEOUT_SECONDS + 10);
    let deadline = at_origin + lease + Duration::from_secs(60);
    let answer = loop {
        let r = w.send(&charge(&key, &credential));
        if r.status == 200 {
            break r;
        }
        if let Err(why) = check_problem(&r, 409, "in-progress") {
            panic!("before reconciliation, only 409 in-progress: {why}");
        }
        assert!(Instant::now() < deadline, "not reconciled a minute after the lease ended: {r:?}");
        thread::sleep(Duration::from_millis(500));
    };
    assert_reconciled(&answer, &key);
    assert_eq!(o.charges(&key), 1, "one charge, never a second");
}

#[test]
fn the_admin_view_shows_how_often_the_lookup_was_asked_and_never_the_lookup() {
    let (o, w) = reconciling();
    let (key, credential, name) = charged_then_lost(o, w, 1_000);
    let object = object_of(w, &name);
    let record = format!("/__idempotency/records/{object}");
    let inspect = || {
        let r = w.send(&Request::get(&record).header("Authorization", format!("Bearer {ADMIN_TOKEN}")));
        assert_eq!(r.status, 200, "{r:?}");
        r
    };
    // The alarm asks a second after the outcome became unknown, and gets 503.
    let deadline = Instant::now() + Duration::from_secs(60);
    let view = loop {
        let r = inspect();
        let view = r.json();
        if view["reconcile"]["asked"].as_u64().unwrap_or(0) >= 1 {
            assert!(!r.text().contains(&key), "the view never shows the key: {view}");
            assert!(!r.text().contains(&credential), "nor the caller's credential: {view}");
            assert!(!r.text().contains("idempotency_key="), "nor the lookup's URL: {view}");
            break view;
        }
        assert!(Instant::now() < deadline, "no lookup shown in a minute: {view}");
        thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(view["state"], "unknown", "{view}");
    assert_eq!(view["reconcile"]["not_found_status"], 404, "{view}");
    let next = view["reconcile"]["next_at_ms"].as_u64().unwrap_or_else(|| panic!("next_at_ms: {view}"));
    assert!(next > view["created_at_ms"].as_u64().unwrap_or(u64::MAX), "asked again later: {view}");
    assert_eq!(o.charges(&key), 1);
}

/// One key, one spelling at the origin: a first attempt that quotes its key (the IETF
/// draft's sf-string) and whose reply is lost is found by the lookup, because the origin
/// received, and the lookup asks for, the same spelling; the bare retry is the same key
/// there too. (Before, the origin stored `"k"`, the lookup asked for `k`, found nothing,
/// and the retry, once that was believed, charged again.)
#[test]
fn a_quoted_key_is_looked_up_in_the_spelling_the_origin_received() {
    let (o, w) = reconciling();
    let (key, credential) = (new_key(), new_credential("reconcile"));
    let quoted = format!("\"{key}\"");
    // Whichever spelling reaches the origin, its first charge's reply is lost.
    o.plan_next(&key, Plan::ChargeThenStall(STALL));
    o.plan_next(&quoted, Plan::ChargeThenStall(STALL));
    assert_problem(&w.send(&charge(&quoted, &credential)), 502, "outcome-unknown");
    assert_eq!(o.charges(&key) + o.charges(&quoted), 1, "charged, reply lost");
    // Past the origin timeout, a "not found" would be believed and release the key.
    thread::sleep(Duration::from_secs(ORIGIN_TIMEOUT_SECONDS + 1));
    let retries: Vec<Response> =
        [&key, &quoted].iter().map(|spelling| w.send(&charge(spelling, &credential))).collect();
    assert_eq!(o.charges(&key) + o.charges(&quoted), 1, "executed once");
    for retry in &retries {
        assert_reconciled(retry, &key);
    }
    assert_eq!(o.arrivals(&key), 1, "the origin received the bare spelling, once");
    assert_eq!(o.arrivals(&quoted), 0, "and never the quoted one");
}

/// A lookup URL is the template's whatever the key: under a path template, the keys `.`
/// and `..` (bare or quoted) would ask `/v1/operations/` or `/v1/`, whose 404 would release
/// the key, so they are refused before anything is stored or forwarded. Keys that are dot
/// segments only once decoded are encoded again and looked up as sent.
#[test]
fn a_key_of_dots_is_refused_under_a_path_template_and_encoded_dots_are_looked_up() {
    let (o, w) = reconciling();
    let credential = new_credential("reconcile");
    let post = |key: &str| {
        Request::post("/v1/operations")
            .header("Authorization", &credential)
            .header("Idempotency-Key", key)
            .json(CHARGE)
            .timeout(Duration::from_secs(120))
    };
    // Where the key is in the query, `..` is an ordinary key.
    let dots = w.send(&charge("..", &credential));
    assert_eq!(dots.status, 201, "{dots:?}");
    // Each first attempt's reply would be lost; past the origin timeout, a "not found" of
    // the collapsed URL would be believed and the retry would charge again.
    let keys = [".", "..", "\".\"", "\"..\""];
    let before: Vec<usize> = keys.iter().map(|key| o.charges(key)).collect();
    let firsts: Vec<Response> = keys
        .iter()
        .map(|key| {
            o.plan_next(key, Plan::ChargeThenStall(STALL));
            w.send(&post(key))
        })
        .collect();
    thread::sleep(Duration::from_secs(ORIGIN_TIMEOUT_SECONDS + 1));
    let retries: Vec<Response> = keys.iter().map(|key| w.send(&post(key))).collect();
    for (i, key) in keys.iter().enumerate() {
        assert!(o.charges(key) - before[i] <= 1, "{key}: executed at most once");
    }
    for (i, key) in keys.iter().enumerate() {
        assert_problem(&firsts[i], 400, "invalid-key");
        assert_problem(&retries[i], 400, "invalid-key");
        assert_eq!(o.charges(key), before[i], "{key}: nothing forwarded");
    }
    // Dot segments once decoded (`%2e`), or dots with more: each charge's reply is lost, and
    // the lookup by path finds it under the key as the origin stored it.
    let tag = &unique("d")[..8];
    for key in
        [format!("%2e{tag}"), "%2e".to_owned(), "%2E%2E".to_owned(), ".%2e".to_owned(), "...".to_owned()]
    {
        o.plan_next(&key, Plan::ChargeThenStall(STALL));
        assert_problem(&w.send(&post(&key)), 502, "outcome-unknown");
        let retry = w.send(&post(&key));
        assert_reconciled(&retry, &key);
        assert_eq!(o.charges(&key), 1, "{key}: executed once");
        assert!(o.lookups(&key) >= 1, "{key}: looked up by its own path");
    }
}

/// A re-send to an origin that deduplicates, refused as a client error (a Stripe-like 400
/// `idempotency_error`), says nothing of the first attempt, which got no answer: the key is
/// held unknown and the caller told so, never given the 400 as the key's answer; the next
/// re-send gets the origin's stored charge, once.
#[test]
fn a_resend_refused_as_a_client_error_is_held_unknown_not_stored() {
    let (o, w) = reconciling();
    let (key, credential) = (new_key(), new_credential("resent"));
    let post = || {
        Request::post("/v1/resent")
            .header("Authorization", &credential)
            .header("Idempotency-Key", &key)
            .json(CHARGE)
            .timeout(Duration::from_secs(120))
    };
    o.plan_next(&key, Plan::ChargeThenStall(STALL));
    o.plan_next(&key, Plan::RefuseAsReused);
    o.plan_next(&key, Plan::ReplayCharge);
    assert_problem(&w.send(&post()), 502, "outcome-unknown");
    assert_eq!(o.charges(&key), 1, "charged, reply lost");
    let refused = w.send(&post());
    assert_problem(&refused, 502, "outcome-unknown");
    assert_eq!(o.arrivals(&key), 2, "sent again, and refused");
    let settled = w.send(&post());
    assert_eq!(settled.status, 201, "the origin's stored charge, not a stored 400: {settled:?}");
    assert_eq!(settled.json()["key"], key.as_str());
    assert_eq!(o.arrivals(&key), 3);
    let replay = w.send(&post());
    assert!(replay.is_replayed(), "{replay:?}");
    assert_eq!(replay.body, settled.body);
    assert_eq!(o.charges(&key), 1, "executed once");
}
