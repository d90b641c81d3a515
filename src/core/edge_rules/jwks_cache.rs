//! The keys of `SCOPE_JWKS_URL` as one isolate caches them: when to fetch the JWKS, how long
//! a fetched one is fresh, what a token's `kid` finds, and what a failed fetch leaves in use.
//!
//! Owns every decision of that cache; never sees a clock (each call is handed the time in
//! milliseconds since the epoch), the network or a future. In the shape of quinn-proto's
//! `Connection` (events in, work out): a token's [`JwksCache::lookup`] answers from the keys
//! at hand or says to wait; [`JwksCache::poll_fetch`] hands out the fetch to start;
//! [`JwksCache::handle_fetched`] takes what it brought. The runtime (`runtime::identity`)
//! carries out the fetch, lets every waiting request share it, and asks again when it ends.
//! The JWKS document is read by `jwt::parse_jwks`, as an inline one is.
//!
//! 1. Without keys, or once they are stale, a lookup waits for a fetch. Lookups that need
//!    one while another is under way wait for that one: never two fetches at once.
//! 2. A fetched JWKS is fresh for its `Cache-Control` max-age clamped to
//!    [`MIN_JWKS_TTL_SECONDS`] … [`MAX_JWKS_TTL_SECONDS`] (an identity provider's typo must
//!    neither refetch per request nor pin a key for weeks), or
//!    [`DEFAULT_JWKS_TTL_SECONDS`] without a readable one.
//! 3. A failed fetch (the runtime's error, a non-200, a timeout, or a document that is not a
//!    usable JWKS) keeps the last good keys in use, stale; without any, the keys are
//!    unavailable. For [`JWKS_RETRY_SECONDS`] after it a lookup answers at once from what is
//!    at hand rather than fetching again (unless a fetch is under way, which it waits
//!    for), so an outage costs one fetch timeout per 30 s, not one per request.
//! 4. A `kid` that the keys at hand lack may be a key the provider just published (a
//!    rotation): the lookup waits for a refetch, at most one per [`JWKS_RETRY_SECONDS`] in
//!    the isolate, whatever the keys' freshness. A `kid` that the refetched keys lack too is
//!    unknown for good ([`Lookup::UnknownKid`]: the token is refused). One that cannot be
//!    refetched yet, or whose refetch failed, may still be published:
//!    [`Lookup::Unavailable`], so `core::edge_rules::scope` asks the caller to retry rather than
//!    refusing the token.
//! 5. Rules 3 and 4 stack: a lookup whose fetch failed or brought keys without its `kid`
//!    goes on to that `kid`'s refetch when the throttle allows, as a token with a new `kid`
//!    does; so the isolate makes at most two fetches per 30 s for tokens with new kids.
//! 6. A fetch not reported within [`FETCH_LOST_AFTER_MS`] of being scheduled is lost (the
//!    request that ran it was cancelled, and its own timeout with it): it counts as a
//!    failed fetch (rule 3), so lookups stop waiting for it, and a report that comes after
//!    all is ignored. Without this, one lost fetch would leave every later lookup of the
//!    isolate waiting for it. A waiter waits at most as long ([`FETCH_LOST_AFTER_MS`]).
//! 7. Only the URL's own 200 is a JWKS ([`answer_status`]). The fetch follows no redirect:
//!    the runtime asks for the 3xx itself, and it is a failed fetch (rule 3), said as a
//!    redirect in the log. The URL is checked to be https (or loopback) where it is
//!    configured (`core::edge_rules::scope`); a followed redirect could take the fetch to any host, plain
//!    http included, where the keys that decide every token's caller could be swapped.

use std::rc::Rc;

use super::scope::JWKS_RETRY_SECONDS;
use crate::core::primitives::jwt::{
    candidates, max_age_seconds, parse_jwks, Algorithm, Jwk, JwksSource, KeySet, Unverified,
};

/// How long a JWKS is fresh without a readable `Cache-Control` max-age.
pub const DEFAULT_JWKS_TTL_SECONDS: u64 = 600;
/// Shortest freshness a max-age can ask for.
pub const MIN_JWKS_TTL_SECONDS: u64 = 30;
/// Longest freshness a max-age can ask for.
pub const MAX_JWKS_TTL_SECONDS: u64 = 86_400;
/// No new fetch this long after a failed one, and at most one refetch per this interval
/// for unknown kids: the `Retry-After` of a transient refusal (`core::edge_rules::scope`).
const RETRY_INTERVAL_MS: u64 = JWKS_RETRY_SECONDS * 1_000;
/// How long the runtime waits for the JWKS URL's answer before it reports the fetch failed
/// (a hanging JWKS URL costs a token this much, then the quiet time of rule 3).
pub const FETCH_TIMEOUT_MS: u64 = 5_000;
/// A fetch not reported this long after it was scheduled is lost (rule 6): well past its
/// own timeout, which a fetch whose request is still running always reports by.
pub const FETCH_LOST_AFTER_MS: u64 = FETCH_TIMEOUT_MS + 5_000;

/// What one isolate knows of the JWKS URL's keys.
#[derive(Debug, Default)]
pub struct JwksCache {
    keys: Option<HeldKeys>,
    fresh_until_ms: u64,
    /// No new fetch before this (after a failure), unless one is under way.
    quiet_until_ms: u64,
    last_kid_refetch_ms: Option<u64>,
    fetch: FetchState,
    /// Fetches numbered so far: a lookup tells the refetch it waited for by its number.
    fetches_scheduled: u64,
    /// A fetch was given up as lost (rule 6) and the runtime has not been told yet.
    lost_untold: bool,
}

