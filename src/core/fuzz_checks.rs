//! The bodies of the `cargo fuzz` targets in `fuzz/`, as plain functions.
//!
//! Each function takes arbitrary bytes, must not panic on any of them, and asserts cheap
//! properties of what the core makes of them; a failed assertion is a bug. The fuzz
//! targets call these functions and nothing else, and the smoke tests below (run by plain
//! `cargo test` on stable Rust) feed them the seed corpus, mutations of it and
//! proptest-generated inputs, so the two never drift apart.
//!
//! | function   | fuzz target | what it reads the bytes as |
//! |------------|-------------|----------------------------|
//! | [`key`]    | `key`       | an `Idempotency-Key` field value; also a header name |
//! | [`json`]   | `json`      | a request body: canonical JSON and the payload fingerprint |
//! | [`record`] | `record`    | stored record bytes, and the seed of a generated record |
//! | [`config`] | `config`    | the wrangler variables, NUL-separated |
//! | [`jwt`]    | `jwt`       | a bearer token, a JWKS, a claim path and a `Cache-Control` value |

use std::sync::Arc;

use serde_json::Value;

use super::edge_rules::admin;
use super::edge_rules::config::Config;
use super::edge_rules::env_names::variable_names;
use super::edge_rules::headers;
use super::edge_rules::routes::pattern_matches;
use super::edge_rules::scope::{bearer_token, ScopeLog};
use super::formats::body_shape::{BodyShape, JsonPointer};
use super::formats::fingerprint::{fingerprint, is_json_media_type, object_name, Digest256, Payload, Scope};
use super::formats::job::{AsyncJob, JobPhase};
use super::formats::key_record::{
    AttemptId, Completed, InFlight, KeyRecord, StoredResponse, Unknown, UnknownReason,
};
use super::formats::stored_terms::{self, decode_text, encode_text};
use super::key_rules::machine::{step, Action, Event, KeyRecordChange};
use super::key_rules::reconcile::Verdict;
use super::primitives::canonical_json::canonicalize;
use super::primitives::jwt::{self as jwt_core, Algorithm, ClaimPath, JwksSource, Unverified, Validation};
use super::primitives::key::{parse_key, parse_key_fields, KeyError, MAX_KEY_LEN};
use super::primitives::url::normalised_path;
use super::vocabulary::key_terms::KeyTerms;
use super::vocabulary::key_terms::{Timing, WaiterLimits};
use super::vocabulary::outcome_table::{OriginResult, OutcomeTable, StatusSet};

