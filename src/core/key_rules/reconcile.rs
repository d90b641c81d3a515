//! Reconciliation of unknown outcomes: where a route names a lookup
//! (`reconcile_url`, a template such as
//! `https://origin.example/v1/charges?idempotency_key={key}`), a key whose outcome is
//! unknown asks the origin whether it executed, instead of holding the key unknown until
//! its TTL ends.
//!
//! Rules (the key's driver, `core::key_rules::machine`, applies them):
//! 1. The lookup is `GET` of the template with `{key}` replaced by the key in the one
//!    spelling the origin received it in (`core::primitives::key` rule 6: the bare value, or the
//!    sf-string where the key cannot be written bare), percent-encoded (every byte but the
//!    unreserved ones of RFC 3986 §2.3), with the caller's scope headers, the edge's
//!    signature (`ORIGIN_AUTH_SECRET`) and the claim's time ([`CLAIMED_AT_HEADER`],
//!    [`lookup_headers`]): the origin answers only for an execution at or after it, so that
//!    a key the client reused after the edge forgot it is never settled by the execution of
//!    its earlier life. It is stored with the claim, sealed (`STORAGE_ENCRYPTION_KEYS` is
//!    required: it holds the key and the caller's credentials), so that the object can ask
//!    from its alarm after a restart; the claim's time is added when it is sent.
//! 2. The origin's answer decides, and only an answer the lookup itself gave counts: one
//!    that carries [`VERDICT_HEADER`] with the verdict its status stands for (a router's
//!    or gateway's 404, an authentication layer's "not yours", a wrong template's answer
//!    carry none). The route's "not found" status (404 unless `reconcile_not_found` says
//!    another 4xx) with `not-executed` means never executed, and the key is released, so
//!    the next retry is forwarded (believed only once the origin had its timeout again
//!    since the outcome became unknown, `core::key_rules::machine` rule 9); a 2xx with `executed`
//!    means executed, and that answer becomes the stored final answer, replayed with
//!    [`RECONCILED_HEADER`]; anything else (another status, a status without its marker, a
//!    timeout, a broken connection, an answer too large to store) says nothing, and the
//!    key stays unknown.
//! 3. When an outcome becomes unknown (a timeout, a reset after send, or a claim whose
//!    object died, past its lease), the alarm asks: first [`FIRST_DELAY_MS`] after, then
//!    with jittered exponential backoff up to [`MAX_DELAY_MS`], until the record's TTL.
//! 4. A retry that finds the outcome unknown asks at once (coalesced with the other retries
//!    of that moment, bounded by the route's origin timeout) unless a lookup already said
//!    nothing and the next is not due, then is answered as the record then says: the
//!    reconciled answer, a forward, or outcome-unknown.
//! 5. An answer the origin gave too large to store stays unknown and is never looked up:
//!    it would be too large again. Observe mode does not reconcile; an asynchronous job does
//!    (`core::key_rules::machine::async_job` rule 9).
//! 6. A lookup's URL is the template's, whatever the key ([`ReconcileRoute::lookup_url`]):
//!    a key that would make a path segment `.` or `..` (a URL parser removes such
//!    segments, so `…/operations/..` would ask `…/` and a router's 404 would release the
//!    key) is refused with 400 `invalid-key` before anything is read, stored or forwarded
//!    (`core::edge_rules::edge`), on routes whose template has `{key}` in its path. Only the key's own
//!    dots can do it: every other byte that could make one (`%`, `/`, `\`) is
//!    percent-encoded, so a key `%2e` is asked as `%252e`, never as a dot segment. Refused
//!    rather than encoded: `%2E` is a dot segment to a WHATWG URL parser too. A template
//!    with a dot segment of its own is refused at configuration.
//! 7. A claim recorded before the key had one spelling at the origin (`core::primitives::key` rule 6;
//!    [`Reconciling::spelling_known`] false) may have sent the client's own spelling, which
//!    the lookup does not ask for: its "not found" says nothing, and the key stays unknown
//!    (asked again with backoff, in case it finds the answer) until its record expires.
//!
//! What the origin's lookup must promise is in docs/operations.md: it sees every committed
//! execution, "not found" is final (the operation can no longer execute), it answers only
//! for an execution at or after the claim's time, and only its own verdicts carry the marker.

