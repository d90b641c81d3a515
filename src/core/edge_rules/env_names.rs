//! Misspelt variables: a name in the environment that looks like a known one.
//!
//! Owns the list of every name the worker reads from its environment (variables, secrets
//! and bindings) and the rule that tells a misspelling from an unrelated name. A misspelt
//! variable is silently ignored by every lookup, and its default applies: `SCOPE_HEADERS`
//! instead of `SCOPE_HEADER` would scope keys by the wrong header. So the worker treats it
//! as an invalid configuration: 500 `invalid-config` naming both names, nothing forwarded.
//!
//! The rule: a name that is not known, starts with the same three characters as a known
//! name, and is within two edits of it (insertions, deletions, substitutions, letters
//! compared without case). Unrelated names of the operator's own pass.

use super::admin::VAR_ADMIN_TOKEN;
use super::config::*;
use super::log_decisions::VAR_LOG_DECISIONS;
use super::origin_auth::{VAR_ORIGIN_AUTH_FORMAT, VAR_ORIGIN_AUTH_SECRET};
use super::routes::VAR_ROUTES;
use super::scope::*;
use crate::core::formats::keyed_name::VAR_OBJECT_NAME_KEY;
use crate::core::formats::seal::{VAR_STORAGE_ALLOW_UNSEALED, VAR_STORAGE_ENCRYPTION_KEYS};
use crate::core::key_rules::machine::async_job::{
    VAR_ASYNC_ACCEPT, VAR_ASYNC_DEADLINE_SECONDS, VAR_ASYNC_MAX_BACKOFF_SECONDS,
};

/// `TRUSTED_CLIENT_IP`: replace client-sent forwarding headers with `CF-Connecting-IP`.
pub const VAR_TRUSTED_CLIENT_IP: &str = "TRUSTED_CLIENT_IP";

/// How a name is set, and so how it is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameKind {
    /// A `[vars]` value (or `--var`): not secret.
    Variable,
    /// Set with `wrangler secret put`, never in `[vars]` (which the dashboard shows and
    /// git keeps); a `--var` in local development.
    Secret,
    /// A test-only variable: unset in production, announced on every isolate start.
    TestOnly,
    /// A binding (wrangler.toml), not a value.
    Binding,
}

/// Every name the worker reads from its environment, and how it is set: the one list.
pub const NAMES: [(&str, NameKind); 46] = [
    (VAR_ORIGIN_URL, NameKind::Variable),
    (VAR_TTL_SECONDS, NameKind::Variable),
    (VAR_DUPLICATE_WAIT_SECONDS, NameKind::Variable),
    (VAR_ORIGIN_TIMEOUT_SECONDS, NameKind::Variable),
    (VAR_MAX_BODY_BYTES, NameKind::Variable),
    (VAR_SCOPE_HEADER, NameKind::Variable),
    (VAR_ROUTES, NameKind::Variable),
    (VAR_ADMIN_PATH_PREFIX, NameKind::Variable),
    (VAR_JURISDICTION, NameKind::Variable),
    (VAR_MAX_WAITERS_PER_KEY, NameKind::Variable),
    (VAR_MAX_WAITING_BYTES, NameKind::Variable),
    (VAR_MAX_STORED_RESPONSE_BYTES, NameKind::Variable),
    (VAR_ORIGIN_DEDUPLICATES, NameKind::Variable),
    (VAR_MAX_ORIGIN_ATTEMPTS, NameKind::Variable),
    (VAR_MODE, NameKind::Variable),
    (VAR_ORIGIN_SERVICE, NameKind::Variable),
    (VAR_ASYNC_ACCEPT, NameKind::Variable),
    (VAR_ASYNC_DEADLINE_SECONDS, NameKind::Variable),
    (VAR_ASYNC_MAX_BACKOFF_SECONDS, NameKind::Variable),
    (VAR_ALLOW_ANONYMOUS, NameKind::Variable),
    (VAR_JWT_CLAIM, NameKind::Variable),
    (VAR_JWKS, NameKind::Variable),
    (VAR_JWKS_URL, NameKind::Variable),
    (VAR_JWT_ISSUER, NameKind::Variable),
    (VAR_JWT_AUDIENCE, NameKind::Variable),
    (VAR_JWT_LEEWAY_SECONDS, NameKind::Variable),
    (VAR_JWT_REQUIRED, NameKind::Variable),
    (VAR_REPLAY_CREDENTIAL_HEADERS, NameKind::Variable),
    (VAR_TRUSTED_CLIENT_IP, NameKind::Variable),
    (VAR_LOG_DECISIONS, NameKind::Variable),
    (VAR_STORAGE_ALLOW_UNSEALED, NameKind::Variable),
    (VAR_ORIGIN_AUTH_FORMAT, NameKind::Variable),
    (VAR_ADMIN_TOKEN, NameKind::Secret),
    (VAR_STORAGE_ENCRYPTION_KEYS, NameKind::Secret),
    (VAR_ORIGIN_AUTH_SECRET, NameKind::Secret),
    (VAR_OBJECT_NAME_KEY, NameKind::Secret),
    (VAR_JWT_HS256_SECRET, NameKind::Secret),
    (VAR_ALARM_FAULT_INJECTION, NameKind::TestOnly),
    (VAR_DELETE_FAULT_INJECTION, NameKind::TestOnly),
    (VAR_CHUNK_WRITE_FAULT_INJECTION, NameKind::TestOnly),
    (VAR_PANIC_FAULT_INJECTION, NameKind::TestOnly),
    (RATE_LIMITER_BINDING, NameKind::Binding),
    ("IDEMPOTENCY_KEYS", NameKind::Binding),
    (super::metrics_schema::BINDING, NameKind::Binding),
    (VERSION_BINDING, NameKind::Binding),
    (super::outcome_events::OUTCOME_QUEUE_BINDING, NameKind::Binding),
];

