//! Reconciliation of unknown outcomes (issue 25): where a route names a lookup
//! (`reconcile_url`, a template such as
//! `https://origin.example/v1/charges?idempotency_key={key}`), a key whose outcome is
//! unknown asks the origin whether it executed, instead of holding the key unknown until
//! its TTL ends.
//!
//! Rules (the key's driver, `core::machine`, applies them):
//! 1. The lookup is `GET` of the template with `{key}` replaced by the client's key,
//!    percent-encoded (every byte but the unreserved ones of RFC 3986 §2.3), with the
//!    caller's scope headers and the edge's signature (`ORIGIN_AUTH_SECRET`). It is stored
//!    with the claim, sealed (`STORAGE_ENCRYPTION_KEYS` is required: it holds the key and
//!    the caller's credentials), so that the object can ask from its alarm after a restart.
//! 2. The origin's answer decides: the route's "not found" status (404 unless
//!    `reconcile_not_found` says another 4xx) means never executed, and the key is
//!    released, so the next retry is forwarded (believed only once the origin had its
//!    timeout again since the outcome became unknown, `core::machine` rule 9); a 2xx means executed, and that answer
//!    becomes the stored final answer, replayed with [`RECONCILED_HEADER`]; anything else
//!    (another status, a timeout, a broken connection, an answer too large to store) says
//!    nothing, and the key stays unknown.
//! 3. When an outcome becomes unknown (a timeout, a reset after send, or a claim whose
//!    object died, past its lease), the alarm asks: first [`FIRST_DELAY_MS`] after, then
//!    with jittered exponential backoff up to [`MAX_DELAY_MS`], until the record's TTL.
//! 4. A retry that finds the outcome unknown asks at once (coalesced with the other retries
//!    of that moment, bounded by the route's origin timeout) unless a lookup already said
//!    nothing and the next is not due, then is answered as the record then says: the
//!    reconciled answer, a forward, or outcome-unknown.
//! 5. An answer the origin gave too large to store stays unknown and is never looked up:
//!    it would be too large again. Observe mode and asynchronous jobs do not reconcile.
//!
//! What the origin's lookup must promise is in docs/operations.md: it sees every committed
//! execution, and "not found" is final (the operation can no longer execute).

use super::codec::{Reader, Writer};
use super::config::ObjectPolicy;
use super::record::{Millis, StoredResponse};
use super::wire::{decode_policy, encode_policy};

/// The header on a replayed answer that a lookup gave, instead of the original reply.
pub const RECONCILED_HEADER: &str = "idempotency-reconciled";

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
    /// those that say nothing about the operation (401, 403, 408, 429).
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
        let not_found = match not_found {
            None => DEFAULT_NOT_FOUND,
            Some(status @ 400..=499) if !matches!(status, 401 | 403 | 408 | 429) => status as u16,
            Some(_) => {
                return Err(
                    "reconcile_not_found: expected a 4xx status other than 401, 403, 408 and 429".to_owned()
                )
            }
        };
        Ok(ReconcileRoute { template: template.to_owned(), not_found })
    }

    /// The lookup's URL for `key`.
    pub fn url_for(&self, key: &str) -> String {
        self.template.replace(KEY_PLACEHOLDER, &percent_encode(key))
    }

    pub fn template(&self) -> &str {
        &self.template
    }
}

/// Every byte but RFC 3986's unreserved characters, percent-encoded.
pub fn percent_encode(text: &str) -> String {
    use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
    const RESERVED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');
    utf8_percent_encode(text, RESERVED).to_string()
}

/// What a key's record keeps for its reconciliation (record extension, `core::record`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reconciling {
    /// The lookup as a sealed `core::async_job::StoredRequest` (`GET`, the URL, the scope
    /// headers, the scope salt), bound to `bound_at` and the record's fingerprint.
    pub sealed_lookup: Vec<u8>,
    /// When the lookup was sealed (the claim's time): part of the seal's binding.
    pub bound_at: Millis,
    pub not_found: u16,
    /// Lookups made so far that said nothing.
    pub asked: u16,
    /// When the alarm asks next (0: not before the outcome is unknown).
    pub next_at: Millis,
    /// The route's policy as the claim had it: the alarm has no request to read it from
    /// (the lookup's timeout, the answer's cap and TTL, the origin's service binding).
    pub policy: Box<ObjectPolicy>,
}

const RECONCILING_VERSION: u8 = 1;

