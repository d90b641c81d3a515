//! Rejections and faults as RFC 9457 `application/problem+json` values.
//!
//! Owns the problem kinds, their status codes and stable `type` URIs, and their encoding.
//! A problem is a plain value; the runtime only turns it into a response.

use serde::Serialize;

pub use idempotency_edge_protocol::problem::{ProblemKind, PROBLEM_CONTENT_TYPE, PROBLEM_TYPE_PREFIX};

/// One problem response: a kind, a detail sentence and, where a retry makes sense, how
/// long to wait.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub kind: ProblemKind,
    pub detail: String,
    /// Seconds for a `Retry-After` header.
    pub retry_after: Option<u64>,
    /// RFC 9457's `instance`: which request this occurrence answered (`core::vocabulary::trace::Trace`),
    /// the same id as its log line's `request_id`.
    pub instance: Option<String>,
}

impl Problem {
    pub fn new(kind: ProblemKind, detail: impl Into<String>) -> Self {
        Problem { kind, detail: detail.into(), retry_after: None, instance: None }
    }

    /// The problem as the answer to the request `trace` names (its `instance`).
    pub fn for_request(mut self, trace: Option<&super::trace::Trace>) -> Self {
        if let Some(instance) = trace.and_then(super::trace::Trace::instance) {
            self.instance = Some(instance);
        }
        self
    }

    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds.max(1));
        self
    }

    pub fn status(&self) -> u16 {
        self.kind.status()
    }

    pub fn type_uri(&self) -> String {
        format!("{PROBLEM_TYPE_PREFIX}{}", self.kind.slug())
    }

    /// The `application/problem+json` body: members in RFC 9457's order (`type`, `title`,
    /// `status`, `detail`, then `instance` when known), the order of `Body`'s fields.
    pub fn to_json(&self) -> Vec<u8> {
        /// The members of the body, as serde writes them.
        #[derive(Serialize)]
        struct Body<'a> {
            #[serde(rename = "type")]
            type_uri: String,
            title: &'a str,
            status: u16,
            detail: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            instance: Option<&'a str>,
        }
        let body = Body {
            type_uri: self.type_uri(),
            title: self.kind.title(),
            status: self.status(),
            detail: &self.detail,
            instance: self.instance.as_deref(),
        };
        serde_json::to_vec(&body).expect("strings and numbers always serialize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problem_json_has_the_rfc_9457_members() {
        let problem = Problem::new(ProblemKind::InProgress, "wait").with_retry_after(0);
        let value: serde_json::Value = serde_json::from_slice(&problem.to_json()).unwrap();
        assert_eq!(value["type"], "urn:idempotency-edge:problem:in-progress");
        assert_eq!(value["status"], 409);
        assert_eq!(value["title"], ProblemKind::InProgress.title());
        assert_eq!(value["detail"], "wait");
        assert_eq!(problem.retry_after, Some(1));
    }

    #[test]
    fn problem_bodies_are_byte_for_byte_as_before() {
        // Stored answers hold these bytes: the members' order and escaping must not move.
        let mut problem = Problem::new(ProblemKind::InProgress, "wait \"here\"\n\u{7}é");
        assert_eq!(
            String::from_utf8(problem.to_json()).unwrap(),
            format!(
                "{{\"type\":\"urn:idempotency-edge:problem:in-progress\",\"title\":\"{}\",\"status\":409,\
                 \"detail\":\"wait \\\"here\\\"\\n\\u0007é\"}}",
                ProblemKind::InProgress.title()
            )
        );
        problem.instance = Some("urn:x".to_owned());
        assert!(String::from_utf8(problem.to_json()).unwrap().ends_with(",\"instance\":\"urn:x\"}"));
    }

    #[test]
    fn every_kind_round_trips_through_its_slug() {
        for kind in ProblemKind::ALL {
            assert_eq!(ProblemKind::from_slug(kind.slug()), Some(kind));
        }
        let mut slugs: Vec<&str> = ProblemKind::ALL.iter().map(|kind| kind.slug()).collect();
        slugs.sort_unstable();
        slugs.dedup();
        assert_eq!(slugs.len(), ProblemKind::ALL.len(), "one slug per kind");
    }

    /// Every problem text is the core's, tested here: the runtime only sends what the core
    /// wrote. A `Problem::new` in `src/runtime` would be a decision outside it.
    #[test]
    fn the_runtime_writes_no_problem_of_its_own() {
        fn sources(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for entry in std::fs::read_dir(dir).expect("src/runtime is readable").flatten() {
                let path = entry.path();
                if path.is_dir() {
                    sources(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    out.push(path);
                }
            }
        }
        let mut files = Vec::new();
        sources(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/runtime"), &mut files);
        assert!(files.len() > 10, "the runtime's sources were found: {files:?}");
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            assert!(!text.contains("Problem::new("), "{} writes a problem of its own", file.display());
        }
    }
}
