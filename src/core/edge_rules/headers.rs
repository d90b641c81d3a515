//! Which headers cross which hop.
//!
//! Owns the header rules; they see names (and the `Connection` value), never a request.
//! It also reads a request's headers as the runtime hands them over in one text
//! ([`HeaderLines`]).
//!
//! 1. Hop-by-hop headers (RFC 9110 §7.6.1, plus any named in `Connection`) never cross the
//!    proxy, in either direction.
//! 2. Towards the origin, `Host` and `Content-Length` are left for the runtime to set, and
//!    the worker's own internal headers are dropped. `Idempotency-Key` is forwarded, so an
//!    origin that honours keys can deduplicate too. A client's own `Idempotency-Claimed-At`
//!    is dropped from every forward whose headers the edge edits (every signed one; an
//!    unsigned pass-through goes as it came): the edge alone sets it, on the lookups it
//!    sends, and the hop's signature would otherwise cover a claim time the client chose ([`client_forward_edits`],
//!    [`passed_edits`]).
//! 3. A stored response keeps its end-to-end headers except `Set-Cookie` (a session cookie
//!    for the first caller must not be handed to whoever retries) and `Content-Length`
//!    (recomputed from the stored body).
//! 4. The headers the edge decides a request by are never hop-by-hop: the route's key
//!    header, the `SCOPE_HEADER` headers and the `REPLAY_CREDENTIAL_HEADERS`. A client's
//!    `Connection` that names one of them is not honoured for it (its other tokens are), so
//!    the origin receives the key the edge keyed by, the signature's key line is that key,
//!    and the origin sees the caller the edge scoped by ([`honoured_connection_tokens`]).
//!    Dropping the key there would have the origin execute a request it cannot deduplicate
//!    or look up; dropping a scope header would have it execute for another account than the
//!    one the edge keyed. Honouring a client's say over which of these crosses is not worth
//!    that; refusing the request would break a client over a header no recipient needs.
//! 5. A forward's headers are the request's with the edits of [`forward_edits`]: what must
//!    not cross deleted, the key set in its one spelling, the client IP rule applied.
//! 6. A replay carries the stored headers, then `Idempotent-Replayed: true` and the object's
//!    mark, each in place of any stored header of its name ([`replay_headers`]); a status
//!    that carries no body (101, 204, 205, 304) gets none ([`carries_body`]).

use std::borrow::Cow;

use crate::core::key_rules::machine::async_job::prefer_for_origin;
use crate::core::key_rules::reconcile::CLAIMED_AT_HEADER;

/// The header that marks every answer that did not come from this request's own execution.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// Prefix of the headers the Worker uses to talk to its Durable Object. Never forwarded.
pub const INTERNAL_PREFIX: &str = "x-idempotency-edge-";

/// Headers that ask an origin to run a request as another method. On a method a route does
/// not cover they would run a covered method unprotected, so they are refused there (unless
/// the route allows them).
pub const METHOD_OVERRIDE_HEADERS: [&str; 3] =
    ["x-http-method-override", "x-method-override", "x-http-method"];

const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The header names listed in a `Connection` value, lowercased.
pub fn connection_tokens(connection: Option<&str>) -> Vec<String> {
    connection
        .unwrap_or("")
        .split(',')
        .map(|token| token.trim().to_ascii_lowercase())
        .filter(|token| !token.is_empty())
        .collect()
}

/// The tokens of the first `Connection` header (any case) in a message's header list.
pub fn connection_tokens_in(headers: &[(String, String)]) -> Vec<String> {
    let connection = headers.iter().find(|(name, _)| name.eq_ignore_ascii_case("connection"));
    connection_tokens(connection.map(|(_, value)| value.as_str()))
}