/// The Rate Limiting binding a route's rate limit uses unless it names another.
pub const RATE_LIMITER_BINDING: &str = "RATE_LIMITER";
/// The version-metadata binding (`[version_metadata]` in wrangler.toml), when bound.
pub const VERSION_BINDING: &str = "CF_VERSION_METADATA";

/// Every name the worker knows.
pub fn known_names() -> impl Iterator<Item = &'static str> {
    NAMES.iter().map(|(name, _)| *name)
}

/// The names read as values (variables, secrets, test-only ones): not bindings.
pub fn variable_names() -> impl Iterator<Item = &'static str> {
    NAMES.iter().filter(|(_, kind)| *kind != NameKind::Binding).map(|(name, _)| *name)
}

/// The names that hold secrets.
pub fn secret_names() -> impl Iterator<Item = &'static str> {
    NAMES.iter().filter(|(_, kind)| *kind == NameKind::Secret).map(|(name, _)| *name)
}

/// A misspelt name: what was set and the known name it resembles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Misspelt {
    pub found: String,
    pub resembles: &'static str,
}

impl Misspelt {
    /// A sentence for the problem's `detail`. Names only, never values.
    pub fn detail(&self) -> String {
        format!(
            "{} is not a variable this worker reads; it looks like a misspelling of {}. Rename or remove it (an ignored variable would silently fall back to the default).",
            self.found, self.resembles
        )
    }
}

/// The first name among `names` that looks like a misspelling of a known name (in the
/// order given; the runtime passes the environment's keys sorted, so the answer is stable).
pub fn find_misspelt<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<Misspelt> {
    for name in names {
        if known_names().any(|known| known == name) {
            continue;
        }
        if let Some(known) = known_names().find(|known| resembles(name, known)) {
            return Some(Misspelt { found: name.to_owned(), resembles: known });
        }
    }
    None
}

fn resembles(name: &str, known: &str) -> bool {
    let prefix = |s: &str| s.get(..3).map(str::to_ascii_uppercase);
    prefix(name).is_some() && prefix(name) == prefix(known) && edit_distance(name, known) <= 2
}