/// The last good keys, and the fetch that brought them.
#[derive(Debug)]
struct HeldKeys {
    set: Rc<KeySet>,
    from: FetchId,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FetchId(u64);

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum FetchState {
    #[default]
    Idle,
    /// A lookup waits for this fetch, scheduled at this time; [`JwksCache::poll_fetch`] has
    /// not handed it out yet.
    Scheduled(FetchId, u64),
    /// Handed out, not yet reported back; scheduled at this time.
    Running(FetchId, u64),
}

/// A fetch of the JWKS URL to start now. Report how it went to
/// [`JwksCache::handle_fetched`], once: until then no other fetch is handed out.
#[must_use]
#[derive(Debug, PartialEq, Eq)]
pub struct FetchRequest {
    id: FetchId,
}

/// What a fetch of the JWKS URL brought: the body of a 200 answer, and its
/// `Cache-Control` header when it had one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Document {
    pub text: String,
    pub cache_control: Option<String>,
}

/// What the JWKS fetch asks for (`Accept`): a JWK set, or any JSON.
pub const ACCEPT: &str = "application/jwk-set+json, application/json";

/// Why a fetch with no answer within [`FETCH_TIMEOUT_MS`] failed, for the log.
pub fn timed_out() -> String {
    format!("no answer within {} s", FETCH_TIMEOUT_MS / 1_000)
}

/// The log line of a fetch the cache gave up as lost (rule 6), written once per lost fetch:
/// its own request can no longer say what became of it.
pub fn lost_fetch_line() -> String {
    format!(
        "jwks: the fetch of SCOPE_JWKS_URL did not end within {} s (its request was cut short?); \
         given up: tokens use the last good keys, if any, until the next fetch in {} s",
        FETCH_LOST_AFTER_MS / 1_000,
        JWKS_RETRY_SECONDS
    )
}

/// The log line of a failed fetch, saying `why` (never the body's content; the URL is
/// configuration, named by its variable).
pub fn failed_fetch_line(why: &str) -> String {
    format!("jwks: fetching SCOPE_JWKS_URL failed ({why}); tokens are unverified until it succeeds")
}

/// What the JWKS URL's answer with `status` is (rule 7): `Ok` for a 200, whose body is the
/// document to read; otherwise why the fetch failed, for the log (never the body).
pub fn answer_status(status: u16) -> Result<(), String> {
    match status {
        200 => Ok(()),
        300..=399 => Err(format!(
            "HTTP {status}, a redirect, not followed: SCOPE_JWKS_URL must answer with the keys itself"
        )),
        _ => Err(format!("HTTP {status}")),
    }
}

/// Why a fetch failed, from the runtime's `error`: a timeout when its signal had fired
/// ([`timed_out`]), since the error the aborted fetch throws says only that it was aborted.
pub fn fetch_failed(timed_out_signal: bool, error: &str) -> String {
    if timed_out_signal {
        timed_out()
    } else {
        error.to_owned()
    }
}

/// Whether the answer's body is to be read as the JWKS: a 200 ([`answer_status`]) whose
/// `Content-Length` does not already say it is too large ([`declared_size`]); otherwise
/// why not, and its body is let go unread.
pub fn answer_head(status: u16, content_length: Option<&str>) -> Result<(), String> {
    answer_status(status)?;
    declared_size(content_length)
}

/// Largest JWKS document read.
pub const MAX_JWKS_BYTES: usize = 256 * 1024;

/// Whether a 200 answer's `Content-Length` already says it is too large (checked before its
/// body is read): `Err` with why, for the log.
pub fn declared_size(content_length: Option<&str>) -> Result<(), String> {
    match content_length.and_then(|length| length.trim().parse::<usize>().ok()) {
        Some(length) if length > MAX_JWKS_BYTES => Err(too_large()),
        _ => Ok(()),
    }
}

/// A 200 answer's body (at most [`MAX_JWKS_BYTES`] of UTF-8) as the document, with its
/// `Cache-Control`; or why it is of no use, never its content.
pub fn document(body: Vec<u8>, cache_control: Option<String>) -> Result<Document, String> {
    if body.len() > MAX_JWKS_BYTES {
        return Err(too_large());
    }
    let text = String::from_utf8(body).map_err(|_| "not UTF-8".to_owned())?;
    Ok(Document { text, cache_control })
}

fn too_large() -> String {
    format!("larger than {MAX_JWKS_BYTES} bytes")
}

/// Why a token has no key to verify under, from why each key source (the inline JWKS, the
/// JWKS URL) had none: the most telling, no keys at all first (transient, 503), then an
/// unknown `kid`, then no key for the algorithm.
pub fn no_candidates(failures: Vec<Unverified>) -> Unverified {
    let rank = |reason: &Unverified| match reason {
        Unverified::KeysUnavailable => 0,
        Unverified::UnknownKid => 1,
        _ => 2,
    };
    failures.into_iter().min_by_key(rank).unwrap_or(Unverified::NoKey)
}

