//! Tests of asynchronous acceptance: the job's encoding, the backoff, the configuration,
//! the job's steps through `machine::step`, and property tests that play random event
//! sequences (async and plain arrivals, alarms, attempts that end every way, crashes, time
//! passing) through the real per-key driver (`core::key_rules::key_state::KeyState`) the way the
//! runtime does, checking the safety invariants after every step.

use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::core::edge_rules::config::Config;
use crate::core::formats::fingerprint::Digest256;
use crate::core::formats::job::StoredRequest;
use crate::core::formats::key_record::{Completed, StoredResponse};
use crate::core::key_rules::key_state::{Arrival, KeyState, Pending};
use crate::core::key_rules::machine::{step, Event, Step};
use crate::core::vocabulary::decision::Decision;
use crate::core::vocabulary::key_terms::KeyTerms;
use crate::core::vocabulary::key_terms::Mode;
use crate::core::vocabulary::key_terms::{Timing, WaiterLimits};
use crate::core::vocabulary::outcome_table::{OriginResult, OutcomeTable};

const T0: Millis = 1_700_000_000_000;
const TTL: u64 = 600_000;
const TIMEOUT: u64 = 2_000;
const DEADLINE: u64 = 60_000;
const BACKOFF: u64 = 4_000;
const MAX_SENDS: u16 = 4;
const FP: Digest256 = Digest256([1; 32]);
const OTHER: Digest256 = Digest256([2; 32]);

fn timing() -> Timing {
    Timing { ttl_ms: TTL, duplicate_wait_ms: 5_000, origin_timeout_ms: TIMEOUT }
}

fn policy(max_origin_attempts: Option<u16>) -> KeyTerms {
    KeyTerms {
        timing: timing(),
        limits: WaiterLimits::default(),
        outcome: OutcomeTable::default(),
        max_stored_response_bytes: 1_000_000,
        max_origin_attempts,
        mode: Mode::Enforce,
        origin_service: None,
        key_header: None,
    }
}

fn accept(max_origin_attempts: Option<u16>) -> Box<AsyncAccept> {
    Box::new(AsyncAccept {
        sealed_request: b"sealed".to_vec(),
        policy: policy(max_origin_attempts),
        probe_origin: true,
        config: AsyncConfig {
            prefer: true,
            deadline_ms: DEADLINE,
            max_backoff_ms: BACKOFF,
            max_sends: MAX_SENDS,
        },
    })
}

fn async_arrival(fingerprint: Digest256, new_attempt: u64, max: Option<u16>) -> Event {
    Event::Arrival {
        lookup: None,
        fingerprint,
        new_attempt: AttemptId(new_attempt),
        live_attempt: None,
        waiters: 0,
        waiting_bytes: 0,
        max_origin_attempts: max,
        body_bytes: 10,
        limits: WaiterLimits::default(),
        timing: timing(),
        accept: Some(accept(max)),
    }
}

fn plain_arrival(
    fingerprint: Digest256,
    new_attempt: u64,
    live: Option<AttemptId>,
    max: Option<u16>,
) -> Event {
    Event::Arrival {
        lookup: None,
        fingerprint,
        new_attempt: AttemptId(new_attempt),
        live_attempt: live,
        waiters: 0,
        waiting_bytes: 0,
        max_origin_attempts: max,
        body_bytes: 10,
        limits: WaiterLimits::default(),
        timing: timing(),
        accept: None,
    }
}

fn finished(attempt: AttemptId, result: OriginResult, retry_after_ms: Option<u64>, jitter: f64) -> Event {
    let response = match result {
        OriginResult::Responded(status) => Some(Arc::new(StoredResponse {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: format!("{{\"attempt\":{}}}", attempt.0).into_bytes(),
        })),
        _ => None,
    };
    Event::JobFinished {
        attempt,
        result,
        response,
        timing: timing(),
        outcome: OutcomeTable::default(),
        retry_after_ms,
        jitter,
    }
}

fn put(step: &Step) -> KeyRecord {
    match &step.change {
        KeyRecordChange::Put(record) => record.clone(),
        other => panic!("expected a put, got {other:?}"),
    }
}

fn job(record: &KeyRecord) -> &AsyncJob {
    record.async_job().expect("a job")
}

/// Claims a job at T0 and lets the alarm send it: the record while the send runs.
fn sending(max: Option<u16>) -> KeyRecord {
    let claimed = put(&step(None, async_arrival(FP, 1, max), T0));
    let sent = step(Some(&claimed), Event::JobAlarm { live_attempt: None, new_attempt: AttemptId(2) }, T0);
    put(&sent)
}

// ---------------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------------

