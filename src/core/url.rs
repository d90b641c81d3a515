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

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