/// Key parsing: `parse_key` and `parse_key_fields`, and the header-name rules.
///
/// A key that parses is 1..=255 printable ASCII characters, came from a field of printable
/// ASCII (plus optional whitespace), re-parses to itself in its sf-string form (and in its
/// bare form where one exists), and turns into a second value when the runtime joins
/// another field to it.
pub fn key(data: &[u8]) {
    let parsed = parse_key(data);
    assert_eq!(parse_key(data), parsed, "parsing is deterministic");
    assert_eq!(parse_key_fields([data]), parsed, "one field is the same as the value");
    assert_eq!(parse_key_fields([data, data]), Err(KeyError::SeveralValues));
    assert_eq!(parse_key_fields(std::iter::empty()), Err(KeyError::Missing));

    match &parsed {
        Ok(key) => {
            let text = key.as_str();
            assert!(!text.is_empty() && text.len() <= MAX_KEY_LEN, "length {}", text.len());
            assert!(text.bytes().all(|b| (0x20..=0x7e).contains(&b)), "not printable ASCII");
            assert!(
                data.iter().all(|&b| (0x20..=0x7e).contains(&b) || b == b'\t'),
                "accepted a field with control or non-ASCII bytes"
            );

            let quoted = sf_string(text);
            assert_eq!(parse_key(quoted.as_bytes()).as_ref(), Ok(key), "sf-string form");
            assert_eq!(parse_key(format!(" \t{quoted}\t ").as_bytes()).as_ref(), Ok(key), "with OWS");
            let bare_allowed =
                !text.starts_with(' ') && !text.ends_with(' ') && !text.contains(['"', '\\', ',']);
            if bare_allowed {
                assert_eq!(parse_key(text.as_bytes()).as_ref(), Ok(key), "bare form");
            }
            // The runtime joins repeated fields with ", ".
            let joined = [data, b", ", quoted.as_bytes()].concat();
            assert_eq!(parse_key(&joined), Err(KeyError::SeveralValues));

            assert_eq!(format!("{key:?}"), format!("IdempotencyKey(<{} chars>)", text.len()));
            let name = object_name(Scope::from_header(Some(b"Bearer x")), text);
            assert!(name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
        }
        Err(error) => assert!(!error.detail().is_empty()),
    }

    // The same bytes as a header name (and a `Connection` value): hop-by-hop and internal
    // headers never cross towards the origin.
    let name = String::from_utf8_lossy(data);
    let tokens = headers::connection_tokens(Some(&name));
    let forwarded = headers::forward_to_origin(&name, &[]);
    let stored = headers::store_for_replay(&name, &tokens);
    let passed = headers::pass_to_caller(&name, &tokens);
    let lower = name.to_ascii_lowercase();
    if lower.starts_with(headers::INTERNAL_PREFIX) || lower == "host" || lower == "content-length" {
        assert!(!forwarded, "{name:?} forwarded");
    }
    if headers::is_hop_by_hop(&name, &tokens) {
        assert!(!stored && !passed, "hop-by-hop {name:?} crossed");
        assert!(!headers::forward_to_origin(&name, &tokens));
    }
}

/// The sf-string form of a key: quoted, with `"` and `\` escaped.
fn sf_string(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 2);
    out.push('"');
    for c in key.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// JSON canonicalisation and the payload fingerprint.
///
/// Canonicalisation is deterministic and idempotent, never lengthens the body, keeps its
/// meaning (serde_json reads the same `Value` from both: members, duplicates' last value,
/// numbers), accepts whatever serde_json (a strict RFC 8259 parser, depth limit 127)
/// accepts, and nothing serde_json refuses. The fingerprint is deterministic,
/// the same for a JSON body and its canonical form, and depends on the content type.
pub fn json(data: &[u8]) {
    let canonical = canonicalize(data);
    assert_eq!(canonicalize(data), canonical, "canonicalisation is deterministic");
    let strict = serde_json::from_slice::<Value>(data).ok();
    if strict.is_some() {
        assert!(canonical.is_some(), "valid JSON was not canonicalised");
    }
    if let Some(canonical) = &canonical {
        assert!(
            serde_json::from_slice::<serde::de::IgnoredAny>(data).is_ok(),
            "canonicalised what serde_json refuses"
        );
        assert_eq!(canonicalize(canonical).as_ref(), Some(canonical), "canonicalisation is idempotent");
        assert!(canonical.len() <= data.len(), "canonical form is longer");
        if let Some(value) = &strict {
            let reread = serde_json::from_slice::<Value>(canonical).ok();
            assert_eq!(reread.as_ref(), Some(value), "canonical form means something else");
        }
        // A route's shape reads every canonical form; what ignoring leaves is still JSON.
        let pointers =
            || ["/a", "/0", "/a/0/b", "/"].map(|p| JsonPointer::parse(p).expect("a pointer")).to_vec();
        let ignored =
            BodyShape::Ignore(pointers()).apply(canonical).expect("a shape reads the canonical form");
        assert!(canonicalize(&ignored.bytes).is_some(), "ignoring left something that is not JSON");
        assert!(BodyShape::Only(pointers()).apply(canonical).is_some(), "a shape reads the canonical form");
    }

    let fp = |content_type: Option<&str>, body: &[u8]| {
        fingerprint(&Payload {
            method: "POST",
            path_and_query: "/v1/charges?expand=x",
            content_type,
            extra_headers: &[("api-version", Some("2024-01-01"))],
            body,
            body_shape: None,
        })
    };
    let as_json = fp(Some("application/json"), data);
    assert_eq!(as_json, fp(Some("application/json"), data), "fingerprint is deterministic");
    let as_text = fp(Some("text/plain"), data);
    assert_ne!(as_json, as_text, "the content type is part of the payload");
    if let Some(canonical) = &canonical {
        assert_eq!(as_json, fp(Some("application/json"), canonical), "canonical form, same payload");
        assert_eq!(
            fp(Some("application/vnd.x+json; charset=utf-8"), data),
            fp(Some("application/vnd.x+json; charset=utf-8"), canonical)
        );
    } else {
        // Not JSON (or too deep): the raw bytes are the payload, under either content type.
        assert_ne!(as_json, fp(Some("application/json"), &[data, b" "].concat()));
    }

    // A leading content type, up to the first NUL, then the body.
    if let Some(split) = data.iter().take(256).position(|&b| b == 0) {
        let content_type = String::from_utf8_lossy(&data[..split]);
        let body = &data[split + 1..];
        let first = fp(Some(&content_type), body);
        assert_eq!(first, fp(Some(&content_type), body));
        if is_json_media_type(&content_type) {
            if let Some(canonical) = canonicalize(body) {
                assert_eq!(first, fp(Some(&content_type), &canonical));
            }
        }
    }

    // Scopes and object names never carry the input.
    let scope = Scope::from_header(Some(data));
    assert!(matches!(scope, Scope::Credential(_)));
    let text = String::from_utf8_lossy(data);
    let name = object_name(scope, &text);
    assert!(name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
    if let Some(digest) = Digest256::from_hex(&text) {
        assert_eq!(text.to_ascii_lowercase(), digest.to_hex());
    }
    assert_eq!(Digest256::from_hex(&as_json.to_hex()), Some(as_json));
}

/// Stored-record decoding, and the state machine on whatever decodes.
///
/// A record that decodes re-encodes to the same bytes (except the unused status of an
/// unknown outcome whose reason carries none, and the skippable extensions it did not know,
/// which it drops) and decodes again to itself. A record built
/// from the bytes round-trips through the encoding. The state machine takes any decoded
/// record, at any time and with any timing, without panicking, and never forwards while an
/// unexpired record is stored.
pub fn record(data: &[u8]) {
    if let Ok((decoded, skipped)) = KeyRecord::decode_skipping(data) {
        let bytes = decoded.encode();
        assert_eq!(KeyRecord::decode(&bytes).as_ref(), Ok(&decoded), "decode(encode(r)) == r");
        if skipped > 0 {
            // Each skipped extension is at least a tag and a length: the re-encoding is
            // shorter by that much, and holds nothing unknown.
            assert!(bytes.len() + 5 * skipped <= data.len(), "skipped extensions are dropped");
            assert_eq!(KeyRecord::decode_skipping(&bytes).map(|(_, skipped)| skipped), Ok(0));
        } else if bytes != data {
            let statusless = matches!(
                &decoded,
                KeyRecord::Unknown(Unknown {
                    reason: UnknownReason::OriginTimeout | UnknownReason::ResetAfterSend,
                    ..
                })
            );
            assert!(statusless, "re-encoding changed the bytes of {decoded:?}");
            assert_eq!(bytes.len(), data.len());
            assert_eq!(bytes[..bytes.len() - 2], data[..data.len() - 2]);
        }
        drive(&decoded, &mut Source(data));
    }

    let mut source = Source(data);
    let built = build_record(&mut source);
    let bytes = built.encode();
    assert_eq!(KeyRecord::decode(&bytes).as_ref(), Ok(&built), "decode(encode(r)) == r");
    for cut in [0, 1, 3, 4, bytes.len() / 2, bytes.len() - 1] {
        assert!(KeyRecord::decode(&bytes[..cut]).is_err(), "a truncated record decoded");
    }
    drive(&built, &mut source);
}

/// Reads values from the fuzz input, and zeros once it is used up.
struct Source<'a>(&'a [u8]);

impl Source<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&first, rest)) => {
                self.0 = rest;
                first
            }
            None => 0,
        }
    }

    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }

    /// A time or duration: often an edge (0, 1, huge), otherwise any value.
    fn u64(&mut self) -> u64 {
        match self.u8() % 8 {
            0 => 0,
            1 => u64::MAX,
            2 => u64::MAX - u64::from(self.u8()),
            3 => u64::from(self.u16()),
            4 => 1_700_000_000_000 + u64::from(self.u16()) * 1_000,
            _ => u64::from_be_bytes(std::array::from_fn(|_| self.u8())),
        }
    }

    fn bytes(&mut self) -> Vec<u8> {
        let len = usize::from(self.u8() % 32).min(self.0.len());
        let (taken, rest) = self.0.split_at(len);
        self.0 = rest;
        taken.to_vec()
    }

    fn string(&mut self) -> String {
        String::from_utf8_lossy(&self.bytes()).into_owned()
    }
}

