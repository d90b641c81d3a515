//! Known answers computed independently with Python's `http-message-signatures` 3.0.0
//! (`HTTPMessageSigner` with `algorithms.HMAC_SHA256`, label `edge`, the same covered
//! components, `created`, `nonce` and `keyid`), and the reference verifier's refusals.

use sha2::{Digest, Sha256};

use super::*;

const SECRET: &[u8] = b"whsec-test-0123456789abcdef0123456789abcdef";

fn charge<'a>() -> Covered<'a> {
    Covered {
        method: "POST",
        target_uri: "https://payments.example.com/v1/charges?expand=customer",
        key: Some(("idempotency-key", "order-42-charge")),
        protection: Protection::Protected,
        claimed_at: None,
        created: 1_796_300_000,
        nonce: "0123456789abcdef0123456789abcdef",
    }
}

const CHARGE_BODY: &[u8] = br#"{"amount":1000,"currency":"eur"}"#;

#[test]
fn known_answers_from_an_independent_implementation() {
    let signed = sign(SECRET, &charge(), &Sha256::digest(CHARGE_BODY));
    assert_eq!(signed.content_digest, "sha-256=:Tkk+TODkdMFmMDrIr/sUZM4qVPkpmuHiX3pDYJk9Irs=:");
    assert_eq!(
        signed.signature_input,
        r#"edge=("@method" "@target-uri" "content-digest" "idempotency-key" "idempotency-edge-protection");created=1796300000;keyid="idempotency-edge";alg="hmac-sha256";nonce="0123456789abcdef0123456789abcdef";tag="idempotency-edge""#
    );
    assert_eq!(signed.signature, "edge=:VzRwzq+B1B/ZeN2HO6bT87c0IuEKX2j2twb+ygw6YmU=:");
    assert_eq!(signed.protection, "protected");

    // No key, passed on unprotected, an empty body (which has a digest too).
    let passed = Covered {
        method: "PATCH",
        target_uri: "http://127.0.0.1:8788/v1/charges/ch_1",
        key: None,
        protection: Protection::Passed,
        claimed_at: None,
        created: 1_796_300_001,
        nonce: "ffeeddccbbaa99887766554433221100",
    };
    let signed = sign(SECRET, &passed, &Sha256::digest(b""));
    assert_eq!(signed.content_digest, "sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:");
    assert_eq!(
        signed.signature_input,
        r#"edge=("@method" "@target-uri" "content-digest" "idempotency-edge-protection");created=1796300001;keyid="idempotency-edge";alg="hmac-sha256";nonce="ffeeddccbbaa99887766554433221100";tag="idempotency-edge""#
    );
    assert_eq!(signed.signature, "edge=:nZLgPvMnRO5ebUoOVW8f41OFidUcMGAFsl2OP787bRY=:");

    // A lookup on a route whose key header is X-Request-Id, the key quoted as sent, with the
    // claim's time.
    let lookup = Covered {
        method: "GET",
        target_uri: "https://payments.example.com/v1/operations?idempotency_key=%22k1%22",
        key: Some(("x-request-id", "\"k1\"")),
        protection: Protection::Protected,
        claimed_at: Some("1796299990123"),
        created: 1_796_300_002,
        nonce: "00112233445566778899aabbccddeeff",
    };
    let signed = sign(SECRET, &lookup, &Sha256::digest(b""));
    assert_eq!(signed.signature, "edge=:2NiSaU+OBp95hDe6qA8hww9/jqwGFPAJ2h3QTY3VjgU=:");
}

#[test]
fn the_signature_base_is_rfc_9421s() {
    let base = signature_base(&charge(), "sha-256=:Tkk+TODkdMFmMDrIr/sUZM4qVPkpmuHiX3pDYJk9Irs=:");
    assert_eq!(
        base,
        "\"@method\": POST\n\
         \"@target-uri\": https://payments.example.com/v1/charges?expand=customer\n\
         \"content-digest\": sha-256=:Tkk+TODkdMFmMDrIr/sUZM4qVPkpmuHiX3pDYJk9Irs=:\n\
         \"idempotency-key\": order-42-charge\n\
         \"idempotency-edge-protection\": protected\n\
         \"@signature-params\": (\"@method\" \"@target-uri\" \"content-digest\" \"idempotency-key\" \"idempotency-edge-protection\");created=1796300000;keyid=\"idempotency-edge\";alg=\"hmac-sha256\";nonce=\"0123456789abcdef0123456789abcdef\";tag=\"idempotency-edge\""
    );
}

