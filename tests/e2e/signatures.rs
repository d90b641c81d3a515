//! End-to-end tests of the origin hop's RFC 9421 signature against an independent verifier:
//! an origin on Python's `http-message-signatures` (`support::signature_origin`) that
//! refuses any request whose signature does not verify. Every kind of request the edge sends
//! is verified there: a protected forward, a pass-through, an observed forward, a quoted key
//! (forwarded in its one spelling), and a lookup of an unknown outcome with the claim's
//! time covered. The reference verifier (`core::edge_rules::message_signature`) is tested against the
//! same library's known answers, and the other test origins verify with it.

use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::assert::assert_problem;
use crate::support::http::Request;
use crate::support::requests::{new_credential, new_key, secret, unique};
use crate::support::signature_origin::SignatureOrigin;
use crate::support::worker::{shared, Readiness, Worker, WorkerConfig};

/// The route's origin timeout: a reply held longer is lost. Long enough for the Python
/// verifier to answer on a loaded machine; the lost reply is held past it on purpose.
const ORIGIN_TIMEOUT_SECONDS: u64 = 6;
const STORAGE_KEYS: &str = r#"[{"id":"sig","key":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}]"#;

fn signed() -> &'static (SignatureOrigin, Worker) {
    static CELL: OnceLock<Result<(SignatureOrigin, Worker), String>> = OnceLock::new();
    shared(&CELL, || {
        let secret = secret("origin-auth");
        let origin = SignatureOrigin::start(&secret);
        let routes = format!(
            r#"[{{"pattern":"/v1/charges/*","reconcile_url":"{}"}},{{"pattern":"/v1/observed/*","mode":"observe"}}]"#,
            origin.reconcile_url()
        );
        let vars = [
            ("ORIGIN_URL", origin.url()),
            ("ORIGIN_AUTH_SECRET", secret),
            ("ORIGIN_TIMEOUT_SECONDS", ORIGIN_TIMEOUT_SECONDS.to_string()),
            ("STORAGE_ENCRYPTION_KEYS", STORAGE_KEYS.to_owned()),
            ("IDEMPOTENCY_ROUTES", routes),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_owned(), v))
        .collect();
        let w = Worker::start(WorkerConfig {
            name: "rfc9421".into(),
            vars,
            readiness: Readiness::OriginAnswers,
        })?;
        Ok((origin, w))
    })
}

fn charge(path: &str, key: &str, credential: &str) -> Request {
    Request::post(path)
        .header("Authorization", credential)
        .header("Idempotency-Key", key)
        .json(r#"{"amount":1000,"currency":"eur"}"#)
        .timeout(Duration::from_secs(120))
}

#[test]
fn every_request_the_edge_sends_verifies_with_an_independent_rfc_9421_library() {
    let (o, w) = signed();
    let credential = new_credential("rfc9421");
    let marker = unique("sig");

    // A protected forward, its replay (nothing sent), and a quoted key forwarded bare.
    let (key, quoted_key) = (new_key(), new_key());
    let first = w.send(&charge(&format!("/v1/charges/{marker}"), &key, &credential));
    assert_eq!(first.status, 201, "the origin verified the signature: {first:?}");
    assert!(w.send(&charge(&format!("/v1/charges/{marker}"), &key, &credential)).is_replayed());
    let quoted =
        w.send(&charge(&format!("/v1/charges/{marker}-q"), &format!("\"{quoted_key}\""), &credential));
    assert_eq!(quoted.status, 201, "{quoted:?}");
    // A pass-through (an uncovered method) and an observed forward: signed as passed.
    let get = w.send(&Request::get(&format!("/v1/charges/{marker}")).header("Authorization", &credential));
    assert_eq!(
        get.status, 404,
        "verified, then answered as the origin does a path it does not serve: {get:?}"
    );
    let observed = w.send(&charge(&format!("/v1/observed/{marker}"), &new_key(), &credential));
    assert_eq!(observed.status, 201, "{observed:?}");

    // A lost reply: the charge executes, its reply is held past the origin timeout; a retry
    // after the origin timeout asks the lookup, which must verify (protected, the claim's
    // time covered) and finds the charge.
    let lost = new_key();
    let stalled = charge(&format!("/v1/charges/{marker}-lost"), &lost, &credential)
        .header("x-test-stall-ms", (1_000 * (ORIGIN_TIMEOUT_SECONDS + 2)).to_string());
    assert_problem(&w.send(&stalled), 502, "outcome-unknown");
    thread::sleep(Duration::from_secs(ORIGIN_TIMEOUT_SECONDS + 1));
    let deadline = Instant::now() + Duration::from_secs(60);
    let reconciled = loop {
        let r = w.send(&charge(&format!("/v1/charges/{marker}-lost"), &lost, &credential));
        // The lookup's answer (200, its body the charge) is the key's answer now.
        if r.status == 200 {
            break r;
        }
        assert_problem(&r, 502, "outcome-unknown");
        assert!(Instant::now() < deadline, "not reconciled a minute after: {r:?}");
        thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(reconciled.header("idempotency-reconciled"), Some("true"), "{reconciled:?}");

    let verdicts: Vec<_> = o
        .verdicts()
        .into_iter()
        .filter(|v| v.path.contains(&marker) || v.key.as_deref() == Some(lost.as_str()))
        .collect();
    let refused: Vec<String> = verdicts
        .iter()
        .filter(|v| !v.ok)
        .map(|v| format!("{} {}: {}", v.method, v.path, v.why.as_deref().unwrap_or("?")))
        .collect();
    assert!(refused.is_empty(), "every request verified: {refused:?}");
    let of = |method: &str, path: &str| {
        verdicts.iter().filter(|v| v.method == method && v.path == path).collect::<Vec<_>>()
    };
    let forwards = of("POST", &format!("/v1/charges/{marker}"));
    assert_eq!(forwards.len(), 1, "one forward, the replay sent nothing: {verdicts:?}");
    assert_eq!(forwards[0].protection.as_deref(), Some("protected"));
    let bare = of("POST", &format!("/v1/charges/{marker}-q"));
    assert_eq!(bare[0].key.as_deref(), Some(quoted_key.as_str()), "the key in its one spelling: {bare:?}");
    assert_eq!(of("GET", &format!("/v1/charges/{marker}"))[0].protection.as_deref(), Some("passed"));
    assert_eq!(of("POST", &format!("/v1/observed/{marker}"))[0].protection.as_deref(), Some("passed"));
    let lookups: Vec<_> = verdicts.iter().filter(|v| v.path.starts_with("/v1/lookup")).collect();
    assert!(!lookups.is_empty(), "the lookup was asked: {verdicts:?}");
    assert!(lookups.iter().all(|v| v.protection.as_deref() == Some("protected")), "{lookups:?}");
}
