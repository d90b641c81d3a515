//! Whose key is this: the scope rules, from the scope headers and a verified token to the
//! [`Scope`] a key lives in.
//!
//! Owns the scope variables (`SCOPE_HEADER`, `SCOPE_JWT_*`, `SCOPE_JWKS*`,
//! `ALLOW_ANONYMOUS`), their validation, and the decision per request. The runtime reads
//! the headers, fetches keys and checks signatures; every choice is made here.
//!
//! 1. `SCOPE_HEADER` lists one or more headers. The first is the credential; the others
//!    (e.g. `Stripe-Account`) are part of every scope, absent ones included, so callers on
//!    behalf of different accounts never share one.
//! 2. An absent or empty credential is anonymous: 401 `missing-credential` unless
//!    `ALLOW_ANONYMOUS` (or the route's `anonymous: "allow"`) keeps one shared scope.
//! 3. Without a scope claim (`SCOPE_JWT_CLAIM` or the route's `scope_claim`), the scope is
//!    the credential hash, exactly as before the claim existed.
//! 4. With one, the credential's token (after an optional `Bearer `) is verified (see
//!    `jwt`). A token has one scope, everywhere: it verifies into the issuer and the
//!    claim's value, or it is refused. Were it to fall back to its credential hash when it
//!    cannot be verified, two isolates (one with the keys, one without) would put one retry
//!    into two scopes, and execute it twice.
//!    - A transient reason (the JWKS cannot be had, or a new `kid` waits for the next
//!      refetch) is 503 `identity-unavailable` with `Retry-After`.
//!    - A permanent one (bad signature, expired, wrong issuer or audience, an unusable
//!      claim) is 401 `unverified-credential`.
//!    - Only a credential that is not a token at all (an opaque API key) is scoped by its
//!      credential hash, in a domain no verified scope shares; with `SCOPE_JWT_REQUIRED`
//!      it is 401 `unverified-credential` too.
//! 5. A replay goes only to the caller who made the original. Where the scope is formed
//!    from a header that is not the secret itself (`SCOPE_HEADER = X-Api-Key-Id` for a
//!    signature scheme), anyone who knows the key id, a key and the payload would read the
//!    stored answer. So a credential's (or an anonymous) scope binds each key to the values
//!    of `REPLAY_CREDENTIAL_HEADERS` (default `Authorization`) that the scope headers do
//!    not already hold: the binding is folded into the payload fingerprint
//!    ([`caller_binding`], `fingerprint::bound_to_caller`), so a request with other values
//!    is refused as a reuse of the key with another request (422) and gets no answer, no
//!    wait on the running execution, and no execution. A retry signed anew (per-request
//!    signatures) is refused the same way: it gets a clear problem, never a second
//!    execution. A verified claim's scope needs no binding (the claim is the caller; a
//!    refreshed token must still replay), and neither does the default, where the scope
//!    header is `Authorization` itself.
//! 6. The rate limiter (`RATE_LIMITER`) counts a verified claim's scope; a credential's
//!    scope and the caller's IP (`CF-Connecting-IP`), both, since anyone can make up a new
//!    credential per request; and an anonymous caller by its IP ([`rate_limit_keys`]). The
//!    IP is asked first, and the limiter is asked no further once a key is over: a client
//!    over its own IP's limit spends no scope's count. Where the scope binds replays
//!    (rule 5), the scope's count is the scope together with that binding: the scope then
//!    comes from a header that is no secret (a key id), and a stranger who sends the
//!    victim's key id with a credential of its own is counted apart from the victim.
//! 7. A scope is logged as `claim`, `credential` or `anonymous`, with the rule an
//!    unverified token failed; never a token, a claim value or a key.

use crate::core::formats::fingerprint::{caller_binding_digest, Digest256, Scope, ScopeField};
use crate::core::primitives::jwt::{
    parse_jwks, ClaimPath, Identity, JwksSource, KeySet, Unverified, Validation,
};
use crate::core::vocabulary::config_error::ConfigError;
use crate::core::vocabulary::problem::{Problem, ProblemKind};
use sha2::{Digest, Sha256};