/// A request as an origin receives it: its headers by lower-case name.
struct Received {
    method: &'static str,
    target_uri: &'static str,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Received {
    fn signed(covered: &Covered<'static>, body: &[u8]) -> Received {
        let signature = sign(SECRET, covered, &Sha256::digest(body));
        let mut headers: Vec<(String, String)> =
            signature.pairs().iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
        if let Some((name, value)) = covered.key {
            headers.push((name.to_owned(), value.to_owned()));
        }
        if let Some(claimed_at) = covered.claimed_at {
            headers.push((CLAIMED_AT_HEADER.to_owned(), claimed_at.to_owned()));
        }
        Received { method: covered.method, target_uri: covered.target_uri, headers, body: body.to_vec() }
    }

    fn set(mut self, name: &str, value: Option<&str>) -> Received {
        self.headers.retain(|(n, _)| n != name);
        if let Some(value) = value {
            self.headers.push((name.to_owned(), value.to_owned()));
        }
        self
    }

    fn verify(&self, key_header: &str, now: u64) -> Result<Verified, Refusal> {
        let header = |name: &str| self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        verify(SECRET, &header, self.method, self.target_uri, key_header, &self.body, now, 300)
    }
}

#[test]
fn the_verifier_accepts_what_is_signed_and_refuses_every_change() {
    let good = || Received::signed(&charge(), CHARGE_BODY);
    let now = 1_796_300_010;
    assert_eq!(
        good().verify("idempotency-key", now),
        Ok(Verified {
            nonce: "0123456789abcdef0123456789abcdef".into(),
            protection: Protection::Protected,
            created: 1_796_300_000
        })
    );
    assert_eq!(good().verify("idempotency-key", now + 400), Err(Refusal::Stale));
    // The key: another spelling, another key, or none.
    for other in [Some("\"order-42-charge\""), Some("order-43-charge")] {
        assert_eq!(
            good().set("idempotency-key", other).verify("idempotency-key", now),
            Err(Refusal::Mismatch)
        );
    }
    assert_eq!(good().set("idempotency-key", None).verify("idempotency-key", now), Err(Refusal::Uncovered));
    // A key the signature does not cover (a request signed without one, with one added).
    let passed = Covered { key: None, ..charge() };
    let added = Received::signed(&passed, CHARGE_BODY).set("idempotency-key", Some("order-42-charge"));
    assert_eq!(added.verify("idempotency-key", now), Err(Refusal::Uncovered));
    // The verdict relabelled, the body changed, the digest replaced with the new body's.
    assert_eq!(
        good().set(PROTECTION_HEADER, Some("passed")).verify("idempotency-key", now),
        Err(Refusal::Mismatch)
    );
    let mut changed = good();
    changed.body = br#"{"amount":9999,"currency":"eur"}"#.to_vec();
    assert_eq!(changed.verify("idempotency-key", now), Err(Refusal::Digest));
    let digest = content_digest(&Sha256::digest(&changed.body));
    assert_eq!(
        changed.set(CONTENT_DIGEST_HEADER, Some(&digest)).verify("idempotency-key", now),
        Err(Refusal::Mismatch)
    );
    // Another target or method.
    let mut moved = good();
    moved.target_uri = "https://payments.example.com/v1/refunds?expand=customer";
    assert_eq!(moved.verify("idempotency-key", now), Err(Refusal::Mismatch));
    let mut put = good();
    put.method = "PUT";
    assert_eq!(put.verify("idempotency-key", now), Err(Refusal::Mismatch));
    // Parameters moved in time, another nonce, another algorithm, no signature at all.
    let input = good().headers.iter().find(|(n, _)| n == SIGNATURE_INPUT_HEADER).unwrap().1.clone();
    let later = input.replace("created=1796300000", "created=1796300001");
    assert_eq!(
        good().set(SIGNATURE_INPUT_HEADER, Some(&later)).verify("idempotency-key", now),
        Err(Refusal::Mismatch)
    );
    let renonced = input.replace("0123456789abcdef0123456789abcdef", "1123456789abcdef0123456789abcdef");
    assert_eq!(
        good().set(SIGNATURE_INPUT_HEADER, Some(&renonced)).verify("idempotency-key", now),
        Err(Refusal::Mismatch)
    );
    let other_alg = input.replace("hmac-sha256", "ed25519");
    assert_eq!(
        good().set(SIGNATURE_INPUT_HEADER, Some(&other_alg)).verify("idempotency-key", now),
        Err(Refusal::Malformed)
    );
    let fewer = input.replace(" \"idempotency-edge-protection\"", "");
    assert_eq!(
        good().set(SIGNATURE_INPUT_HEADER, Some(&fewer)).verify("idempotency-key", now),
        Err(Refusal::Uncovered)
    );
    assert_eq!(good().set(SIGNATURE_HEADER, None).verify("idempotency-key", now), Err(Refusal::Missing));
    assert_eq!(
        good().set(SIGNATURE_HEADER, Some("edge=:not base64!:")).verify("idempotency-key", now),
        Err(Refusal::Malformed)
    );
    // Another secret.
    let header = |name: &str| good().headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    assert_eq!(
        verify(
            b"another-secret-of-enough-length-000000",
            &header,
            "POST",
            charge().target_uri,
            "idempotency-key",
            CHARGE_BODY,
            now,
            300
        ),
        Err(Refusal::Mismatch)
    );
}