fn build_record(source: &mut Source<'_>) -> KeyRecord {
    let attempt = AttemptId(source.u64());
    let fingerprint = Digest256(std::array::from_fn(|_| source.u8()));
    match source.u8() % 3 {
        0 => KeyRecord::InFlight(InFlight {
            attempt,
            fingerprint,
            origin_attempts: source.u16(),
            claimed_at: source.u64(),
            lease_until: source.u64(),
            expires_at: source.u64(),
            async_job: source.u8().is_multiple_of(3).then(|| build_job(source)),
            reconcile: build_reconciling(source),
        }),
        1 => {
            let completed_at = source.u64();
            let expires_at = source.u64();
            let sealed_bound = source.u8().is_multiple_of(2);
            let sealed_answer =
                source.u8().is_multiple_of(4).then(|| source.bytes()).filter(|sealed| !sealed.is_empty());
            // A binding means nothing without a sealed answer (and is not written then).
            let sealed_bound = sealed_bound && sealed_answer.is_some();
            let response = if sealed_answer.is_some() {
                StoredResponse { status: 0, headers: Vec::new(), body: Vec::new() }
            } else {
                StoredResponse {
                    status: source.u16(),
                    headers: (0..source.u8() % 4).map(|_| (source.string(), source.string())).collect(),
                    body: source.bytes(),
                }
            };
            // A chunked answer (record tag 4) keeps no body in the record.
            let chunks = source.u8().is_multiple_of(4).then(|| {
                let count = usize::from(source.u8() % 3) + 1;
                crate::core::formats::chunk_manifest::ChunkManifest {
                    body_len: (count as u64 - 1) * 1024 + 1 + u64::from(source.u16() % 1024),
                    chunk_len: 1024,
                    attempt: source.u64(),
                    digests: (0..count).map(|_| std::array::from_fn(|_| source.u8())).collect(),
                }
            });
            let response = match chunks {
                Some(_) => StoredResponse { body: Vec::new(), ..response },
                None => response,
            };
            KeyRecord::Completed(Completed {
                attempt,
                fingerprint,
                completed_at,
                expires_at,
                response: Arc::new(response),
                sealed_answer,
                sealed_bound,
                chunks,
            })
        }
        _ => KeyRecord::Unknown(Unknown {
            attempt,
            fingerprint,
            origin_attempts: source.u16(),
            since: source.u64(),
            expires_at: source.u64(),
            reason: match source.u8() % 3 {
                0 => UnknownReason::OriginTimeout,
                1 => UnknownReason::ResetAfterSend,
                _ => UnknownReason::ResponseTooLarge { status: source.u16() },
            },
            reconcile: build_reconciling(source),
        }),
    }
}