/// The headers whose values name the caller (`Authorization` unless set).
pub const VAR_SCOPE_HEADER: &str = "SCOPE_HEADER";
pub const VAR_ALLOW_ANONYMOUS: &str = "ALLOW_ANONYMOUS";
pub const VAR_JWT_CLAIM: &str = "SCOPE_JWT_CLAIM";
pub const VAR_JWKS: &str = "SCOPE_JWKS";
pub const VAR_JWKS_URL: &str = "SCOPE_JWKS_URL";
pub const VAR_JWT_ISSUER: &str = "SCOPE_JWT_ISSUER";
pub const VAR_JWT_AUDIENCE: &str = "SCOPE_JWT_AUDIENCE";
pub const VAR_JWT_LEEWAY_SECONDS: &str = "SCOPE_JWT_LEEWAY_SECONDS";
pub const VAR_JWT_REQUIRED: &str = "SCOPE_JWT_REQUIRED";
/// A secret (`wrangler secret put`); the runtime reads it as a secret first.
pub const VAR_JWT_HS256_SECRET: &str = "SCOPE_JWT_HS256_SECRET";
/// The headers that carry the caller's secret (default `Authorization`): a stored answer,
/// or a running execution's, goes only to a request whose values of these headers are the
/// original's (rule 5).
pub const VAR_REPLAY_CREDENTIAL_HEADERS: &str = "REPLAY_CREDENTIAL_HEADERS";

/// Most headers in `SCOPE_HEADER`.
const MAX_SCOPE_HEADERS: usize = 8;
/// Largest clock leeway: more would keep expired tokens alive for hours.
const MAX_LEEWAY_SECONDS: u64 = 3_600;
/// How long a refusal for a transient reason asks the caller to wait: `jwks_cache` looks for
/// keys again (a failed JWKS fetch, an unknown `kid`) at most this often.
pub const JWKS_RETRY_SECONDS: u64 = 30;
/// RFC 7518 §3.2: an HS256 key must be at least as long as the hash (256 bits).
const MIN_HS256_SECRET_BYTES: usize = 32;

/// An HMAC secret whose `Debug` shows nothing of it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret(<{} bytes>)", self.0.len())
    }
}

/// The validated scope variables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopeConfig {
    /// Lowercase header names; the first is the credential.
    pub headers: Vec<String>,
    pub allow_anonymous: bool,
    /// `SCOPE_JWT_CLAIM`; `None`: the credential hash (routes may still name a claim).
    pub claim: Option<ClaimPath>,
    /// `SCOPE_JWKS`.
    pub jwks: Option<KeySet>,
    /// `SCOPE_JWKS_URL`.
    pub jwks_url: Option<String>,
    pub hs256_secret: Option<Secret>,
    pub validation: Validation,
    pub required: bool,
    /// `REPLAY_CREDENTIAL_HEADERS`, lowercase (rule 5).
    pub replay_headers: Vec<String>,
}

