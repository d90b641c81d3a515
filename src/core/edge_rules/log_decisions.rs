//! `LOG_DECISIONS`: which decision lines are written to the log.
//!
//! Owns the setting's values and the rule that keeps or drops one line. Each line costs
//! CPU in the isolate and in whatever receives the log (Workers Logs, `wrangler tail`),
//! and on a busy route most lines say the same healthy thing. Lines that an operator must
//! see are always kept: rejections, unknown outcomes, releases and fail-open forwards.
//! Only the healthy decisions (executed, replayed, coalesced, and an asynchronous request
//! accepted) can be dropped or sampled; an asynchronous job's retries, re-forwards and
//! give-ups are kept like the problems they follow.
//! Metrics (the Analytics Engine point) are written for every request, whatever this says:
//! rates come from there, not from counting lines.
//!
//! The sampling draw is the runtime's (a number in `[0, 1)`), so the rule stays pure.

use crate::core::vocabulary::decision::Decision;

/// The variable.
pub const VAR_LOG_DECISIONS: &str = "LOG_DECISIONS";

/// The setting a rate written in digits with at most one dot (`0.01`, `.5`, `1.`, `1`)
/// stands for (`0` is `problems`, `1` is `all`); `None` for anything else (signs,
/// exponents, `inf`, `NaN`) and for a value above 1.
///
/// Which of the three a value is comes from its digits, exactly; the rate itself is the
/// nearest `f64` (`str::parse`, which rounds correctly).
fn decimal_rate(value: &str) -> Option<LogDecisions> {
    let (whole, fraction) = value.split_once('.').unwrap_or((value, ""));
    let all_digits = |text: &str| text.bytes().all(|b| b.is_ascii_digit());
    if whole.len() + fraction.len() == 0 || !all_digits(whole) || !all_digits(fraction) {
        return None;
    }
    let fraction_is_zero = fraction.bytes().all(|b| b == b'0');
    match whole.trim_start_matches('0') {
        "" if fraction_is_zero => return Some(LogDecisions::Problems),
        "" => {}
        "1" if fraction_is_zero => return Some(LogDecisions::All),
        _ => return None,
    }
    let rate: f64 = value.parse().ok()?;
    // Only a value with hundreds of zeros after the dot reads as 0: sampling it is never
    // drawing, which is what `problems` does.
    Some(if rate > 0.0 { LogDecisions::Sample(rate) } else { LogDecisions::Problems })
}

/// Which decision lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum LogDecisions {
    /// Every line (the default).
    #[default]
    All,
    /// Only the lines an operator must see: rejections, unknowns, releases, fail-open.
    Problems,
    /// Every problem line, and this fraction (greater than 0, less than 1) of the healthy ones.
    Sample(f64),
}

impl LogDecisions {
    /// Reads the variable: `all` (or unset / empty), `problems`, or a rate such as `0.01`
    /// (`0` is `problems`, `1` is `all`).
    pub fn parse(raw: Option<&str>) -> Result<LogDecisions, String> {
        let value = raw.map(str::trim).unwrap_or("");
        match value {
            "" | "all" => return Ok(LogDecisions::All),
            "problems" => return Ok(LogDecisions::Problems),
            _ => {}
        }
        let invalid = || {
            format!(
                "{VAR_LOG_DECISIONS} is invalid: expected all, problems, or a sampling rate from 0 to 1 (such as 0.01)"
            )
        };
        decimal_rate(value).ok_or_else(invalid)
    }

    /// Whether the line of `decision` is written, given the runtime's draw in `[0, 1)`.
    pub fn keeps(self, decision: Decision, draw: f64) -> bool {
        if is_problem(decision) {
            return true;
        }
        match self {
            LogDecisions::All => true,
            LogDecisions::Problems => false,
            LogDecisions::Sample(rate) => draw < rate,
        }
    }

    /// Whether keeping a line needs a draw (only sampling does; the others draw nothing).
    pub fn samples(self) -> bool {
        matches!(self, LogDecisions::Sample(_))
    }
}