/// A record's reconciliation (`core::key_rules::reconcile`), one time in four; never with an empty
/// lookup, which no writer stores.
fn build_reconciling(source: &mut Source<'_>) -> Option<crate::core::formats::reconciling::Reconciling> {
    if !source.u8().is_multiple_of(4) {
        return None;
    }
    let sealed_lookup = source.bytes();
    (!sealed_lookup.is_empty()).then(|| crate::core::formats::reconciling::Reconciling {
        sealed_lookup,
        bound_at: source.u64(),
        not_found: source.u16(),
        asked: source.u16(),
        next_at: source.u64(),
        policy: {
            let text = format!("600000,5000,{},100,1000,1000,0,503,,0,", u64::from(source.u16()) * 10);
            Box::new(decode_text(&text).expect("a policy the runtime writes"))
        },
        spelling_known: source.u8().is_multiple_of(2),
    })
}

/// An asynchronous job (`core::key_rules::machine::async_job`), with a policy whose deduplication and lease
/// vary (a job's policy is always readable: an unreadable one makes the record so).
fn build_job(source: &mut Source<'_>) -> AsyncJob {
    let phase = match source.u8() % 3 {
        0 => JobPhase::Waiting,
        1 => JobPhase::Sending,
        _ => JobPhase::GaveUp,
    };
    let flags = source.u8();
    let max = source.u8() % 4;
    let text = format!("600000,5000,{},100,1000,1000,0,503,,{max},", u64::from(source.u16()) * 10);
    let policy = Box::new(decode_text(&text).expect("a policy the runtime writes"));
    let mut sealed_request = source.bytes();
    if phase != JobPhase::GaveUp && sealed_request.is_empty() {
        sealed_request.push(source.u8());
    }
    AsyncJob {
        phase,
        deadline: source.u64(),
        next_attempt_at: source.u64(),
        max_backoff_ms: source.u64(),
        unknown_seen: flags & 1 != 0,
        probe_origin: flags & 2 != 0,
        max_sends: u16::from(source.u8() % 8).max(1),
        request_bound: flags & 8 != 0,
        policy,
        sealed_request,
    }
}

