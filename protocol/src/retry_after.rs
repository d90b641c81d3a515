//! `Retry-After` (RFC 9110 §10.2.3) read one way, by the worker (an origin's) and by its
//! clients (the worker's): delay-seconds of at most nine digits, or an IMF-fixdate from 1970
//! on; anything else is ignored, and the reader's own backoff alone applies.

/// An origin's `Retry-After` in milliseconds from `now` (Unix ms): delay-seconds, or an
/// HTTP date (RFC 9110 §10.2.3; the IMF-fixdate form every sender must use). A date in
/// the past is 0; anything else is ignored, and the backoff alone applies.
pub fn parse_retry_after(value: Option<&str>, now: u64) -> Option<u64> {
    let text = value?.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        if text.len() > 9 {
            return None;
        }
        return text.parse::<u64>().ok().map(|seconds| seconds * 1_000);
    }
    imf_fixdate_ms(text).map(|at| at.saturating_sub(now))
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` as Unix milliseconds.
fn imf_fixdate_ms(text: &str) -> Option<u64> {
    const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    const MONTHS: [&str; 12] =
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let b = text.as_bytes();
    if b.len() != 29
        || &b[3..5] != b", "
        || b[7] != b' '
        || b[11] != b' '
        || b[16] != b' '
        || &b[25..] != b" GMT"
    {
        return None;
    }
    if !DAYS.contains(&text.get(0..3)?) || b[19] != b':' || b[22] != b':' {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<u64> {
        let part = text.get(range)?;
        part.bytes().all(|c| c.is_ascii_digit()).then(|| part.parse().ok()).flatten()
    };
    let day = number(5..7)?;
    let month = MONTHS.iter().position(|m| Some(*m) == text.get(8..11))? as u64 + 1;
    let year = number(12..16)?;
    let (hour, minute, second) = (number(17..19)?, number(20..22)?, number(23..25)?);
    if year < 1970 || day == 0 || day > 31 || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm), for years from 1970.
    let (y, m) = if month <= 2 { (year - 1, month + 9) } else { (year, month - 3) };
    let era = y / 400;
    let year_of_era = y - era * 400;
    let day_of_year = (153 * m + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = (era * 146_097 + day_of_era).checked_sub(719_468)?;
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second;
    Some(seconds * 1_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_and_dates() {
        // Sun, 06 Nov 1994 08:49:37 GMT is 784111777 s.
        let now = 784_111_777_000;
        let at = |value: &str| parse_retry_after(Some(value), now);
        assert_eq!(at("5"), Some(5_000));
        assert_eq!(at(" 120 "), Some(120_000));
        assert_eq!(at("0"), Some(0));
        assert_eq!(at("999999999"), Some(999_999_999_000));
        assert_eq!(at("1000000000"), None, "over nine digits: ignored");
        assert_eq!(at("Sun, 06 Nov 1994 08:49:37 GMT"), Some(0));
        assert_eq!(at("Sun, 06 Nov 1994 08:50:07 GMT"), Some(30_000));
        assert_eq!(at("Mon, 07 Nov 1994 08:49:37 GMT"), Some(86_400_000));
        assert_eq!(at("Sat, 05 Nov 1994 08:49:37 GMT"), Some(0), "past: no wait");
        assert_eq!(parse_retry_after(Some("Thu, 01 Jan 1970 00:00:00 GMT"), 0), Some(0));
        assert_eq!(parse_retry_after(Some("Tue, 29 Feb 2000 00:00:10 GMT"), 951_782_400_000), Some(10_000));
        assert_eq!(parse_retry_after(None, now), None);
        for bad in [
            "",
            "-1",
            "1.5",
            "soon",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 6 Nov 1994 08:49:37 GMT",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 25:49:37 GMT",
        ] {
            assert_eq!(at(bad), None, "{bad:?}");
        }
    }
}