/// The decisions whose lines are always written.
fn is_problem(decision: Decision) -> bool {
    match decision {
        Decision::Rejected(_) | Decision::Unknown | Decision::Released | Decision::FailedOpen => true,
        // An asynchronous job's failures: a send that did not execute and waits for the
        // next, an unknown outcome sent again, a job given up at its deadline.
        Decision::RetryScheduled | Decision::Reforwarded | Decision::GaveUp => true,
        // Every reconciliation: what became of an outcome that was unknown.
        Decision::ReconciledExecuted | Decision::ReconciledNotExecuted | Decision::ReconcileFailed => true,
        Decision::Executed | Decision::Replayed | Decision::Coalesced | Decision::Accepted => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::vocabulary::problem::ProblemKind;

    const HEALTHY: [Decision; 4] =
        [Decision::Executed, Decision::Replayed, Decision::Coalesced, Decision::Accepted];
    const PROBLEMS: [Decision; 8] = [
        Decision::RetryScheduled,
        Decision::Reforwarded,
        Decision::GaveUp,
        Decision::Rejected(ProblemKind::KeyReused),
        Decision::Rejected(ProblemKind::InProgress),
        Decision::Unknown,
        Decision::Released,
        Decision::FailedOpen,
    ];

    #[test]
    fn values() {
        for (raw, expected) in [
            (None, LogDecisions::All),
            (Some(""), LogDecisions::All),
            (Some("all"), LogDecisions::All),
            (Some(" problems "), LogDecisions::Problems),
            (Some("0"), LogDecisions::Problems),
            (Some("1"), LogDecisions::All),
            (Some("1.0"), LogDecisions::All),
            (Some("0.01"), LogDecisions::Sample(0.01)),
            (Some(".5"), LogDecisions::Sample(0.5)),
        ] {
            assert_eq!(LogDecisions::parse(raw), Ok(expected), "{raw:?}");
        }
        for raw in ["ALL", "none", "1.5", "-0.1", "1e-2", "NaN", "inf", "0.1.2", "50%"] {
            let error = LogDecisions::parse(Some(raw)).expect_err(raw);
            assert!(error.contains(VAR_LOG_DECISIONS), "{error}");
        }
    }

    #[test]
    fn a_rate_reads_as_rusts_float_parser_reads_it() {
        // Beside `values`: long and odd forms, read without `str::parse::<f64>`.
        for (raw, expected) in [
            ("000", Some(LogDecisions::Problems)),
            ("0.000", Some(LogDecisions::Problems)),
            ("1.", Some(LogDecisions::All)),
            ("001.000", Some(LogDecisions::All)),
            ("0.000000000000000000001", Some(LogDecisions::Sample(1e-21))),
            ("0.12345678901234567890123", Some(LogDecisions::Sample(0.12345678901234568))),
            ("1.0000000000000000000001", None),
            ("2", None),
            (".", None),
            ("..5", None),
            ("0,5", None),
            ("+0.5", None),
            ("0.5 ", None),
        ] {
            assert_eq!(decimal_rate(raw), expected, "{raw:?}");
        }
        let hundreds_of_zeros = format!("0.{}1", "0".repeat(400));
        assert_eq!(decimal_rate(&hundreds_of_zeros), Some(LogDecisions::Problems));
    }

    proptest::proptest! {
        /// Up to 15 significant digits and 22 places, the rate is the correctly rounded one.
        #[test]
        fn a_short_rate_is_the_nearest_f64(whole in "0{0,3}1?", zeros in "0{0,7}", digits in "[0-9]{0,15}") {
            let raw = format!("{whole}.{zeros}{digits}");
            let expected = match raw.parse::<f64>() {
                Ok(0.0) => Some(LogDecisions::Problems),
                Ok(1.0) => Some(LogDecisions::All),
                Ok(rate) if rate < 1.0 => Some(LogDecisions::Sample(rate)),
                Ok(_) => None,
                Err(_) => None,
            };
            proptest::prop_assert_eq!(decimal_rate(&raw), expected, "{}", raw);
        }
    }

    #[test]
    fn problem_lines_are_always_kept() {
        for setting in [LogDecisions::All, LogDecisions::Problems, LogDecisions::Sample(0.001)] {
            for decision in PROBLEMS {
                for draw in [0.0, 0.5, 0.999] {
                    assert!(setting.keeps(decision, draw), "{setting:?} {decision:?} {draw}");
                }
            }
        }
    }

    #[test]
    fn healthy_lines_follow_the_setting() {
        for decision in HEALTHY {
            assert!(LogDecisions::All.keeps(decision, 0.999));
            assert!(!LogDecisions::Problems.keeps(decision, 0.0));
            assert!(LogDecisions::Sample(0.25).keeps(decision, 0.2));
            assert!(!LogDecisions::Sample(0.25).keeps(decision, 0.25));
            assert!(!LogDecisions::Sample(0.25).keeps(decision, 0.9));
        }
        assert!(LogDecisions::Sample(0.5).samples());
        assert!(!LogDecisions::All.samples() && !LogDecisions::Problems.samples());
    }
}