/// Puts a stored record through the admin view and every event of the state machine.
fn drive(record: &KeyRecord, source: &mut Source<'_>) {
    let now = source.u64();
    let timing =
        Timing { ttl_ms: source.u64(), duplicate_wait_ms: source.u64(), origin_timeout_ms: source.u64() };
    let live = source.u8().is_multiple_of(2);
    let live_attempt = live.then(|| record.attempt());
    let id = "0".repeat(64);

    let view = admin::summary(&id, Some(record), live, now, live);
    assert_eq!(view["state"].as_str() == Some("absent"), record.is_expired(now));
    assert_eq!(view.get("fingerprint").is_some(), live && !record.is_expired(now));
    // A record that is still kept is never purged without force, except a job between
    // attempts none of which can have executed.
    let job_purgeable =
        !live && record.async_job().is_some_and(|job| job.phase != JobPhase::Sending && !job.unknown_seen);
    let expected = if record.is_expired(now) { live } else { !job_purgeable };
    assert_eq!(admin::purge_refusal(Some(record), live, now, false).is_some(), expected);

    let other = AttemptId(record.attempt().0.wrapping_add(1));
    for fingerprint in [record.fingerprint(), Digest256([source.u8(); 32])] {
        let waiters = usize::from(source.u16());
        let max_origin_attempts = source.u8().is_multiple_of(2).then(|| u16::from(source.u8() % 8));
        let arrival = Event::Arrival {
            fingerprint,
            new_attempt: other,
            live_attempt,
            waiters,
            waiting_bytes: u64::from(source.u16()) << 10,
            max_origin_attempts,
            body_bytes: u64::from(source.u16()) << 10,
            limits: WaiterLimits::default(),
            timing,
            accept: None,
            lookup: None,
        };
        let next = step(Some(record), arrival, now);
        let forwarded = next.actions.iter().any(|a| matches!(a, Action::Forward { .. }));
        let held = !record.is_expired(now) || (live && matches!(record, KeyRecord::InFlight(_)));
        if held && forwarded {
            // Only rule 7 sends a held key again: the origin deduplicates, the payload is the
            // same, the attempts allow it, and nothing may still be running.
            let reforwardable = match record {
                KeyRecord::Unknown(unknown) => {
                    !matches!(unknown.reason, UnknownReason::ResponseTooLarge { .. })
                }
                KeyRecord::InFlight(claim) => !live && now >= claim.lease_until,
                KeyRecord::Completed(_) => false,
            };
            let allowed = max_origin_attempts.is_some_and(|max| record.origin_attempts() < max);
            assert!(
                reforwardable && allowed && fingerprint == record.fingerprint(),
                "forwarded while {record:?} is held at {now}: {next:?}"
            );
            let KeyRecordChange::Put(KeyRecord::InFlight(claim)) = &next.change else { panic!("{next:?}") };
            assert_eq!(claim.origin_attempts, record.origin_attempts() + 1);
        }
        if forwarded {
            let Some(Action::SetAlarm(alarm)) = next.actions.first() else {
                panic!("a forward without its alarm: {next:?}");
            };
            match &next.change {
                KeyRecordChange::Put(KeyRecord::InFlight(claim)) => {
                    assert!(claim.attempt == other && claim.claimed_at == now);
                    assert!(claim.lease_until >= now && claim.expires_at >= claim.lease_until);
                    // The claim's alarm covers the outcome it may get (one alarm per key), or,
                    // with a lookup (rule 9), comes at the lease's end to notice a dead owner.
                    assert_eq!(*alarm, super::key_rules::machine::claim_alarm(claim, &timing));
                    if claim.reconcile.is_some() {
                        assert_eq!(*alarm, claim.lease_until);
                    } else {
                        assert!(*alarm >= claim.expires_at);
                    }
                }
                change => panic!("a forward without its claim: {change:?}"),
            }
        }
    }

    let flags = source.u8();
    let outcome = OutcomeTable {
        unknown: if flags & 4 != 0 {
            StatusSet::of(&[502, 504]).unwrap_or_default()
        } else {
            StatusSet::default()
        },
        release_requires_header: flags & 2 != 0,
        via_cloudflare: flags & 1 != 0,
        ..OutcomeTable::default()
    };
    let results = [
        OriginResult::Responded(source.u16()),
        OriginResult::Oversized(source.u16()),
        OriginResult::ConnectRefused,
        OriginResult::TimedOut,
        OriginResult::ResetAfterSend,
    ];
    for result in results {
        for attempt in [record.attempt(), other] {
            let response = matches!(result, OriginResult::Responded(_))
                .then(|| Arc::new(StoredResponse { status: 200, headers: Vec::new(), body: source.bytes() }));
            let finished = Event::OriginFinished { attempt, result, response, timing, outcome };
            let next = step(Some(record), finished, now);
            let settles = next.actions.iter().filter(|a| matches!(a, Action::Settle { .. })).count();
            assert_eq!(settles, 1, "{next:?}");
            if attempt != record.attempt() || !matches!(record, KeyRecord::InFlight(_)) {
                assert_eq!(next.change, KeyRecordChange::Keep, "fencing: a stale finisher wrote");
            }
        }
    }

    // A lookup's verdict (rule 9) never forwards, changes only the unknown outcome (or dead
    // claim) it was asked about, and keeps its attempt and fingerprint; only "not executed"
    // releases the key, and not before the origin had its timeout again since the outcome
    // became unknown (a dead claim's: when its lease ended).
    // Nor from a claim made before the key had one spelling at the origin (rule 7 of
    // `core::key_rules::reconcile`): its lookup may ask for another spelling than was sent.
    let became_unknown = match record {
        KeyRecord::Unknown(unknown) => unknown.since,
        KeyRecord::InFlight(claim) => claim.lease_until,
        KeyRecord::Completed(_) => 0,
    };
    let too_soon = now < became_unknown.saturating_add(timing.origin_timeout_ms)
        || !record.reconciling().is_some_and(|reconciling| reconciling.spelling_known);
    let answer = StoredResponse { status: 200, headers: Vec::new(), body: source.bytes() };
    for verdict in [Verdict::NotExecuted, Verdict::Executed(answer), Verdict::Unsure] {
        let asked =
            Event::Reconciled { attempt: record.attempt(), verdict: verdict.clone(), timing, jitter: 0.5 };
        let next = step(Some(record), asked, now);
        assert!(!next.actions.iter().any(|a| matches!(a, Action::Forward { .. })), "{next:?}");
        let current = super::key_rules::machine::lookup_is_current(Some(record), record.attempt())
            && !record.is_expired(now);
        match &next.change {
            KeyRecordChange::Keep => {}
            KeyRecordChange::Delete => {
                assert!(current && verdict == Verdict::NotExecuted && !too_soon, "{record:?}: {next:?}")
            }
            KeyRecordChange::Put(after) => {
                assert!(current, "a verdict wrote over {record:?}: {next:?}");
                assert_eq!((after.attempt(), after.fingerprint()), (record.attempt(), record.fingerprint()));
                match after {
                    KeyRecord::Completed(_) => assert!(matches!(verdict, Verdict::Executed(_))),
                    // An answer too large to store is no answer, and a "not found" too soon
                    // is not believed yet: still unknown.
                    KeyRecord::Unknown(_) => assert!(verdict != Verdict::NotExecuted || too_soon, "{next:?}"),
                    KeyRecord::InFlight(_) => panic!("a verdict claimed: {next:?}"),
                }
            }
        }
    }

    // The job's alarm sends only a job that is due, before its deadline, and never a send
    // that may still run; every send is claimed with its lease and its alarm first.
    let alarm = step(Some(record), Event::JobAlarm { live_attempt, new_attempt: other }, now);
    if alarm.actions.iter().any(|a| matches!(a, Action::Forward { .. })) {
        let (KeyRecord::InFlight(before), Some(job)) = (record, record.async_job()) else {
            panic!("the alarm sent {record:?}: {alarm:?}")
        };
        assert!(!record.is_expired(now) && now < job.deadline, "sent at {now}: {record:?}");
        match job.phase {
            JobPhase::Waiting => assert!(now >= job.next_attempt_at),
            JobPhase::Sending => assert!(!live && now >= before.lease_until),
            JobPhase::GaveUp => panic!("a job that gave up was sent"),
        }
        let KeyRecordChange::Put(KeyRecord::InFlight(claim)) = &alarm.change else { panic!("{alarm:?}") };
        assert_eq!(claim.attempt, other);
        assert_eq!(claim.origin_attempts, before.origin_attempts.saturating_add(1));
        assert_eq!(alarm.actions.first(), Some(&Action::SetAlarm(claim.lease_until)));
    }
    for result in
        [OriginResult::Responded(source.u16()), OriginResult::ConnectRefused, OriginResult::TimedOut]
    {
        for attempt in [record.attempt(), other] {
            let response = matches!(result, OriginResult::Responded(_))
                .then(|| Arc::new(StoredResponse { status: 200, headers: Vec::new(), body: source.bytes() }));
            let finished = Event::JobFinished {
                attempt,
                result,
                response,
                timing,
                outcome,
                retry_after_ms: Some(source.u64()),
                jitter: f64::from(source.u8()) / 255.0,
            };
            let next = step(Some(record), finished, now);
            assert!(!next.actions.iter().any(|a| matches!(a, Action::Forward { .. })), "{next:?}");
            if attempt != record.attempt() || !matches!(record, KeyRecord::InFlight(_)) {
                assert_eq!(next.change, KeyRecordChange::Keep, "fencing: a stale finisher wrote");
            }
        }
    }

    let next = step(Some(record), Event::WaitExpired { attempt: record.attempt() }, now);
    match next.actions.as_slice() {
        [Action::Reject(problem)] => assert!(problem.retry_after.is_some_and(|s| s >= 1)),
        other => panic!("an expired wait answered {other:?}"),
    }
    let _ = step(Some(record), Event::Alarm { live_attempt }, now);
    let _ = step(Some(record), Event::ClaimWriteFailed { attempt: other }, now);
}