impl ScopeConfig {
    /// The headers a reconciliation's lookup carries (`core::key_rules::reconcile`): every header that
    /// names the caller (`SCOPE_HEADER`'s) and every one that carries its secret
    /// (`REPLAY_CREDENTIAL_HEADERS`'), once each, so that the origin answers for this caller
    /// only.
    pub fn lookup_headers(&self) -> Vec<String> {
        let mut names = self.headers.clone();
        for name in &self.replay_headers {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
        names
    }

    /// Parses the scope variables; `lookup` as in `Config::from_vars`.
    pub fn from_vars<'a>(
        lookup: &impl Fn(&'static str) -> Option<&'a str>,
    ) -> Result<ScopeConfig, ConfigError> {
        let headers =
            parse_header_list(VAR_SCOPE_HEADER, lookup(VAR_SCOPE_HEADER).unwrap_or("Authorization"))?;
        let replay_headers = parse_header_list(
            VAR_REPLAY_CREDENTIAL_HEADERS,
            lookup(VAR_REPLAY_CREDENTIAL_HEADERS)
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .unwrap_or("Authorization"),
        )?;
        let allow_anonymous = parse_bool(VAR_ALLOW_ANONYMOUS, lookup(VAR_ALLOW_ANONYMOUS))?;
        let required = parse_bool(VAR_JWT_REQUIRED, lookup(VAR_JWT_REQUIRED))?;
        let claim = match lookup(VAR_JWT_CLAIM).map(str::trim).unwrap_or("") {
            "" => None,
            text => Some(ClaimPath::parse(text).map_err(|reason| ConfigError::new(VAR_JWT_CLAIM, reason))?),
        };
        let jwks = match lookup(VAR_JWKS).map(str::trim).unwrap_or("") {
            "" => None,
            text => Some(
                parse_jwks(text, JwksSource::Inline).map_err(|reason| ConfigError::new(VAR_JWKS, reason))?,
            ),
        };
        let jwks_url = parse_jwks_url(lookup(VAR_JWKS_URL).unwrap_or(""))?;
        let hs256_secret = match lookup(VAR_JWT_HS256_SECRET) {
            None | Some("") => None,
            Some(secret) if secret.len() < MIN_HS256_SECRET_BYTES => {
                return Err(ConfigError::new(
                    VAR_JWT_HS256_SECRET,
                    format!("too short: HS256 needs a secret of at least {MIN_HS256_SECRET_BYTES} bytes"),
                ))
            }
            Some(secret) => Some(Secret(secret.as_bytes().to_vec())),
        };
        let text =
            |name: &'static str| lookup(name).map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned);
        let leeway_seconds = match lookup(VAR_JWT_LEEWAY_SECONDS).map(str::trim) {
            None | Some("") => 60,
            Some(raw) => raw
                .parse::<u64>()
                .ok()
                .filter(|s| raw.bytes().all(|b| b.is_ascii_digit()) && *s <= MAX_LEEWAY_SECONDS)
                .ok_or_else(|| {
                    ConfigError::new(
                        VAR_JWT_LEEWAY_SECONDS,
                        format!("expected a whole number of seconds from 0 to {MAX_LEEWAY_SECONDS}"),
                    )
                })?,
        };
        let validation =
            Validation { issuer: text(VAR_JWT_ISSUER), audience: text(VAR_JWT_AUDIENCE), leeway_seconds };
        let config = ScopeConfig {
            headers,
            allow_anonymous,
            claim,
            jwks,
            jwks_url,
            hs256_secret,
            validation,
            required,
            replay_headers,
        };
        if config.claim.is_some() && !config.has_keys() {
            return Err(ConfigError::new(
                VAR_JWT_CLAIM,
                "a scope claim needs a key to verify tokens: set SCOPE_JWKS, SCOPE_JWKS_URL or SCOPE_JWT_HS256_SECRET",
            ));
        }
        Ok(config)
    }

    /// Whether a key is bound to its caller's replay credential (rule 5): only when some
    /// `REPLAY_CREDENTIAL_HEADERS` header is not already part of the scope.
    pub fn binds_replays(&self) -> bool {
        self.replay_headers.iter().any(|name| !self.headers.contains(name))
    }

    /// Whether any key source is configured.
    pub fn has_keys(&self) -> bool {
        self.jwks.is_some() || self.jwks_url.is_some() || self.hs256_secret.is_some()
    }

    /// Checks what the routes ask of the scope variables: a route's claim needs a key,
    /// and `SCOPE_JWT_REQUIRED` needs a claim somewhere.
    pub fn check_route_claims(&self, route_claims: &[Option<&ClaimPath>]) -> Result<(), ConfigError> {
        let route_claim = route_claims.iter().any(Option::is_some);
        if route_claim && !self.has_keys() {
            return Err(ConfigError::new(
                super::routes::VAR_ROUTES,
                "a route's scope_claim needs a key to verify tokens: set SCOPE_JWKS, SCOPE_JWKS_URL or SCOPE_JWT_HS256_SECRET",
            ));
        }
        if self.required && self.claim.is_none() && !route_claim {
            return Err(ConfigError::new(
                VAR_JWT_REQUIRED,
                "true needs a scope claim: set SCOPE_JWT_CLAIM (or a route's scope_claim)",
            ));
        }
        Ok(())
    }
}

/// The scope rule in effect for one request path: which claim names the caller, and
/// whether anonymous callers are let in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScopeRule<'a> {
    /// The claim that names the caller; `None`: the credential hash.
    pub claim: Option<&'a ClaimPath>,
    pub anonymous_allowed: bool,
}

