//! Reconciliation of unknown outcomes (route option `reconcile_url`): an origin
//! that answers "did operation X happen?" settles what would otherwise stay
//! `outcome-unknown` until the TTL. The test origin (`support::ledger_origin`) keeps a
//! ledger and offers the lookup as a payment API would: it verifies the edge's signature on
//! every request (lookups included, 401 otherwise), answers only for charges made at or
//! after the claim's time, marks its own verdicts (`Idempotency-Lookup`) and answers 404
//! without a marker to a path it does not serve. Every test counts its charges, so "one
//! execution" is the origin's word, not the worker's.

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

/// The edge's short-lived route: its records last this long.
const BRIEF_TTL_SECONDS: u64 = 5;

/// The routes: `/v1/charges` with the origin's lookup; `/v1/brief/charges` the same with a
/// TTL shorter than the origin's ledger keeps keys; `/v1/gone/charges` with a lookup whose
/// "not found" is 410 (`reconcile_not_found`); `/v1/typo/charges` with a template that
/// names a path the origin does not serve; `/v1/strict/charges` with narrowed release
/// statuses that need the origin's confirmation; `/v1/operations` with a lookup whose
/// template puts `{key}` in its path; `/v1/resent` to an origin that deduplicates by key;
/// `/v1/dedup/charges` with both a lookup and an origin that deduplicates.
fn vars(origin: &LedgerOrigin, secret: &str) -> Vec<(String, String)> {
    let (lookup, gone) = (origin.reconcile_url(), origin.gone_reconcile_url());
    let typo = lookup.replace("/v1/charges?", "/v1/charge?");
    let routes = format!(
        r#"[{{"pattern":"/v1/charges","reconcile_url":"{lookup}"}},
            {{"pattern":"/v1/brief/charges","ttl_seconds":{BRIEF_TTL_SECONDS},"reconcile_url":"{lookup}"}},
            {{"pattern":"/v1/gone/charges","reconcile_url":"{gone}","reconcile_not_found":410}},
            {{"pattern":"/v1/typo/charges","reconcile_url":"{typo}"}},
            {{"pattern":"/v1/strict/charges","release_statuses":[503],"release_requires_header":true,"reconcile_url":"{lookup}"}},
            {{"pattern":"/v1/operations","reconcile_url":"{path_lookup}"}},
            {{"pattern":"/v1/resent","origin_deduplicates":true}},
            {{"pattern":"/v1/dedup/charges","origin_deduplicates":true,"reconcile_url":"{lookup}"}}]"#,
        path_lookup = origin.reconcile_path_url()
    );
    let secret = secret.to_owned();
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
    let secret = crate::support::requests::secret("origin-auth");
    let origin = LedgerOrigin::start(&secret);
    let w = Worker::start(WorkerConfig {
        name: name.into(),
        vars: vars(&origin, &secret),
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
    charge_at("/v1/charges", key, credential)
}

/// A charge under `key` from the caller `credential`, on the route at `path`.
fn charge_at(path: &str, key: &str, credential: &str) -> Request {
    Request::post(path)
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
    // Signed by the edge: the origin verified it (a lookup that fails to is refused 401, and
    // a refused lookup never reconciles), and no request of the suite was refused.
    let input = header("signature-input").unwrap_or_else(|| panic!("the edge's signature: {headers:?}"));
    assert!(input.contains("\"idempotency-claimed-at\""), "the claim's time is signed: {input}");
    assert_eq!(header("idempotency-edge-protection").as_deref(), Some("protected"), "{headers:?}");
    assert_eq!(o.refused(), 0, "every request the origin got carried the edge's valid signature");
    // With the claim's time, which the origin answers from: not later than the first
    // attempt's charge.
    let claimed_at: u64 = header("idempotency-claimed-at")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("the claim's time: {headers:?}"));
    assert!(claimed_at > 1_700_000_000_000, "Unix milliseconds: {claimed_at}");

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
    let name = ray();
    let first = w.send(&named(charge(&key, &credential), &name));
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
    // The release is on the record: the key's line says so, with the lookup's status.
    let object = object_of(w, &name);
    wait_for_line(w, "reconciled-not-executed", |line| {
        line["object"] == object.as_str()
            && line["decision"] == "reconciled-not-executed"
            && line["origin_status"] == 404
    });
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
    // Two charges in flight as workerd dies: the origin executes one as the connection
    // breaks, and drops the other.
    let (charged, dropped) = (new_key(), new_key());
    let credential = new_credential("reconcile");
    o.plan_next(&charged, Plan::ChargeWhenAbandoned);
    o.plan_next(&dropped, Plan::DropWhenAbandoned);
    // Both claims are made after this: their leases end no sooner than a lease from now.
    let sent = Instant::now();
    let first = charge(&charged, &credential).start(w.addr).expect("send");
    let second = charge(&dropped, &credential).start(w.addr).expect("send");
    for key in [&charged, &dropped] {
        let arrived = o.wait_for(key, Duration::from_secs(60), |_, arrived, _| arrived == 1);
        assert!(arrived, "the charge reached the origin");
    }
    w.crash();
    assert!(first.finish().is_err(), "the caller's connection dies with workerd");
    assert!(second.finish().is_err(), "the caller's connection dies with workerd");
    assert!(
        o.wait_for(&charged, Duration::from_secs(60), |charges, _, _| charges == 1),
        "the origin charged as workerd died"
    );
    w.restart(Readiness::OriginAnswers).unwrap_or_else(|e| panic!("restart on the same state: {e}"));

    // During the lease a retry is told to wait; once it ends, the outcome is looked up
    // (by the alarm set for the lease's end, or by the retry itself): the charge the origin
    // made is the retry's answer, and the one it dropped is released, but only once the
    // origin has had its timeout after the lease's end (the owner could have sent it at the
    // lease's last moment), and then executes once.
    let lease = Duration::from_secs(ORIGIN_TIMEOUT_SECONDS + 10);
    let timeout = Duration::from_secs(ORIGIN_TIMEOUT_SECONDS);
    let deadline = sent + lease + Duration::from_secs(60);
    let (mut reconciled, mut executed) = (None, None);
    while reconciled.is_none() || executed.is_none() {
        if reconciled.is_none() {
            let r = w.send(&charge(&charged, &credential));
            if r.status == 200 {
                reconciled = Some(r);
            } else if let Err(why) = check_problem(&r, 409, "in-progress") {
                panic!("before reconciliation, only 409 in-progress: {why}");
            }
        }
        if executed.is_none() {
            let r = w.send(&charge(&dropped, &credential));
            if r.status == 201 {
                executed = Some(r);
            } else if check_problem(&r, 409, "in-progress").is_err() {
                assert_problem(&r, 502, "outcome-unknown");
            }
        }
        assert!(Instant::now() < deadline, "not reconciled a minute after the lease ended");
        thread::sleep(Duration::from_millis(500));
    }
    assert_reconciled(&reconciled.expect("reconciled"), &charged);
    assert_eq!(o.charges(&charged), 1, "one charge, never a second");
    let executed = executed.expect("executed");
    assert!(!executed.is_replayed(), "{executed:?}");
    assert_eq!(o.charges(&dropped), 1, "the dropped charge executed once, after its release");

    // No lookup before a lease's end, and no release before the origin timeout after it.
    for key in [&charged, &dropped] {
        let lookups = o.lookup_log(key);
        assert!(!lookups.is_empty(), "looked up");
        for (at, status) in &lookups {
            assert!(
                *at >= sent + lease,
                "a lookup ({status}) {:?} before the lease's end",
                sent + lease - *at
            );
        }
    }
    let arrivals = o.arrival_times(&dropped);
    assert_eq!(arrivals.len(), 2, "the dropped charge, then its retry");
    assert!(
        arrivals[1] >= sent + lease + timeout,
        "released {:?} before the lease's end plus the origin timeout",
        sent + lease + timeout - arrivals[1]
    );
    assert_eq!(o.refused(), 0, "every request carried the edge's valid signature");
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

#[test]
fn only_the_lookups_own_not_found_releases_a_key() {
    // The template names a path the origin does not serve: every lookup gets the router's
    // 404, which does not carry the lookup's marker. Long after a "not found" would have
    // been believed, the key is still held unknown, and nothing is forwarded again.
    let (o, w) = reconciling();
    let path = "/v1/typo/charges";
    let (key, credential) = (new_key(), new_credential("reconcile"));
    o.plan_next(&key, Plan::StallThenDrop(STALL));
    assert_problem(&w.send(&charge_at(path, &key, &credential)), 502, "outcome-unknown");
    let until = Instant::now() + Duration::from_secs(3 * ORIGIN_TIMEOUT_SECONDS + 2);
    while Instant::now() < until {
        assert_problem(&w.send(&charge_at(path, &key, &credential)), 502, "outcome-unknown");
        thread::sleep(Duration::from_millis(500));
    }
    assert!(o.strays(&key) >= 2, "asked, at the path the template names, {} time(s)", o.strays(&key));
    assert_eq!(o.lookups(&key), 0, "the origin's own lookup was never asked");
    assert_eq!(o.arrival_times(&key).len(), 1, "never forwarded again");
    assert_eq!(o.charges(&key), 0);
}

#[test]
fn a_key_reused_after_the_edges_ttl_is_not_settled_by_its_earlier_charge() {
    // The edge keeps the route's records BRIEF_TTL_SECONDS; the origin's ledger keeps keys
    // longer. A client reuses a key once the edge forgot it, for a new charge that times
    // out unexecuted: the lookup, which answers only from the claim's time, must not find
    // the earlier charge, or the new payment would be recorded as done without executing.
    let (o, w) = reconciling();
    let path = "/v1/brief/charges";
    let (key, credential) = (new_key(), new_credential("reconcile"));
    let earlier = w.send(&charge_at(path, &key, &credential));
    assert_eq!(earlier.status, 201, "{earlier:?}");
    thread::sleep(Duration::from_secs(BRIEF_TTL_SECONDS + 1));

    o.plan_next(&key, Plan::StallThenDrop(STALL));
    assert_problem(&w.send(&charge_at(path, &key, &credential)), 502, "outcome-unknown");
    let deadline = Instant::now() + Duration::from_secs(60);
    let retry = loop {
        let r = w.send(&charge_at(path, &key, &credential));
        assert_ne!(r.status, 200, "the earlier charge answered for this claim: {r:?}");
        if r.status == 201 {
            break r;
        }
        assert_problem(&r, 502, "outcome-unknown");
        assert!(Instant::now() < deadline, "not settled a minute after: {r:?}");
        thread::sleep(Duration::from_millis(300));
    };
    assert!(!retry.is_replayed(), "{retry:?}");
    assert_ne!(retry.json()["id"], earlier.json()["id"], "a new charge");
    assert_eq!(o.charges(&key), 2, "the earlier charge and the new one, each once");
    assert!(
        o.lookup_log(&key).iter().any(|(_, status)| *status == 404),
        "the lookup found nothing from the claim's time: {:?}",
        o.lookup_log(&key)
    );
}

#[test]
fn a_routes_own_not_found_status_releases_the_key_and_the_log_says_so() {
    // The route's lookup answers 410 for "never executed" (reconcile_not_found).
    let (o, w) = reconciling();
    let path = "/v1/gone/charges";
    let (key, credential) = (new_key(), new_credential("reconcile"));
    o.plan_next(&key, Plan::StallThenDrop(STALL));
    let name = ray();
    assert_problem(&w.send(&named(charge_at(path, &key, &credential), &name)), 502, "outcome-unknown");
    let deadline = Instant::now() + Duration::from_secs(60);
    let retry = loop {
        let r = w.send(&charge_at(path, &key, &credential));
        if r.status == 201 {
            break r;
        }
        assert_problem(&r, 502, "outcome-unknown");
        assert!(Instant::now() < deadline, "not released a minute after: {r:?}");
        thread::sleep(Duration::from_millis(500));
    };
    assert!(!retry.is_replayed(), "{retry:?}");
    assert_eq!(o.charges(&key), 1, "executed once");
    let statuses: Vec<u16> = o.lookup_log(&key).iter().map(|(_, status)| *status).collect();
    assert!(statuses.contains(&410) && !statuses.contains(&404), "{statuses:?}");
    let object = object_of(w, &name);
    wait_for_line(w, "reconciled-not-executed", |line| {
        line["object"] == object.as_str()
            && line["decision"] == "reconciled-not-executed"
            && line["origin_status"] == 410
    });
}

#[test]
fn a_lookup_that_hangs_past_the_origin_timeout_says_nothing() {
    let (o, w) = reconciling();
    let (key, credential, name) = charged_then_lost(o, w, 0);
    // The next lookup answers, but only long after the route's origin timeout.
    let hang = Duration::from_secs(4 * ORIGIN_TIMEOUT_SECONDS);
    o.hang_next_lookups(&key, 1, hang);
    let started = Instant::now();
    let retry = w.send(&charge(&key, &credential));
    let took = started.elapsed();
    assert_problem(&retry, 502, "outcome-unknown");
    assert!(
        took < hang - Duration::from_secs(1),
        "the retry waited {took:?}, not bounded by the origin timeout"
    );
    let object = object_of(w, &name);
    wait_for_line(w, "reconcile-failed", |line| {
        line["object"] == object.as_str() && line["decision"] == "reconcile-failed"
    });
    // Asked again later, the lookup answers in time.
    let deadline = Instant::now() + Duration::from_secs(60);
    let answer = loop {
        let r = w.send(&charge(&key, &credential));
        if r.status == 200 {
            break r;
        }
        assert_problem(&r, 502, "outcome-unknown");
        assert!(Instant::now() < deadline, "not reconciled a minute after: {r:?}");
        thread::sleep(Duration::from_millis(500));
    };
    assert_reconciled(&answer, &key);
    assert_eq!(o.charges(&key), 1);
}

#[test]
fn a_refused_caller_releases_the_key_on_a_route_that_requires_confirmed_releases() {
    // The route narrows its release statuses and requires Idempotency-Released on them; an
    // origin's 401 or 403 still releases the key (nothing executed for such a caller), and
    // the retry executes once.
    let (o, w) = reconciling();
    let path = "/v1/strict/charges";
    for status in [401u16, 403] {
        let (key, credential) = (new_key(), new_credential("reconcile"));
        o.plan_next(&key, Plan::Refuse(status));
        let refused = w.send(&charge_at(path, &key, &credential));
        assert_eq!(refused.status, status, "{refused:?}");
        let retry = w.send(&charge_at(path, &key, &credential));
        assert_eq!(retry.status, 201, "released: the retry executes: {retry:?}");
        assert!(!retry.is_replayed(), "{retry:?}");
        assert_eq!(o.charges(&key), 1);
    }
}

#[test]
fn a_route_that_would_hold_a_refused_caller_unknown_is_invalid_config() {
    // 401 and 403 always release the key: a route that lists them as unknown would be
    // overridden in silence, so the worker refuses its configuration, naming the route.
    let secret = crate::support::requests::secret("origin-auth");
    let origin = LedgerOrigin::start(&secret);
    let routes = r#"[{"pattern":"/v1/charges","unknown_statuses":[502,401]}]"#;
    let mut vars = vars(&origin, &secret);
    vars.retain(|(name, _)| name != "IDEMPOTENCY_ROUTES");
    vars.push(("IDEMPOTENCY_ROUTES".to_owned(), routes.to_owned()));
    let w = Worker::start(WorkerConfig {
        name: "reconcile-misconfigured".into(),
        vars,
        readiness: Readiness::AnyResponse,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let key = new_key();
    let r = w.send(&charge(&key, &new_credential("reconcile")));
    assert_problem(&r, 500, "invalid-config");
    let detail = r.json()["detail"].as_str().unwrap_or_default().to_owned();
    assert!(
        detail.contains("unknown_statuses") && detail.contains("/v1/charges"),
        "names the route: {detail}"
    );
    assert_eq!(origin.arrival_times(&key).len(), 0, "nothing forwarded");
}

/// The origin timeout of [`limited`]: long enough that a lookup held [`HOLD`] still answers.
const LIMITED_TIMEOUT_SECONDS: u64 = 4;
/// Longer than [`LIMITED_TIMEOUT_SECONDS`]: the worker gives up on the charge first.
const LIMITED_STALL: Duration = Duration::from_secs(5);
/// How long a lookup is held at the origin while retries arrive.
const HOLD: Duration = Duration::from_secs(3);
/// `MAX_WAITING_BYTES` of [`limited`]: two retries of [`padded_charge`] wait, a third does not.
const WAITING_BYTES: usize = 2_500;

/// The ledger origin behind a route with a lookup and a route-level `async_accept` (with
/// `ASYNC_ACCEPT` unset), bodies up to 4 MiB, and room for the bodies of two waiters.
fn limited() -> &'static (LedgerOrigin, Worker) {
    static CELL: OnceLock<Result<(LedgerOrigin, Worker), String>> = OnceLock::new();
    shared(&CELL, || {
        let secret = crate::support::requests::secret("origin-auth");
        let origin = LedgerOrigin::start(&secret);
        let routes = format!(
            r#"[{{"pattern":"/v1/charges","reconcile_url":"{}","async_accept":"prefer"}}]"#,
            origin.reconcile_url()
        );
        let mut vars: Vec<(String, String)> = vars(&origin, &secret)
            .into_iter()
            .filter(|(name, _)| !matches!(name.as_str(), "IDEMPOTENCY_ROUTES" | "ORIGIN_TIMEOUT_SECONDS"))
            .collect();
        for (name, value) in [
            ("IDEMPOTENCY_ROUTES", routes),
            ("ORIGIN_TIMEOUT_SECONDS", LIMITED_TIMEOUT_SECONDS.to_string()),
            ("MAX_WAITING_BYTES", WAITING_BYTES.to_string()),
            ("MAX_BODY_BYTES", (4 * 1024 * 1024).to_string()),
        ] {
            vars.push((name.to_owned(), value));
        }
        let w = Worker::start(WorkerConfig {
            name: "reconcile-limits".into(),
            vars,
            readiness: Readiness::OriginAnswers,
        })?;
        Ok((origin, w))
    })
}

/// A charge whose body is exactly `bytes` long.
fn padded_charge(bytes: usize) -> String {
    let head = r#"{"amount":1000,"currency":"eur","memo":""#;
    let tail = r#""}"#;
    format!("{head}{}{tail}", "m".repeat(bytes - head.len() - tail.len()))
}

/// Retries that arrive while a lookup runs wait for it, each holding its body (read, so
/// that the one that forwards once the key is released has it): capped by the bytes of
/// those bodies, `MAX_WAITING_BYTES`, as the docs promise, not only by their count. Past
/// the cap a retry gets 502 `outcome-unknown` at once, its body drained (a full answer on
/// a connection that stays usable), and those that waited get the lookup's answer. One
/// lookup in all.
#[test]
fn retries_waiting_on_a_running_lookup_are_capped_by_bytes_and_the_rest_get_502_at_once() {
    let (o, w) = limited();
    let (key, credential) = (new_key(), new_credential("reconcile"));
    let req = charge(&key, &credential).json(&padded_charge(1_000));
    o.plan_next(&key, Plan::ChargeThenStall(LIMITED_STALL));
    // The key's first lookup (the alarm's, a second after the outcome became unknown) is
    // held at the origin while the retries arrive.
    o.hang_next_lookups(&key, 1, HOLD);
    assert_problem(&w.send(&req), 502, "outcome-unknown");
    assert!(
        o.wait_for(&key, Duration::from_secs(30), |_, _, lookups| lookups == 1),
        "the alarm's lookup reached the origin"
    );

    let addr = w.addr;
    let answers: Vec<(Response, Duration)> = thread::scope(|scope| {
        let sent: Vec<_> = (0..5)
            .map(|_| {
                let req = req.clone();
                scope.spawn(move || {
                    let started = Instant::now();
                    let r = req.send(addr).unwrap_or_else(|e| panic!("a complete answer: {e}"));
                    (r, started.elapsed())
                })
            })
            .collect();
        sent.into_iter().map(|retry| retry.join().expect("the retry's thread")).collect()
    });
    let (waited, refused): (Vec<_>, Vec<_>) = answers.iter().partition(|(r, _)| r.status == 200);
    assert_eq!((waited.len(), refused.len()), (2, 3), "two bodies fit in MAX_WAITING_BYTES: {answers:?}");
    for (r, _) in &waited {
        assert_reconciled(r, &key);
    }
    for (r, _) in &refused {
        assert_problem(r, 502, "outcome-unknown");
        assert_eq!(r.header("retry-after"), Some("1"), "{r:?}");
        assert!(r.text().contains("MAX_WAITING_BYTES"), "says why: {r:?}");
    }
    let slowest_refusal = refused.iter().map(|(_, took)| *took).max().unwrap_or_default();
    let quickest_wait = waited.iter().map(|(_, took)| *took).min().unwrap_or_default();
    assert!(slowest_refusal < quickest_wait, "refused at once, before the lookup answered: {answers:?}");
    assert_eq!(o.lookups(&key), 1, "the retries asked nothing themselves");
    assert_eq!(o.charges(&key), 1);

    // The lookup's answer is stored: a retry now replays it.
    assert_reconciled(&w.send(&req), &key);
    assert_eq!(o.lookups(&key), 1);
}

/// A request that prefers `respond-async` with a body too large to store with a job (over
/// 1.5 MB) is served synchronously, and on a route with a lookup it reconciles like any
/// other: its claim keeps the lookup, so an outcome lost at the origin is looked up and the
/// retry gets the charge, never `outcome-unknown` until the TTL ends.
#[test]
fn an_async_request_too_large_for_a_job_keeps_the_routes_lookup() {
    let (o, w) = limited();
    let (key, credential) = (new_key(), new_credential("reconcile"));
    let req = charge(&key, &credential).header("Prefer", "respond-async").json(&padded_charge(1_600_000));
    o.plan_next(&key, Plan::ChargeThenStall(LIMITED_STALL));
    let first = w.send(&req);
    assert_problem(&first, 502, "outcome-unknown");
    assert_eq!(first.header("preference-applied"), None, "served synchronously: {first:?}");
    assert_eq!(o.charges(&key), 1, "the origin charged, then its reply was lost");

    let retry = w.send(&req);
    assert_reconciled(&retry, &key);
    assert!(o.lookups(&key) >= 1, "looked up");
    assert_eq!(o.charges(&key), 1, "reconciled, never executed again");
}

/// `async_accept` on a route, with `ASYNC_ACCEPT` unset: that route's requests that prefer
/// `respond-async` are taken as jobs (202, executed from the alarm, polled to the stored
/// answer, executed once); those that do not are served synchronously.
#[test]
fn a_route_level_async_accept_takes_jobs_where_async_accept_is_off() {
    let (o, w) = limited();
    let (key, credential) = (new_key(), new_credential("reconcile"));
    let req = charge(&key, &credential).header("Prefer", "respond-async");
    let accepted = w.send(&req);
    assert_eq!(accepted.status, 202, "a job: {accepted:?}");
    assert_eq!(accepted.header("preference-applied"), Some("respond-async"), "{accepted:?}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let done = loop {
        let r = w.send(&req);
        if r.status != 202 {
            break r;
        }
        assert!(Instant::now() < deadline, "the job did not run in a minute: {r:?}");
        thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(done.status, 201, "the job's stored answer: {done:?}");
    assert!(done.is_replayed(), "{done:?}");
    assert_eq!(done.json()["key"], key.as_str());
    assert_eq!(o.charges(&key), 1, "executed once, by the job");

    let (key, credential) = (new_key(), new_credential("reconcile"));
    let plain = w.send(&charge(&key, &credential));
    assert_eq!(plain.status, 201, "no preference: served at once: {plain:?}");
    assert!(!plain.is_replayed());
    assert_eq!(plain.header("preference-applied"), None);
    assert_eq!(o.charges(&key), 1);
}

/// A job on a route with a lookup reconciles too: its send that timed out at the origin
/// (which charged, then lost its reply) is held unknown with the route's lookup, the alarm
/// asks, and the client's poll gets the charge, never `outcome-unknown` until the TTL.
#[test]
fn a_jobs_unknown_outcome_is_looked_up_and_the_poll_gets_the_charge() {
    let (o, w) = limited();
    let (key, credential) = (new_key(), new_credential("reconcile"));
    let req = charge(&key, &credential).header("Prefer", "respond-async");
    o.plan_next(&key, Plan::ChargeThenStall(LIMITED_STALL));
    let accepted = w.send(&req);
    assert_eq!(accepted.status, 202, "a job: {accepted:?}");
    let deadline = Instant::now() + Duration::from_secs(90);
    let done = loop {
        let r = w.send(&req);
        if r.status != 202 {
            break r;
        }
        assert!(Instant::now() < deadline, "the job did not end in 90 s: {r:?}");
        thread::sleep(Duration::from_millis(250));
    };
    assert_reconciled(&done, &key);
    assert!(o.lookups(&key) >= 1, "looked up");
    assert_eq!(o.charges(&key), 1, "one charge: the job's send, never again");
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

/// A route with both a lookup and an origin that deduplicates by key: a charge whose reply
/// is lost is settled once, whichever comes first (the lookup finding the charge, or a
/// re-send the origin answers with the charge it made), and never executed twice. Every
/// request the origin got, lookups and re-sends included, carried the edge's signature.
#[test]
fn reconciliation_beside_an_origin_that_deduplicates_settles_a_lost_reply_once() {
    let (o, w) = reconciling();
    let path = "/v1/dedup/charges";
    let (key, credential) = (new_key(), new_credential("reconcile"));
    o.plan_next(&key, Plan::ChargeThenStall(STALL));
    o.plan_next(&key, Plan::ReplayCharge);
    assert_problem(&w.send(&charge_at(path, &key, &credential)), 502, "outcome-unknown");
    assert_eq!(o.charges(&key), 1, "charged, reply lost");
    let deadline = Instant::now() + Duration::from_secs(60);
    let settled = loop {
        let r = w.send(&charge_at(path, &key, &credential));
        if matches!(r.status, 200 | 201) {
            break r;
        }
        assert_problem(&r, 502, "outcome-unknown");
        assert!(Instant::now() < deadline, "not settled a minute after: {r:?}");
        thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(settled.json()["key"], key.as_str(), "the charge made under the key: {settled:?}");
    let replay = w.send(&charge_at(path, &key, &credential));
    assert!(replay.is_replayed(), "{replay:?}");
    assert_eq!(replay.body, settled.body);
    assert_eq!(o.charges(&key), 1, "executed once");
    assert_eq!(o.refused(), 0, "every request carried the edge's valid signature");
}
