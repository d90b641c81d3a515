//! Faults: a dependency of the worker failed (the key's storage, a platform call, the
//! Worker's call to the key's object), as one
//! value that says which dependency and how far the request had come, mapped by one
//! function ([`consequence`]) to what the caller is answered, what becomes of the key, and
//! what the log line says.
//!
//! The runtime turns each failure into a [`Fault`] where it happens and carries out the
//! [`Consequence`]; it writes no problem of its own for a fault. The key's fate is the one
//! the key's driver (`core::key_rules::key_state`, `core::key_rules::machine`) gives the same failure: a claim
//! whose write failed was never written, a claim withdrawn for want of its alarm is
//! released, and an outcome that could not be written after the origin was reached leaves
//! the claim stored, so the key is held (unknown once its lease ends) and never forwarded
//! again. The tests below hold the mapping to those rules.
//!
//! The origin's own failures are not faults here: what the origin did (answered, refused
//! before anything was sent, timed out, broke off) is an origin result, which the key's
//! rules (`core::key_rules::machine`) turn into a stored answer, a released key or an unknown outcome.

use std::fmt;

use super::problem::{Problem, ProblemKind};

/// A failure of something the worker depends on, with what is known of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    pub source: FaultSource,
    /// How far the request had come when it failed: whether anything was claimed, and
    /// whether the origin may have been reached.
    pub stage: Stage,
}

/// Which dependency failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultSource {
    /// The key's storage (the object's database, its alarm, the sealing of what it stores).
    Storage { operation: StorageOperation },
    /// A call into the platform that is not storage: reading the request, building the
    /// answer.
    Platform { what: PlatformCall },
    /// The key's driver stepped without giving an answer to send (it always gives one;
    /// this is the answer should it not).
    NoAnswer,
    /// The Worker's call to the key's object (`core::edge_rules::routes::ObjectCallFailure` says how
    /// it failed), on a route that chose availability (`route_fails_open`) or not. Its
    /// stage is `BeforeClaim` only where the object provably never had the request.
    ObjectCall { route_fails_open: bool },
}

/// What the key's storage was asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageOperation {
    /// Read the record.
    Read,
    /// Open a stored answer (sealed or chunked) or a stored request.
    Open,
    /// Seal a request (or an answer) for storage.
    Seal,
    /// Write a record (a claim, an outcome, a release).
    Write,
    /// Delete the record (a purge).
    Delete,
    /// Set or delete the key's alarm.
    Alarm,
}

/// Why the key's storage could not read, open or write the record, with the platform's
/// own error text (it names no key or body): the detail of a [`FaultSource::Storage`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StorageError {
    /// A storage call failed (`Name: message`, as the runtime threw it).
    Sql(String),
    /// The stored record is not one this release can read (never read as absent).
    Corrupt(String),
    /// A stored answer could not be sealed or opened (`core::formats::seal`).
    Seal(String),
    /// A chunked answer's rows are missing or do not match its record
    /// (`core::formats::chunks`).
    Chunks(String),
    /// An outcome whose claim stopped being the live one while its answer was sealed (a
    /// purge, then a new claim): not written, so the new claim's record stays.
    Fenced,
}

impl StorageError {
    /// What failed of a read of the record: opening its sealed or chunked answer, or
    /// reading the record itself.
    pub fn operation(&self) -> StorageOperation {
        match self {
            StorageError::Seal(_) | StorageError::Chunks(_) => StorageOperation::Open,
            StorageError::Sql(_) | StorageError::Corrupt(_) | StorageError::Fenced => StorageOperation::Read,
        }
    }
}

impl StorageError {
    /// An answer stored in the clear while sealing is required
    /// (`core::formats::seal::Opening::Refuse`): never replayed, the caller answers 503.
    pub fn stored_in_clear() -> StorageError {
        StorageError::Seal(
            "an answer is stored in the clear while STORAGE_ENCRYPTION_KEYS is set (STORAGE_ALLOW_UNSEALED is not true)"
                .to_owned(),
        )
    }

    /// An answer to seal or open before the caller scope's key salt is known (the first key
    /// request brings it): never stored or read in the clear instead.
    pub fn no_scope_salt() -> StorageError {
        StorageError::Seal("no scope salt".to_owned())
    }
}