/// How a scope was reached, for the log line and the metrics. Never holds a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScopeKind {
    /// A verified claim.
    Claim,
    /// The credential hash (no claim configured, or the token did not verify).
    Credential,
    /// No credential; `ALLOW_ANONYMOUS`.
    Anonymous,
}

impl ScopeKind {
    pub fn slug(self) -> &'static str {
        match self {
            ScopeKind::Claim => "claim",
            ScopeKind::Credential => "credential",
            ScopeKind::Anonymous => "anonymous",
        }
    }
}

/// The binding of a key to its caller's replay credential (rule 5): `None` where none
/// applies (a verified claim, or a scope that holds every replay header already), else a
/// digest of `replay`, the values of `REPLAY_CREDENTIAL_HEADERS` in their order (absent
/// ones included).
pub fn caller_binding(config: &ScopeConfig, kind: ScopeKind, replay: &ScopeHeaders<'_>) -> Option<Digest256> {
    (kind != ScopeKind::Claim && config.binds_replays()).then(|| caller_binding_digest(replay))
}

/// The keys a covered request is counted under by the rate limiter, in the order the
/// limiter is asked: it is over the limit when any of them is, and the keys after the first
/// one over are not counted (rule 6). `scope_salt` is the scope's key salt (a hash: never
/// the credential); `binding` the key's [`caller_binding`], if any; `client_ip` is
/// `CF-Connecting-IP`, set by Cloudflare's edge.
///
/// The IP comes first: counted after a scope, a client over its own IP's limit would still
/// spend that scope's count, and one IP could hold any caller whose key id it knows at the
/// limit. A bound scope's key holds the binding, so only requests that carry the caller's
/// own credential count against it.
pub fn rate_limit_keys(
    kind: ScopeKind,
    scope_salt: &Digest256,
    binding: Option<&Digest256>,
    client_ip: Option<&str>,
) -> Vec<String> {
    let ip = || format!("ip:{}", client_ip.unwrap_or_default());
    let scope = || match binding {
        None => format!("scope:{}", scope_salt.to_hex()),
        Some(binding) => format!("scope:{}", bound_limit_key(scope_salt, binding).to_hex()),
    };
    match kind {
        // A verified claim is the caller itself, wherever it calls from.
        ScopeKind::Claim => vec![scope()],
        // A credential is whatever the caller sent: counted per IP too, so that a new
        // random credential per request does not make a new caller per request.
        ScopeKind::Credential => vec![ip(), scope()],
        ScopeKind::Anonymous => vec![ip()],
    }
}

/// What the limiter's answer for one of the [`rate_limit_keys`] means (`Ok(within)`, or the
/// limiter's error).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterLimit {
    /// Within the limit: ask about the next key.
    Next,
    /// Over it: refused (429), and the keys after it are not counted.
    Over,
    /// The limiter failed: the request goes on, and this line says so. The limiter guards
    /// against floods, not the idempotency promise.
    LetThrough(String),
}

/// [`AfterLimit`] of the limiter's answer for one key.
pub fn after_limit(answer: Result<bool, String>) -> AfterLimit {
    match answer {
        Ok(true) => AfterLimit::Next,
        Ok(false) => AfterLimit::Over,
        Err(error) => AfterLimit::LetThrough(format!("rate limiter failed, request let through: {error}")),
    }
}

/// The rate limit's key for a scope bound to a replay credential: one digest of both, so
/// that the key's length does not grow and neither part can be read back.
fn bound_limit_key(scope_salt: &Digest256, binding: &Digest256) -> Digest256 {
    let mut hasher = Sha256::new();
    hasher.update(b"idempotency-edge rate limit scope v1");
    hasher.update(scope_salt.0);
    hasher.update(binding.0);
    Digest256(hasher.finalize().into())
}

/// The scope as logged: its kind, and why a token did not verify, if one was tried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScopeLog {
    pub kind: ScopeKind,
    pub unverified: Option<Unverified>,
}

