//! [`BaseUrl`]: which requests the middleware covers. A covered request gets a key when it
//! has none and is retried; every other request passes through untouched. Coverage is the
//! caller's explicit list of the worker's base URLs, never "every POST through the client":
//! a client shared with an API that is not behind the worker must not add random keys to,
//! or retry, that API's payments (a retry there without the worker's deduplication is a
//! second payment).
//!
//! A base URL covers a request when the scheme, the host and the port (the scheme's
//! default when none is written) are the same, and the request's path is the base's path
//! or continues it after a `/`: `https://pay.example.com/v1` covers `/v1` and
//! `/v1/charges`, not `/v10/charges` or `/v2/charges`. Paths are compared as the URL
//! parser writes them (percent-encoded, dot segments resolved); query strings are ignored.

use std::fmt;
use std::str::FromStr;

use reqwest::Url;

/// A base URL whose requests the middleware covers: `http` or `https`, a host, an optional
/// port and an optional path prefix; no credentials, query or fragment. A trailing `/` is
/// not significant (`https://h/v1/` is `https://h/v1`).
#[derive(Clone, PartialEq, Eq)]
pub struct BaseUrl {
    scheme: String,
    host: String,
    port: u16,
    /// Without the trailing `/`: empty for the whole host.
    path: String,
}

/// Why a base URL was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidBaseUrl {
    base_url: String,
    reason: String,
}

impl InvalidBaseUrl {
    /// A URL with an `@` may hold a credential: it is not repeated in the message.
    fn new(base_url: &str, reason: impl Into<String>) -> Self {
        let shown = if base_url.contains('@') { String::new() } else { base_url.to_string() };
        InvalidBaseUrl { base_url: shown, reason: reason.into() }
    }

    /// An empty list: a layer that covers nothing is a mistake, not a configuration.
    pub(crate) fn none() -> Self {
        InvalidBaseUrl::new("", "no base URL given: the layer covers only the base URLs it is given")
    }

    /// What was wrong with it.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for InvalidBaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.base_url.is_empty() {
            write!(f, "invalid base URL: {}", self.reason)
        } else {
            write!(f, "invalid base URL {:?}: {}", self.base_url, self.reason)
        }
    }
}

impl std::error::Error for InvalidBaseUrl {}

impl BaseUrl {
    /// Parses `https://host[:port][/path]`.
    pub fn parse(base_url: &str) -> Result<BaseUrl, InvalidBaseUrl> {
        let invalid = |reason: &str| InvalidBaseUrl::new(base_url, reason);
        let url = Url::parse(base_url).map_err(|e| invalid(&format!("not an absolute URL ({e})")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid("only http:// and https:// base URLs are supported"));
        }
        let host = url.host_str().filter(|h| !h.is_empty()).ok_or_else(|| invalid("no host"))?;
        // A credential in a URL would end up in logs and error messages; the worker takes it
        // in a header.
        if !url.username().is_empty() || url.password().is_some() {
            return Err(invalid("a base URL carries no user name or password"));
        }
        // A base URL is a prefix: a query or fragment would make it match nothing or
        // everything depending on how it is read.
        if url.query().is_some() || url.fragment().is_some() {
            return Err(invalid("a base URL has no query or fragment"));
        }
        let port = url.port_or_known_default().ok_or_else(|| invalid("no port"))?;
        Ok(BaseUrl {
            scheme: url.scheme().to_string(),
            host: host.to_string(),
            port,
            path: url.path().trim_end_matches('/').to_string(),
        })
    }

    /// Whether a request to `url` is one of this base's: same scheme, host and port, and a
    /// path that is the base's or continues it after a `/`.
    pub fn covers(&self, url: &Url) -> bool {
        if url.scheme() != self.scheme
            || url.host_str() != Some(self.host.as_str())
            || url.port_or_known_default() != Some(self.port)
        {
            return false;
        }
        match url.path().strip_prefix(self.path.as_str()) {
            Some(rest) => rest.is_empty() || rest.starts_with('/'),
            None => false,
        }
    }
}