#[test]
fn the_claims_time_is_covered_on_a_lookup() {
    let lookup = Covered { claimed_at: Some("1796299990123"), ..charge() };
    let received = Received::signed(&lookup, b"");
    assert!(received.verify("idempotency-key", 1_796_300_000).is_ok());
    let moved = Received::signed(&lookup, b"").set(CLAIMED_AT_HEADER, Some("1"));
    assert_eq!(moved.verify("idempotency-key", 1_796_300_000), Err(Refusal::Mismatch));
    let added = Received::signed(&charge(), b"").set(CLAIMED_AT_HEADER, Some("1"));
    assert_eq!(added.verify("idempotency-key", 1_796_300_000), Err(Refusal::Uncovered));
}

/// A client's own signature under another label stays beside the edge's: the verifier picks
/// the edge's by its label and tag; a second `edge` member is refused, never guessed at.
#[test]
fn the_edges_member_is_found_among_a_clients_own() {
    let good = Received::signed(&charge(), CHARGE_BODY);
    let input = good.headers.iter().find(|(n, _)| n == SIGNATURE_INPUT_HEADER).unwrap().1.clone();
    let signature = good.headers.iter().find(|(n, _)| n == SIGNATURE_HEADER).unwrap().1.clone();
    let client_input = r#"client=("@method");created=1;keyid="theirs""#;
    let beside = Received::signed(&charge(), CHARGE_BODY)
        .set(SIGNATURE_INPUT_HEADER, Some(&format!("{client_input}, {input}")))
        .set(SIGNATURE_HEADER, Some(&format!("client=:AAAA:, {signature}")));
    assert!(beside.verify("idempotency-key", 1_796_300_000).is_ok());
    let doubled = Received::signed(&charge(), CHARGE_BODY)
        .set(SIGNATURE_HEADER, Some(&format!("{signature}, {signature}")));
    assert_eq!(doubled.verify("idempotency-key", 1_796_300_000), Err(Refusal::Malformed));
}

#[test]
fn a_route_key_header_is_the_one_covered() {
    let lookup = Covered { key: Some(("x-request-id", "\"k1\"")), ..charge() };
    let received = Received::signed(&lookup, b"");
    assert!(received.verify("x-request-id", 1_796_300_000).is_ok());
    // Verified as if the key were in Idempotency-Key, the signature covers a header the
    // verifier does not expect.
    assert_eq!(received.verify("idempotency-key", 1_796_300_000), Err(Refusal::Uncovered));
}

#[test]
fn the_edges_fields_are_appended_to_a_clients_own_unless_it_used_the_edges_label() {
    let ours = r#"edge=("@method");created=1"#;
    assert_eq!(merged_field(None, ours), ours);
    assert_eq!(merged_field(Some("  "), ours), ours);
    assert_eq!(merged_field(Some(r#"client=("@path")"#), ours), format!(r#"client=("@path"), {ours}"#));
    assert_eq!(merged_field(Some(r#"edge=("@path")"#), ours), ours, "a forged edge member is replaced");
    assert_eq!(merged_field(Some(r#"a=("x"), edge=:AAA:"#), ours), ours);
}
