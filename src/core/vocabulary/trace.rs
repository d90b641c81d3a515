//! Which request a log line or a problem is about: the request's trace, shared by the
//! problems (`core::vocabulary::problem`) and the log line (`core::edge_rules::log`) so that neither imports the
//! other.

/// Which request a line or a problem is about, so that a caller's failure can be traced to
/// its log line: the request id (the `cf-ray` of the request when Cloudflare gave one,
/// else one the Worker drew), the method and the route pattern that matched. Safe to log
/// by construction: no key, credential or body.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    pub request_id: String,
    pub method: String,
    pub route: Option<String>,
}

impl Trace {
    /// The problem's `instance` (RFC 9457): a URI naming this occurrence.
    pub fn instance(&self) -> Option<String> {
        (!self.request_id.is_empty()).then(|| format!("urn:idempotency-edge:request:{}", self.request_id))
    }
}
