//! What an origin result means for the key: the outcome table.
//!
//! Owns the one place where an origin's answer (or failure) is classified. Change the
//! product's outcome policy here and nowhere else.
//!
//! | origin result                                  | disposition |
//! |------------------------------------------------|-------------|
//! | 2xx                                            | `Final`: store and replay |
//! | 408, 409, 425, 429                             | `Release`: not executed, pass it on, next retry runs |
//! | any other 4xx (definitive)                     | `Final` |
//! | 503                                            | `Release` |
//! | 500, 502, 504 and other 5xx                    | `Final` (as Stripe does: the origin may have acted) |
//! | 1xx/3xx                                        | `Final` (a definitive answer) |
//! | connection refused before the request was sent | `Release`, the caller gets 502 origin-unreachable |
//! | timeout, or a reset after the request was sent | `Unknown`: never forwarded again while retained |

/// What happened when the object forwarded the first attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OriginResult {
    /// The origin answered with this status and a complete body.
    Responded(u16),
    /// The connection failed before any byte of the request was sent.
    ConnectRefused,
    /// No complete answer within the origin timeout (this includes a body that stalls).
    TimedOut,
    /// The connection broke after the request was (or may have been) sent.
    ResetAfterSend,
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

/// The outcome table (see the module doc).
pub fn disposition(result: OriginResult) -> Disposition {
    use Disposition::{Final, Release, Unknown};
    match result {
        OriginResult::Responded(200..=299) => Final,
        OriginResult::Responded(408 | 409 | 425 | 429) => Release,
        OriginResult::Responded(400..=499) => Final,
        OriginResult::Responded(503) => Release,
        OriginResult::Responded(500..=599) => Final,
        OriginResult::Responded(_) => Final,
        OriginResult::ConnectRefused => Release,
        OriginResult::TimedOut | OriginResult::ResetAfterSend => Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Disposition::*;
    use OriginResult::*;

    #[test]
    fn the_table() {
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
            (ConnectRefused, Release),
            (TimedOut, Unknown),
            (ResetAfterSend, Unknown),
        ];
        for (result, expected) in rows {
            assert_eq!(disposition(result), expected, "{result:?}");
        }
    }
}