#[test]
fn jobs_and_requests_round_trip_and_every_truncation_is_refused() {
    let record = sending(Some(3));
    let bytes = record.encode();
    assert_eq!(bytes[2], 2, "a job is a version 2 record");
    assert_eq!(KeyRecord::decode(&bytes), Ok(record.clone()));
    for cut in 0..bytes.len() {
        assert!(KeyRecord::decode(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    let request = StoredRequest {
        scope_salt: [9; 32],
        method: "POST".into(),
        target: "http://127.0.0.1:9/v1/charges?x=1".into(),
        headers: vec![("authorization".into(), "Bearer t".into()), ("idempotency-key".into(), "k".into())],
        body: b"{\"amount\":1}\xff".to_vec(),
    };
    let encoded = request.encode();
    assert_eq!(StoredRequest::decode(&encoded), Some(request));
    for cut in 0..encoded.len() {
        assert_eq!(StoredRequest::decode(&encoded[..cut]), None, "cut at {cut}");
    }
    // A job that can still send, without its request, is not a job.
    let hollow = AsyncJob { sealed_request: Vec::new(), ..job(&record).clone() };
    assert_eq!(AsyncJob::decode(&hollow.encode()), None);
    let gave_up = AsyncJob { phase: JobPhase::GaveUp, ..hollow };
    assert_eq!(AsyncJob::decode(&gave_up.encode()), Some(gave_up));
}

#[test]
fn a_job_and_an_attempt_count_are_written_in_one_order_only() {
    let record = KeyRecord::InFlight(match sending(Some(3)) {
        KeyRecord::InFlight(claim) => InFlight { origin_attempts: 2, ..claim },
        _ => unreachable!(),
    });
    let bytes = record.encode();
    assert_eq!(KeyRecord::decode(&bytes), Ok(record.clone()));
    // The same two extensions, the job first: refused, so that one record has one encoding.
    let job = job(&record).encode();
    let attempts_ext = [&[1u8][..], &2u32.to_be_bytes(), &2u16.to_be_bytes()].concat();
    let job_ext = [&[3u8][..], &(job.len() as u32).to_be_bytes(), &job].concat();
    let head = &bytes[..bytes.len() - attempts_ext.len() - job_ext.len()];
    assert_eq!([head, &attempts_ext, &job_ext].concat(), bytes);
    let swapped = [head, &job_ext, &attempts_ext].concat();
    assert_eq!(KeyRecord::decode(&swapped), Err(crate::core::formats::key_record::DecodeError::BadField(1)));
}

#[test]
fn a_reader_without_the_job_extension_refuses_the_record() {
    // Tag 3 is critical: its high bit is clear, so an older reader answers 503.
    let bytes = sending(None).encode();
    let tag_at = bytes.len() - job(&sending(None)).encode().len() - 4 - 1;
    assert_eq!(bytes[tag_at], 3);
    assert_eq!(bytes[tag_at] & 0x80, 0);
}

// ---------------------------------------------------------------------------------------
// Configuration, headers, backoff
// ---------------------------------------------------------------------------------------

fn config(
    vars: &[(&'static str, &'static str)],
) -> Result<Config, crate::core::vocabulary::config_error::ConfigError> {
    Config::from_vars(|name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| *v))
}

#[test]
fn the_async_settings_are_parsed_and_the_deadline_fits_the_ttl() {
    let off = config(&[("IDEMPOTENCY_TTL_SECONDS", "60")]).unwrap();
    assert!(!off.accepts_async(), "off by default, and its default deadline is not checked then");
    assert_eq!(off.policy_for("/x").async_accept, None);
    let on = config(&[
        ("ASYNC_ACCEPT", "prefer"),
        ("ASYNC_DEADLINE_SECONDS", "20"),
        ("ASYNC_MAX_BACKOFF_SECONDS", "2"),
    ])
    .unwrap();
    assert_eq!(
        on.policy_for("/x").async_accept,
        Some(AsyncConfig {
            prefer: true,
            deadline_ms: 20_000,
            max_backoff_ms: 2_000,
            max_sends: DEFAULT_MAX_SENDS
        })
    );
    // A deadline the operator set must fit the TTL; the default is derived from it.
    let too_long = config(&[
        ("ASYNC_ACCEPT", "prefer"),
        ("IDEMPOTENCY_TTL_SECONDS", "60"),
        ("ASYNC_DEADLINE_SECONDS", "61"),
    ])
    .unwrap_err();
    assert_eq!(too_long.variable, VAR_ASYNC_DEADLINE_SECONDS);
    let short_ttl = config(&[("ASYNC_ACCEPT", "prefer"), ("IDEMPOTENCY_TTL_SECONDS", "60")]).unwrap();
    assert_eq!(short_ttl.policy_for("/x").async_accept.map(|a| a.deadline_ms), Some(60_000));
    let long_ttl = config(&[("ASYNC_ACCEPT", "prefer")]).unwrap();
    assert_eq!(long_ttl.policy_for("/x").async_accept.map(|a| a.deadline_ms), Some(3_600_000));
    assert_eq!(config(&[("ASYNC_ACCEPT", "yes")]).unwrap_err().variable, VAR_ASYNC_ACCEPT);
    assert_eq!(
        config(&[("ASYNC_MAX_BACKOFF_SECONDS", "0")]).unwrap_err().variable,
        VAR_ASYNC_MAX_BACKOFF_SECONDS
    );
    // A route may turn it on, and its own TTL must then hold the deadline.
    let routed = config(&[(
        "IDEMPOTENCY_ROUTES",
        r#"[{"pattern":"/async/*","async_accept":"prefer","ttl_seconds":7200}]"#,
    )])
    .unwrap();
    assert!(routed.accepts_async());
    assert!(routed.policy_for("/async/1").async_accept.is_some());
    assert!(routed.policy_for("/sync/1").async_accept.is_none());
    let short_route = config(&[(
        "IDEMPOTENCY_ROUTES",
        r#"[{"pattern":"/async/*","async_accept":"prefer","ttl_seconds":60}]"#,
    )])
    .unwrap();
    assert_eq!(short_route.policy_for("/async/1").async_accept.map(|a| a.deadline_ms), Some(60_000));
    let short_route_set = config(&[
        ("IDEMPOTENCY_ROUTES", r#"[{"pattern":"/async/*","async_accept":"prefer","ttl_seconds":60}]"#),
        ("ASYNC_DEADLINE_SECONDS", "120"),
    ]);
    assert_eq!(short_route_set.unwrap_err().variable, VAR_ASYNC_DEADLINE_SECONDS);
    let settings = AsyncConfig { prefer: true, deadline_ms: 5_000, max_backoff_ms: 1_000, max_sends: 3 };
    assert_eq!(AsyncConfig::decode(&settings.encode()), Some(settings));
    // From a Worker of the release before: no send cap in the header, so the default.
    assert_eq!(
        AsyncConfig::decode("5000,1000"),
        Some(AsyncConfig { max_sends: DEFAULT_MAX_SENDS, ..settings })
    );
    for bad in ["5000,1000,0", "5000,1000,x", "5000,1000,3,4", "5000"] {
        assert_eq!(AsyncConfig::decode(bad), None, "{bad}");
    }
    // MAX_ORIGIN_ATTEMPTS caps every job, whatever ORIGIN_DEDUPLICATES says.
    let capped = config(&[("ASYNC_ACCEPT", "prefer"), ("MAX_ORIGIN_ATTEMPTS", "3")]).unwrap();
    assert_eq!(capped.policy_for("/x").async_accept.map(|accept| accept.max_sends), Some(3));
}

#[test]
fn prefer_respond_async_is_read_as_rfc_7240_says() {
    assert!(prefers_respond_async(Some("respond-async")));
    assert!(prefers_respond_async(Some("return=minimal, Respond-Async; wait=10")));
    assert!(prefers_respond_async(Some("wait=5,respond-async")));
    assert!(!prefers_respond_async(Some("respond-asynchronously")));
    assert!(!prefers_respond_async(Some("return=respond-async")));
    assert!(!prefers_respond_async(None));
    assert_eq!(prefer_for_origin("respond-async"), None);
    assert_eq!(prefer_for_origin("return=minimal, respond-async").as_deref(), Some("return=minimal"));
}

/// Rule 7 with a lookup: a body too large to store is served synchronously, wholly; on a
/// route with a lookup it reconciles, and the claim it makes keeps the lookup, so an
/// unknown outcome of it is looked up like any other. A job reconciles too (rule 9).
#[test]
fn a_body_too_large_for_a_job_is_served_synchronously_and_keeps_the_routes_lookup() {
    let config = accept(None).config;
    let small = ArrivalPlan::new(Some(config), MAX_STORED_REQUEST_BODY_BYTES, true);
    assert_eq!(
        small,
        ArrivalPlan { accept: Some(config), reconcile: true, observing: false },
        "a job, with its lookup"
    );
    let large = ArrivalPlan::new(Some(config), MAX_STORED_REQUEST_BODY_BYTES + 1, true);
    assert_eq!(
        large,
        ArrivalPlan { accept: None, reconcile: true, observing: false },
        "synchronous: it reconciles"
    );
    let plain = ArrivalPlan::new(None, 10, true);
    assert_eq!(plain, ArrivalPlan { accept: None, reconcile: true, observing: false });
    for (accept, bytes) in [(Some(config), 10), (Some(config), u64::MAX), (None, 10)] {
        assert!(!ArrivalPlan::new(accept, bytes, false).reconcile, "no lookup on the route: none");
    }

    // What the plan leads to: the claim of the large request is a plain claim that keeps
    // the sealed lookup the arrival brought, and its alarm is set for the lease's end.
    let lookup = crate::core::formats::reconciling::Reconciling {
        sealed_lookup: vec![7; 40],
        bound_at: T0,
        not_found: 404,
        asked: 0,
        next_at: 0,
        policy: Box::new(policy(None)),
        spelling_known: true,
    };
    let mut arrival = plain_arrival(FP, 1, None, None);
    if let Event::Arrival { accept, lookup: brought, body_bytes, .. } = &mut arrival {
        *accept = large.accept.map(|config| Box::new(AsyncAccept { config, ..*self::accept(None) }));
        *brought = large.reconcile.then(|| Box::new(lookup.clone()));
        *body_bytes = MAX_STORED_REQUEST_BODY_BYTES + 1;
    }
    let claimed = step(None, arrival, T0);
    let KeyRecord::InFlight(claim) = put(&claimed) else { panic!("a claim: {claimed:?}") };
    assert!(claim.async_job.is_none(), "served synchronously: {claim:?}");
    assert_eq!(claim.reconcile.as_ref().map(|kept| &kept.sealed_lookup), Some(&lookup.sealed_lookup));
    assert!(claimed.actions.contains(&Action::Forward { attempt: AttemptId(1) }), "{claimed:?}");
    assert!(claimed.actions.contains(&Action::SetAlarm(claim.lease_until)), "{claimed:?}");
}

/// Rule 9: on a route with a lookup a job keeps it, sealed, from its claim through its
/// sends, and an outcome it ends with unknown is looked up by the alarm, a second after:
/// held unknown without `ORIGIN_DEDUPLICATES` (as any attempt), held at the deadline, or
/// orphaned by a restart.
#[test]
fn a_jobs_unknown_outcome_keeps_the_routes_lookup_and_is_looked_up() {
    let lookup = crate::core::formats::reconciling::Reconciling {
        sealed_lookup: vec![7; 40],
        bound_at: T0,
        not_found: 404,
        asked: 3,
        next_at: 5,
        policy: Box::new(policy(None)),
        spelling_known: true,
    };
    let with_lookup = |max| {
        let mut arrival = async_arrival(FP, 1, max);
        if let Event::Arrival { lookup: brought, .. } = &mut arrival {
            *brought = Some(Box::new(lookup.clone()));
        }
        arrival
    };
    let claimed = put(&step(None, with_lookup(None), T0));
    assert!(claimed.async_job().is_some());
    let kept = claimed.reconciling().expect("the job's claim keeps the lookup");
    assert_eq!(
        (kept.asked, kept.next_at, &kept.sealed_lookup),
        (0, 0, &lookup.sealed_lookup),
        "asked afresh"
    );
    let sent_job =
        put(&step(Some(&claimed), Event::JobAlarm { live_attempt: None, new_attempt: AttemptId(2) }, T0));
    assert_eq!(sent_job.reconciling(), claimed.reconciling(), "kept through the send");

    // A send that timed out, without ORIGIN_DEDUPLICATES: held unknown, looked up.
    let timed_out =
        step(Some(&sent_job), finished(AttemptId(2), OriginResult::TimedOut, None, 0.5), T0 + 3_000);
    let KeyRecord::Unknown(unknown) = put(&timed_out) else { panic!("held unknown: {timed_out:?}") };
    let first = T0 + 3_000 + crate::core::key_rules::reconcile::FIRST_DELAY_MS;
    assert_eq!(unknown.reconcile.as_ref().map(|kept| kept.next_at), Some(first));
    assert!(timed_out.actions.contains(&Action::SetAlarm(first)), "{timed_out:?}");
    let due = step(Some(&KeyRecord::Unknown(unknown.clone())), Event::Alarm { live_attempt: None }, first);
    assert_eq!(due.actions, vec![Action::Lookup { attempt: AttemptId(2) }]);

    // A send orphaned by a restart, past its lease: held unknown with the lookup too.
    let lease_end = match &sent_job {
        KeyRecord::InFlight(claim) => claim.lease_until,
        other => panic!("{other:?}"),
    };
    let orphaned =
        step(Some(&sent_job), Event::JobAlarm { live_attempt: None, new_attempt: AttemptId(3) }, lease_end);
    let held = put(&orphaned);
    assert!(matches!(held, KeyRecord::Unknown(_)), "{held:?}");
    let next_at = held.reconciling().map(|kept| kept.next_at);
    assert_eq!(next_at, Some(lease_end + crate::core::key_rules::reconcile::FIRST_DELAY_MS));
    assert!(orphaned.actions.contains(&Action::SetAlarm(next_at.unwrap_or_default())), "{orphaned:?}");

    // Without a lookup on the route, nothing changes: held to the end of the TTL.
    let plain = sending(None);
    let held = step(Some(&plain), finished(AttemptId(2), OriginResult::TimedOut, None, 0.5), T0 + 3_000);
    assert_eq!(put(&held).reconciling(), None);
}

#[test]
fn a_jobs_202_says_the_preference_was_applied_and_when_to_poll() {
    let accepted = accepted_response(7);
    assert_eq!(accepted.status, 202);
    let header = |name: &str| accepted.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
    assert_eq!(header("preference-applied"), Some("respond-async"));
    assert_eq!(header("retry-after"), Some("7"));
    assert_eq!(header("content-type"), Some("application/json"));
    assert_eq!(accepted.body, br#"{"status":"pending","retry_after":7}"#);
}

#[test]
fn an_answers_retry_after_is_found_whatever_its_case() {
    let headers = |name: &str, value: &str| {
        vec![("x-a".to_owned(), "1".to_owned()), (name.to_owned(), value.to_owned())]
    };
    assert_eq!(retry_after_in(&headers("Retry-After", "2"), 0), Some(2_000));
    assert_eq!(retry_after_in(&headers("retry-after", "5"), 0), Some(5_000));
    assert_eq!(retry_after_in(&headers("retry-afterx", "5"), 0), None);
    assert_eq!(retry_after_in(&[], 0), None);
}

#[test]
fn retry_after_is_read_in_delay_seconds() {
    let now = 1_793_021_280_000; // Mon, 26 Oct 2026 13:28:00 GMT
    assert_eq!(parse_retry_after(Some(" 3 "), now), Some(3_000));
    assert_eq!(parse_retry_after(Some("Mon, 26 Oct 2026 13:28:30 GMT"), now), Some(30_000));
    assert_eq!(parse_retry_after(Some("Mon, 26 Oct 2026 13:27:00 GMT"), now), Some(0), "a date in the past");
    assert_eq!(parse_retry_after(Some("Thu, 01 Jan 1970 00:00:00 GMT"), 0), Some(0));
    assert_eq!(parse_retry_after(Some("Sun, 06 Nov 1994 08:49:37 GMT"), 0), Some(784_111_777_000));
    assert_eq!(parse_retry_after(Some("Tue, 29 Feb 2028 00:00:01 GMT"), 1_835_395_200_000), Some(1_000));
    for bad in [
        "Sunday, 06-Nov-94 08:49:37 GMT",
        "Sun Nov  6 08:49:37 1994",
        "Sun, 06 Nov 1994 08:49:37 UTC",
        "Sun, 06 Foo 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 25:49:37 GMT",
        "-1",
        "1.5",
    ] {
        assert_eq!(parse_retry_after(Some(bad), now), None, "{bad}");
    }
    assert_eq!(parse_retry_after(None, now), None);
}

proptest! {
    #[test]
    fn the_backoff_stays_within_its_bounds(
        sent in 0u16..200,
        jitter in prop_oneof![0.0f64..=1.0, Just(f64::NAN), Just(-3.0), Just(7.0)],
        cap in 1u64..100_000,
        retry_after in proptest::option::of(0u64..100_000),
    ) {
        let delay = backoff_ms(sent, jitter, cap, retry_after);
        let ceiling = BACKOFF_BASE_MS.saturating_mul(1 << u32::from(sent.saturating_sub(1)).min(30)).min(cap);
        prop_assert!(delay >= MIN_RETRY_DELAY_MS);
        prop_assert!(delay >= retry_after.unwrap_or(0), "the origin's Retry-After is honoured");
        prop_assert!(delay <= ceiling.max(MIN_RETRY_DELAY_MS).max(retry_after.unwrap_or(0)));
    }
}

// ---------------------------------------------------------------------------------------
// Steps
// ---------------------------------------------------------------------------------------

#[test]
fn an_async_arrival_claims_a_job_answers_202_and_sets_the_alarm_for_now() {
    let step1 = step(None, async_arrival(FP, 1, None), T0);
    assert_eq!(step1.actions, vec![Action::SetAlarm(T0), Action::Accepted { retry_after: 1 }]);
    let claimed = put(&step1);
    let job1 = job(&claimed);
    assert_eq!((job1.phase, job1.next_attempt_at, job1.deadline), (JobPhase::Waiting, T0, T0 + DEADLINE));
    assert_eq!(claimed.origin_attempts(), 0, "nothing was sent yet");
    assert_eq!(job_decision(None, &step1.change), Some(JobDecision::Accepted));
    // A poll, with or without the preference, is 202; another payload is 422.
    for poll in [async_arrival(FP, 9, None), plain_arrival(FP, 9, None, None)] {
        let polled = step(Some(&claimed), poll, T0 + 10);
        assert_eq!(polled.change, KeyRecordChange::Keep);
        assert_eq!(polled.actions, vec![Action::Accepted { retry_after: 1 }]);
    }
    let reused = step(Some(&claimed), plain_arrival(OTHER, 9, None, None), T0 + 10);
    assert!(matches!(&reused.actions[..], [Action::Reject(p)] if p.kind == ProblemKind::KeyReused));
}

#[test]
fn the_alarm_sends_under_a_fenced_attempt_with_a_lease() {
    let record = sending(None);
    let KeyRecord::InFlight(claim) = &record else { panic!() };
    assert_eq!(claim.attempt, AttemptId(2));
    assert_eq!(claim.origin_attempts, 1);
    assert_eq!(claim.lease_until, T0 + TIMEOUT + LEASE_MARGIN_MS);
    assert_eq!(job(&record).phase, JobPhase::Sending);
    let claimed = put(&step(None, async_arrival(FP, 1, None), T0));
    let sent = step(Some(&claimed), Event::JobAlarm { live_attempt: None, new_attempt: AttemptId(2) }, T0);
    assert_eq!(
        sent.actions,
        vec![Action::SetAlarm(claim.lease_until), Action::Forward { attempt: AttemptId(2) }]
    );
    assert_eq!(job_decision(Some(&claimed), &sent.change), None, "a first send is logged by its outcome");
    // An early alarm waits for the next attempt; the plain alarm never sends.
    let early = step(Some(&claimed), Event::Alarm { live_attempt: None }, T0);
    assert_eq!(early.actions, vec![Action::SetAlarm(T0)]);
    // While the send runs, a poll is 202.
    let polled = step(Some(&record), plain_arrival(FP, 9, Some(AttemptId(2)), None), T0 + 100);
    assert!(matches!(polled.actions[..], [Action::Accepted { .. }]));
}

#[test]
fn not_executed_is_retried_after_a_jittered_backoff_that_honours_retry_after() {
    let record = sending(None);
    let now = T0 + 500;
    let retried = step(Some(&record), finished(AttemptId(2), OriginResult::Responded(503), None, 0.5), now);
    let next = put(&retried);
    let expected = now + backoff_ms(1, 0.5, BACKOFF, None);
    assert_eq!(job(&next).phase, JobPhase::Waiting);
    assert_eq!(job(&next).next_attempt_at, expected);
    assert_eq!(retried.actions, vec![Action::SetAlarm(expected)]);
    assert_eq!(job_decision(Some(&record), &retried.change), Some(JobDecision::RetryScheduled));
    let honoured =
        step(Some(&record), finished(AttemptId(2), OriginResult::ConnectRefused, Some(9_000), 0.0), now);
    assert_eq!(job(&put(&honoured)).next_attempt_at, now + 9_000);
    // A stale attempt's end changes nothing (fencing).
    let stale = step(Some(&record), finished(AttemptId(7), OriginResult::Responded(201), None, 0.5), now);
    assert_eq!(stale.change, KeyRecordChange::Keep);
}

/// An origin that executes and answers 503 every time (a proxy's 503 after the origin ran)
/// gets at most `MAX_ORIGIN_ATTEMPTS` sends, without `ORIGIN_DEDUPLICATES` too; the cap
/// ends the job as the deadline would (`gave-up`).
#[test]
fn every_job_is_sent_at_most_max_origin_attempts_times() {
    let mut record = put(&step(None, async_arrival(FP, 1, None), T0));
    let mut now = T0;
    let mut sends = 0u16;
    for id in 2..100u64 {
        let alarm =
            step(Some(&record), Event::JobAlarm { live_attempt: None, new_attempt: AttemptId(id) }, now);
        if alarm.actions.iter().any(|action| matches!(action, Action::Forward { .. })) {
            sends += 1;
            let sent = put(&alarm);
            let ended =
                step(Some(&sent), finished(AttemptId(id), OriginResult::Responded(503), None, 0.0), now + 10);
            if sends == MAX_SENDS {
                assert_eq!(job_decision(Some(&sent), &ended.change), Some(JobDecision::GaveUp));
            }
            record = put(&ended);
        }
        if job(&record).phase == JobPhase::GaveUp {
            break;
        }
        now = job(&record).next_attempt_at.max(now + 1);
    }
    assert_eq!(sends, MAX_SENDS, "sent exactly the cap, well before the deadline");
    assert!(now < T0 + DEADLINE);
    let polled = step(Some(&record), plain_arrival(FP, 99, None, None), now + 1);
    assert!(matches!(&polled.actions[..], [Action::Reject(p)] if p.kind == ProblemKind::OriginUnavailable));
}

#[test]
fn a_final_answer_is_stored_and_every_later_poll_replays_it() {
    let record = sending(None);
    let done = step(Some(&record), finished(AttemptId(2), OriginResult::Responded(201), None, 0.5), T0 + 500);
    let KeyRecord::Completed(completed) = put(&done) else { panic!("completed") };
    assert_eq!(completed.response.status, 201);
    let stored = KeyRecord::Completed(completed.clone());
    let poll = step(Some(&stored), async_arrival(FP, 9, None), T0 + 1_000);
    assert_eq!(poll.actions, vec![Action::Replay(completed.response.clone())]);
}

#[test]
fn the_deadline_gives_up_then_the_next_poll_gets_503_and_releases_the_key() {
    let record = sending(None);
    // The next attempt would start after the deadline.
    let late = T0 + DEADLINE - 100;
    let gave_up = step(Some(&record), finished(AttemptId(2), OriginResult::Responded(503), None, 1.0), late);
    let after = put(&gave_up);
    assert_eq!(job(&after).phase, JobPhase::GaveUp);
    assert!(job(&after).sealed_request.is_empty(), "the request is not kept any longer");
    assert_eq!(job_decision(Some(&record), &gave_up.change), Some(JobDecision::GaveUp));
    let poll = step(Some(&after), plain_arrival(FP, 9, None, None), late + 1);
    assert_eq!(poll.change, KeyRecordChange::Delete);
    assert!(matches!(&poll.actions[..], [Action::Reject(p)]
        if p.kind == ProblemKind::OriginUnavailable && p.status() == 503 && p.detail.contains("never executed")));
    // A waiting job whose alarm comes after the deadline gives up too.
    let claimed = put(&step(None, async_arrival(FP, 1, None), T0));
    let missed = step(
        Some(&claimed),
        Event::JobAlarm { live_attempt: None, new_attempt: AttemptId(2) },
        T0 + DEADLINE,
    );
    assert_eq!(job(&put(&missed)).phase, JobPhase::GaveUp);
}

#[test]
fn an_unknown_outcome_is_held_without_the_option() {
    let record = sending(None);
    let held = step(Some(&record), finished(AttemptId(2), OriginResult::TimedOut, None, 0.5), T0 + 3_000);
    assert!(matches!(put(&held), KeyRecord::Unknown(Unknown { reason: UnknownReason::OriginTimeout, .. })));
    // An orphaned send (a restart) past its lease: held too, never sent again.
    let KeyRecord::InFlight(claim) = &record else { panic!() };
    let orphan = step(
        Some(&record),
        Event::JobAlarm { live_attempt: None, new_attempt: AttemptId(3) },
        claim.lease_until,
    );
    assert!(matches!(put(&orphan), KeyRecord::Unknown(_)));
    assert!(!orphan.actions.iter().any(|a| matches!(a, Action::Forward { .. })));
    // Within the lease, the alarm waits.
    let waits =
        step(Some(&record), Event::JobAlarm { live_attempt: None, new_attempt: AttemptId(3) }, T0 + 1);
    assert_eq!(waits.actions, vec![Action::SetAlarm(claim.lease_until)]);
}

#[test]
fn with_a_deduplicating_origin_an_unknown_outcome_is_sent_again_up_to_the_limit() {
    let record = sending(Some(2));
    let retried =
        step(Some(&record), finished(AttemptId(2), OriginResult::ResetAfterSend, None, 0.5), T0 + 100);
    let waiting = put(&retried);
    assert!(job(&waiting).unknown_seen);
    let at = job(&waiting).next_attempt_at;
    let resent = step(Some(&waiting), Event::JobAlarm { live_attempt: None, new_attempt: AttemptId(3) }, at);
    let second = put(&resent);
    assert_eq!(job_decision(Some(&waiting), &resent.change), Some(JobDecision::Reforwarded));
    assert_eq!(second.origin_attempts(), 2);
    // The second is lost too: the limit is reached, held unknown (never "never executed").
    let held = step(Some(&second), finished(AttemptId(3), OriginResult::Responded(503), None, 0.5), at + 10);
    assert!(matches!(put(&held), KeyRecord::Unknown(Unknown { origin_attempts: 2, .. })));
    // An orphaned send with attempts left is sent again at once: reforwarded.
    let KeyRecord::InFlight(claim) = &record else { panic!() };
    let orphan = step(
        Some(&record),
        Event::JobAlarm { live_attempt: None, new_attempt: AttemptId(4) },
        claim.lease_until,
    );
    assert!(orphan.actions.contains(&Action::Forward { attempt: AttemptId(4) }));
    assert_eq!(job_decision(Some(&record), &orphan.change), Some(JobDecision::Reforwarded));
}

#[test]
fn an_async_retry_of_an_unknown_key_becomes_a_job_where_the_origin_deduplicates() {
    let unknown = KeyRecord::Unknown(Unknown {
        reconcile: None,
        attempt: AttemptId(1),
        fingerprint: FP,
        origin_attempts: 1,
        since: T0,
        expires_at: T0 + TTL,
        reason: UnknownReason::OriginTimeout,
    });
    let taken_up = step(Some(&unknown), async_arrival(FP, 5, Some(3)), T0 + 10);
    let job_record = put(&taken_up);
    assert!(job(&job_record).unknown_seen);
    assert_eq!(job_record.origin_attempts(), 1);
    assert!(taken_up.actions.contains(&Action::Accepted { retry_after: 1 }));
    let refused = step(Some(&unknown), async_arrival(FP, 5, None), T0 + 10);
    assert!(matches!(&refused.actions[..], [Action::Reject(p)] if p.kind == ProblemKind::OutcomeUnknown));
}

#[test]
fn purging_a_job_between_attempts_needs_no_force_and_admin_shows_it() {
    use crate::core::edge_rules::admin::{purge_refusal, summary};
    let claimed = put(&step(None, async_arrival(FP, 1, None), T0));
    assert_eq!(purge_refusal(Some(&claimed), false, T0, false), None);
    assert!(purge_refusal(Some(&sending(None)), false, T0, false).is_some(), "a send may be running");
    let view = summary("id", Some(&claimed), false, T0, false);
    assert_eq!(view["async"]["phase"], "waiting");
    assert_eq!(view["async"]["request_stored"], true);
    assert_eq!(view["async"]["retry_at_ms"], T0);
    assert_eq!(view["attempts"], 0);
    assert!(!view.to_string().contains("sealed\""), "{view}");
}

// ---------------------------------------------------------------------------------------
// Property tests
// ---------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    AsyncArrival {
        other_payload: bool,
    },
    PlainArrival,
    Alarm,
    /// The live attempt ends: 0 final 201, 1 a 503, 2 refused, 3 a timeout, 4 a reset, 5 a 500.
    Finish {
        how: u8,
        jitter: f64,
        retry_after: Option<u64>,
    },
    Crash,
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        any::<bool>().prop_map(|other_payload| Op::AsyncArrival { other_payload }),
        Just(Op::PlainArrival),
        Just(Op::Alarm),
        Just(Op::Alarm),
        (0u8..6, 0.0f64..=1.0, proptest::option::of(0u64..20_000))
            .prop_map(|(how, jitter, retry_after)| Op::Finish { how, jitter, retry_after }),
        Just(Op::Crash),
        prop_oneof![0u64..2_000, 2_000u64..20_000, 20_000u64..200_000].prop_map(Op::Advance),
    ]
}

/// The key as the runtime keeps it: storage, and this instance's driver
/// (`core::key_rules::key_state::KeyState`, lost in a crash), driven as `runtime::object` drives it.
struct Sim {
    max: Option<u16>,
    policy: KeyTerms,
    now: Millis,
    stored: Option<KeyRecord>,
    key: KeyState,
    /// The attempts that the alarm sent as a job (the others were forwarded on arrival).
    job_sends: Vec<AttemptId>,
    next_id: u64,
    /// Since the key was last absent: sends, and whether one may have executed.
    sends: u16,
    maybe_executed: bool,
    definitive: Option<Arc<StoredResponse>>,
}

impl Sim {
    fn new(max: Option<u16>) -> Sim {
        Sim {
            max,
            policy: policy(max),
            now: T0,
            stored: None,
            key: KeyState::new(),
            job_sends: Vec::new(),
            next_id: 0,
            sends: 0,
            maybe_executed: false,
            definitive: None,
        }
    }

    fn id(&mut self) -> AttemptId {
        self.next_id += 1;
        AttemptId(self.next_id)
    }

    fn fresh(&mut self) {
        self.sends = 0;
        self.maybe_executed = false;
        self.definitive = None;
    }

    /// What the runtime does before any event: read storage the first time, and delete a
    /// record read past its expiry (unless its attempt runs here: the driver decides).
    fn read(&mut self) {
        if !self.key.is_loaded() {
            self.key.remember(self.stored.clone());
        }
        if self.key.expired_on_read(self.now) {
            self.stored = None;
            self.key.handle_deleting();
            self.fresh();
        }
    }

    fn run(&mut self, op: Op) -> Result<(), TestCaseError> {
        let pending = match op {
            Op::Advance(ms) => {
                self.now += ms;
                return Ok(());
            }
            Op::Crash => {
                if self.key.live().is_some() {
                    self.maybe_executed = true;
                }
                self.key = KeyState::new();
                return Ok(());
            }
            Op::AsyncArrival { other_payload } => {
                self.read();
                let fingerprint = if other_payload { OTHER } else { FP };
                let new_attempt = self.id();
                let accept = Some(*accept(self.max));
                let arrival = Arrival {
                    lookup: None,
                    fingerprint,
                    new_attempt,
                    policy: &self.policy,
                    body_bytes: 1,
                    accept,
                    observing: false,
                };
                self.key.handle_arrival(arrival, self.now)
            }
            Op::PlainArrival => {
                self.read();
                let new_attempt = self.id();
                let arrival = Arrival {
                    lookup: None,
                    fingerprint: FP,
                    new_attempt,
                    policy: &self.policy,
                    body_bytes: 10,
                    accept: None,
                    observing: false,
                };
                self.key.handle_arrival(arrival, self.now)
            }
            // The runtime's alarm: a key with a job runs it, any other is cleaned up.
            Op::Alarm => {
                self.read();
                if self.key.record().and_then(KeyRecord::async_job).is_some() {
                    let new_attempt = self.id();
                    self.key.handle_job_alarm(new_attempt, self.now)
                } else {
                    self.key.handle_alarm(self.now)
                }
            }
            Op::Finish { how, jitter, retry_after } => {
                let Some(attempt) = self.key.live().map(|live| live.attempt) else { return Ok(()) };
                let result = match how {
                    0 => OriginResult::Responded(201),
                    1 => OriginResult::Responded(503),
                    2 => OriginResult::ConnectRefused,
                    3 => OriginResult::TimedOut,
                    4 => OriginResult::ResetAfterSend,
                    _ => OriginResult::Responded(500),
                };
                if matches!(how, 0 | 3 | 4 | 5) {
                    self.maybe_executed = true;
                }
                let Event::JobFinished { response, .. } = finished(attempt, result, retry_after, jitter)
                else {
                    unreachable!()
                };
                if self.job_sends.contains(&attempt) {
                    let policy = self.policy.clone();
                    let pending = self.key.handle_job_finished(
                        attempt,
                        result,
                        response,
                        &policy,
                        retry_after,
                        jitter,
                        self.now,
                    );
                    // The decision is what the log line and the published outcome say: it
                    // names what became of the key. "Released" (certainly not executed)
                    // of a key held unknown would tell a consumer to send it again.
                    let change = &pending.step().change;
                    if matches!(change, KeyRecordChange::Put(KeyRecord::Unknown(_))) {
                        prop_assert_eq!(pending.decision(), Some(Decision::Unknown), "held unknown");
                    }
                    if pending.decision() == Some(Decision::Released) {
                        prop_assert!(
                            matches!(change, KeyRecordChange::Delete),
                            "released, yet kept: {:?}",
                            change
                        );
                    }
                    let checked = self.write_and_check(pending, false);
                    self.key.handle_send_over(attempt);
                    prop_assert!(self.key.live().is_none(), "a finished send stays live");
                    return checked;
                }
                let policy = self.policy.clone();
                self.key.handle_origin_finished(attempt, result, response, &policy, self.now)
            }
        };
        let is_alarm = matches!(op, Op::Alarm);
        self.write_and_check(pending, is_alarm)
    }

    /// Checks a pending step against the invariants, writes it (memory follows storage),
    /// and reports it to the driver.
    fn write_and_check(&mut self, pending: Pending, is_alarm: bool) -> Result<(), TestCaseError> {
        let before = self.stored.clone();
        let step = pending.step().clone();
        for action in &step.actions {
            if let Action::Forward { attempt } = action {
                // Never a forward of a key with a definitive answer, nor (without the
                // option) of one that may have executed.
                prop_assert!(self.definitive.is_none(), "a forward after a definitive answer");
                prop_assert!(
                    self.max.is_some() || !self.maybe_executed,
                    "an unknown outcome was forwarded without ORIGIN_DEDUPLICATES"
                );
                self.sends += 1;
                if let Some(max) = self.max {
                    prop_assert!(self.sends <= max, "sent {} times, more than {max}", self.sends);
                }
                if let Some(job) = before.as_ref().and_then(KeyRecord::async_job) {
                    prop_assert!(self.now < job.deadline, "a job's attempt at or after its deadline");
                    // Rule 5: whatever the dedupe setting.
                    prop_assert!(self.sends <= MAX_SENDS, "a job sent {} times", self.sends);
                }
                prop_assert!(self.key.live().is_none(), "two attempts at once");
                if is_alarm {
                    self.job_sends.push(*attempt);
                }
            }
        }
        match &step.change {
            KeyRecordChange::Keep => {}
            KeyRecordChange::Delete => {
                self.stored = None;
                self.key.handle_deleting();
                self.fresh();
            }
            KeyRecordChange::Put(record) => {
                if let KeyRecord::Completed(Completed { response, .. }) = record {
                    if let Some(first) = &self.definitive {
                        prop_assert_eq!(first, response, "two definitive answers");
                    }
                    self.definitive = Some(response.clone());
                }
                if let Some(job) = record.async_job() {
                    let KeyRecord::InFlight(claim) = record else { unreachable!() };
                    prop_assert!(job.deadline <= claim.claimed_at + DEADLINE, "the deadline moved");
                    prop_assert!(job.deadline <= claim.expires_at, "a job outlives its record");
                    if job.phase == JobPhase::GaveUp {
                        prop_assert!(
                            !self.maybe_executed,
                            "gave up (never executed) after a possible execution"
                        );
                    }
                }
                if self.stored.is_none() && before.is_none() {
                    self.fresh();
                }
                self.stored = Some(record.clone());
                self.key.remember(Some(record.clone()));
            }
        }
        let decided = self.key.handle_written(pending);
        if let Some(attempt) = forwards_of(&decided.step) {
            prop_assert_eq!(self.key.live().map(|live| live.attempt), Some(attempt), "a send is live");
        }
        // An answer of "never executed" releases the key only when nothing could have run.
        for action in &decided.step.actions {
            if let Action::Reject(problem) = action {
                if problem.kind == ProblemKind::OriginUnavailable {
                    prop_assert!(!self.maybe_executed);
                }
            }
        }
        Ok(())
    }
}

/// A job whose first send was lost (reset after it was sent) is sent again, as the origin
/// deduplicates; the second is refused (503), and the sends are used up. The key is held
/// unknown (the first may have executed), and its decision says so: `unknown`, never
/// `released`, which the log line and the published outcome would carry.
#[test]
fn a_job_held_unknown_after_a_refused_resend_is_decided_unknown_not_released() {
    let mut sim = Sim::new(Some(2));
    let ops = [
        Op::AsyncArrival { other_payload: false },
        Op::Alarm,
        Op::Finish { how: 4, jitter: 0.0, retry_after: None },
        Op::Advance(BACKOFF),
        Op::Alarm,
        Op::Finish { how: 1, jitter: 0.0, retry_after: None },
    ];
    for op in ops {
        sim.run(op).unwrap_or_else(|e| panic!("{e}"));
    }
    assert!(
        matches!(sim.stored, Some(KeyRecord::Unknown(Unknown { origin_attempts: 2, .. }))),
        "{:?}",
        sim.stored
    );
}

fn forwards_of(step: &Step) -> Option<AttemptId> {
    step.actions.iter().find_map(|action| match action {
        Action::Forward { attempt } => Some(*attempt),
        _ => None,
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn async_jobs_keep_the_safety_invariants(
        dedup in proptest::option::of(1u16..5),
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        let mut sim = Sim::new(dedup);
        for op in ops {
            sim.run(op)?;
        }
    }
}
