//! What an origin result means for the key: the outcome table.
//!
//! Owns the one place where an origin's answer (or failure) is classified. Change the
//! product's outcome table here and nowhere else.
//!
//! The table depends on where the answer came from. In route mode (`ORIGIN_URL` empty) the
//! Worker's fetch goes through Cloudflare to the origin, so Cloudflare's own 52x answers
//! reach the object as responses, not as fetch errors; they say what happened on the way.
//!
//! | origin result                                  | disposition |
//! |------------------------------------------------|-------------|
//! | 2xx                                            | `Final`: store and replay |
//! | a release status (default 408, 409, 425, 429, 503) | `Release`: not executed, pass it on, next retry runs; with `release_requires_header`, only when the answer carries `Idempotency-Released: true`, else `Unknown` |
//! | a status the route calls unknown (`unknown_statuses`, e.g. 502, 504) | `Unknown` |
//! | route mode: 520 (covers a reset after send), 524 (timeout after send) | `Unknown` |
//! | route mode: 521, 522, 523, 525, 526 (nothing was delivered) | `Release` |
//! | 401, 403: the origin refused the caller        | `Release`, always: nothing was executed for such a caller, and a stored refusal would let anyone who sends junk first squat the key |
//! | any other 4xx (definitive)                     | `Final` |
//! | 500, 502, 504 and other 5xx                    | `Final` (as Stripe does: the origin may have acted) |
//! | 1xx/3xx                                        | `Final` (a definitive answer) |
//! | connection refused before the request was sent | `Release`, the caller gets 502 origin-unreachable |
//! | timeout, or a reset after the request was sent | `Unknown`: never forwarded again while retained |
//! | an answer over the stored-size cap             | as its status says, but `Final` becomes `Unknown` (it cannot be replayed) |
//!
//! A status releases a key only when the operator says that it means "not executed" for
//! their origin: a 503 from Heroku's router after an application timeout, or Envoy's
//! "upstream reset", came after the application received the request. Hence the route
//! options to narrow the set, or to require the origin's explicit confirmation.

/// The response header with which an origin confirms that it did not execute a request
/// (see [`OutcomeTable::release_requires_header`]).
pub const RELEASED_HEADER: &str = "idempotency-released";

/// The statuses that release a key unless a route says otherwise.
pub const DEFAULT_RELEASE_STATUSES: [u16; 5] = [408, 409, 425, 429, 503];

/// Cloudflare's answers, in route mode, for a request that may have reached the origin:
/// 520 (an unknown error, which covers a reset after the request was sent) and 524 (the
/// origin accepted the connection and did not answer in time).
const CLOUDFLARE_UNKNOWN: [u16; 2] = [520, 524];
/// Cloudflare's answers, in route mode, for a request that never reached the origin: web
/// server down (521), connection timed out (522), origin unreachable (523), TLS handshake
/// failed (525), invalid certificate (526).
const CLOUDFLARE_UNDELIVERED: [u16; 5] = [521, 522, 523, 525, 526];
/// The origin refused the caller (unauthenticated, forbidden): nothing was executed, and
/// the key is released whatever the route says. Stored, such an answer would be every
/// retry's answer, so a stranger who sent junk under a victim's key first would own it.
/// A route cannot say otherwise: `core::edge_rules::routes` refuses 401 or 403 among its
/// `unknown_statuses`, and among its `release_statuses` with `release_requires_header`.
pub const AUTH_REFUSED: [u16; 2] = [401, 403];

/// What happened when the object forwarded the first attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OriginResult {
    /// The origin answered with this status and a complete body.
    Responded(u16),
    /// The origin answered with this status, but the answer is larger than may be stored;
    /// it was streamed to its caller and cannot be replayed.
    Oversized(u16),
    /// The connection failed before any byte of the request was sent.
    ConnectRefused,
    /// No complete answer within the origin timeout (this includes a body that stalls).
    TimedOut,
    /// The connection broke after the request was (or may have been) sent.
    ResetAfterSend,
}

impl OriginResult {
    /// Whether the origin's answer is kept as the key's stored one (for replay and
    /// waiters): only a complete answer is; one over the cap went to its caller alone, and
    /// a failure has none.
    pub fn keeps_answer(self) -> bool {
        match self {
            OriginResult::Responded(_) => true,
            OriginResult::Oversized(_)
            | OriginResult::ConnectRefused
            | OriginResult::TimedOut
            | OriginResult::ResetAfterSend => false,
        }
    }
}