/// Configuration: the variables, in the order of [`variable_names`], separated by NUL
/// bytes (a missing part, or one that is a single `\x01`, is unset). The rest after the
/// last variable is a request path.
///
/// Parsing never panics; a valid configuration's timing stays in range and round-trips
/// through its internal header; every policy's asynchronous deadline fits its TTL and no
/// status both releases and is unknown; every route pattern matches itself; the policy,
/// the origin target and the admin routing take any path.
pub fn config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.split('\0');
    let names: Vec<&str> = variable_names().collect();
    let values: Vec<Option<&str>> =
        names.iter().map(|_| parts.next().filter(|part| *part != "\u{1}")).collect();
    let path = parts.next().unwrap_or("/");
    let lookup = |name: &'static str| names.iter().position(|v| *v == name).and_then(|i| values[i]);

    if let Some(policy) = decode_text(&text) {
        assert_eq!(decode_text(&encode_text(&policy)), Some(policy));
    }
    let _ = normalised_path(path);
    let path_and_query = format!("/{}", path.trim_start_matches('/'));
    let (path_only, query) = match path_and_query.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (path_and_query.as_str(), None),
    };

    let Ok(config) = Config::from_vars(lookup) else { return };
    // The policy as the envelope and jobs write it, and in the text form of older releases,
    // which predates `key_header` (every route it was written for used `Idempotency-Key`).
    let round_trips = |policy: KeyTerms| {
        assert_eq!(stored_terms::decode(&stored_terms::encode(&policy)), Some(policy.clone()));
        if policy.key_header.is_none() {
            assert_eq!(decode_text(&encode_text(&policy)), Some(policy));
        }
    };
    round_trips(config.key_terms(&config.policy_for("/")));
    assert!(config.timing.ttl_ms >= 1_000 && config.timing.origin_timeout_ms >= 1_000);
    for route in &config.routes {
        assert!(pattern_matches(&route.pattern, &route.pattern), "{:?} does not match itself", route.pattern);
        let _ = pattern_matches(&route.pattern, path_only);
    }
    let policy = config.policy_for(path_only);
    // Defaults are derived, never contradictory: a job ends before its record expires, and
    // no status both releases a key and leaves its outcome unknown.
    for policy in [&policy, &config.policy_for("/")] {
        if let Some(accept) = policy.async_accept {
            assert!(accept.deadline_ms <= policy.timing.ttl_ms, "a job would outlive its record");
        }
        assert!(
            !policy.outcome.release.intersects(&policy.outcome.unknown),
            "a status both releases and is unknown"
        );
    }
    round_trips(config.key_terms(&policy));
    let _ = policy.covers(path);
    let _ = config.origin_target("https://edge.example/", &path_and_query);
    if admin::is_admin_path(&config.admin_prefix, path_only) {
        let _ = admin::parse_call(&config.admin_prefix, "DELETE", path_only, query);
    }
    let _ = admin::token_matches(Some(path), &text);
}