/// The tokens of a request's `Connection` value that its forward to the origin honours
/// (rule 4): every one but the names in `end_to_end` (any case), the headers the edge keyed,
/// scoped and bound the request by (`core::edge_rules::config::Config::end_to_end_headers`).
pub fn honoured_connection_tokens(connection: Option<&str>, end_to_end: &[&str]) -> Vec<String> {
    let mut tokens = connection_tokens(connection);
    tokens.retain(|token| !end_to_end.iter().any(|name| name.eq_ignore_ascii_case(token)));
    tokens
}

/// True for a hop-by-hop header, given the tokens of the message's `Connection` header.
pub fn is_hop_by_hop(name: &str, connection_tokens: &[String]) -> bool {
    HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h))
        || connection_tokens.iter().any(|t| name.eq_ignore_ascii_case(t))
}

/// Whether a client request header is sent on to the origin.
pub fn forward_to_origin(name: &str, connection_tokens: &[String]) -> bool {
    !is_hop_by_hop(name, connection_tokens)
        && !name.eq_ignore_ascii_case("host")
        && !name.eq_ignore_ascii_case("content-length")
        && !is_internal(name)
}

/// Whether an origin response header is stored for replay.
pub fn store_for_replay(name: &str, connection_tokens: &[String]) -> bool {
    !is_hop_by_hop(name, connection_tokens)
        && !name.eq_ignore_ascii_case("set-cookie")
        && !name.eq_ignore_ascii_case("content-length")
}

/// The headers of an origin answer (in order) that are stored for replay, given its
/// `Connection` tokens ([`store_for_replay`]).
pub fn stored_for_replay(
    headers: &[(String, String)],
    connection_tokens: &[String],
) -> Vec<(String, String)> {
    headers.iter().filter(|(name, _)| store_for_replay(name, connection_tokens)).cloned().collect()
}

/// Whether an origin response header is passed to the caller whose request executed.
pub fn pass_to_caller(name: &str, connection_tokens: &[String]) -> bool {
    !is_hop_by_hop(name, connection_tokens) && !name.eq_ignore_ascii_case("content-length")
}

fn is_internal(name: &str) -> bool {
    // Compared as bytes: slicing the `str` would panic when a non-ASCII character straddles
    // the prefix's end.
    name.as_bytes()
        .get(..INTERNAL_PREFIX.len())
        .is_some_and(|prefix| prefix.eq_ignore_ascii_case(INTERNAL_PREFIX.as_bytes()))
}

/// `TRUSTED_CLIENT_IP`: the forwarding headers a forward carries, set from the connecting
/// IP (`CF-Connecting-IP`, set by Cloudflare's edge and not by the client) and never from
/// the client: each of the client's own is deleted (`None`), then, when the connecting IP is
/// known, `X-Forwarded-For` and `X-Real-IP` carry it, in this order.
pub fn client_ip_headers(connecting_ip: Option<&str>) -> Vec<HeaderEdit<'static>> {
    let mut edits: Vec<HeaderEdit<'static>> =
        ["x-forwarded-for", "forwarded", "x-real-ip"].into_iter().map(|name| (name, None)).collect();
    if let Some(ip) = connecting_ip {
        edits.extend(
            ["x-forwarded-for", "x-real-ip"].into_iter().map(|name| (name, Some(Cow::Owned(ip.to_owned())))),
        );
    }
    edits
}

/// One edit of a copy of a request's headers: the name set to the value, or deleted (`None`).
pub type HeaderEdit<'a> = (&'a str, Option<Cow<'a, str>>);

