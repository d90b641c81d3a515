//! [`Operation`]: one logical operation, its key and the exact request every attempt sends.

use std::fmt;

use http::{HeaderName, HeaderValue, Method};

use crate::key::wire_key;

/// Why an [`Operation`] could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidOperation(pub String);

impl fmt::Display for InvalidOperation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid operation: {}", self.0)
    }
}

impl std::error::Error for InvalidOperation {}

/// One logical operation: its key and the exact request every attempt sends. Immutable once
/// built, so no attempt can send another key or payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    key: String,
    /// The key as it goes on the wire: bare, or as an sf-string when it contains a
    /// character a bare key may not.
    wire_key: String,
    method: Method,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// Headers the client or the HTTP stack set; an operation may not carry its own.
const RESERVED_HEADERS: [&str; 5] =
    ["idempotency-key", "host", "content-length", "transfer-encoding", "connection"];

impl Operation {
    /// An operation with this key, method, path (and query) and body. The key follows the
    /// worker's rules: 1 to 255 printable ASCII characters.
    pub fn new(
        key: impl Into<String>,
        method: &str,
        path: &str,
        body: impl Into<Vec<u8>>,
    ) -> Result<Operation, InvalidOperation> {
        let key = key.into();
        let wire_key = wire_key(&key).map_err(|why| InvalidOperation(why.to_string()))?;
        let method = Method::from_bytes(method.as_bytes())
            .map_err(|_| InvalidOperation(format!("invalid method {method:?}")))?;
        if !path.starts_with('/') || path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(InvalidOperation(format!(
                "the path must start with / and contain no whitespace or control characters: {path:?}"
            )));
        }
        Ok(Operation {
            key,
            wire_key,
            method,
            path: path.to_string(),
            headers: Vec::new(),
            body: body.into(),
        })
    }

    /// A `POST` of a JSON body, with `Content-Type: application/json`.
    pub fn post_json(
        key: impl Into<String>,
        path: &str,
        json: impl Into<String>,
    ) -> Result<Operation, InvalidOperation> {
        Operation::new(key, "POST", path, json.into().into_bytes())?
            .header("Content-Type", "application/json")
    }

    /// Adds a header line (repeated names give repeated lines). `Idempotency-Key` is set by
    /// [`Operation::new`], and the framing headers by the HTTP stack, so those are refused.
    pub fn header(mut self, name: &str, value: &str) -> Result<Operation, InvalidOperation> {
        if HeaderName::from_bytes(name.as_bytes()).is_err() || HeaderValue::from_str(value).is_err() {
            return Err(InvalidOperation(format!("invalid header {name:?}")));
        }
        if RESERVED_HEADERS.iter().any(|r| name.eq_ignore_ascii_case(r)) {
            return Err(InvalidOperation(format!("{name} is set by the client, not by the operation")));
        }
        self.headers.push((name.to_string(), value.to_string()));
        Ok(self)
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// The `Idempotency-Key` header value: the key, or its sf-string form.
    pub fn wire_key(&self) -> &str {
        &self.wire_key
    }

    pub fn method(&self) -> &str {
        self.method.as_str()
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    pub fn body(&self) -> &[u8] {
        &self.body
    }

    pub(crate) fn http_method(&self) -> &Method {
        &self.method
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_worker_rules() {
        let op = |key: &str| Operation::new(key, "POST", "/x", Vec::new());
        assert_eq!(op("order-42-charge").unwrap().wire_key(), "order-42-charge");
        assert_eq!(op("a,b").unwrap().wire_key(), r#""a,b""#);
        assert_eq!(op("a,b").unwrap().key(), "a,b");
        for bad in ["", " padded", "new\nline", "clé"] {
            assert!(op(bad).is_err(), "{bad:?}");
        }
        assert!(op(&"k".repeat(256)).is_err());
    }

    #[test]
    fn operations_refuse_what_the_client_sets() {
        let base = || Operation::post_json("k", "/v1/charges", "{}").unwrap();
        for name in [
            "Idempotency-Key",
            "idempotency-key",
            "Host",
            "Content-Length",
            "Transfer-Encoding",
            "Connection",
        ] {
            assert!(base().header(name, "x").is_err(), "{name}");
        }
        assert!(base().header("X-A", "b\r\nX-Injected: 1").is_err());
        assert!(base().header("Bad Name", "v").is_err());
        assert!(base().header("X-Request-Source", "batch").is_ok());
        for path in ["v1/charges", "/v1/a b", "", "http://x/y"] {
            assert!(Operation::new("k", "POST", path, Vec::new()).is_err(), "{path:?}");
        }
        assert!(Operation::new("k", "PO ST", "/x", Vec::new()).is_err());
        assert_eq!(base().headers(), &[("Content-Type".to_string(), "application/json".to_string())]);
        assert_eq!(base().method(), "POST");
        assert_eq!(base().path(), "/v1/charges");
        assert_eq!(base().body(), b"{}");
    }
}