/// What a transaction (`transactionSync`) comes to: done when nothing was `thrown`; when
/// its write failed (the callback threw that failure, which rolled every statement back),
/// that failure as the write reported it; else what the runtime threw (say, a failed
/// commit), as `Name: message`.
pub fn transaction_outcome(
    thrown: Option<String>,
    write_failed: Option<StorageError>,
) -> Result<(), StorageError> {
    match (thrown, write_failed) {
        (None, _) => Ok(()),
        (Some(_), Some(failure)) => Err(failure),
        (Some(thrown), None) => Err(StorageError::Sql(thrown)),
    }
}

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageError::Sql(message) => write!(f, "SQL error: {message}"),
            StorageError::Corrupt(error) => write!(f, "stored record is unreadable: {error}"),
            StorageError::Seal(error) => write!(f, "stored answer: {error}"),
            StorageError::Chunks(error) => write!(f, "stored answer chunks: {error}"),
            StorageError::Fenced => write!(f, "the claim is no longer the live one; outcome not written"),
        }
    }
}

/// What was asked of the platform.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlatformCall {
    /// Read the request's body or headers.
    Request,
    /// Build or mark the answer.
    Answer,
}

/// How far a request had come when a fault ended it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Nothing was claimed or changed for this request (its claim, if any, was not
    /// written) and nothing was sent.
    BeforeClaim,
    /// Its claim was written, and nothing was sent.
    Claimed,
    /// The request was forwarded: the origin may have executed it.
    Forwarded,
    /// The key's step for this request was carried out (written as the key's driver
    /// decided), or may have been (a call to the object that failed once sent); the fault
    /// came after it, in giving the answer.
    AfterStep,
}

/// What the caller is answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultAnswer {
    /// This problem.
    Problem(Problem),
    /// What the origin answered: the fault came after it, and cannot take it back.
    Origin,
    /// The request forwarded by the Worker without protection: the route chose
    /// availability, and the key's object never had the request.
    FailOpen,
}

/// What becomes of the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyFate {
    /// As it was: nothing of this request was stored.
    Untouched,
    /// The request's claim is withdrawn: nothing was sent, and a retry may claim anew.
    Released,
    /// The claim stays stored: the key is held (in progress, then unknown once its lease
    /// ends) and never forwarded again.
    HeldUnknown,
    /// Where the key's step left it: the fault changes nothing the step wrote.
    AsStepped,
}

/// How loud the log line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultLevel {
    /// An operator must look: a dependency failed.
    Error,
}

/// What a fault decides: the answer, the key's fate, and the log line's level and `fault`
/// field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Consequence {
    pub answer: FaultAnswer,
    pub key: KeyFate,
    pub level: FaultLevel,
    /// The source as the log line names it ([`FaultSource::label`]).
    pub field: &'static str,
}

impl Consequence {
    /// The problem to answer, where the answer is one.
    pub fn problem(&self) -> Option<&Problem> {
        match &self.answer {
            FaultAnswer::Problem(problem) => Some(problem),
            FaultAnswer::Origin | FaultAnswer::FailOpen => None,
        }
    }
}

impl Fault {
    pub fn storage(operation: StorageOperation, stage: Stage) -> Fault {
        Fault { source: FaultSource::Storage { operation }, stage }
    }

    pub fn platform(what: PlatformCall, stage: Stage) -> Fault {
        Fault { source: FaultSource::Platform { what }, stage }
    }

    /// The problem [`consequence`] answers this fault with. A fault after the forward is
    /// answered with the origin's answer, and a failed object call on a route that fails
    /// open with the forward; should either be missing, this problem.
    pub fn problem(&self) -> Problem {
        match (consequence(self).answer, self.source) {
            (FaultAnswer::Problem(problem), _) => problem,
            (_, FaultSource::ObjectCall { .. }) => object_unreachable(),
            (FaultAnswer::Origin | FaultAnswer::FailOpen, _) => storage_unavailable(),
        }
    }
}

