use proptest::prelude::*;

use super::*;

#[test]
fn the_searches_the_worker_makes() {
    assert_eq!(find("https://origin.test/pay", "://"), Some(5));
    assert_eq!(find("/pay", "://"), None);
    assert_eq!(find("", "x"), None);
    assert_eq!(find("abc", ""), Some(0));
    assert_eq!(find("", ""), Some(0));
    assert!(contains("Error: no such table: idempotency_record", "no such table"));
    assert_eq!(split_once("http://[::1]:8080/x", "://"), Some(("http", "[::1]:8080/x")));
    assert_eq!(
        replace("https://o.test/charges/{key}?k={key}", "{key}", "k%201"),
        "https://o.test/charges/k%201?k=k%201"
    );
    assert_eq!(replace("aaaa", "aa", "b"), "bb", "left to right, not overlapping");
    assert_eq!(find("ünïcödé/ü", "/ü"), Some("ünïcödé".len()));
}

proptest! {
    /// Small alphabets (with a two-byte character), so that matches, near misses and
    /// overlaps are common.
    #[test]
    fn each_agrees_with_str(haystack in "[ab/é]{0,24}", needle in "[ab/é]{0,4}") {
        prop_assert_eq!(find(&haystack, &needle), haystack.find(needle.as_str()));
        prop_assert_eq!(contains(&haystack, &needle), haystack.contains(needle.as_str()));
        prop_assert_eq!(split_once(&haystack, &needle), haystack.split_once(needle.as_str()));
        if !needle.is_empty() {
            prop_assert_eq!(replace(&haystack, &needle, "<>"), haystack.replace(needle.as_str(), "<>"));
        }
    }
}
