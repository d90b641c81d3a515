//! The problem kinds every idempotency-edge answer names: their `type` URIs, status codes
//! and titles (RFC 9457 `application/problem+json`), shared by the worker that answers them
//! and the clients that read them.

/// The media type of every problem body.
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// Prefix of every problem `type`. URNs, so that they are stable identifiers and nobody
/// mistakes them for a page to fetch.
pub const PROBLEM_TYPE_PREFIX: &str = "urn:idempotency-edge:problem:";

/// Every kind of problem the worker answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProblemKind {
    /// A covered request without an `Idempotency-Key`.
    MissingKey,
    /// A malformed `Idempotency-Key`.
    InvalidKey,
    /// The key was first used with another payload (method, path, content type or body).
    KeyReused,
    /// The first attempt is still running (or its lease is) and the wait ran out.
    InProgress,
    /// The body is over `MAX_BODY_BYTES`.
    BodyTooLarge,
    /// The first attempt may or may not have executed at the origin.
    OutcomeUnknown,
    /// The origin refused the connection; nothing was executed and the key was released.
    OriginUnreachable,
    /// The object or its storage failed; nothing was forwarded.
    StorageUnavailable,
    /// A configuration variable is invalid; nothing is forwarded until it is fixed.
    InvalidConfig,
    /// A covered request without the scope header (the caller's credential), where
    /// anonymous callers are not allowed.
    MissingCredential,
    /// A covered request whose token did not verify, where `SCOPE_JWT_REQUIRED` is set.
    UnverifiedCredential,
    /// An admin call without the right bearer token.
    Unauthorized,
    /// An admin path that does not exist.
    NotFound,
    /// An admin path called with a method it does not take.
    MethodNotAllowed,
    /// An admin lookup whose body does not say which key of which caller.
    InvalidLookup,
    /// A path that origins may read as another path (an encoded `/`, `\` or dot segment,
    /// or `//`), on a method that a route could cover.
    InvalidPath,
    /// A method-override header on a method that is not covered: the origin might execute
    /// it as a covered method without a key.
    MethodOverride,
    /// The caller (its scope, or its IP when anonymous) is over the rate limit; nothing was
    /// created or forwarded.
    RateLimited,
    /// An asynchronous request's deadline came before the origin took it: it was never
    /// executed, and the key is released (`core::key_rules::machine::async_job`).
    OriginUnavailable,
    /// A token that may verify could not be checked right now (the JWKS URL is down, or a
    /// new `kid` waits for the next refetch); nothing was forwarded: retry later.
    IdentityUnavailable,
}

impl ProblemKind {
    /// Every kind, for parsing a slug back.
    pub const ALL: [ProblemKind; 20] = [
        ProblemKind::MissingKey,
        ProblemKind::InvalidKey,
        ProblemKind::KeyReused,
        ProblemKind::InProgress,
        ProblemKind::BodyTooLarge,
        ProblemKind::OutcomeUnknown,
        ProblemKind::OriginUnreachable,
        ProblemKind::StorageUnavailable,
        ProblemKind::InvalidConfig,
        ProblemKind::Unauthorized,
        ProblemKind::NotFound,
        ProblemKind::MethodNotAllowed,
        ProblemKind::InvalidLookup,
        ProblemKind::InvalidPath,
        ProblemKind::MethodOverride,
        ProblemKind::OriginUnavailable,
        ProblemKind::MissingCredential,
        ProblemKind::UnverifiedCredential,
        ProblemKind::RateLimited,
        ProblemKind::IdentityUnavailable,
    ];

    /// The kind whose [`ProblemKind::slug`] is `slug`.
    pub fn from_slug(slug: &str) -> Option<ProblemKind> {
        Self::ALL.into_iter().find(|kind| kind.slug() == slug)
    }

    pub fn status(self) -> u16 {
        match self {
            ProblemKind::MissingKey
            | ProblemKind::InvalidKey
            | ProblemKind::InvalidPath
            | ProblemKind::MethodOverride => 400,
            ProblemKind::KeyReused => 422,
            ProblemKind::InProgress => 409,
            ProblemKind::BodyTooLarge => 413,
            ProblemKind::OutcomeUnknown | ProblemKind::OriginUnreachable => 502,
            ProblemKind::StorageUnavailable
            | ProblemKind::OriginUnavailable
            | ProblemKind::IdentityUnavailable => 503,
            ProblemKind::InvalidConfig => 500,
            ProblemKind::Unauthorized
            | ProblemKind::MissingCredential
            | ProblemKind::UnverifiedCredential => 401,
            ProblemKind::NotFound => 404,
            ProblemKind::MethodNotAllowed => 405,
            ProblemKind::InvalidLookup => 400,
            ProblemKind::RateLimited => 429,
        }
    }

    /// The last segment of the `type` URI; also the name used in logs.
    pub fn slug(self) -> &'static str {
        match self {
            ProblemKind::MissingKey => "missing-key",
            ProblemKind::InvalidKey => "invalid-key",
            ProblemKind::KeyReused => "key-reused",
            ProblemKind::InProgress => "in-progress",
            ProblemKind::BodyTooLarge => "body-too-large",
            ProblemKind::OutcomeUnknown => "outcome-unknown",
            ProblemKind::OriginUnreachable => "origin-unreachable",
            ProblemKind::StorageUnavailable => "storage-unavailable",
            ProblemKind::InvalidConfig => "invalid-config",
            ProblemKind::MissingCredential => "missing-credential",
            ProblemKind::UnverifiedCredential => "unverified-credential",
            ProblemKind::RateLimited => "rate-limited",
            ProblemKind::Unauthorized => "unauthorized",
            ProblemKind::NotFound => "not-found",
            ProblemKind::MethodNotAllowed => "method-not-allowed",
            ProblemKind::InvalidLookup => "invalid-lookup",
            ProblemKind::InvalidPath => "invalid-path",
            ProblemKind::MethodOverride => "method-override",
            ProblemKind::OriginUnavailable => "origin-unavailable",
            ProblemKind::IdentityUnavailable => "identity-unavailable",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            ProblemKind::MissingKey => "Idempotency-Key is required",
            ProblemKind::InvalidKey => "Idempotency-Key is malformed",
            ProblemKind::KeyReused => "Idempotency-Key was used with a different payload",
            ProblemKind::InProgress => "A request with this Idempotency-Key is in progress",
            ProblemKind::BodyTooLarge => "Request body is too large",
            ProblemKind::OutcomeUnknown => "The outcome of this request is unknown",
            ProblemKind::OriginUnreachable => "The origin could not be reached",
            ProblemKind::StorageUnavailable => "Idempotency storage is unavailable",
            ProblemKind::InvalidConfig => "The idempotency worker is misconfigured",
            ProblemKind::MissingCredential => "A credential identifying the caller is required",
            ProblemKind::UnverifiedCredential => "A verifiable token is required",
            ProblemKind::Unauthorized => "A valid admin bearer token is required",
            ProblemKind::NotFound => "No such admin endpoint",
            ProblemKind::MethodNotAllowed => "Method not allowed on this admin endpoint",
            ProblemKind::InvalidLookup => "The lookup does not name a key and its caller",
            ProblemKind::InvalidPath => "The request path is ambiguous",
            ProblemKind::MethodOverride => "Method-override headers are not accepted here",
            ProblemKind::RateLimited => "Too many requests",
            ProblemKind::OriginUnavailable => "The origin was unavailable until the deadline",
            ProblemKind::IdentityUnavailable => "The caller's token cannot be verified right now",
        }
    }
}