/// The sent-or-not verdict of one exchange with the origin, as its I/O saw it: the one
/// typed value between the runtime's fetch (and probe) and the outcome table. Only
/// [`OriginVerdict::NotSent`] releases a key: whatever the runtime cannot place is
/// "maybe sent", since mistaking an executed payment for an unexecuted one would charge
/// twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OriginVerdict {
    /// Certainly nothing was sent: the probe was refused or did not connect in time, or the
    /// request could not be built, signed or handed to its binding.
    NotSent,
    /// It may have been sent and no answer came: the fetch threw, or what came back was not
    /// an answer.
    MaybeSent,
    /// No complete answer within the origin timeout (a body that stalls included).
    TimedOut,
    /// The answer's head came with this status, then the answer broke off.
    BrokeOff(u16),
    /// The whole answer came, within the stored-size cap.
    Answered(u16),
    /// The answer came, past the stored-size cap: passed on as a stream, never stored.
    OverCap(u16),
}

impl OriginVerdict {
    /// What the verdict is to the outcome table. An answer that broke off is unknown, as a
    /// reset after the request was sent: the origin did answer, so it was sent.
    pub fn result(self) -> OriginResult {
        match self {
            OriginVerdict::NotSent => OriginResult::ConnectRefused,
            OriginVerdict::MaybeSent | OriginVerdict::BrokeOff(_) => OriginResult::ResetAfterSend,
            OriginVerdict::TimedOut => OriginResult::TimedOut,
            OriginVerdict::Answered(status) => OriginResult::Responded(status),
            OriginVerdict::OverCap(status) => OriginResult::Oversized(status),
        }
    }
}

/// What becomes of the key after an origin result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// Store the response with an expiry and replay it to every retry.
    Final,
    /// Certainly not executed: pass the answer on and forget the key, so a retry runs.
    Release,
    /// It may have executed: hold the key as outcome-unknown and never forward it again.
    Unknown,
}

/// A set of HTTP statuses from 400 to 599, as a bit set (it is copied into every request's
/// policy, so it stays small and `Copy`).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct StatusSet([u64; 4]);

impl StatusSet {
    pub const LOWEST: u16 = 400;
    pub const HIGHEST: u16 = 599;

    /// The set of `statuses`; `None` when one is outside 400..=599.
    pub fn of(statuses: &[u16]) -> Option<StatusSet> {
        let mut set = StatusSet::default();
        for &status in statuses {
            if !(Self::LOWEST..=Self::HIGHEST).contains(&status) {
                return None;
            }
            let bit = usize::from(status - Self::LOWEST);
            set.0[bit / 64] |= 1 << (bit % 64);
        }
        Some(set)
    }

    pub fn contains(&self, status: u16) -> bool {
        if !(Self::LOWEST..=Self::HIGHEST).contains(&status) {
            return false;
        }
        let bit = usize::from(status - Self::LOWEST);
        self.0[bit / 64] & (1 << (bit % 64)) != 0
    }

    pub fn is_empty(&self) -> bool {
        self.0 == [0; 4]
    }

    pub fn intersects(&self, other: &StatusSet) -> bool {
        self.0.iter().zip(other.0.iter()).any(|(a, b)| a & b != 0)
    }

    /// The statuses of this set that are not in `other`.
    pub fn without(&self, other: &StatusSet) -> StatusSet {
        let mut set = *self;
        for (word, removed) in set.0.iter_mut().zip(other.0) {
            *word &= !removed;
        }
        set
    }

    /// The statuses, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        (Self::LOWEST..=Self::HIGHEST).filter(|&status| self.contains(status))
    }
}

impl std::fmt::Debug for StatusSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// How one route's origin answers are classified: its rows of the outcome table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutcomeTable {
    /// Statuses that mean "not executed" at this origin.
    pub release: StatusSet,
    /// Statuses that leave the outcome unknown (e.g. a gateway's 502 or 504).
    pub unknown: StatusSet,
    /// A release status releases only when the answer also carries
    /// `Idempotency-Released: true`; without it the outcome is unknown.
    pub release_requires_header: bool,
    /// The fetch goes through Cloudflare (route mode), so 52x are Cloudflare's own answers.
    pub via_cloudflare: bool,
}

impl Default for OutcomeTable {
    fn default() -> Self {
        OutcomeTable {
            release: StatusSet::of(&DEFAULT_RELEASE_STATUSES).unwrap_or_default(),
            unknown: StatusSet::default(),
            release_requires_header: false,
            via_cloudflare: false,
        }
    }
}