/// The keys a token signed with `algorithm` (naming `kid`) may verify under, in the order
/// they are tried: the inline JWKS's (`inline`) first, then the JWKS URL's (`url`: its keys,
/// or why it has none; `None` when no URL is set). When neither source has one, why not
/// ([`no_candidates`]).
pub fn candidate_keys(
    inline: Option<&KeySet>,
    url: Option<Result<&KeySet, Unverified>>,
    algorithm: Algorithm,
    kid: Option<&str>,
) -> Result<Vec<Jwk>, Unverified> {
    let mut chosen: Vec<Jwk> = Vec::new();
    let mut failures: Vec<Unverified> = Vec::new();
    for set in inline.map(Ok).into_iter().chain(url) {
        match set.and_then(|set| candidates(set, algorithm, kid)) {
            Ok(keys) => chosen.extend(keys.into_iter().cloned()),
            Err(reason) => failures.push(reason),
        }
    }
    if !chosen.is_empty() {
        return Ok(chosen);
    }
    Err(no_candidates(failures))
}

/// One token's search for its keys, across the fetches it waits for: make one per token
/// and hand it to every [`JwksCache::lookup`] until the answer is not [`Lookup::Wait`].
#[derive(Debug)]
pub struct KeyQuery<'k> {
    kid: Option<&'k str>,
    step: Step,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Nothing asked yet.
    Start,
    /// Waited for a fetch of keys at all (none at hand, or stale): take what is at hand now.
    Refreshed,
    /// Waited for this refetch for the token's unknown `kid`.
    Refetched(FetchId),
}

impl<'k> KeyQuery<'k> {
    /// The keys for a token with this `kid` (header `kid`), or for any key without one.
    pub fn new(kid: Option<&'k str>) -> KeyQuery<'k> {
        KeyQuery { kid, step: Step::Start }
    }
}

/// The answer to a [`KeyQuery`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Keys to choose the token's candidates from; they hold its `kid` if it has one.
    Found(Rc<KeySet>),
    /// Keys just refetched for the token's `kid` lack it too: `jwt::Unverified::UnknownKid`.
    UnknownKid,
    /// No keys at hand (none fetched yet and the fetch failed), or the `kid`'s refetch is
    /// throttled or failed: `jwt::Unverified::KeysUnavailable`.
    Unavailable,
    /// A fetch is scheduled or under way: start what [`JwksCache::poll_fetch`] hands out,
    /// wait for the fetch to be reported, then look up again with the same query.
    Wait,
}

impl Lookup {
    /// What this answer means to a token's verification: the keys to choose from, or why
    /// there are none (an unknown `kid`, or no keys at hand: transient); `None` to wait for
    /// the fetch and look up again.
    pub fn keys(self) -> Option<Result<Rc<KeySet>, Unverified>> {
        match self {
            Lookup::Found(keys) => Some(Ok(keys)),
            Lookup::UnknownKid => Some(Err(Unverified::UnknownKid)),
            Lookup::Unavailable => Some(Err(Unverified::KeysUnavailable)),
            Lookup::Wait => None,
        }
    }
}

impl JwksCache {
    /// The keys for `query` at `now_ms`, or a fetch to wait for first (rules 1, 3, 4).
    pub fn lookup(&mut self, query: &mut KeyQuery<'_>, now_ms: u64) -> Lookup {
        self.give_up_lost_fetch(now_ms);
        match query.step {
            Step::Start => {
                let fresh = self.keys.is_some() && now_ms < self.fresh_until_ms;
                let quiet = now_ms < self.quiet_until_ms && self.fetch == FetchState::Idle;
                if fresh || quiet {
                    return self.at_hand(query, now_ms);
                }
                self.schedule(now_ms);
                query.step = Step::Refreshed;
                Lookup::Wait
            }
            // The fetch brought new keys, or failed and left the last good ones (or none).
            Step::Refreshed => self.at_hand(query, now_ms),
            Step::Refetched(id) => match &self.keys {
                Some(held) if held.from == id => found(&held.set, query.kid).unwrap_or(Lookup::UnknownKid),
                // The refetch failed: nothing newer than the keys that lacked the kid.
                _ => Lookup::Unavailable,
            },
        }
    }

    /// Whether a fetch has been given up as lost (rule 6) since the last call: true once per
    /// lost fetch, so that the runtime logs it once, whichever request noticed.
    pub fn take_lost_fetch(&mut self) -> bool {
        std::mem::take(&mut self.lost_untold)
    }

    /// The fetch to start now, if a lookup waits for one that is not under way yet.
    /// Hands out at most one fetch at a time.
    pub fn poll_fetch(&mut self) -> Option<FetchRequest> {
        let FetchState::Scheduled(id, at) = self.fetch else { return None };
        self.fetch = FetchState::Running(id, at);
        Some(FetchRequest { id })
    }

    /// Takes what the fetch `request` brought at `now_ms`: a document, or why there is none.
    /// The error is why the keys were not updated (the runtime's reason, or why the
    /// document is not a usable JWKS), for the runtime's log; it never holds the document.
    pub fn handle_fetched(
        &mut self,
        now_ms: u64,
        request: FetchRequest,
        fetched: Result<Document, String>,
    ) -> Result<(), String> {
        // Only one fetch is handed out at a time: `request` is the one under way, unless it
        // was given up as lost (rule 6), and then what it brought is not taken.
        match self.fetch {
            FetchState::Running(id, _) if id == request.id => self.fetch = FetchState::Idle,
            _ => return Err("reported after it was given up as lost; not used".to_owned()),
        }
        let parsed = fetched.and_then(|document| {
            let set = parse_jwks(&document.text, JwksSource::Fetched)
                .map_err(|why| format!("not a usable JWKS: {why}"))?;
            Ok((set, document.cache_control.as_deref().and_then(max_age_seconds)))
        });
        match parsed {
            Ok((set, max_age)) => {
                let ttl_seconds = max_age
                    .unwrap_or(DEFAULT_JWKS_TTL_SECONDS)
                    .clamp(MIN_JWKS_TTL_SECONDS, MAX_JWKS_TTL_SECONDS);
                self.keys = Some(HeldKeys { set: Rc::new(set), from: request.id });
                self.fresh_until_ms = now_ms + ttl_seconds * 1_000;
                self.quiet_until_ms = 0;
                Ok(())
            }
            Err(why) => {
                self.quiet_until_ms = now_ms + RETRY_INTERVAL_MS;
                Err(why)
            }
        }
    }

