//! Finding one text inside another, for the few places that look for more than one
//! character: a URL's `://`, a route pattern's literal parts in a request path, a
//! template's `{key}`, a header name in a sentence, a storage error's "no such table".
//!
//! Owns those searches only. `str::find` with a `&str` pattern brings `core`'s Two-Way
//! searcher (about 2.5 KB of the Wasm, issue 23); these compare at each position instead.
//! That is at most (text length × needle length) byte comparisons, and every needle here is
//! a constant or a literal part of an operator's `ROUTES` pattern, never the caller's input,
//! so a hostile path costs a route's pattern length per byte at worst. The tests check each
//! function against `str`'s own.

/// The byte index of the first occurrence of `needle` in `haystack` (0 for an empty one),
/// as `str::find` gives it. A match of one UTF-8 text in another always starts on a
/// character boundary, so the index can slice `haystack`.
pub fn find(haystack: &str, needle: &str) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    haystack.as_bytes().windows(needle.len()).position(|window| window == needle.as_bytes())
}

/// Whether `needle` occurs in `haystack`.
pub fn contains(haystack: &str, needle: &str) -> bool {
    find(haystack, needle).is_some()
}

/// The text before and after the first `separator`, as `str::split_once` splits it.
pub fn split_once<'a>(text: &'a str, separator: &str) -> Option<(&'a str, &'a str)> {
    let at = find(text, separator)?;
    Some((&text[..at], &text[at + separator.len()..]))
}

/// `text` with every occurrence of `from` replaced by `to`, left to right and not
/// overlapping, as `str::replace` does. Every caller replaces a constant; an empty `from`
/// (which `str::replace` finds between every character) leaves `text` as it is.
pub fn replace(text: &str, from: &str, to: &str) -> String {
    if from.is_empty() {
        return text.to_owned();
    }
    let mut replaced = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = find(rest, from) {
        replaced.push_str(&rest[..at]);
        replaced.push_str(to);
        rest = &rest[at + from.len()..];
    }
    replaced.push_str(rest);
    replaced
}

#[cfg(test)]
mod tests;