/// The outcome table (see the module doc). `release_confirmed` says whether the answer
/// carried `Idempotency-Released: true`.
pub fn disposition(result: OriginResult, policy: &OutcomeTable, release_confirmed: bool) -> Disposition {
    use Disposition::{Final, Release, Unknown};
    let by_status = |status: u16| {
        if policy.via_cloudflare && CLOUDFLARE_UNKNOWN.contains(&status) {
            Unknown
        } else if (policy.via_cloudflare && CLOUDFLARE_UNDELIVERED.contains(&status))
            || AUTH_REFUSED.contains(&status)
        {
            Release
        } else if policy.unknown.contains(status) {
            Unknown
        } else if policy.release.contains(status) {
            if policy.release_requires_header && !release_confirmed {
                Unknown
            } else {
                Release
            }
        } else {
            Final
        }
    };
    match result {
        OriginResult::Responded(status) => by_status(status),
        OriginResult::Oversized(status) => match by_status(status) {
            Final => Unknown,
            other => other,
        },
        OriginResult::ConnectRefused => Release,
        OriginResult::TimedOut | OriginResult::ResetAfterSend => Unknown,
    }
}

/// Whether an answer's headers confirm that the origin did not execute the request.
pub fn release_confirmed<'a>(mut headers: impl Iterator<Item = (&'a str, &'a str)>) -> bool {
    headers.any(|(name, value)| {
        name.eq_ignore_ascii_case(RELEASED_HEADER) && value.trim().eq_ignore_ascii_case("true")
    })
}

#[cfg(test)]
mod tests {

    use super::*;
    use Disposition::*;
    use OriginResult::*;

    #[test]
    fn only_a_complete_answer_is_kept() {
        assert!(Responded(500).keeps_answer());
        for result in [Oversized(200), ConnectRefused, TimedOut, ResetAfterSend] {
            assert!(!result.keeps_answer(), "{result:?}");
        }
    }

    #[test]
    fn only_a_verdict_that_nothing_left_releases_the_key() {
        let verdicts = [
            OriginVerdict::NotSent,
            OriginVerdict::MaybeSent,
            OriginVerdict::TimedOut,
            OriginVerdict::BrokeOff(200),
            OriginVerdict::Answered(200),
            OriginVerdict::OverCap(200),
        ];
        for verdict in verdicts {
            let released = verdict.result() == OriginResult::ConnectRefused;
            assert_eq!(released, verdict == OriginVerdict::NotSent, "{verdict:?}");
        }
        assert_eq!(OriginVerdict::MaybeSent.result(), OriginResult::ResetAfterSend);
        // The origin answered, then broke off: sent, its outcome unknown.
        assert_eq!(OriginVerdict::BrokeOff(201).result(), OriginResult::ResetAfterSend);
        assert_eq!(OriginVerdict::TimedOut.result(), OriginResult::TimedOut);
        assert_eq!(OriginVerdict::Answered(200).result(), OriginResult::Responded(200));
        assert_eq!(OriginVerdict::OverCap(200).result(), OriginResult::Oversized(200));
    }

    fn route_mode() -> OutcomeTable {
        OutcomeTable { via_cloudflare: true, ..OutcomeTable::default() }
    }

    #[test]
    fn the_default_table() {
        let rows = [
            (Responded(200), Final),
            (Responded(201), Final),
            (Responded(204), Final),
            (Responded(400), Final),
            (Responded(402), Final),
            (Responded(404), Final),
            (Responded(422), Final),
            (Responded(408), Release),
            (Responded(409), Release),
            (Responded(425), Release),
            (Responded(429), Release),
            (Responded(500), Final),
            (Responded(502), Final),
            (Responded(504), Final),
            (Responded(503), Release),
            (Responded(302), Final),
            // Outside route mode a 52x is the origin's own word: final like any 5xx.
            (Responded(520), Final),
            (Responded(521), Final),
            (Responded(524), Final),
            (Oversized(200), Unknown),
            (Oversized(503), Release),
            (Oversized(500), Unknown),
            (ConnectRefused, Release),
            (TimedOut, Unknown),
            (ResetAfterSend, Unknown),
        ];
        for (result, expected) in rows {
            assert_eq!(disposition(result, &OutcomeTable::default(), false), expected, "{result:?}");
        }
    }