    /// The answer from the keys at hand: found, unavailable, or a refetch for an unknown
    /// `kid` to wait for when the throttle allows one (rule 4).
    fn at_hand(&mut self, query: &mut KeyQuery<'_>, now_ms: u64) -> Lookup {
        let Some(held) = &self.keys else { return Lookup::Unavailable };
        if let Some(found) = found(&held.set, query.kid) {
            return found;
        }
        if self.last_kid_refetch_ms.is_some_and(|at| now_ms < at + RETRY_INTERVAL_MS) {
            return Lookup::Unavailable;
        }
        self.last_kid_refetch_ms = Some(now_ms);
        query.step = Step::Refetched(self.schedule(now_ms));
        Lookup::Wait
    }

    /// The fetch a lookup waits for: the one scheduled or under way, else a new one.
    fn schedule(&mut self, now_ms: u64) -> FetchId {
        match self.fetch {
            FetchState::Scheduled(id, _) | FetchState::Running(id, _) => id,
            FetchState::Idle => {
                self.fetches_scheduled += 1;
                let id = FetchId(self.fetches_scheduled);
                self.fetch = FetchState::Scheduled(id, now_ms);
                id
            }
        }
    }

    /// Rule 6: a fetch scheduled [`FETCH_LOST_AFTER_MS`] ago and not reported failed.
    fn give_up_lost_fetch(&mut self, now_ms: u64) {
        if let FetchState::Scheduled(_, at) | FetchState::Running(_, at) = self.fetch {
            if now_ms >= at.saturating_add(FETCH_LOST_AFTER_MS) {
                self.fetch = FetchState::Idle;
                self.quiet_until_ms = now_ms + RETRY_INTERVAL_MS;
                self.lost_untold = true;
            }
        }
    }
}