use crate::core::formats::job::StoredRequest;
use crate::core::formats::key_record::StoredResponse;
use crate::core::formats::reconciling::Reconciling;
use crate::core::primitives::key::IdempotencyKey;
use crate::core::primitives::time::Millis;
use crate::core::vocabulary::key_terms::KeyTerms;
use crate::core::vocabulary::problem::{Problem, ProblemKind};

/// The header on a replayed answer that a lookup gave, instead of the original reply.
pub const RECONCILED_HEADER: &str = "idempotency-reconciled";

/// The response header by which the origin's lookup says its answer is its verdict:
/// [`LOOKUP_EXECUTED`] on a 2xx, [`LOOKUP_NOT_EXECUTED`] on the route's "not found" status.
pub const VERDICT_HEADER: &str = "idempotency-lookup";
pub const LOOKUP_EXECUTED: &str = "executed";
pub const LOOKUP_NOT_EXECUTED: &str = "not-executed";

/// The request header that carries the claim's time to the lookup, in Unix milliseconds
/// (the edge's clock): the lookup answers only for an execution at or after it.
pub const CLAIMED_AT_HEADER: &str = "idempotency-claimed-at";

/// The status that means "never executed" unless a route says another.
pub const DEFAULT_NOT_FOUND: u16 = 404;

/// The first lookup from the alarm, after an outcome became unknown.
pub const FIRST_DELAY_MS: u64 = 1_000;

/// The longest wait between two lookups from the alarm.
pub const MAX_DELAY_MS: u64 = 300_000;

/// The placeholder a template must hold.
const KEY_PLACEHOLDER: &str = "{key}";

/// A route's lookup: the template and what "not found" is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconcileRoute {
    template: String,
    pub not_found: u16,
}

impl ReconcileRoute {
    /// Checks a template: an absolute `http` or `https` URL that holds `{key}` (in its
    /// path or query, not its host), and a "not found" status from 400 to 499 other than
    /// those that say nothing about the operation (401, 403, 408, 429) and those an origin
    /// answers while in doubt (409, 425: docs/operations.md), which can never be final.
    pub fn parse(template: &str, not_found: Option<u64>) -> Result<ReconcileRoute, String> {
        let rest = template
            .strip_prefix("https://")
            .or_else(|| template.strip_prefix("http://"))
            .ok_or("expected an absolute http or https URL")?;
        let (authority, path) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
        if authority.is_empty() || authority.contains(['{', '}', '@']) {
            return Err("expected a host (without {key} or credentials) after the scheme".to_owned());
        }
        if !path.contains(KEY_PLACEHOLDER) {
            return Err("expected {key} in the path or the query".to_owned());
        }
        if template.chars().any(|c| c.is_whitespace() || c.is_control()) || template.contains('#') {
            return Err("expected a URL without spaces or a fragment".to_owned());
        }
        // With a key that cannot make one, a dot segment is the template's own.
        if has_dot_segment(&path.replace(KEY_PLACEHOLDER, "k")) {
            return Err("expected a path without . or .. segments".to_owned());
        }
        let not_found = match not_found {
            None => DEFAULT_NOT_FOUND,
            Some(status @ 400..=499) if !matches!(status, 401 | 403 | 408 | 409 | 425 | 429) => status as u16,
            Some(_) => {
                return Err(
                    "reconcile_not_found: expected a 4xx status other than 401, 403, 408, 409, 425 and 429"
                        .to_owned(),
                )
            }
        };
        Ok(ReconcileRoute { template: template.to_owned(), not_found })
    }

    /// The lookup's URL for `key`.
    pub fn url_for(&self, key: &str) -> String {
        self.template.replace(KEY_PLACEHOLDER, &percent_encode(key))
    }

    /// The lookup's URL for `key`, in the spelling the origin receives (rule 1), or the
    /// refusal of a key that would make it another URL (rule 6).
    pub fn lookup_url(&self, key: &IdempotencyKey) -> Result<String, Problem> {
        let url = self.url_for(&key.forwarded());
        let rest = url.split_once("://").map_or(url.as_str(), |(_, rest)| rest);
        // As `parse` splits it: the authority ends at the first `/` or `?`.
        let path = &rest[rest.find(['/', '?']).unwrap_or(rest.len())..];
        if has_dot_segment(path) {
            return Err(Problem::new(
                ProblemKind::InvalidKey,
                "This Idempotency-Key cannot be looked up on this route: a key of . or .. would change the reconciliation URL. Nothing was stored or forwarded; use another key.",
            ));
        }
        Ok(url)
    }