impl ScopeLog {
    /// The value the Worker hands its object in an internal header: `claim`, `credential`,
    /// `credential unverified=<reason>` or `anonymous`.
    pub fn encode(&self) -> String {
        match self.unverified {
            Some(reason) => format!("{} unverified={}", self.kind.slug(), reason.slug()),
            None => self.kind.slug().to_owned(),
        }
    }

    /// The inverse of [`ScopeLog::encode`]; `None` for anything else.
    pub fn decode(value: &str) -> Option<ScopeLog> {
        let (kind, rest) = match value.split_once(' ') {
            Some((kind, rest)) => (kind, Some(rest)),
            None => (value, None),
        };
        let kind = [ScopeKind::Claim, ScopeKind::Credential, ScopeKind::Anonymous]
            .into_iter()
            .find(|k| k.slug() == kind)?;
        let unverified = match rest {
            None => None,
            Some(rest) => Some(Unverified::from_slug(rest.strip_prefix("unverified=")?)?),
        };
        Some(ScopeLog { kind, unverified })
    }
}

/// A request's scope headers, in `SCOPE_HEADER` order: (lowercase name, value if present).
pub type ScopeHeaders<'a> = [(&'a str, Option<&'a [u8]>)];

/// The first step of a request's scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start<'a> {
    /// Decided without a token.
    Decided(Scope, ScopeLog),
    /// Verify this token for the route's claim (it names one), then call [`finish`].
    Verify(&'a str, &'a ClaimPath),
    Refused(Problem),
}

/// Decides what the scope headers alone decide (rules 1–3), or hands back the token to
/// verify (rule 4). `headers` must hold every configured header, the credential first.
pub fn start<'a>(config: &ScopeConfig, policy: &ScopeRule<'a>, headers: &ScopeHeaders<'a>) -> Start<'a> {
    let (credential, extras) = match headers.split_first() {
        Some(((_, value), extras)) => (*value, extras),
        None => (None, headers),
    };
    let credential = credential.filter(|value| !value.iter().all(u8::is_ascii_whitespace));
    let Some(credential) = credential else {
        if !policy.anonymous_allowed {
            return Start::Refused(missing_credential(config));
        }
        if policy.claim.is_some() && config.required {
            return Start::Refused(unverified_credential(None));
        }
        let log = ScopeLog { kind: ScopeKind::Anonymous, unverified: None };
        return Start::Decided(Scope::anonymous(&fields(extras)), log);
    };
    let Some(claim) = policy.claim else {
        let log = ScopeLog { kind: ScopeKind::Credential, unverified: None };
        return Start::Decided(Scope::credential(credential, &fields(extras)), log);
    };
    match bearer_token(credential) {
        Some(token) => Start::Verify(token, claim),
        None => match finish(config, headers, Err(Unverified::Malformed)) {
            Ok((scope, log)) => Start::Decided(scope, log),
            Err(problem) => Start::Refused(problem),
        },
    }
}

/// The scope once the token's verification is known (rule 4): the identity's; the
/// credential hash for a credential that is no token at all; or the refusal.
pub fn finish(
    config: &ScopeConfig,
    headers: &ScopeHeaders<'_>,
    verified: Result<Identity, Unverified>,
) -> Result<(Scope, ScopeLog), Problem> {
    let (credential, extras) = match headers.split_first() {
        Some(((_, value), extras)) => (value.unwrap_or(b""), extras),
        None => (&b""[..], headers),
    };
    match verified {
        Ok(identity) => Ok((
            Scope::claim(&identity, &fields(extras)),
            ScopeLog { kind: ScopeKind::Claim, unverified: None },
        )),
        Err(reason) if reason.is_transient() => Err(identity_unavailable(reason)),
        Err(reason @ Unverified::Malformed) if !config.required => Ok((
            Scope::credential(credential, &fields(extras)),
            ScopeLog { kind: ScopeKind::Credential, unverified: Some(reason) },
        )),
        Err(reason) => Err(unverified_credential(Some(reason))),
    }
}

fn fields<'a>(extras: &ScopeHeaders<'a>) -> Vec<ScopeField<'a>> {
    extras.iter().map(|&(name, value)| ScopeField { name, value }).collect()
}

