//! The few things the worker needs from a URL, read from the string the runtime already
//! serialised (`Request.url`), without parsing it again.
//!
//! A WHATWG URL serialiser (the runtime's) emits `scheme://authority/path?query#fragment`
//! for the special schemes, with a path that always starts with `/`, the host lowercased,
//! the default port left out, and `?` and `#` percent-encoded inside the path. So the first
//! `/` after `://` starts the path, the first `?` after it starts the query, and the first
//! `#` the fragment. Pulling in a full URL parser (the `url` crate and its IDNA tables) for
//! this cost about a fifth of the Wasm bundle.

/// The path and the query (without `?`) of a serialised URL.
pub fn path_and_query_parts(url: &str) -> (&str, Option<&str>) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[after_scheme..];
    let rest = match rest.find('#') {
        Some(i) => &rest[..i],
        None => rest,
    };
    let Some(path_start) = rest.find(['/', '?']) else { return ("/", None) };
    let rest = &rest[path_start..];
    let (path, query) = match rest.find('?') {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    (if path.is_empty() { "/" } else { path }, query)
}

/// The path and query as they follow the authority (`/path?query`), as appended to an
/// origin base URL.
pub fn path_and_query(url: &str) -> String {
    match path_and_query_parts(url) {
        (path, Some(query)) => {
            let mut joined = String::with_capacity(path.len() + 1 + query.len());
            joined.push_str(path);
            joined.push('?');
            joined.push_str(query);
            joined
        }
        (path, None) => path.to_owned(),
    }
}

/// The host and port a serialised `http`/`https` URL connects to (the scheme's default
/// port when none is given). An IPv6 host keeps its brackets, as `url::Url::host_str` does.
/// `None` when there is no usable host or port.
pub fn host_and_port(url: &str) -> Option<(&str, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let default_port = if scheme.eq_ignore_ascii_case("https") {
        443
    } else if scheme.eq_ignore_ascii_case("http") {
        80
    } else {
        return None;
    };
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let authority = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    // The port follows the last `:` that is not inside an IPv6 literal's brackets.
    let (host, port) = match authority.rfind(':') {
        Some(i) if !authority[i..].contains(']') => {
            let port = &authority[i + 1..];
            let port = if port.is_empty() { default_port } else { port.parse().ok()? };
            (&authority[..i], port)
        }
        _ => (authority, default_port),
    };
    (!host.is_empty()).then_some((host, port))
}

/// Why a path is refused where a route could cover it: an origin might read it as another
/// path than the route patterns see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AmbiguousPath {
    /// `%2F`: many servers decode it into a segment separator.
    EncodedSlash,
    /// `\` or `%5C`: some servers treat it as `/`.
    Backslash,
    /// A `.` or `..` segment, written or percent-encoded, left in the path.
    DotSegment,
    /// `//`: some servers merge it into one `/`.
    EmptySegment,
    /// A `%` that does not start a percent-escape: decoding what follows it can make a new
    /// escape (`%%61%30` reads as `%a0`).
    BareEscape,
}

impl AmbiguousPath {
    pub fn detail(self) -> &'static str {
        match self {
            AmbiguousPath::EncodedSlash => "The path contains an encoded slash (%2F), which servers read in different ways. Send the path without it.",
            AmbiguousPath::Backslash => "The path contains a backslash (\\ or %5C), which some servers read as a slash. Send the path without it.",
            AmbiguousPath::DotSegment => "The path contains a dot segment (. or .., possibly percent-encoded). Send the resolved path.",
            AmbiguousPath::EmptySegment => "The path contains an empty segment (//), which some servers merge. Send the path without it.",
            AmbiguousPath::BareEscape => "The path contains a % that does not start a percent-escape. Encode it as %25.",
        }
    }
}

/// The path as an origin would route it, for matching route patterns: percent-encoded
/// unreserved characters (`%61` for `a`) decoded and other escapes' hex digits in upper
/// case. A path that origins may read as a different path is refused instead: route
/// patterns would match one path while the origin executes another.
///
/// The runtime's URL parser has already resolved literal `.`/`..` segments and their
/// `%2E` spellings; they are checked again here so that the rule does not depend on it.
pub fn normalised_path(path: &str) -> Result<String, AmbiguousPath> {
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            if let Some(value) = bytes.get(i + 1..i + 3).and_then(hex_pair) {
                match value {
                    b'/' => return Err(AmbiguousPath::EncodedSlash),
                    b'\\' => return Err(AmbiguousPath::Backslash),
                    v if v.is_ascii_alphanumeric() || matches!(v, b'-' | b'.' | b'_' | b'~') => {
                        out.push(char::from(v));
                    }
                    v => {
                        out.push('%');
                        super::hex::push_upper(&mut out, v);
                    }
                }
                i += 3;
                continue;
            }
            return Err(AmbiguousPath::BareEscape);
        }
        if b == b'\\' {
            return Err(AmbiguousPath::Backslash);
        }
        // Copy the run up to the next escape as it is (it may hold non-ASCII text).
        let run_end = bytes[i..].iter().position(|&c| c == b'%' || c == b'\\').map_or(bytes.len(), |n| i + n);
        let run_end = if run_end == i { i + 1 } else { run_end };
        out.push_str(&path[i..run_end]);
        i = run_end;
    }
    let mut segments = out.split('/').skip(1).peekable();
    while let Some(segment) = segments.next() {
        if segment == "." || segment == ".." {
            return Err(AmbiguousPath::DotSegment);
        }
        // An empty last segment is a trailing slash, not a doubled one.
        if segment.is_empty() && segments.peek().is_some() {
            return Err(AmbiguousPath::EmptySegment);
        }
    }
    Ok(out)
}