    pub fn template(&self) -> &str {
        &self.template
    }
}

/// Whether the path of a URL (what follows its authority, up to any query) has a segment
/// that a WHATWG URL parser resolves away: `.` or `..`, with either dot possibly written
/// `%2e` or `%2E`. `\` separates segments as `/` does (for `http` and `https`).
fn has_dot_segment(path_and_query: &str) -> bool {
    let path = path_and_query.split('?').next().unwrap_or("");
    path.split(['/', '\\']).any(|segment| {
        let lower = segment.to_ascii_lowercase();
        matches!(lower.as_str(), "." | "%2e" | ".." | ".%2e" | "%2e." | "%2e%2e")
    })
}

/// Every byte but RFC 3986's unreserved characters, percent-encoded.
pub fn percent_encode(text: &str) -> String {
    use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
    const RESERVED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');
    utf8_percent_encode(text, RESERVED).to_string()
}

/// What a lookup said (rule 2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Never executed: release the key.
    NotExecuted,
    /// Executed: this answer (already marked with [`RECONCILED_HEADER`]) is the final one.
    Executed(StoredResponse),
    /// Nothing known: ask again later.
    Unsure,
}

/// The verdict on a lookup's answer: its status and the answer as it would be stored
/// (`None` when it could not be read whole within the stored-size cap). `None` for a lookup
/// that got no answer. Only an answer whose [`VERDICT_HEADER`] says what its status says
/// is a verdict (rule 2); the marker is not kept in a stored answer.
pub fn verdict(answer: Option<(u16, Option<StoredResponse>)>, not_found: u16) -> Verdict {
    let Some((status, Some(mut response))) = answer else { return Verdict::Unsure };
    let says = |word: &str| {
        let mut markers =
            response.headers.iter().filter(|(name, _)| name.eq_ignore_ascii_case(VERDICT_HEADER));
        // Exactly one marker, saying `word`: two that disagree (or an origin's and a
        // gateway's) say nothing.
        matches!((markers.next(), markers.next()), (Some((_, value)), None) if value.trim().eq_ignore_ascii_case(word))
    };
    if status == not_found && says(LOOKUP_NOT_EXECUTED) {
        return Verdict::NotExecuted;
    }
    if (200..=299).contains(&status) && says(LOOKUP_EXECUTED) {
        response.headers.retain(|(name, _)| {
            !name.eq_ignore_ascii_case(RECONCILED_HEADER) && !name.eq_ignore_ascii_case(VERDICT_HEADER)
        });
        response.headers.push((RECONCILED_HEADER.to_owned(), "true".to_owned()));
        return Verdict::Executed(response);
    }
    Verdict::Unsure
}

/// The headers a lookup is sent with: the caller's scope headers as the lookup keeps them,
/// and [`CLAIMED_AT_HEADER`] with the claim's time (`claimed_at`, the lookup's `bound_at`),
/// replacing any header of that name among them.
pub fn lookup_headers(scope_headers: &[(String, String)], claimed_at: Millis) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> = scope_headers
        .iter()
        .filter(|(name, _)| !name.eq_ignore_ascii_case(CLAIMED_AT_HEADER))
        .cloned()
        .collect();
    headers.push((CLAIMED_AT_HEADER.to_owned(), claimed_at.to_string()));
    headers
}

/// The lookup as a retry would send it (rule 1): `GET` of `url` (the route's, with the
/// key in it), with the caller's scope headers (`scope_headers`, lowercase names) as the
/// request carries them (`header`), under the caller's scope salt. Sealed with a claim, or
/// sent at once for a retry.
pub fn lookup_request(
    url: &str,
    scope_headers: &[String],
    header: impl Fn(&str) -> Option<String>,
    scope_salt: [u8; 32],
) -> StoredRequest {
    let headers =
        scope_headers.iter().filter_map(|name| header(name).map(|value| (name.clone(), value))).collect();
    StoredRequest { scope_salt, method: "GET".to_owned(), target: url.to_owned(), headers, body: Vec::new() }
}