/// The edits that turn a request's headers (read whole as `lines`) into its forward's, in
/// the order the runtime applies them to a copy (rule 5): every header that must not cross
/// deleted (rules 1, 2, and 4 for the names in `end_to_end`), then the key set in its one
/// spelling (`key`: the route's key header and the value, `core::primitives::key` rule 6),
/// then with `trusted_client_ip` the forwarding headers replaced ([`client_ip_headers`]).
pub fn forward_edits<'a>(
    lines: &'a HeaderLines,
    end_to_end: &[&str],
    key: Option<(&'a str, &'a str)>,
    trusted_client_ip: bool,
) -> Vec<HeaderEdit<'a>> {
    let tokens = honoured_connection_tokens(lines.get("connection").as_deref(), end_to_end);
    let refused = lines.pairs().filter(|(name, _)| !forward_to_origin(name, &tokens));
    let mut edits: Vec<HeaderEdit<'a>> = refused.map(|(name, _)| (name, None)).collect();
    edits.extend(key.map(|(name, value)| (name, Some(Cow::Borrowed(value)))));
    if trusted_client_ip {
        let connecting_ip = lines.get("cf-connecting-ip");
        edits.extend(client_ip_headers(connecting_ip.as_deref()));
    }
    edits
}

/// [`forward_edits`] for a client's request on its way to the key's object (rule 2): a
/// client's own `Idempotency-Claimed-At` deleted too, where it sent one.
pub fn client_forward_edits<'a>(
    lines: &'a HeaderLines,
    end_to_end: &[&str],
    key: Option<(&'a str, &'a str)>,
    trusted_client_ip: bool,
) -> Vec<HeaderEdit<'a>> {
    let mut edits = forward_edits(lines, end_to_end, key, trusted_client_ip);
    let claim_times = lines.pairs().filter(|(name, _)| name.eq_ignore_ascii_case(CLAIMED_AT_HEADER));
    edits.extend(claim_times.map(|(name, _)| (name, None)));
    edits
}

/// The edits of a forward the Worker makes itself (pass-through, observe mode, failing open;
/// rule 2): a client's `Idempotency-Claimed-At` deleted, then with `trusted_client_ip` the
/// forwarding headers replaced from `connecting_ip` ([`client_ip_headers`]).
pub fn passed_edits(trusted_client_ip: bool, connecting_ip: Option<&str>) -> Vec<HeaderEdit<'static>> {
    let mut edits: Vec<HeaderEdit<'static>> = vec![(CLAIMED_AT_HEADER, None)];
    if trusted_client_ip {
        edits.extend(client_ip_headers(connecting_ip));
    }
    edits
}

/// A stored answer's headers as an answer from the store carries them (rule 6): the stored
/// ones in order, then `Idempotent-Replayed: true` when `replayed` and the object's `mark`
/// (`core::edge_rules::wire::ANSWERED_HEADER` and its plain value) when given, each in
/// place of any stored header of its name.
pub fn replay_headers<'a>(
    stored: &'a [(String, String)],
    replayed: bool,
    mark: Option<(&'a str, &'a str)>,
) -> Vec<(&'a str, &'a str)> {
    let added = [replayed.then_some((REPLAYED_HEADER, "true")), mark];
    let added = || added.into_iter().flatten();
    let replaced = |name: &str| added().any(|(set, _)| set.eq_ignore_ascii_case(name));
    let kept = stored.iter().filter(|(name, _)| !replaced(name));
    kept.map(|(name, value)| (name.as_str(), value.as_str())).chain(added()).collect()
}

/// Whether an answer with `status` may carry a body (rule 6): the runtime throws on a body
/// for 101, 204, 205 and 304.
pub fn carries_body(status: u16) -> bool {
    !matches!(status, 101 | 204 | 205 | 304)
}

/// A request's headers, read whole once (`runtime::boundary`) and then looked up here
/// without crossing the JS↔Wasm boundary again: each header as `name\nvalue\n`, as the runtime's
/// `Headers` iterates them (lowercase names; repeated lines joined with `", "`). A name
/// cannot hold a line feed and the runtime refuses one in a value, so the text splits
/// without escapes; a field left without its pair (never written by the runtime) is
/// ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderLines {
    text: String,
}

impl HeaderLines {
    pub fn new(text: String) -> HeaderLines {
        HeaderLines { text }
    }