    #[test]
    fn a_refused_caller_always_releases_the_key() {
        let strict = OutcomeTable {
            release: StatusSet::default(),
            unknown: StatusSet::of(&[401, 403]).unwrap(),
            release_requires_header: true,
            via_cloudflare: true,
        };
        for policy in [OutcomeTable::default(), route_mode(), strict] {
            for status in [401, 403] {
                assert_eq!(disposition(OriginResult::Responded(status), &policy, false), Release);
                assert_eq!(disposition(OriginResult::Oversized(status), &policy, false), Release);
            }
            assert_eq!(disposition(OriginResult::Responded(404), &policy, false), Final);
        }
    }

    #[test]
    fn route_mode_reads_cloudflare_statuses() {
        let rows = [
            (Responded(520), Unknown),
            (Responded(524), Unknown),
            (Responded(521), Release),
            (Responded(522), Release),
            (Responded(523), Release),
            (Responded(525), Release),
            (Responded(526), Release),
            (Responded(527), Final),
            (Responded(530), Final),
            (Responded(502), Final),
            (Responded(201), Final),
            (Responded(503), Release),
            (ResetAfterSend, Unknown),
        ];
        for (result, expected) in rows {
            assert_eq!(disposition(result, &route_mode(), false), expected, "{result:?}");
        }
    }

    #[test]
    fn a_route_may_call_gateway_errors_unknown() {
        let policy = OutcomeTable { unknown: StatusSet::of(&[502, 504]).unwrap(), ..OutcomeTable::default() };
        assert_eq!(disposition(Responded(502), &policy, false), Unknown);
        assert_eq!(disposition(Responded(504), &policy, false), Unknown);
        assert_eq!(disposition(Responded(500), &policy, false), Final);
        assert_eq!(disposition(Responded(503), &policy, false), Release);
    }

    #[test]
    fn a_route_may_narrow_or_widen_the_release_statuses() {
        let narrow = OutcomeTable { release: StatusSet::of(&[429]).unwrap(), ..OutcomeTable::default() };
        assert_eq!(disposition(Responded(429), &narrow, false), Release);
        assert_eq!(disposition(Responded(503), &narrow, false), Final);
        assert_eq!(disposition(Responded(408), &narrow, false), Final);
        let none = OutcomeTable { release: StatusSet::default(), ..OutcomeTable::default() };
        assert_eq!(disposition(Responded(503), &none, false), Final);
        assert_eq!(disposition(ConnectRefused, &none, false), Release, "a refused connect sent nothing");
        let wide = OutcomeTable { release: StatusSet::of(&[503, 507]).unwrap(), ..OutcomeTable::default() };
        assert_eq!(disposition(Responded(507), &wide, false), Release);
    }

    #[test]
    fn release_requires_the_origins_confirmation_when_asked() {
        let strict = OutcomeTable { release_requires_header: true, ..OutcomeTable::default() };
        assert_eq!(disposition(Responded(503), &strict, false), Unknown);
        assert_eq!(disposition(Responded(503), &strict, true), Release);
        assert_eq!(disposition(Responded(429), &strict, false), Unknown);
        // The header never releases a status outside the set.
        assert_eq!(disposition(Responded(500), &strict, true), Final);
        assert_eq!(disposition(Responded(201), &strict, true), Final);
        // Cloudflare cannot send the header; its "never delivered" answers still release.
        let strict_route = OutcomeTable { via_cloudflare: true, ..strict };
        assert_eq!(disposition(Responded(522), &strict_route, false), Release);
        assert_eq!(disposition(Responded(520), &strict_route, true), Unknown);
    }

    #[test]
    fn the_confirmation_header_is_read_strictly() {
        assert!(release_confirmed([("Idempotency-Released", "true")].into_iter()));
        assert!(release_confirmed([("idempotency-released", " TRUE ")].into_iter()));
        assert!(!release_confirmed([("idempotency-released", "1")].into_iter()));
        assert!(!release_confirmed([("x-idempotency-released", "true")].into_iter()));
        assert!(!release_confirmed(std::iter::empty()));
    }

    #[test]
    fn status_sets() {
        let set = StatusSet::of(&[400, 503, 599]).unwrap();
        assert!(set.contains(400) && set.contains(503) && set.contains(599));
        assert!(!set.contains(401) && !set.contains(200) && !set.contains(600));
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![400, 503, 599]);
        assert_eq!(StatusSet::of(&[200]), None);
        assert_eq!(StatusSet::of(&[600]), None);
        assert!(set.intersects(&StatusSet::of(&[503]).unwrap()));
        assert!(!set.intersects(&StatusSet::of(&[502]).unwrap()));
    }
}