/// `Found` when `set` may hold the token's key: it has the `kid`, or the token names none.
fn found(set: &Rc<KeySet>, kid: Option<&str>) -> Option<Lookup> {
    kid.is_none_or(|kid| set.has_kid(kid)).then(|| Lookup::Found(set.clone()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::core::primitives::jwt::base64url_encode;

    #[test]
    fn a_jwks_answer_is_refused_past_its_size_or_when_not_utf8() {
        assert_eq!(declared_size(Some("262144")), Ok(()));
        assert_eq!(declared_size(Some(" 262145 ")), Err("larger than 262144 bytes".to_owned()));
        // No length, or one that is no number: the body's own size decides.
        assert_eq!(declared_size(None), Ok(()));
        assert_eq!(declared_size(Some("many")), Ok(()));
        let cache = Some("max-age=60".to_owned());
        let read = super::document(b"{}".to_vec(), cache.clone());
        assert_eq!(read, Ok(Document { text: "{}".to_owned(), cache_control: cache }));
        assert_eq!(
            super::document(vec![b' '; MAX_JWKS_BYTES], None).map(|d| d.text.len()),
            Ok(MAX_JWKS_BYTES)
        );
        assert_eq!(
            super::document(vec![b' '; MAX_JWKS_BYTES + 1], None),
            Err("larger than 262144 bytes".to_owned())
        );
        assert_eq!(super::document(vec![0xff, 0xfe], None), Err("not UTF-8".to_owned()));
    }

    #[test]
    fn the_fetchs_log_lines_name_the_variable_the_reason_and_the_delays() {
        assert_eq!(timed_out(), "no answer within 5 s");
        let failed = failed_fetch_line("HTTP 500");
        assert!(failed.starts_with("jwks: fetching SCOPE_JWKS_URL failed (HTTP 500);"), "{failed}");
        let lost = lost_fetch_line();
        assert!(lost.contains("did not end within 10 s"), "{lost}");
        assert!(lost.contains("until the next fetch in 30 s"), "{lost}");
        assert!(ACCEPT.starts_with("application/jwk-set+json"));
    }

    #[test]
    fn a_lookup_is_keys_a_reason_or_a_wait() {
        let keys = Rc::new(KeySet::default());
        assert_eq!(Lookup::Found(keys.clone()).keys(), Some(Ok(keys)));
        assert_eq!(Lookup::UnknownKid.keys(), Some(Err(Unverified::UnknownKid)));
        // No keys at hand is transient (the caller is asked to retry), an unknown kid is not.
        assert_eq!(Lookup::Unavailable.keys(), Some(Err(Unverified::KeysUnavailable)));
        assert!(Unverified::KeysUnavailable.is_transient() && !Unverified::UnknownKid.is_transient());
        assert_eq!(Lookup::Wait.keys(), None);
    }

    #[test]
    fn only_a_200_of_an_acceptable_declared_size_is_read() {
        assert_eq!(answer_head(200, None), Ok(()));
        assert_eq!(answer_head(200, Some(&MAX_JWKS_BYTES.to_string())), Ok(()));
        assert_eq!(answer_head(200, Some(&(MAX_JWKS_BYTES + 1).to_string())), Err(too_large()));
        assert_eq!(answer_head(500, Some("10")), Err("HTTP 500".to_owned()));
        let redirect = answer_head(302, None).unwrap_err();
        assert!(redirect.contains("a redirect, not followed"), "{redirect}");
        // The status is judged first: a large error page is an HTTP error, not a size.
        assert_eq!(answer_head(404, Some(&(MAX_JWKS_BYTES * 2).to_string())), Err("HTTP 404".to_owned()));
    }

    #[test]
    fn a_fetch_aborted_by_its_timeout_says_so_and_any_other_failure_says_its_error() {
        assert_eq!(fetch_failed(true, "AbortError: The operation was aborted"), "no answer within 5 s");
        assert_eq!(
            fetch_failed(false, "TypeError: Network connection lost."),
            "TypeError: Network connection lost."
        );
    }

    #[test]
    fn no_candidates_names_the_most_telling_reason() {
        use Unverified::{KeysUnavailable, NoKey, UnknownKid};
        assert_eq!(no_candidates(vec![NoKey, UnknownKid, KeysUnavailable]), KeysUnavailable);
        assert_eq!(no_candidates(vec![NoKey, UnknownKid]), UnknownKid);
        assert_eq!(no_candidates(vec![UnknownKid, NoKey]), UnknownKid);
        assert_eq!(no_candidates(vec![NoKey]), NoKey);
        assert_eq!(no_candidates(Vec::new()), NoKey);
    }

    /// A set with these kids (Ed25519 keys, so EdDSA tokens use them).
    fn key_set(kids: &[&str]) -> KeySet {
        let keys: Vec<_> = kids.iter().map(|kid| ed_key(kid)).collect();
        parse_jwks(&json!({ "keys": keys }).to_string(), JwksSource::Fetched).expect("a usable set")
    }

    fn kids_of(keys: &[Jwk]) -> Vec<&str> {
        keys.iter().filter_map(|key| key.kid.as_deref()).collect()
    }

    #[test]
    fn candidate_keys_are_the_inline_ones_then_the_urls() {
        use Unverified::{KeysUnavailable, NoKey, UnknownKid};
        let (inline, url) = (key_set(&["a", "b"]), key_set(&["c"]));
        let both = candidate_keys(Some(&inline), Some(Ok(&url)), Algorithm::EdDsa, None).unwrap();
        assert_eq!(kids_of(&both), ["a", "b", "c"]);
        // A kid picks its key wherever it is; the source without it is no failure then.
        let one = candidate_keys(Some(&inline), Some(Ok(&url)), Algorithm::EdDsa, Some("c")).unwrap();
        assert_eq!(kids_of(&one), ["c"]);
        // A URL without keys leaves the inline ones in use.
        let some = candidate_keys(Some(&inline), Some(Err(KeysUnavailable)), Algorithm::EdDsa, None);
        assert_eq!(kids_of(&some.unwrap()), ["a", "b"]);
        assert_eq!(kids_of(&candidate_keys(None, Some(Ok(&url)), Algorithm::EdDsa, None).unwrap()), ["c"]);
        // No source with a key: the most telling reason.
        let none = candidate_keys(Some(&inline), Some(Err(KeysUnavailable)), Algorithm::EdDsa, Some("x"));
        assert_eq!(none, Err(KeysUnavailable));
        assert_eq!(candidate_keys(Some(&inline), None, Algorithm::EdDsa, Some("x")), Err(UnknownKid));
        assert_eq!(candidate_keys(Some(&inline), Some(Ok(&url)), Algorithm::Rs256, None), Err(NoKey));
        assert_eq!(candidate_keys(None, None, Algorithm::EdDsa, None), Err(NoKey));
    }

    /// Any time: only differences matter.
    const T0: u64 = 1_700_000_000_000;
    const SECOND: u64 = 1_000;

    fn ed_key(kid: &str) -> serde_json::Value {
        json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": base64url_encode(&[3; 32])})
    }

    /// A JWKS document with these kids and this `Cache-Control`.
    fn document(kids: &[&str], cache_control: Option<&str>) -> Result<Document, String> {
        let keys: Vec<_> = kids.iter().map(|kid| ed_key(kid)).collect();
        Ok(Document {
            text: json!({ "keys": keys }).to_string(),
            cache_control: cache_control.map(str::to_owned),
        })
    }

    /// Only the URL's own 200 brings keys: a redirect is a failed fetch, whichever scheme or
    /// host it points to (the runtime never follows it), and the keys at hand stay in use.
    #[test]
    fn a_redirect_is_a_failed_fetch() {
        assert_eq!(answer_status(200), Ok(()));
        for status in [301, 302, 303, 307, 308] {
            let why = answer_status(status).unwrap_err();
            assert!(why.contains("redirect") && why.contains(&status.to_string()), "{why}");
        }
        for status in [0, 201, 204, 304, 404, 500] {
            assert!(answer_status(status).is_err(), "{status}");
        }
        // Reported as a failure, it leaves the cache as any failed fetch does.
        let mut cache = JwksCache::default();
        let mut query = KeyQuery::new(Some("a"));
        assert_eq!(cache.lookup(&mut query, T0), Lookup::Wait);
        let fetch = cache.poll_fetch().expect("a fetch to start");
        assert!(cache.handle_fetched(T0, fetch, answer_status(302).map(|()| unreachable!())).is_err());
        assert_eq!(cache.lookup(&mut query, T0 + SECOND), Lookup::Unavailable);
    }

    fn kids(lookup: &Lookup) -> Vec<String> {
        match lookup {
            Lookup::Found(set) => set.keys.iter().filter_map(|key| key.kid.clone()).collect(),
            other => panic!("expected keys, got {other:?}"),
        }
    }

    /// One lookup from start to answer, with every fetch it waits for answered by `answer`
    /// at the time it is asked: the answer and how many fetches it took.
    fn resolve(
        cache: &mut JwksCache,
        kid: Option<&str>,
        now: u64,
        mut answer: impl FnMut() -> Result<Document, String>,
    ) -> (Lookup, usize) {
        let mut query = KeyQuery::new(kid);
        let mut fetches = 0;
        loop {
            match cache.lookup(&mut query, now) {
                Lookup::Wait => {
                    let request = cache.poll_fetch().expect("a wait comes with a fetch to start");
                    assert_eq!(cache.poll_fetch(), None, "one fetch at a time");
                    fetches += 1;
                    let _ = cache.handle_fetched(now, request, answer());
                }
                done => return (done, fetches),
            }
        }
    }

    /// A cache holding keys `kids`, fetched at `T0` with this `Cache-Control`.
    fn filled(kids: &[&str], cache_control: Option<&str>) -> JwksCache {
        let mut cache = JwksCache::default();
        let (lookup, fetches) = resolve(&mut cache, None, T0, || document(kids, cache_control));
        assert_eq!((fetches, self::kids(&lookup).len()), (1, kids.len()));
        cache
    }

    fn failed() -> Result<Document, String> {
        Err("HTTP 503".to_owned())
    }

    fn no_fetch() -> Result<Document, String> {
        panic!("no fetch expected")
    }

    /// Rule 6: a fetch that never reports (its request was cancelled) is waited for until
    /// `FETCH_LOST_AFTER_MS`, then counts as failed: lookups answer from what is at hand for
    /// the retry interval, the next fetch comes after it, and the lost one's late report is
    /// not taken and does not end the new one.
    #[test]
    fn a_fetch_that_never_reports_is_given_up_and_its_late_report_ignored() {
        let mut cache = JwksCache::default();
        let mut query = KeyQuery::new(Some("a"));
        assert_eq!(cache.lookup(&mut query, T0), Lookup::Wait);
        let lost = cache.poll_fetch().expect("the first fetch");

        let mut other = KeyQuery::new(Some("a"));
        assert_eq!(cache.lookup(&mut other, T0 + FETCH_LOST_AFTER_MS - 1), Lookup::Wait, "still under way");
        assert_eq!(cache.poll_fetch(), None, "one fetch at a time");
        assert!(!cache.take_lost_fetch());
        assert_eq!(
            cache.lookup(&mut other, T0 + FETCH_LOST_AFTER_MS),
            Lookup::Unavailable,
            "the waiter stops"
        );
        assert_eq!(cache.lookup(&mut query, T0 + FETCH_LOST_AFTER_MS), Lookup::Unavailable);
        assert!(cache.take_lost_fetch(), "told once");
        assert!(!cache.take_lost_fetch(), "and only once");
        let quiet_end = T0 + FETCH_LOST_AFTER_MS + RETRY_INTERVAL_MS;
        let (lookup, fetches) = resolve(&mut cache, Some("a"), quiet_end - 1, no_fetch);
        assert_eq!((lookup, fetches), (Lookup::Unavailable, 0), "no fetch in the retry interval");

        let mut next = KeyQuery::new(Some("a"));
        assert_eq!(cache.lookup(&mut next, quiet_end), Lookup::Wait);
        let running = cache.poll_fetch().expect("a new fetch after the interval");
        assert!(cache.handle_fetched(quiet_end + 1, lost, document(&["a"], None)).is_err(), "a late report");
        assert_eq!(cache.poll_fetch(), None, "the new fetch is still the one under way");
        assert_eq!(
            cache.lookup(&mut KeyQuery::new(Some("a")), quiet_end + 1),
            Lookup::Wait,
            "keys not taken"
        );
        cache.handle_fetched(quiet_end + 2, running, document(&["a"], None)).unwrap();
        assert_eq!(kids(&cache.lookup(&mut next, quiet_end + 2)), ["a"]);
    }

    /// A lost refresh of stale keys leaves them in use, as a failed one does (rule 3).
    #[test]
    fn a_lost_refresh_leaves_the_stale_keys_in_use() {
        let mut cache = filled(&["a"], None);
        let stale = T0 + DEFAULT_JWKS_TTL_SECONDS * SECOND;
        let mut query = KeyQuery::new(Some("a"));
        assert_eq!(cache.lookup(&mut query, stale), Lookup::Wait);
        let _lost = cache.poll_fetch().expect("the refresh");
        assert_eq!(kids(&cache.lookup(&mut query, stale + FETCH_LOST_AFTER_MS)), ["a"]);
        let (lookup, fetches) = resolve(&mut cache, Some("a"), stale + FETCH_LOST_AFTER_MS + 1, no_fetch);
        assert_eq!((kids(&lookup), fetches), (vec!["a".to_owned()], 0));
    }

    #[test]
    fn the_first_lookup_waits_for_a_fetch_and_fresh_keys_serve_without_one() {
        let mut cache = JwksCache::default();
        assert_eq!(cache.poll_fetch(), None, "nothing to fetch before a lookup asks");
        let (lookup, fetches) = resolve(&mut cache, Some("a"), T0, || document(&["a", "b"], None));
        assert_eq!((kids(&lookup), fetches), (vec!["a".to_owned(), "b".to_owned()], 1));
        for (kid, at) in [(Some("a"), T0 + SECOND), (Some("b"), T0 + 599 * SECOND), (None, T0 + 599 * SECOND)]
        {
            let (lookup, fetches) = resolve(&mut cache, kid, at, no_fetch);
            assert_eq!((kids(&lookup).len(), fetches), (2, 0));
        }
    }

    #[test]
    fn stale_keys_are_refetched_at_their_max_age_clamped() {
        let minute = Some("public, max-age=60");
        for (cache_control, ttl_seconds) in [
            (None, DEFAULT_JWKS_TTL_SECONDS),
            (Some("no-cache"), DEFAULT_JWKS_TTL_SECONDS),
            (Some("max-age=ten"), DEFAULT_JWKS_TTL_SECONDS),
            (minute, 60),
            (Some("max-age=0"), MIN_JWKS_TTL_SECONDS),
            (Some("max-age=5"), MIN_JWKS_TTL_SECONDS),
            (Some("max-age=604800"), MAX_JWKS_TTL_SECONDS),
            (Some("max-age=99999999999999999999999"), MAX_JWKS_TTL_SECONDS),
        ] {
            let mut cache = filled(&["a"], cache_control);
            let last_fresh = T0 + ttl_seconds * SECOND - 1;
            assert_eq!(resolve(&mut cache, Some("a"), last_fresh, no_fetch).1, 0, "{cache_control:?}");
            let stale = last_fresh + 1;
            let (lookup, fetches) = resolve(&mut cache, Some("a"), stale, || document(&["a"], minute));
            assert_eq!((kids(&lookup), fetches), (vec!["a".to_owned()], 1), "{cache_control:?}");
            // The new keys' own max-age counts from the refetch.
            assert_eq!(resolve(&mut cache, Some("a"), stale + 59 * SECOND, no_fetch).1, 0);
            assert_eq!(resolve(&mut cache, None, stale + 60 * SECOND, || document(&["a"], None)).1, 1);
        }
    }

    #[test]
    fn concurrent_lookups_share_one_fetch() {
        let mut cache = JwksCache::default();
        let (mut first, mut second, mut third) =
            (KeyQuery::new(Some("a")), KeyQuery::new(None), KeyQuery::new(Some("a")));
        assert_eq!(cache.lookup(&mut first, T0), Lookup::Wait);
        let request = cache.poll_fetch().expect("a fetch to start");
        // Asked while it runs: they wait for it, and no second fetch is handed out.
        assert_eq!(cache.lookup(&mut second, T0 + 1), Lookup::Wait);
        assert_eq!(cache.poll_fetch(), None);
        assert_eq!(cache.lookup(&mut third, T0 + 2), Lookup::Wait);
        assert_eq!(cache.poll_fetch(), None);
        cache.handle_fetched(T0 + 3, request, document(&["a"], None)).unwrap();
        for query in [&mut first, &mut second, &mut third] {
            assert_eq!(kids(&cache.lookup(query, T0 + 4)), vec!["a".to_owned()]);
        }
        assert_eq!(cache.poll_fetch(), None);
    }

    #[test]
    fn a_failed_first_fetch_leaves_the_keys_unavailable_for_30_s_then_recovers() {
        let mut cache = JwksCache::default();
        let (lookup, fetches) = resolve(&mut cache, Some("a"), T0, failed);
        assert_eq!((lookup, fetches), (Lookup::Unavailable, 1));
        // Within 30 s: answered at once, no fetch (one timeout per 30 s in an outage).
        assert_eq!(resolve(&mut cache, Some("a"), T0 + 29 * SECOND, no_fetch), (Lookup::Unavailable, 0));
        assert_eq!(resolve(&mut cache, None, T0 + 30 * SECOND - 1, no_fetch), (Lookup::Unavailable, 0));
        // Then the next lookup tries again; another failure starts another 30 s.
        let retry = T0 + 30 * SECOND;
        assert_eq!(resolve(&mut cache, Some("a"), retry, failed), (Lookup::Unavailable, 1));
        assert_eq!(resolve(&mut cache, Some("a"), retry + 29 * SECOND, no_fetch), (Lookup::Unavailable, 0));
        // Recovery: fresh keys, for their whole max-age.
        let recovered = retry + 30 * SECOND;
        let (lookup, fetches) = resolve(&mut cache, Some("a"), recovered, || document(&["a"], None));
        assert_eq!((kids(&lookup), fetches), (vec!["a".to_owned()], 1));
        assert_eq!(resolve(&mut cache, Some("a"), recovered + 599 * SECOND, no_fetch).1, 0);
    }

    #[test]
    fn a_failed_refresh_serves_the_stale_keys() {
        let not_a_jwks = Ok(Document { text: "<html>".to_owned(), cache_control: None });
        for failure in [failed(), not_a_jwks] {
            let mut cache = filled(&["a"], Some("max-age=60"));
            let stale = T0 + 60 * SECOND;
            let (lookup, fetches) = resolve(&mut cache, Some("a"), stale, || failure.clone());
            assert_eq!((kids(&lookup), fetches), (vec!["a".to_owned()], 1));
            // Quiet for 30 s: the stale keys at once.
            let (lookup, fetches) = resolve(&mut cache, None, stale + 30 * SECOND - 1, no_fetch);
            assert_eq!((kids(&lookup), fetches), (vec!["a".to_owned()], 0));
            // Then a fetch again, and its keys replace the stale ones.
            let (lookup, fetches) = resolve(&mut cache, None, stale + 30 * SECOND, || document(&["b"], None));
            assert_eq!((kids(&lookup), fetches), (vec!["b".to_owned()], 1));
        }
    }

    #[test]
    fn the_reason_a_fetch_failed_is_returned_for_the_log() {
        let mut cache = JwksCache::default();
        for (fetched, expected) in [
            (failed(), Err("HTTP 503".to_owned())),
            (
                Ok(Document { text: "{}".to_owned(), cache_control: None }),
                Err("not a usable JWKS".to_owned()),
            ),
            (document(&["a"], None), Ok(())),
        ] {
            let mut query = KeyQuery::new(None);
            assert_eq!(cache.lookup(&mut query, T0 + 60 * SECOND), Lookup::Wait);
            let request = cache.poll_fetch().expect("a fetch to start");
            let result = cache.handle_fetched(T0, request, fetched);
            match expected {
                Ok(()) => assert_eq!(result, Ok(())),
                Err(start) => {
                    assert!(result.as_ref().is_err_and(|why| why.starts_with(&start)), "{result:?}")
                }
            }
        }
    }

    #[test]
    fn a_lookup_in_the_quiet_time_waits_for_a_fetch_under_way() {
        let mut cache = filled(&["a"], Some("max-age=30"));
        // Stale, and the refresh fails: quiet until 60 s.
        assert_eq!(resolve(&mut cache, Some("a"), T0 + 30 * SECOND, failed).1, 1);
        // A new kid's refetch runs in the quiet time; a lookup of the stale keys waits for it.
        let during = T0 + 40 * SECOND;
        let (mut new, mut known) = (KeyQuery::new(Some("new")), KeyQuery::new(Some("a")));
        assert_eq!(cache.lookup(&mut new, during), Lookup::Wait);
        let request = cache.poll_fetch().expect("the kid's refetch");
        assert_eq!(cache.lookup(&mut known, during), Lookup::Wait, "waits for the fetch under way");
        assert_eq!(cache.poll_fetch(), None);
        cache.handle_fetched(during, request, document(&["a", "new"], None)).unwrap();
        assert_eq!(kids(&cache.lookup(&mut new, during)), vec!["a".to_owned(), "new".to_owned()]);
        assert_eq!(kids(&cache.lookup(&mut known, during)), vec!["a".to_owned(), "new".to_owned()]);
    }

    #[test]
    fn an_unknown_kid_refetches_at_most_once_per_30_s() {
        let mut cache = filled(&["a"], None);
        // A rotation: the refetch brings the new kid.
        let (lookup, fetches) = resolve(&mut cache, Some("b"), T0 + SECOND, || document(&["a", "b"], None));
        assert_eq!((kids(&lookup), fetches), (vec!["a".to_owned(), "b".to_owned()], 1));
        // Another unknown kid within 30 s: no refetch, and not refused as unknown either.
        assert_eq!(resolve(&mut cache, Some("c"), T0 + 30 * SECOND, no_fetch), (Lookup::Unavailable, 0));
        // Known kids still verify meanwhile.
        assert_eq!(kids(&resolve(&mut cache, Some("a"), T0 + 30 * SECOND, no_fetch).0).len(), 2);
        // 30 s after the last refetch: refetched; still absent, so unknown for good.
        let later = T0 + 31 * SECOND;
        assert_eq!(
            resolve(&mut cache, Some("c"), later, || document(&["a", "b"], None)),
            (Lookup::UnknownKid, 1)
        );
        assert_eq!(resolve(&mut cache, Some("c"), later + 29 * SECOND, no_fetch), (Lookup::Unavailable, 0));
    }

    #[test]
    fn an_unknown_kids_refetch_that_fails_leaves_its_keys_unavailable() {
        let mut cache = filled(&["a"], None);
        assert_eq!(resolve(&mut cache, Some("b"), T0 + SECOND, failed), (Lookup::Unavailable, 1));
        // The keys at hand still serve the kids they hold, without a fetch.
        let (lookup, fetches) = resolve(&mut cache, Some("a"), T0 + 2 * SECOND, no_fetch);
        assert_eq!((kids(&lookup), fetches), (vec!["a".to_owned()], 0));
    }

    #[test]
    fn a_second_unknown_kid_during_a_refetch_is_throttled() {
        let mut cache = filled(&["a"], None);
        let (mut b, mut c) = (KeyQuery::new(Some("b")), KeyQuery::new(Some("c")));
        assert_eq!(cache.lookup(&mut b, T0 + SECOND), Lookup::Wait);
        let request = cache.poll_fetch().expect("the refetch");
        // The throttle counts from the refetch's start, not its end.
        assert_eq!(cache.lookup(&mut c, T0 + SECOND), Lookup::Unavailable);
        cache.handle_fetched(T0 + 2 * SECOND, request, document(&["a", "b", "c"], None)).unwrap();
        assert_eq!(kids(&cache.lookup(&mut b, T0 + 2 * SECOND)).len(), 3);
        assert_eq!(cache.poll_fetch(), None);
    }

    #[test]
    fn a_refresh_that_lacks_the_kid_goes_on_to_its_refetch() {
        // Rule 5: a stale or missing JWKS, then the kid's refetch (today's behaviour).
        let mut cache = JwksCache::default();
        assert_eq!(resolve(&mut cache, Some("b"), T0, || document(&["a"], None)), (Lookup::UnknownKid, 2));
        let mut cache = filled(&["a"], None);
        let stale = T0 + 600 * SECOND;
        let mut answers = [failed(), document(&["a", "b"], None)].into_iter();
        let (lookup, fetches) =
            resolve(&mut cache, Some("b"), stale, || answers.next().expect("two fetches"));
        assert_eq!((kids(&lookup), fetches), (vec!["a".to_owned(), "b".to_owned()], 2));
    }
}