/// Levenshtein distance over ASCII letters compared without case. Names longer than any
/// known name by more than two can never be within two edits, so long input is cut short.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<u8> = a.bytes().map(|c| c.to_ascii_uppercase()).collect();
    let b: Vec<u8> = b.bytes().map(|c| c.to_ascii_uppercase()).collect();
    if a.len().abs_diff(b.len()) > 2 {
        return 3;
    }
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, &x) in a.iter().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, &y) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(x != y);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn misspellings_are_found_with_the_name_they_resemble() {
        let found = find_misspelt(["ORIGIN_URL", "SCOPE_HEADERS"]).unwrap();
        assert_eq!(found, Misspelt { found: "SCOPE_HEADERS".into(), resembles: "SCOPE_HEADER" });
        assert!(found.detail().contains("SCOPE_HEADERS") && found.detail().contains("SCOPE_HEADER."));
        assert_eq!(find_misspelt(["ORIGN_URL"]).unwrap().resembles, "ORIGIN_URL");
        assert_eq!(find_misspelt(["scope_header"]).unwrap().resembles, "SCOPE_HEADER");
        assert_eq!(find_misspelt(["IDEMPOTENCY_TTL_SECOND"]).unwrap().resembles, "IDEMPOTENCY_TTL_SECONDS");
        assert_eq!(find_misspelt(["ADMIN_TOKENS"]).unwrap().resembles, "ADMIN_TOKEN");
        assert_eq!(find_misspelt(["SCOPE_JWT_ISSUR"]).unwrap().resembles, "SCOPE_JWT_ISSUER");
    }

    #[test]
    fn known_and_unrelated_names_pass() {
        assert_eq!(find_misspelt(known_names()), None);
        assert_eq!(find_misspelt(["DATABASE_URL", "MY_FEATURE_FLAG", "SENTRY_DSN", "X"]), None);
        // Same prefix, but more than two edits away.
        assert_eq!(find_misspelt(["SCOPE_COOKIE_NAME"]), None);
        // Within two edits, but another first three characters.
        assert_eq!(find_misspelt(["XCOPE_HEADER"]), None);
    }

    #[test]
    fn every_name_is_listed_once() {
        let names: Vec<&str> = known_names().collect();
        for (i, name) in names.iter().enumerate() {
            assert!(!names[i + 1..].contains(name), "{name} is listed twice");
        }
    }

    #[test]
    fn known_names_are_not_misspellings_of_each_other() {
        let names: Vec<&str> = known_names().collect();
        for a in &names {
            for b in &names {
                if a != b {
                    assert!(!resembles(a, b), "{a} and {b} are too alike to tell a typo from either");
                }
            }
        }
    }

    /// Secrets are set with `wrangler secret put`, never in `[vars]` (which the dashboard
    /// shows and git keeps). The runtime cannot tell the two apart, so the repository's own
    /// configuration is checked here.
    #[test]
    fn wrangler_toml_names_no_secret_in_vars() {
        let toml = include_str!("../../../wrangler.toml");
        let assignments: Vec<&str> = toml
            .lines()
            .map(str::trim)
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| line.split_once('=').map(|(name, _)| name.trim()))
            .collect();
        for secret in secret_names() {
            assert!(
                !assignments.contains(&secret),
                "{secret} is set in wrangler.toml; use `wrangler secret put {secret}`"
            );
        }
    }

    proptest! {
        /// One or two edits of a known name are always caught, when the first three
        /// characters stay.
        #[test]
        fn one_or_two_edits_are_caught(index in 0usize..100, at in 3usize..40, c in "[A-Z_]", twice in any::<bool>()) {
            let names: Vec<&str> = known_names().collect();
            let known = names[index % names.len()];
            let mut typo: Vec<char> = known.chars().collect();
            let at = at.min(typo.len());
            typo.insert(at, c.chars().next().unwrap());
            if twice { typo.remove(typo.len() - 1); }
            let typo: String = typo.into_iter().collect();
            prop_assume!(!names.contains(&typo.as_str()));
            prop_assert!(find_misspelt([typo.as_str()]).is_some(), "{typo}");
        }

        #[test]
        fn distance_is_symmetric(a in "[A-Z_]{0,12}", b in "[A-Z_]{0,12}") {
            prop_assert_eq!(edit_distance(&a, &b), edit_distance(&b, &a));
        }
    }
}