    /// Every header, as (name, value), in the runtime's order.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        let mut fields = self.text.split('\n');
        std::iter::from_fn(move || Some((fields.next()?, fields.next()?)))
    }

    /// Every header, owned.
    pub fn to_pairs(&self) -> Vec<(String, String)> {
        self.pairs().map(|(name, value)| (name.to_owned(), value.to_owned())).collect()
    }

    /// The value of `name` (any case) as `Headers.get` answers it: `None` when absent,
    /// repeated entries (`Set-Cookie` is iterated one line at a time) joined with `", "`.
    pub fn get(&self, name: &str) -> Option<String> {
        let mut values = self.pairs().filter(|(present, _)| present.eq_ignore_ascii_case(name));
        let mut joined = values.next()?.1.to_owned();
        for (_, value) in values {
            joined.push_str(", ");
            joined.push_str(value);
        }
        Some(joined)
    }

    /// A job's request headers as the origin gets them: end to end (the Worker's internal
    /// headers dropped, [`forward_to_origin`]), and `respond-async` taken out of `Prefer`
    /// (the edge honoured it; the origin must answer with its final answer).
    pub fn for_job(&self) -> Vec<(String, String)> {
        let kept = self.pairs().filter(|(name, _)| forward_to_origin(name, &[]));
        kept.filter_map(|(name, value)| match name.eq_ignore_ascii_case("prefer") {
            true => prefer_for_origin(value).map(|value| (name.to_owned(), value)),
            false => Some((name.to_owned(), value.to_owned())),
        })
        .collect()
    }

    /// The names of the headers that `keep` refuses, as one text (`name\n` each) for the
    /// runtime to delete from a copy in one call.
    pub fn refused_names(&self, keep: impl Fn(&str) -> bool) -> String {
        let mut names = String::new();
        for (name, _) in self.pairs().filter(|(name, _)| !keep(name)) {
            names.push_str(name);
            names.push('\n');
        }
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jobs_headers_drop_internal_ones_and_respond_async() {
        let lines = HeaderLines::new(
            "content-type\napplication/json\nhost\ne.test\nprefer\nrespond-async, wait=5\nx-idempotency-edge-fingerprint\nf\n"
                .to_owned(),
        );
        let kept = lines.for_job();
        assert_eq!(kept[0], ("content-type".to_owned(), "application/json".to_owned()));
        assert_eq!(kept.len(), 2, "{kept:?}");
        assert_eq!(kept[1].0, "prefer");
        assert!(!kept[1].1.contains("respond-async"), "{kept:?}");
        let only_async = HeaderLines::new("prefer\nrespond-async\n".to_owned());
        assert!(only_async.for_job().is_empty());
    }

    #[test]
    fn a_forward_drops_what_must_not_cross_then_sets_the_key_then_the_client_ip() {
        let lines = HeaderLines::new(
            "connection\nidempotency-key, x-trace\ncontent-length\n3\ncf-connecting-ip\n203.0.113.7\nhost\ne.test\nidempotency-key\nk1\nx-forwarded-for\n10.0.0.1\nx-idempotency-edge-call\nc\nx-trace\nt\ncontent-type\ntext/plain\n"
                .to_owned(),
        );
        let edits = forward_edits(&lines, &["Idempotency-Key"], Some(("idempotency-key", "\"k1\"")), true);
        let deleted: Vec<&str> = edits
            .iter()
            .take(5)
            .map(|(name, value)| {
                assert!(value.is_none(), "{name}");
                *name
            })
            .collect();
        // The client's `Connection` cannot take the key off (rule 4); its other token is honoured.
        assert_eq!(deleted, ["connection", "content-length", "host", "x-idempotency-edge-call", "x-trace"]);
        assert_eq!(
            edits[5],
            ("idempotency-key", Some(Cow::Borrowed("\"k1\""))),
            "the key in its one spelling"
        );
        let client: Vec<(&str, Option<&str>)> = edits[6..].iter().map(|(n, v)| (*n, v.as_deref())).collect();
        assert_eq!(client[..3], [("x-forwarded-for", None), ("forwarded", None), ("x-real-ip", None)]);
        assert_eq!(
            client[3..],
            [("x-forwarded-for", Some("203.0.113.7")), ("x-real-ip", Some("203.0.113.7"))]
        );
        // Without the key or the client IP rule, only deletions; the client's forwarding headers stay.
        let plain = forward_edits(&lines, &[], None, false);
        assert!(plain.iter().all(|(name, value)| value.is_none() && *name != "x-forwarded-for"));
        assert!(plain.iter().any(|(name, _)| *name == "idempotency-key"), "a named token is hop-by-hop here");
    }

    /// Only the edge sets a claim's time, on its lookups: a client's own never reaches the
    /// origin, whichever forward carries the request; the lookups' own filter keeps theirs.
    #[test]
    fn a_clients_claim_time_is_never_forwarded() {
        let lines = HeaderLines::new("idempotency-claimed-at\n1\ncontent-type\ntext/plain\n".to_owned());
        let edits = client_forward_edits(&lines, &[], None, false);
        assert_eq!(edits, [("idempotency-claimed-at", None)]);
        let none_sent = HeaderLines::new("content-type\ntext/plain\n".to_owned());
        assert!(client_forward_edits(&none_sent, &[], None, false).is_empty(), "nothing to delete");
        assert!(forward_edits(&lines, &[], None, false).is_empty(), "the object's own sends keep it");
        assert_eq!(passed_edits(false, None), [("idempotency-claimed-at", None)]);
        let trusted = passed_edits(true, Some("203.0.113.7"));
        assert_eq!(trusted[0], ("idempotency-claimed-at", None));
        assert_eq!(trusted[1..], client_ip_headers(Some("203.0.113.7"))[..]);
    }

    #[test]
    fn a_replay_is_marked_once_in_place_of_stored_marks() {
        let stored: Vec<(String, String)> =
            [("content-type", "application/json"), ("Idempotent-Replayed", "false"), ("x-b", "2")]
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect();
        use crate::core::edge_rules::wire::{ANSWERED_HEADER, ANSWERED_PLAIN};
        let replay = replay_headers(&stored, true, Some((ANSWERED_HEADER, ANSWERED_PLAIN)));
        assert_eq!(
            replay,
            [
                ("content-type", "application/json"),
                ("x-b", "2"),
                (REPLAYED_HEADER, "true"),
                (ANSWERED_HEADER, ANSWERED_PLAIN)
            ]
        );
        assert_eq!(replay_headers(&stored, false, None).len(), 3, "unmarked: as stored");
        assert_eq!(replay_headers(&stored, true, None).last(), Some(&(REPLAYED_HEADER, "true")));
    }

    #[test]
    fn only_statuses_that_may_carry_a_body_get_one() {
        for status in [101, 204, 205, 304] {
            assert!(!carries_body(status), "{status}");
        }
        for status in [200, 201, 202, 206, 301, 400, 409, 422, 500, 503] {
            assert!(carries_body(status), "{status}");
        }
    }

    #[test]
    fn hop_by_hop_headers_never_cross() {
        let tokens = connection_tokens(Some("close, X-Trace"));
        for name in ["Connection", "keep-alive", "Transfer-Encoding", "Upgrade", "TE", "x-trace"] {
            assert!(!forward_to_origin(name, &tokens), "{name}");
            assert!(!store_for_replay(name, &tokens), "{name}");
            assert!(!pass_to_caller(name, &tokens), "{name}");
        }
    }

    #[test]
    fn an_answers_connection_tokens_come_from_its_connection_header() {
        let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
            list.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
        };
        let answer = pairs(&[("x-a", "1"), ("Connection", "close, X-Trace"), ("connection", "x-other")]);
        assert_eq!(connection_tokens_in(&answer), ["close", "x-trace"]);
        assert!(connection_tokens_in(&pairs(&[("x-connection", "x-a")])).is_empty());
    }

    #[test]
    fn a_trusted_client_ip_replaces_every_forwarding_header_the_client_sent() {
        let edits = client_ip_headers(Some("203.0.113.7"));
        let deleted: Vec<&str> = edits.iter().filter(|(_, v)| v.is_none()).map(|(n, _)| *n).collect();
        assert_eq!(deleted, ["x-forwarded-for", "forwarded", "x-real-ip"]);
        let set: Vec<(&str, &str)> = edits.iter().filter_map(|(n, v)| Some((*n, v.as_deref()?))).collect();
        assert_eq!(set, [("x-forwarded-for", "203.0.113.7"), ("x-real-ip", "203.0.113.7")]);
        let last_delete = edits.iter().rposition(|(_, v)| v.is_none());
        assert!(last_delete < edits.iter().position(|(_, v)| v.is_some()), "deleted before set");
        assert!(client_ip_headers(None).iter().all(|(_, v)| v.is_none()), "no IP: none forwarded");
    }

    #[test]
    fn an_answer_is_stored_without_cookies_lengths_or_hop_by_hop_headers_in_order() {
        let answer: Vec<(String, String)> = [
            ("Content-Type", "application/json"),
            ("Set-Cookie", "session=1"),
            ("Content-Length", "12"),
            ("X-Trace", "abc"),
            ("Keep-Alive", "timeout=5"),
            ("X-Request-Id", "r-1"),
        ]
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
        let stored = stored_for_replay(&answer, &connection_tokens(Some("X-Trace")));
        let names: Vec<&str> = stored.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["Content-Type", "X-Request-Id"]);
    }

    #[test]
    fn request_headers_towards_the_origin() {
        assert!(forward_to_origin("Idempotency-Key", &[]));
        assert!(forward_to_origin("Authorization", &[]));
        assert!(forward_to_origin("content-type", &[]));
        assert!(!forward_to_origin("Host", &[]));
        assert!(!forward_to_origin("X-Idempotency-Edge-Fingerprint", &[]));
    }

    /// A client's `Connection` cannot take the key, the caller or its credential off the
    /// forward: the edge decided by them, so the origin (and the signature's key line) gets
    /// them as the edge read them. Other tokens are still honoured.
    #[test]
    fn the_headers_the_edge_decides_by_are_never_hop_by_hop() {
        use crate::core::edge_rules::config::Config;
        use crate::core::edge_rules::routes::VAR_ROUTES;
        use crate::core::edge_rules::scope::VAR_REPLAY_CREDENTIAL_HEADERS;
        use crate::core::edge_rules::scope::VAR_SCOPE_HEADER;
        let vars = [
            (VAR_SCOPE_HEADER, "X-Api-Key-Id, Stripe-Account"),
            (VAR_REPLAY_CREDENTIAL_HEADERS, "Authorization, Signature"),
            (VAR_ROUTES, r#"[{"pattern":"/rid/*","key_header":"X-Request-Id"}]"#),
        ];
        let config =
            Config::from_vars(|name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)).unwrap();
        for (path, key_header) in [("/v1/charges", "Idempotency-Key"), ("/rid/1", "X-Request-Id")] {
            let policy = config.policy_for(path);
            let end_to_end = config.end_to_end_headers(&policy);
            let connection = format!(
                "close, {key_header}, x-api-key-id, STRIPE-ACCOUNT, Authorization, signature, X-Trace"
            );
            let tokens = honoured_connection_tokens(Some(&connection), &end_to_end);
            assert_eq!(tokens, ["close", "x-trace"], "{path}");
            for name in [key_header, "X-Api-Key-Id", "Stripe-Account", "authorization", "Signature"] {
                assert!(forward_to_origin(name, &tokens), "{path}: {name} crosses");
            }
            assert!(!forward_to_origin("x-trace", &tokens), "another token is still honoured");
            assert!(!forward_to_origin("connection", &tokens), "and Connection itself never crosses");
        }
        // The route's key header is protected there only: elsewhere it is an ordinary header.
        let plain = config.end_to_end_headers(&config.policy_for("/v1/charges"));
        let tokens = honoured_connection_tokens(Some("X-Request-Id"), &plain);
        assert!(!forward_to_origin("x-request-id", &tokens));
        // The fixed hop-by-hop headers stay hop-by-hop whatever is protected.
        assert!(!forward_to_origin("keep-alive", &honoured_connection_tokens(None, &plain)));
        // The default configuration protects the key and `Authorization`.
        let default = Config::from_vars(|_| None).unwrap();
        let policy = default.policy_for("/");
        assert_eq!(default.end_to_end_headers(&policy), ["idempotency-key", "authorization"]);
    }

    #[test]
    fn non_ascii_names_are_classified_without_panicking() {
        // Found by the key fuzz check: a multi-byte character across the prefix's end.
        assert!(forward_to_origin("x-idempotency-edg\u{e9}", &[]));
        assert!(forward_to_origin("x-idempotency-edge\u{e9}", &[]));
        assert!(!forward_to_origin("X-IDEMPOTENCY-EDGE-\u{e9}", &[]));
        assert!(forward_to_origin("\u{e9}", &[]));
    }

    #[test]
    fn stored_headers_leave_out_cookies() {
        assert!(store_for_replay("content-type", &[]));
        assert!(store_for_replay("x-request-id", &[]));
        assert!(!store_for_replay("Set-Cookie", &[]));
        assert!(pass_to_caller("Set-Cookie", &[]));
    }

    #[test]
    fn header_lines_read_as_the_runtime_reads_headers() {
        let lines = HeaderLines::new(
            "authorization\nBearer a\ncontent-type\napplication/json\nset-cookie\na=1\nset-cookie\nb=2\nx-empty\n\n"
                .to_owned(),
        );
        assert_eq!(lines.get("Authorization").as_deref(), Some("Bearer a"));
        assert_eq!(lines.get("content-type").as_deref(), Some("application/json"));
        assert_eq!(lines.get("set-cookie").as_deref(), Some("a=1, b=2"), "repeated entries joined");
        assert_eq!(lines.get("x-empty").as_deref(), Some(""), "present and empty is not absent");
        assert_eq!(lines.get("x-absent"), None);
        assert_eq!(lines.pairs().count(), 5);
        let tokens = connection_tokens(None);
        assert_eq!(
            lines.refused_names(|name| name != "authorization" && forward_to_origin(name, &tokens)),
            "authorization\n"
        );
        assert_eq!(HeaderLines::new(String::new()).pairs().count(), 0, "no headers");
        assert_eq!(HeaderLines::new("dangling".to_owned()).get("dangling"), None, "a field without its pair");
    }

    proptest::proptest! {
        /// Whatever headers the runtime iterates (lowercase token names, values of any byte
        /// but a line feed, as `Headers` holds them), the text `runtime::boundary` writes reads
        /// back as the same pairs, and `get` answers as `Headers.get` does.
        #[test]
        fn header_lines_read_back_what_the_runtime_wrote(
            headers in proptest::collection::vec(("[a-z0-9-]{1,12}", "[\\x00-\\x09\\x0b-\\xff]{0,24}"), 0..12)
        ) {
            let text: String = headers.iter().map(|(name, value)| format!("{name}\n{value}\n")).collect();
            let lines = HeaderLines::new(text);
            let read: Vec<(String, String)> = lines.to_pairs();
            proptest::prop_assert_eq!(&read, &headers);
            for (name, _) in &headers {
                let values: Vec<&str> =
                    headers.iter().filter(|(other, _)| other == name).map(|(_, value)| value.as_str()).collect();
                proptest::prop_assert_eq!(lines.get(&name.to_ascii_uppercase()), Some(values.join(", ")));
            }
        }
    }
}