impl FaultSource {
    /// The source as a log line names it: which dependency, and what of it. Never a key,
    /// a body or a credential.
    pub fn label(self) -> &'static str {
        match self {
            FaultSource::Storage { operation } => match operation {
                StorageOperation::Read => "storage-read",
                StorageOperation::Open => "storage-open",
                StorageOperation::Seal => "storage-seal",
                StorageOperation::Write => "storage-write",
                StorageOperation::Delete => "storage-delete",
                StorageOperation::Alarm => "storage-alarm",
            },
            FaultSource::Platform { what } => match what {
                PlatformCall::Request => "platform-request",
                PlatformCall::Answer => "platform-answer",
            },
            FaultSource::NoAnswer => "no-answer",
            FaultSource::ObjectCall { .. } => "object-call",
        }
    }

    /// The log line of this fault: `{subject}: {what} failed (fault: {label}): {detail}`,
    /// where `detail` is the dependency's own error text (it names no key or body).
    pub fn log_line(self, subject: &str, what: &str, detail: impl fmt::Display) -> String {
        format!("{subject}: {what} failed (fault: {}): {detail}", self.label())
    }
}

/// What a fault decides. The one mapping from faults to answers and decisions: where a
/// fault leaves the key (`KeyFate`) is where the key's driver leaves it for the same
/// failure, so a fault after the forward never releases the key.
pub fn consequence(fault: &Fault) -> Consequence {
    let (answer, key) = match (fault.source, fault.stage) {
        // The object never had the request: forwarded unprotected only where the route
        // chose availability, and nothing of the key changed either way.
        (FaultSource::ObjectCall { route_fails_open: true }, Stage::BeforeClaim) => {
            (FaultAnswer::FailOpen, KeyFate::Untouched)
        }
        (FaultSource::ObjectCall { .. }, Stage::BeforeClaim) => {
            (FaultAnswer::Problem(object_unreachable()), KeyFate::Untouched)
        }
        // The object may have had it, and claimed and sent it: never forwarded again from
        // here, whatever the route chose; the object's step stands.
        (FaultSource::ObjectCall { .. }, _) => {
            (FaultAnswer::Problem(object_unreachable()), KeyFate::AsStepped)
        }
        (_, stage) => by_stage(fault.source, stage),
    };
    Consequence { answer, key, level: FaultLevel::Error, field: fault.source.label() }
}

/// [`consequence`] of a fault inside the key's object: by how far the request had come.
fn by_stage(source: FaultSource, stage: Stage) -> (FaultAnswer, KeyFate) {
    match stage {
        // Nothing stored, nothing sent: the caller may retry the same key at once.
        Stage::BeforeClaim => (FaultAnswer::Problem(storage_unavailable()), KeyFate::Untouched),
        // Nothing sent, but the claim stands: it is withdrawn, so the retry is not told
        // "in progress" for a request that never went anywhere.
        Stage::Claimed => (FaultAnswer::Problem(storage_unavailable()), KeyFate::Released),
        // The origin may have executed it: the caller gets what the origin said, and the
        // claim stays (a release here could execute the payment twice).
        Stage::Forwarded => match source {
            FaultSource::Storage { .. } => (FaultAnswer::Origin, KeyFate::HeldUnknown),
            // No origin answer to pass on: the problem, the key held all the same.
            FaultSource::Platform { .. } | FaultSource::NoAnswer | FaultSource::ObjectCall { .. } => {
                (FaultAnswer::Problem(storage_unavailable()), KeyFate::HeldUnknown)
            }
        },
        // The step stands (a claim stays claimed, a release released): only the answer is
        // lost, and the caller retries the same key.
        Stage::AfterStep => (FaultAnswer::Problem(storage_unavailable()), KeyFate::AsStepped),
    }
}

/// 503 when the object cannot read or write its record: nothing was forwarded.
fn storage_unavailable() -> Problem {
    Problem::new(
        ProblemKind::StorageUnavailable,
        "The idempotency record could not be read or written, so the request was not forwarded. Retry with the same key.",
    )
    .with_retry_after(1)
}

/// 503 for a key whose object could not be reached.
fn object_unreachable() -> Problem {
    Problem::new(
        ProblemKind::StorageUnavailable,
        "The idempotency record for this key could not be reached, so the request was not forwarded. Retry with the same key.",
    )
    .with_retry_after(1)
}

#[cfg(test)]
mod tests;