/// Tokens and key sets (`core::primitives::jwt`, `core::edge_rules::scope`): the bytes as a bearer token, as a
/// JWKS, as a claim path and as a `Cache-Control` value.
///
/// Nothing panics; a parsed token's signing input is the token up to its second dot and its
/// algorithm is one the worker verifies; claims are judged the same way twice; base64url
/// decoding is canonical; a JWKS keeps public members only and its keys are chosen only
/// for their own algorithm (never for HS256).
pub fn jwt(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let now = 1_700_000_000;
    let rules = Validation { issuer: Some("https://idp.example".into()), audience: None, leeway_seconds: 60 };

    if let Some(bytes) = jwt_core::base64url_decode(&text) {
        assert_eq!(jwt_core::base64url_encode(&bytes), text, "base64url decoding is canonical");
    }
    let token = bearer_token(data);
    if let Some(token) = token {
        assert!(!token.is_empty() && text.contains(token));
        match jwt_core::parse(token) {
            Ok(parsed) => {
                assert!(token.as_bytes().starts_with(parsed.signing_input));
                assert_eq!(parsed.signing_input.iter().filter(|&&b| b == b'.').count(), 1);
                assert_eq!(Algorithm::from_jose(parsed.algorithm.jose_name()), Some(parsed.algorithm));
                let first = jwt_core::check_claims(&parsed.claims, &rules, now);
                assert_eq!(first, jwt_core::check_claims(&parsed.claims, &rules, now));
                if first.is_ok() {
                    assert_eq!(
                        parsed.claims.get("iss").and_then(|v| v.as_str()),
                        Some("https://idp.example")
                    );
                }
                let path = ClaimPath::parse("sub").expect("a valid path");
                let prepared = jwt_core::prepare(token, &rules, &path, now);
                if let Ok((_, identity)) = prepared {
                    assert!(first.is_ok() && identity.issuer.is_some());
                }
            }
            Err(reason) => assert!(!reason.slug().is_empty()),
        }
    }

    for source in [JwksSource::Inline, JwksSource::Fetched] {
        let Ok(set) = jwt_core::parse_jwks(&text, source) else { continue };
        assert!(!set.keys.is_empty() && set.keys.len() <= jwt_core::MAX_JWKS_KEYS);
        for key in &set.keys {
            let value: Value = serde_json::from_str(&key.import_json).expect("import form is JSON");
            let members = value.as_object().expect("import form is an object");
            assert!(
                members.keys().all(|m| ["kty", "crv", "x", "y", "n", "e"].contains(&m.as_str())),
                "{members:?}"
            );
        }
        for algorithm in [Algorithm::Rs256, Algorithm::Es256, Algorithm::EdDsa, Algorithm::Hs256] {
            for kid in [None, set.keys[0].kid.as_deref(), Some(text.as_ref())] {
                match jwt_core::candidates(&set, algorithm, kid) {
                    Ok(keys) => {
                        assert_ne!(algorithm, Algorithm::Hs256, "a JWKS key used as an HMAC secret");
                        assert!(keys
                            .iter()
                            .all(|k| k.algorithm == algorithm && (kid.is_none() || k.kid.as_deref() == kid)));
                    }
                    Err(reason) => assert!(matches!(reason, Unverified::NoKey | Unverified::UnknownKid)),
                }
            }
        }
    }

    if let Ok(path) = ClaimPath::parse(&text) {
        let claims = serde_json::json!({"sub": "a", "org": {"id": 1u64}});
        let _ = path.find(claims.as_object().expect("an object"));
    }
    let _ = jwt_core::max_age_seconds(&text);
    if let Some(log) = ScopeLog::decode(&text) {
        assert_eq!(log.encode(), text);
    }
}