/// The token in a credential value: after a case-insensitive `Bearer ` prefix when there
/// is one, trimmed; `None` when not UTF-8 or empty.
pub fn bearer_token(value: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let token = match text.get(..7) {
        Some(prefix) if prefix.eq_ignore_ascii_case("bearer ") => text[7..].trim_start(),
        _ => text,
    };
    (!token.is_empty()).then_some(token)
}

fn missing_credential(config: &ScopeConfig) -> Problem {
    let header = config.headers.first().map_or("authorization", String::as_str);
    Problem::new(
        ProblemKind::MissingCredential,
        format!(
            "A request with an Idempotency-Key must identify its caller with the {header} header: keys are scoped by caller. Nothing was forwarded."
        ),
    )
}

fn unverified_credential(reason: Option<Unverified>) -> Problem {
    let why = match reason {
        Some(reason) => format!(" ({})", reason.slug()),
        None => " (no token)".to_owned(),
    };
    Problem::new(
        ProblemKind::UnverifiedCredential,
        format!("A verifiable token is required and this one did not verify{why}. Nothing was forwarded."),
    )
}

fn identity_unavailable(reason: Unverified) -> Problem {
    Problem::new(
        ProblemKind::IdentityUnavailable,
        format!(
            "The token could not be verified right now ({}), and a token is only ever scoped by what it verifies to. Nothing was forwarded; retry with the same key after Retry-After seconds.",
            reason.slug()
        ),
    )
    .with_retry_after(JWKS_RETRY_SECONDS)
}

fn parse_bool(variable: &'static str, raw: Option<&str>) -> Result<bool, ConfigError> {
    match raw.map(str::trim) {
        None | Some("") => Ok(false),
        Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
        Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
        Some(_) => Err(ConfigError::new(variable, "expected true or false")),
    }
}

fn parse_header_list(variable: &'static str, raw: &str) -> Result<Vec<String>, ConfigError> {
    let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    let mut names: Vec<String> = Vec::new();
    for name in raw.split(',').map(str::trim) {
        if name.is_empty() || !name.bytes().all(tchar) {
            return Err(ConfigError::new(
                variable,
                "expected an HTTP header name, or several separated by commas (Authorization, Stripe-Account)",
            ));
        }
        let lower = name.to_ascii_lowercase();
        if names.contains(&lower) {
            return Err(ConfigError::new(variable, format!("{name} is listed twice")));
        }
        names.push(lower);
    }
    if names.len() > MAX_SCOPE_HEADERS {
        return Err(ConfigError::new(variable, format!("at most {MAX_SCOPE_HEADERS} headers")));
    }
    Ok(names)
}

/// `https://…`, or `http://` to a loopback host (local development and tests only: keys
/// fetched in the clear could be swapped on the way).
fn parse_jwks_url(raw: &str) -> Result<Option<String>, ConfigError> {
    let url = raw.trim();
    if url.is_empty() {
        return Ok(None);
    }
    let invalid = |why: &str| Err(ConfigError::new(VAR_JWKS_URL, why));
    if url.bytes().any(|b| b <= b' ' || b >= 0x7f) || url.contains('#') {
        return invalid("the URL contains whitespace, control or non-ASCII characters, or a fragment");
    }
    let (rest, secure) = if let Some(rest) = url.strip_prefix("https://") {
        (rest, true)
    } else if let Some(rest) = url.strip_prefix("http://") {
        (rest, false)
    } else {
        return invalid("expected an https:// URL");
    };
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    if authority.is_empty() || authority.contains('@') {
        return invalid("the URL needs a host (and no user info)");
    }
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.split(':').next().unwrap_or(""),
    };
    let loopback = host == "localhost" || host == "::1" || is_loopback_ipv4(host);
    if !secure && !loopback {
        return invalid("expected an https:// URL (http:// only for a loopback host)");
    }
    Ok(Some(url.to_owned()))
}

/// Whether `host` is an IPv4 address in 127.0.0.0/8, as `std::net::Ipv4Addr` reads one
/// (four decimal octets up to 255, no leading zeros, no signs or spaces).
fn is_loopback_ipv4(host: &str) -> bool {
    host.parse::<std::net::Ipv4Addr>().is_ok_and(|address| address.is_loopback())
}

#[cfg(test)]
mod tests;