impl FromStr for BaseUrl {
    type Err = InvalidBaseUrl;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BaseUrl::parse(s)
    }
}

impl TryFrom<&str> for BaseUrl {
    type Error = InvalidBaseUrl;

    fn try_from(s: &str) -> Result<Self, Self::Error> {
        BaseUrl::parse(s)
    }
}

impl fmt::Display for BaseUrl {
    /// The normalised form: `https://host:port/path`, the port always written.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}{}", self.scheme, self.host, self.port, self.path)
    }
}

impl fmt::Debug for BaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BaseUrl({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn covers(base: &str, url: &str) -> bool {
        BaseUrl::parse(base).unwrap().covers(&Url::parse(url).unwrap())
    }

    #[test]
    fn a_base_covers_its_origin_and_its_path_on_segment_boundaries() {
        let base = "https://pay.example.com/v1";
        for url in [
            "https://pay.example.com/v1",
            "https://pay.example.com/v1/",
            "https://pay.example.com/v1/charges",
            "https://pay.example.com/v1/charges/ch_1?expand=all",
            "https://PAY.Example.com:443/v1/charges",
            "https://pay.example.com/v2/../v1/charges",
        ] {
            assert!(covers(base, url), "{url}");
        }
        for url in [
            "https://pay.example.com/v10/charges",
            "https://pay.example.com/v1charges",
            "https://pay.example.com/v2/charges",
            "https://pay.example.com/",
            "https://pay.example.com/V1/charges",
            "http://pay.example.com/v1/charges",
            "https://pay.example.com:8443/v1/charges",
            "https://api.example.com/v1/charges",
            "https://pay.example.com.evil.test/v1/charges",
            "https://evil.test/pay.example.com/v1/charges",
        ] {
            assert!(!covers(base, url), "{url}");
        }
    }

    #[test]
    fn a_trailing_slash_and_default_ports_are_not_significant() {
        assert_eq!(BaseUrl::parse("https://h/v1/").unwrap(), BaseUrl::parse("https://h:443/v1").unwrap());
        assert_eq!(BaseUrl::parse("http://h:80").unwrap(), BaseUrl::parse("http://h/").unwrap());
        assert_eq!(BaseUrl::parse("https://h/v1/").unwrap().to_string(), "https://h:443/v1");
        // A whole host: every path on it.
        for url in ["https://h", "https://h/", "https://h/v1/charges", "https://h/anything?x=1"] {
            assert!(covers("https://h", url), "{url}");
            assert!(covers("https://h/", url), "{url}");
        }
        assert!(covers("http://127.0.0.1:8787", "http://127.0.0.1:8787/v1/charges"));
        assert!(!covers("http://127.0.0.1:8787", "http://127.0.0.1:8788/v1/charges"));
        assert!(!covers("http://127.0.0.1:8787", "http://localhost:8787/v1/charges"));
        assert!(covers("https://[::1]:8443/api", "https://[::1]:8443/api/v1"));
    }

    #[test]
    fn bases_that_are_not_a_plain_prefix_are_refused() {
        for (base, why) in [
            ("", "not an absolute URL"),
            ("pay.example.com/v1", "not an absolute URL"),
            ("/v1/charges", "not an absolute URL"),
            ("ftp://pay.example.com", "only http"),
            ("mailto:pay@example.com", "only http"),
            ("https://user:secret@pay.example.com", "no user name or password"),
            ("https://pay.example.com/v1?x=1", "no query or fragment"),
            ("https://pay.example.com/v1#top", "no query or fragment"),
        ] {
            let e = BaseUrl::parse(base).expect_err(base);
            assert!(e.reason().contains(why), "{base:?}: {e}");
            assert!(!e.to_string().contains("secret"), "the password is not repeated: {e}");
        }
    }
}