/// What a claim made at `now` keeps of its route's lookup, sealed (`sealed_lookup`, bound
/// to `now` and the claim's fingerprint): not asked yet, and forwarded in the key's one
/// spelling (the Worker built the lookup's URL, and forwards the key, in it).
pub fn kept_for_claim(sealed_lookup: Vec<u8>, now: Millis, not_found: u16, policy: &KeyTerms) -> Reconciling {
    Reconciling {
        sealed_lookup,
        bound_at: now,
        not_found,
        asked: 0,
        next_at: 0,
        policy: Box::new(policy.clone()),
        spelling_known: true,
    }
}

/// How long after its `asked`-th unsure lookup the alarm asks again: doubling from
/// [`FIRST_DELAY_MS`], at most [`MAX_DELAY_MS`], times a jitter in `[0.5, 1]` drawn from
/// `jitter` (a number in `[0, 1]`), so that keys that became unknown together do not ask
/// together.
pub fn next_delay(asked: u16, jitter: f64) -> u64 {
    let full = FIRST_DELAY_MS.saturating_mul(1u64 << asked.min(20)).min(MAX_DELAY_MS);
    let factor = 0.5 + 0.5 * jitter.clamp(0.0, 1.0);
    ((full as f64) * factor) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lookup_carries_only_the_scope_headers_the_request_has_and_no_body() {
        let header = |name: &str| (name == "authorization").then(|| "Bearer t".to_owned());
        let names = ["authorization".to_owned(), "x-tenant".to_owned()];
        let request = lookup_request("https://o.test/v1?k=a", &names, header, [7; 32]);
        assert_eq!(request.method, "GET");
        assert_eq!(request.target, "https://o.test/v1?k=a");
        assert_eq!(request.headers, vec![("authorization".to_owned(), "Bearer t".to_owned())]);
        assert!(request.body.is_empty());
        assert_eq!(request.scope_salt, [7; 32]);
        let policy = crate::core::format_fixtures::policy();
        let kept = kept_for_claim(vec![1, 2], 5, 404, &policy);
        assert_eq!((kept.bound_at, kept.asked, kept.next_at, kept.not_found), (5, 0, 0, 404));
        assert!(kept.spelling_known);
    }

    #[test]
    fn templates_are_checked_and_filled() {
        let route =
            ReconcileRoute::parse("https://api.example/v1/charges?idempotency_key={key}", None).unwrap();
        assert_eq!(route.not_found, 404);
        assert_eq!(route.url_for("order-1"), "https://api.example/v1/charges?idempotency_key=order-1");
        assert_eq!(
            route.url_for("a b/c?d&e=f%"),
            "https://api.example/v1/charges?idempotency_key=a%20b%2Fc%3Fd%26e%3Df%25"
        );
        let path = ReconcileRoute::parse("http://127.0.0.1:8788/v1/operations/{key}", Some(410)).unwrap();
        assert_eq!(path.url_for("k1"), "http://127.0.0.1:8788/v1/operations/k1");
        assert_eq!(path.not_found, 410);
    }

    #[test]
    fn bad_templates_say_why() {
        for (template, why) in [
            ("/v1/charges?key={key}", "absolute"),
            ("ftp://h/{key}", "absolute"),
            ("https://{key}.example/x", "host"),
            ("https://user:pw@h/{key}", "host"),
            ("https:///{key}", "host"),
            ("https://h/v1/charges", "{key}"),
            ("https://h/{key}#frag", "fragment"),
            ("https://h/{key} x", "spaces"),
            ("https://h/v1/../{key}", ". or .."),
            ("https://h/v1/%2E/{key}", ". or .."),
            ("https://h/v1/{key}/..?x=1", ". or .."),
        ] {
            let error = ReconcileRoute::parse(template, None).unwrap_err();
            assert!(error.contains(why), "{template}: {error}");
        }
        // 409 and 425 are what an origin answers while in doubt: never "not found".
        for status in [200, 401, 403, 408, 409, 425, 429, 500, 399] {
            assert!(ReconcileRoute::parse("https://h/{key}", Some(status)).is_err(), "{status}");
        }
    }

    /// An answer of `status` with `headers`, read whole.
    fn said(status: u16, headers: &[(&str, &str)]) -> Option<(u16, Option<StoredResponse>)> {
        let headers = headers.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
        Some((status, Some(StoredResponse { status, headers, body: b"{}".to_vec() })))
    }

    fn key(raw: &str) -> IdempotencyKey {
        crate::core::primitives::key::parse_key(raw.as_bytes()).unwrap()
    }

    #[test]
    fn a_lookup_carries_the_forwarded_spelling() {
        let query = ReconcileRoute::parse("https://h/v1/charges?idempotency_key={key}", None).unwrap();
        for spelling in ["k1", "\"k1\""] {
            assert_eq!(query.lookup_url(&key(spelling)).unwrap(), "https://h/v1/charges?idempotency_key=k1");
        }
        // A key that cannot be written bare is asked as the sf-string the origin received.
        assert_eq!(
            query.lookup_url(&key("\"a,b\"")).unwrap(),
            "https://h/v1/charges?idempotency_key=%22a%2Cb%22"
        );
    }

    #[test]
    fn a_key_that_would_make_a_dot_segment_is_refused() {
        let path = ReconcileRoute::parse("https://h/v1/operations/{key}", None).unwrap();
        let query = ReconcileRoute::parse("https://h/v1/operations?key={key}", None).unwrap();
        let prefixed = ReconcileRoute::parse("https://h/v1/operations/.{key}/x", None).unwrap();
        for dots in [".", "..", "\".\"", "\"..\""] {
            let refused = path.lookup_url(&key(dots)).unwrap_err();
            assert_eq!(refused.kind, ProblemKind::InvalidKey, "{dots}");
            assert_eq!(refused.status(), 400);
            assert!(query.lookup_url(&key(dots)).is_ok(), "{dots}: a query is no path");
        }
        assert!(prefixed.lookup_url(&key(".")).is_err(), ".{{key}} with the key . is ..");
        assert!(prefixed.lookup_url(&key("..")).is_ok(), "... is no dot segment");
        // Slashes and dots in a query are no path.
        let query_only = ReconcileRoute::parse("https://h?path=/./{key}", None).unwrap();
        assert_eq!(query_only.lookup_url(&key("..")).unwrap(), "https://h?path=/./..");
        // Keys that are dot segments once decoded are encoded again: never one themselves.
        for (raw, segment) in [
            ("%2e", "%252e"),
            ("%2E%2E", "%252E%252E"),
            (".%2e", ".%252e"),
            ("...", "..."),
            ("./..", ".%2F.."),
            (r#""\\..""#, "%22%5C%5C..%22"),
            (r#"".\\.""#, "%22.%5C%5C.%22"),
            ("a/../b", "a%2F..%2Fb"),
        ] {
            let url = path.lookup_url(&key(raw)).unwrap_or_else(|_| panic!("{raw} is refused"));
            assert_eq!(url, format!("https://h/v1/operations/{segment}"), "{raw}");
        }
    }

    proptest::proptest! {
        /// Whatever the key, the lookup's path is the template's: one segment for `{key}`,
        /// never a dot segment, or the key is refused.
        #[test]
        fn a_lookups_path_is_the_templates(raw in "[./%2eE\\\\a]{1,6}|[ -~]{1,12}") {
            let route = ReconcileRoute::parse("https://h/v1/operations/{key}/status", None).unwrap();
            let quoted = format!("\"{}\"", raw.replace('\\', "\\\\").replace('"', "\\\""));
            let Ok(parsed) = crate::core::primitives::key::parse_key(quoted.as_bytes()) else { return Ok(()) };
            match route.lookup_url(&parsed) {
                Ok(url) => {
                    let path = url.strip_prefix("https://h").unwrap();
                    let segments: Vec<&str> = path.split(['/', '\\']).collect();
                    proptest::prop_assert_eq!(segments.len(), 5, "{}", url);
                    proptest::prop_assert!(!has_dot_segment(path), "{}", url);
                }
                Err(_) => proptest::prop_assert!(matches!(parsed.as_str(), "." | "..")),
            }
        }
    }

    #[test]
    fn verdicts_follow_the_status_and_the_lookups_own_marker() {
        let not_found = [(VERDICT_HEADER, LOOKUP_NOT_EXECUTED)];
        assert_eq!(verdict(said(404, &not_found), 404), Verdict::NotExecuted);
        assert_eq!(
            verdict(said(410, &[("Idempotency-Lookup", " Not-Executed ")]), 410),
            Verdict::NotExecuted
        );
        assert_eq!(verdict(said(404, &not_found), 410), Verdict::Unsure, "only the route's not-found status");
        let executed = [
            ("content-type", "application/json"),
            (RECONCILED_HEADER, "no"),
            (VERDICT_HEADER, LOOKUP_EXECUTED),
        ];
        let Verdict::Executed(stored) = verdict(said(200, &executed), 404) else { panic!() };
        assert_eq!(stored.status, 200);
        assert_eq!(stored.body, b"{}");
        assert_eq!(
            stored.headers,
            vec![
                ("content-type".to_owned(), "application/json".to_owned()),
                (RECONCILED_HEADER.to_owned(), "true".to_owned())
            ],
            "the origin's own mark is replaced, and the lookup's marker is not stored"
        );
        for unsure in [said(200, &[]), said(500, &[]), said(503, &not_found), said(302, &[]), None] {
            assert_eq!(verdict(unsure.clone(), 404), Verdict::Unsure, "{unsure:?}");
        }
    }

    #[test]
    fn an_answer_without_the_lookups_marker_is_no_verdict() {
        // A router's or gateway's 404, a wrong template's 404, an authentication layer's
        // "not yours": none carries the marker, none releases the key.
        assert_eq!(verdict(said(404, &[]), 404), Verdict::Unsure);
        assert_eq!(verdict(said(404, &[("x-idempotency-lookup", "not-executed")]), 404), Verdict::Unsure);
        // A marker that contradicts the status, or two markers, say nothing.
        assert_eq!(verdict(said(404, &[(VERDICT_HEADER, LOOKUP_EXECUTED)]), 404), Verdict::Unsure);
        assert_eq!(verdict(said(200, &[(VERDICT_HEADER, LOOKUP_NOT_EXECUTED)]), 404), Verdict::Unsure);
        assert_eq!(verdict(said(404, &[(VERDICT_HEADER, "not-executed, executed")]), 404), Verdict::Unsure);
        let twice = [(VERDICT_HEADER, LOOKUP_NOT_EXECUTED), (VERDICT_HEADER, LOOKUP_NOT_EXECUTED)];
        assert_eq!(verdict(said(404, &twice), 404), Verdict::Unsure);
        assert_eq!(verdict(said(404, &[(VERDICT_HEADER, "yes")]), 404), Verdict::Unsure);
        // A 2xx without it (a list endpoint, a catch-all page) is no proof of execution.
        assert_eq!(verdict(said(200, &[("content-type", "text/html")]), 404), Verdict::Unsure);
        // An answer that could not be read whole cannot show its marker.
        assert_eq!(verdict(Some((404, None)), 404), Verdict::Unsure);
        assert_eq!(verdict(Some((200, None)), 404), Verdict::Unsure);
    }

    #[test]
    fn a_lookup_carries_the_claims_time_and_only_the_edges() {
        let scope = vec![
            ("authorization".to_owned(), "Bearer t".to_owned()),
            ("Idempotency-Claimed-At".to_owned(), "0".to_owned()),
        ];
        assert_eq!(
            lookup_headers(&scope, 1_790_000_000_123),
            vec![
                ("authorization".to_owned(), "Bearer t".to_owned()),
                (CLAIMED_AT_HEADER.to_owned(), "1790000000123".to_owned())
            ]
        );
        assert_eq!(lookup_headers(&[], 7), vec![(CLAIMED_AT_HEADER.to_owned(), "7".to_owned())]);
    }

    #[test]
    fn the_backoff_doubles_with_jitter_up_to_its_cap() {
        assert_eq!(next_delay(0, 1.0), 1_000);
        assert_eq!(next_delay(0, 0.0), 500);
        assert_eq!(next_delay(3, 1.0), 8_000);
        assert_eq!(next_delay(30, 1.0), MAX_DELAY_MS);
        assert_eq!(next_delay(u16::MAX, 0.0), MAX_DELAY_MS / 2);
        for asked in 0..12 {
            assert!(next_delay(asked, 0.3) <= next_delay(asked + 1, 0.3));
        }
    }
}