fn hex_pair(pair: &[u8]) -> Option<u8> {
    Some(super::hex::digit_value(pair[0])? << 4 | super::hex::digit_value(pair[1])?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalised_paths() {
        assert_eq!(normalised_path("/v1/charges").as_deref(), Ok("/v1/charges"));
        assert_eq!(normalised_path("/").as_deref(), Ok("/"));
        assert_eq!(normalised_path("/v1/charges/").as_deref(), Ok("/v1/charges/"));
        assert_eq!(normalised_path("/v1/ch%61rges").as_deref(), Ok("/v1/charges"));
        assert_eq!(normalised_path("/v1/%7Euser%2d1").as_deref(), Ok("/v1/~user-1"));
        assert_eq!(normalised_path("/v1/a%20b%3f").as_deref(), Ok("/v1/a%20b%3F"));
        assert_eq!(normalised_path("/v1/100%25").as_deref(), Ok("/v1/100%25"));
        assert_eq!(normalised_path("/v1/caf\u{e9}").as_deref(), Ok("/v1/caf\u{e9}"));
    }

    #[test]
    fn ambiguous_paths_are_refused() {
        let cases = [
            ("/v1/quotes%2F..%2Fcharges", AmbiguousPath::EncodedSlash),
            ("/v1/quotes%2fx", AmbiguousPath::EncodedSlash),
            ("/v1/quotes%5C..%5Ccharges", AmbiguousPath::Backslash),
            ("/v1/quotes\\charges", AmbiguousPath::Backslash),
            ("/v1/quotes/../charges", AmbiguousPath::DotSegment),
            ("/v1/quotes/%2e%2E/charges", AmbiguousPath::DotSegment),
            ("/v1/./charges", AmbiguousPath::DotSegment),
            ("/v1/.%2e", AmbiguousPath::DotSegment),
            ("/v1//charges", AmbiguousPath::EmptySegment),
            ("//v1/charges", AmbiguousPath::EmptySegment),
            ("/v1/100%", AmbiguousPath::BareEscape),
            ("/v1/%zz", AmbiguousPath::BareEscape),
            ("/%%61%30", AmbiguousPath::BareEscape),
        ];
        for (path, expected) in cases {
            assert_eq!(normalised_path(path), Err(expected), "{path}");
        }
        // Dots inside a segment are ordinary characters.
        assert!(normalised_path("/v1/charges.json").is_ok());
        assert!(normalised_path("/v1/...").is_ok());
    }

    #[test]
    fn path_and_query_from_serialised_urls() {
        assert_eq!(path_and_query_parts("https://a.example/v1/pay?x=1&y"), ("/v1/pay", Some("x=1&y")));
        assert_eq!(path_and_query_parts("http://127.0.0.1:8080/v1/pay"), ("/v1/pay", None));
        assert_eq!(path_and_query_parts("https://a.example/"), ("/", None));
        assert_eq!(path_and_query_parts("https://a.example/?"), ("/", Some("")));
        assert_eq!(path_and_query_parts("https://a.example/p?q#frag"), ("/p", Some("q")));
        assert_eq!(path_and_query_parts("https://a.example/p%3Fx?q=%3F"), ("/p%3Fx", Some("q=%3F")));
        assert_eq!(path_and_query_parts("https://a.example"), ("/", None));
        assert_eq!(path_and_query("https://a.example/v1/pay?x=1"), "/v1/pay?x=1");
        assert_eq!(path_and_query("https://a.example/v1/pay"), "/v1/pay");
    }

    #[test]
    fn host_and_port_with_scheme_defaults() {
        assert_eq!(host_and_port("http://127.0.0.1:8080/v1/pay"), Some(("127.0.0.1", 8080)));
        assert_eq!(host_and_port("http://origin.example/v1"), Some(("origin.example", 80)));
        assert_eq!(host_and_port("https://origin.example?x"), Some(("origin.example", 443)));
        assert_eq!(host_and_port("http://[::1]:9000/"), Some(("[::1]", 9000)));
        assert_eq!(host_and_port("http://[::1]/"), Some(("[::1]", 80)));
        assert_eq!(host_and_port("http://u:p@h.example:81/"), Some(("h.example", 81)));
        assert_eq!(host_and_port("ftp://h.example/"), None);
        assert_eq!(host_and_port("http:///x"), None);
        assert_eq!(host_and_port("http://h:99999/"), None);
    }

    proptest::proptest! {
        // The runtime serialises the URL, but the helpers must not panic on anything: every
        // slice is cut at an ASCII delimiter, so it is always on a character boundary.
        #[test]
        fn any_string_is_split_without_panicking(url in "\\PC*", scheme in "(https?|ftp)://") {
            for url in [url.clone(), format!("{scheme}{url}")] {
                let (path, query) = path_and_query_parts(&url);
                proptest::prop_assert!(path.starts_with('/'));
                proptest::prop_assert!(url.contains(path) || path == "/");
                proptest::prop_assert!(query.is_none_or(|q| url.contains(q)));
                if let Some((host, _port)) = host_and_port(&url) {
                    proptest::prop_assert!(!host.is_empty() && url.contains(host));
                }
            }
        }

        // Normalising never panics, and a path it accepts is a fixed point: decoding is
        // done once, so no second reading of the result finds another path.
        #[test]
        fn normalising_is_idempotent(path in "(/([a-z.%]|%2[eEfF]|%5[cC]|%6[1-9]|%7[eE]|%[0-9a-fA-F]{2}){0,6}){1,5}/?") {
            if let Ok(once) = normalised_path(&path) {
                let twice = normalised_path(&once);
                proptest::prop_assert_eq!(twice.as_deref(), Ok(once.as_str()), "{} -> {}", path, once);
            }
        }
    }
}