#[cfg(test)]
mod tests {
    //! Smoke runs of the fuzz checks on stable Rust: the seed corpus in `fuzz/seeds/`,
    //! deterministic mutations of it, and proptest-generated inputs. A few thousand inputs
    //! per target, in well under a second each in a release build.

    use std::path::Path;

    use proptest::prelude::*;

    use super::*;

    /// How many mutants of the seeds each smoke test runs.
    const MUTANTS: usize = 3_000;

    fn seeds(target: &str) -> Vec<Vec<u8>> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds").join(target);
        let mut seeds: Vec<Vec<u8>> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| std::fs::read(entry.expect("a seed").path()).expect("a readable seed"))
            .collect();
        assert!(!seeds.is_empty(), "no seeds in {}", dir.display());
        seeds.sort();
        seeds
    }

    /// A small deterministic generator (xorshift64*), so that a failure reproduces.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }
    }

    /// Bytes that matter to the parsers under test.
    const INTERESTING: &[u8] = b"\"\\,{}[]:0123456789-+.eE tfnu \t\r\n\x00\x01\x7f\xff\xc3\xa9";

    /// The libFuzzer mutations that matter here, in miniature: flip, replace with an
    /// interesting byte, insert, delete, duplicate a run, splice in another seed.
    fn mutate(rng: &mut Rng, input: &[u8], seeds: &[Vec<u8>]) -> Vec<u8> {
        let mut out = input.to_vec();
        for _ in 0..=rng.below(4) {
            let at = rng.below(out.len() + 1);
            match rng.below(6) {
                0 if at < out.len() => out[at] ^= 1 << rng.below(8),
                1 if at < out.len() => out[at] = INTERESTING[rng.below(INTERESTING.len())],
                2 => out.insert(at, INTERESTING[rng.below(INTERESTING.len())]),
                3 if at < out.len() => {
                    out.remove(at);
                }
                4 => {
                    let end = (at + rng.below(16)).min(out.len());
                    let run = out[at..end].to_vec();
                    out.splice(at..at, run);
                }
                _ => {
                    let other = &seeds[rng.below(seeds.len())];
                    let from = rng.below(other.len() + 1);
                    let end = (from + rng.below(32)).min(other.len());
                    out.splice(at..at, other[from..end].iter().copied());
                }
            }
        }
        out
    }

    fn smoke(target: &str, check: fn(&[u8])) {
        let seeds = seeds(target);
        for seed in &seeds {
            check(seed);
        }
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut input = seeds[0].clone();
        for i in 0..MUTANTS {
            // Mostly mutate the previous mutant (to go deeper), sometimes restart from a seed.
            if i % 8 == 0 {
                input = seeds[rng.below(seeds.len())].clone();
            }
            input = mutate(&mut rng, &input, &seeds);
            input.truncate(4_096);
            check(&input);
        }
    }

    #[test]
    fn key_smoke() {
        smoke("key", key);
    }

    #[test]
    fn json_smoke() {
        smoke("json", json);
    }

    #[test]
    fn record_smoke() {
        smoke("record", record);
    }

    #[test]
    fn config_smoke() {
        smoke("config", config);
    }

    #[test]
    fn jwt_smoke() {
        smoke("jwt", jwt);
    }

    fn bytes_from(alphabet: &'static [u8], max: usize) -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(prop_oneof![prop::sample::select(alphabet), any::<u8>()], 0..max)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1_000, ..ProptestConfig::default() })]

        #[test]
        fn key_proptest(data in bytes_from(b" \t\"\\,abcXYZ019-_~", 300)) {
            key(&data);
        }

        #[test]
        fn json_proptest(data in bytes_from(b" {}[]:,\"\\u0123456789-.eEtrufalsn", 200)) {
            json(&data);
        }

        #[test]
        fn record_proptest(data in bytes_from(b"IE\x01\x02\x03\x00\xff", 300)) {
            record(&data);
            let mut stored = b"IE\x01".to_vec();
            stored.extend_from_slice(&data);
            record(&stored);
        }

        #[test]
        fn jwt_proptest(data in bytes_from(b".-_eyJhbGciOiJSUzI1NiJ9AQABkty{}[]:\",", 300)) {
            jwt(&data);
        }

        #[test]
        fn config_proptest(data in bytes_from(b"\x00\x01/*[]{}\":,0123456789httpsp:/a", 200)) {
            config(&data);
        }
    }
}