impl Reconciling {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Writer::with_capacity(self.sealed_lookup.len() + 32);
        out.u8(RECONCILING_VERSION);
        out.bytes(&self.sealed_lookup);
        out.u64(self.bound_at);
        out.u16(self.not_found);
        out.u16(self.asked);
        out.u64(self.next_at);
        out.bytes(&encode_policy(&self.policy));
        out.into_bytes()
    }

    pub fn decode(bytes: &[u8]) -> Option<Reconciling> {
        let mut input = Reader::new(bytes);
        if input.u8().ok()? != RECONCILING_VERSION {
            return None;
        }
        let sealed_lookup = input.bytes().ok()?.to_vec();
        let reconciling = Reconciling {
            sealed_lookup,
            bound_at: input.u64().ok()?,
            not_found: input.u16().ok()?,
            asked: input.u16().ok()?,
            next_at: input.u64().ok()?,
            policy: Box::new(decode_policy(input.bytes().ok()?).ok()?),
        };
        input.finish().ok()?;
        (!reconciling.sealed_lookup.is_empty()).then_some(reconciling)
    }
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

/// The verdict on a lookup's answer: its status and, for a 2xx, the answer as it would be
/// stored (`None` when it could not be read whole within the stored-size cap). `None` for
/// a lookup that got no answer.
pub fn verdict(answer: Option<(u16, Option<StoredResponse>)>, not_found: u16) -> Verdict {
    match answer {
        Some((status, _)) if status == not_found => Verdict::NotExecuted,
        Some((200..=299, Some(mut response))) => {
            response.headers.retain(|(name, _)| !name.eq_ignore_ascii_case(RECONCILED_HEADER));
            response.headers.push((RECONCILED_HEADER.to_owned(), "true".to_owned()));
            Verdict::Executed(response)
        }
        _ => Verdict::Unsure,
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
        ] {
            let error = ReconcileRoute::parse(template, None).unwrap_err();
            assert!(error.contains(why), "{template}: {error}");
        }
        for status in [200, 401, 403, 408, 429, 500, 399] {
            assert!(ReconcileRoute::parse("https://h/{key}", Some(status)).is_err(), "{status}");
        }
    }

    #[test]
    fn verdicts_follow_the_status() {
        let answer = StoredResponse {
            status: 200,
            headers: vec![
                ("content-type".into(), "application/json".into()),
                (RECONCILED_HEADER.into(), "no".into()),
            ],
            body: b"{}".to_vec(),
        };
        assert_eq!(verdict(Some((404, None)), 404), Verdict::NotExecuted);
        assert_eq!(verdict(Some((410, None)), 410), Verdict::NotExecuted);
        assert_eq!(verdict(Some((404, None)), 410), Verdict::Unsure, "only the route's not-found status");
        let Verdict::Executed(stored) = verdict(Some((200, Some(answer.clone()))), 404) else { panic!() };
        assert_eq!(stored.status, 200);
        assert_eq!(stored.body, b"{}");
        let marks: Vec<_> = stored.headers.iter().filter(|(n, _)| n == RECONCILED_HEADER).collect();
        assert_eq!(
            marks,
            vec![&(RECONCILED_HEADER.to_owned(), "true".to_owned())],
            "the origin's own is replaced"
        );
        for unsure in [Some((200, None)), Some((500, None)), Some((503, None)), Some((302, None)), None] {
            assert_eq!(verdict(unsure.clone(), 404), Verdict::Unsure, "{unsure:?}");
        }
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

    #[test]
    fn the_extension_round_trips_and_refuses_what_it_cannot_read() {
        let reconciling = Reconciling {
            sealed_lookup: vec![1, 2, 3],
            bound_at: 7,
            not_found: 404,
            asked: 2,
            next_at: 99,
            policy: Box::new(crate::core::format_fixtures::policy()),
        };
        assert_eq!(Reconciling::decode(&reconciling.encode()), Some(reconciling.clone()));
        let mut other_version = reconciling.encode();
        other_version[0] = 2;
        assert_eq!(Reconciling::decode(&other_version), None);
        let mut longer = reconciling.encode();
        longer.push(0);
        assert_eq!(Reconciling::decode(&longer), None);
        let empty = Reconciling { sealed_lookup: Vec::new(), ..reconciling };
        assert_eq!(Reconciling::decode(&empty.encode()), None);
    }
}
