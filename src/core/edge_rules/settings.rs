//! The environment, parsed once: every variable and secret the worker reads, checked
//! together, with every problem named.
//!
//! The runtime supplies a lookup (what the environment holds under a name: a string, or
//! the JSON text of any other value), the names present (for the misspelling check) and
//! whether the metrics dataset is bound; [`Settings::from_env`] does the rest.
//!
//! Values are read as wrangler users write them: wrangler hands a `[vars]` number, boolean,
//! array or table to the worker as that JSON value, so `IDEMPOTENCY_TTL_SECONDS = 86400`,
//! `SCOPE_JWT_REQUIRED = true` and `IDEMPOTENCY_ROUTES = [{ pattern = "/v1/charges" }]`
//! mean what they say. The rule: such a value is read as its JSON text (`86400`, `true`,
//! `[{"pattern":"/v1/charges"}]`), which is exactly the string a user would have quoted,
//! and is then checked like one. A JSON `null` is an error naming the variable: read as
//! unset, its default would apply in silence.
//!
//! An invalid environment does not stop the key objects from reading what they need to
//! keep their records safe (the key ring, whether unsealed records may be read), so each
//! part keeps its own result; the Worker refuses every request while any part is invalid
//! ([`Settings::first_problem`]), naming the variable and never its value.

use super::admin::{check_token, VAR_ADMIN_TOKEN};
use super::config::{Config, FaultInjection};
use super::env_names::{find_misspelt, variable_names, VAR_TRUSTED_CLIENT_IP};
use super::log_decisions::{LogDecisions, VAR_LOG_DECISIONS};
use super::origin_auth::{
    check_secret, SignatureFormat, Signer, VAR_ORIGIN_AUTH_FORMAT, VAR_ORIGIN_AUTH_SECRET,
};
use crate::core::formats::keyed_name::{check_name_key, VAR_OBJECT_NAME_KEY};
use crate::core::formats::seal::{
    parse_allow_unsealed, KeyRing, VAR_STORAGE_ALLOW_UNSEALED, VAR_STORAGE_ENCRYPTION_KEYS,
};
use crate::core::vocabulary::config_error::ConfigError;
use crate::core::vocabulary::problem::{Problem, ProblemKind};

/// What the environment holds under a name that is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnvValue<'a> {
    Text(&'a str),
    /// Any other value (a number, a boolean, an array or a table from `[vars]`), as its
    /// JSON text.
    Json(&'a str),
}

/// What the runtime knows about the environment beyond the values.
pub struct EnvFacts<'a> {
    /// Every name the environment holds (variables, secrets, bindings), sorted.
    pub names: &'a [&'a str],
    /// Whether the Analytics Engine dataset (`IDEMPOTENCY_METRICS`) is bound.
    pub metrics_bound: bool,
}

/// One invalid setting: its name and a sentence for the 500 problem's `detail`, which
/// names the setting and never its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingError {
    pub name: String,
    pub detail: String,
}

impl SettingError {
    fn new(name: &str, detail: String) -> SettingError {
        SettingError { name: name.to_owned(), detail }
    }

    /// The 500 `invalid-config` problem every request gets while this holds.
    pub fn problem(&self) -> Problem {
        Problem::new(ProblemKind::InvalidConfig, self.detail.clone())
    }
}

impl From<ConfigError> for SettingError {
    fn from(error: ConfigError) -> SettingError {
        SettingError::new(error.variable, error.detail())
    }
}

/// Everything the worker reads from its environment.
#[derive(Debug)]
pub struct Settings {
    /// The configuration (`core::edge_rules::config`), or its first invalid variable.
    pub config: Result<Config, SettingError>,
    /// The key ring that seals stored answers (`STORAGE_ENCRYPTION_KEYS`), when set.
    pub storage_keys: Result<Option<KeyRing>, SettingError>,
    /// Every other problem, in the order they are reported: values that are not strings,
    /// a misspelt name, a secret too short, a flag that is not `true`/`false`, settings
    /// that contradict each other.
    pub others: Vec<SettingError>,
    /// The admin token, when the `ADMIN_TOKEN` secret is set and not empty. Without it the
    /// admin API does not exist.
    pub admin_token: Option<String>,
    /// `ORIGIN_AUTH_SECRET`: sign every origin request (`core::edge_rules::origin_auth`).
    pub origin_auth_secret: Option<String>,
    /// `ORIGIN_AUTH_FORMAT`: how (`core::edge_rules::origin_auth::SignatureFormat`).
    pub origin_auth_format: SignatureFormat,
    /// `OBJECT_NAME_KEY`: key the object names (`core::formats::keyed_name`).
    pub object_name_key: Option<Vec<u8>>,
    /// `TRUSTED_CLIENT_IP`: replace client-sent forwarding headers with `CF-Connecting-IP`.
    pub trusted_client_ip: bool,
    /// The `*_FAULT_INJECTION` variables (tests only).
    pub fault_injection: FaultInjection,
    /// `LOG_DECISIONS`: which decision lines are written.
    pub log_decisions: LogDecisions,
    /// `STORAGE_ALLOW_UNSEALED` (`core::formats::seal`, rule 4).
    pub storage_allow_unsealed: bool,
    /// Whether the Analytics Engine dataset is bound.
    pub metrics_bound: bool,
}

impl Settings {
    /// What signs the origin hop, when `ORIGIN_AUTH_SECRET` is set.
    pub fn signer(&self) -> Option<Signer<'_>> {
        self.origin_auth_secret.as_deref().map(|secret| Signer { secret, format: self.origin_auth_format })
    }

    /// [`Settings::from_env`] over what the runtime read: each variable's `held` value
    /// (its name, its text, and whether the text is the JSON of a value that is no string),
    /// and every name the environment holds, in any order: sorted here, so the misspelling
    /// check names the same one whatever order the platform lists them in.
    pub fn from_held(held: &[(&str, String, bool)], mut names: Vec<String>, metrics_bound: bool) -> Settings {
        names.sort();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let lookup = |name: &str| {
            let (_, text, json) = held.iter().find(|(held, ..)| *held == name)?;
            Some(if *json { EnvValue::Json(text) } else { EnvValue::Text(text) })
        };
        Settings::from_env(lookup, &EnvFacts { names: &names, metrics_bound })
    }

    /// Parses the environment. `lookup` returns what a name holds (`None` when unset).
    pub fn from_env<'a>(lookup: impl Fn(&str) -> Option<EnvValue<'a>>, facts: &EnvFacts<'_>) -> Settings {
        let mut others: Vec<SettingError> = variable_names()
            .filter(|name| {
                lookup(name)
                    .is_some_and(|value| matches!(value, EnvValue::Json(json) if json.trim() == "null"))
            })
            .map(|name| {
                SettingError::new(
                    name,
                    format!(
                        "{name} is invalid: it is null. Remove it to take its default, or give it a value."
                    ),
                )
            })
            .collect();
        let text = |name: &str| match lookup(name) {
            Some(EnvValue::Text(value)) => Some(value),
            Some(EnvValue::Json(json)) if json.trim() != "null" => Some(json),
            _ => None,
        };
        if let Some(misspelt) = find_misspelt(facts.names.iter().copied()) {
            others.push(SettingError::new(&misspelt.found, misspelt.detail()));
        }
        let admin_token = match check_token(text(VAR_ADMIN_TOKEN).unwrap_or_default()) {
            Ok(token) => token.map(str::to_owned),
            Err(detail) => {
                others.push(SettingError::new(VAR_ADMIN_TOKEN, detail));
                None
            }
        };
        let origin_auth_secret = text(VAR_ORIGIN_AUTH_SECRET).filter(|s| !s.is_empty()).map(str::to_owned);
        if let Some(Err(detail)) = origin_auth_secret.as_deref().map(check_secret) {
            others.push(SettingError::new(VAR_ORIGIN_AUTH_SECRET, detail));
        }
        let origin_auth_format =
            SignatureFormat::parse(text(VAR_ORIGIN_AUTH_FORMAT)).unwrap_or_else(|detail| {
                others.push(SettingError::new(VAR_ORIGIN_AUTH_FORMAT, detail));
                SignatureFormat::default()
            });
        let object_name_key = text(VAR_OBJECT_NAME_KEY).filter(|s| !s.is_empty());
        if let Some(Err(detail)) = object_name_key.map(check_name_key) {
            others.push(SettingError::new(VAR_OBJECT_NAME_KEY, detail));
        }
        let trusted_client_ip = match text(VAR_TRUSTED_CLIENT_IP).map(str::trim) {
            None | Some("") | Some("false") => false,
            Some("true") => true,
            Some(_) => {
                others.push(SettingError::new(
                    VAR_TRUSTED_CLIENT_IP,
                    format!("{VAR_TRUSTED_CLIENT_IP} is invalid: expected true or false"),
                ));
                false
            }
        };
        let log_decisions = LogDecisions::parse(text(VAR_LOG_DECISIONS)).unwrap_or_else(|detail| {
            others.push(SettingError::new(VAR_LOG_DECISIONS, detail));
            LogDecisions::All
        });
        let fault_injection = FaultInjection::from_vars(text).unwrap_or_else(|error| {
            others.push(error.into());
            FaultInjection::default()
        });
        let config = Config::from_vars(text).map_err(SettingError::from);
        let storage_keys = match text(VAR_STORAGE_ENCRYPTION_KEYS).filter(|raw| !raw.trim().is_empty()) {
            None => Ok(None),
            Some(raw) => KeyRing::parse(raw).map(Some).map_err(|reason| {
                SettingError::new(
                    VAR_STORAGE_ENCRYPTION_KEYS,
                    format!("{VAR_STORAGE_ENCRYPTION_KEYS} is invalid: {reason}"),
                )
            }),
        };
        let storage_allow_unsealed =
            parse_allow_unsealed(text(VAR_STORAGE_ALLOW_UNSEALED)).unwrap_or_else(|detail| {
                others.push(SettingError::new(VAR_STORAGE_ALLOW_UNSEALED, detail));
                false
            });
        // A stored request holds the caller's credentials: never stored unsealed.
        if matches!((&config, &storage_keys), (Ok(config), Ok(None)) if config.accepts_async()) {
            others.push(SettingError::new(
                VAR_STORAGE_ENCRYPTION_KEYS,
                format!("ASYNC_ACCEPT is prefer (or a route's async_accept is), which stores requests, credentials included: set the secret {VAR_STORAGE_ENCRYPTION_KEYS} so that they are sealed."),
            ));
        }
        // So does a stored lookup: the key and the caller's scope headers.
        if matches!((&config, &storage_keys), (Ok(config), Ok(None)) if config.reconciles()) {
            others.push(SettingError::new(
                VAR_STORAGE_ENCRYPTION_KEYS,
                format!("a route's reconcile_url stores the lookup of each key, with the key and the caller's credentials: set the secret {VAR_STORAGE_ENCRYPTION_KEYS} so that they are sealed."),
            ));
        }
        Settings {
            config,
            storage_keys,
            others,
            admin_token,
            origin_auth_secret,
            origin_auth_format,
            object_name_key: object_name_key.map(|key| key.as_bytes().to_vec()),
            trusted_client_ip,
            fault_injection,
            log_decisions,
            storage_allow_unsealed,
            metrics_bound: facts.metrics_bound,
        }
    }

    /// Every problem, in the order the Worker reports them: the configuration's, the key
    /// ring's, then the others.
    pub fn problems(&self) -> Vec<&SettingError> {
        let config = self.config.as_ref().err();
        let keys = self.storage_keys.as_ref().err();
        config.into_iter().chain(keys).chain(&self.others).collect()
    }

    /// The problem every request gets while the environment is invalid (the first of
    /// [`Settings::problems`], without collecting them: it is asked on every request).
    pub fn first_problem(&self) -> Option<&SettingError> {
        self.config.as_ref().err().or(self.storage_keys.as_ref().err()).or(self.others.first())
    }

    /// The configuration requests are served under: only when nothing is invalid, else
    /// the problem every request gets.
    pub fn serving_config(&self) -> Result<&Config, &SettingError> {
        match (self.first_problem(), &self.config) {
            (None, Ok(config)) => Ok(config),
            (Some(error), _) | (None, Err(error)) => Err(error),
        }
    }

    /// [`Settings::from_env`], valid or every problem at once (a check before deploy).
    pub fn check<'a>(
        lookup: impl Fn(&str) -> Option<EnvValue<'a>>,
        facts: &EnvFacts<'_>,
    ) -> Result<Settings, Vec<SettingError>> {
        let settings = Settings::from_env(lookup, facts);
        let problems: Vec<SettingError> = settings.problems().into_iter().cloned().collect();
        if problems.is_empty() {
            Ok(settings)
        } else {
            Err(problems)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(names: &[&'static str]) -> EnvFacts<'static> {
        let names: &'static [&'static str] = Box::leak(names.to_vec().into_boxed_slice());
        EnvFacts { names, metrics_bound: false }
    }

    fn settings(values: &[(&'static str, EnvValue<'static>)]) -> Settings {
        let names: Vec<&'static str> = values.iter().map(|(name, _)| *name).collect();
        Settings::from_env(|name| values.iter().find(|(n, _)| *n == name).map(|(_, v)| *v), &facts(&names))
    }

    #[test]
    fn held_values_are_read_as_text_or_json_and_names_in_sorted_order() {
        let held = |json: bool| vec![("MAX_ORIGIN_ATTEMPTS", "3".to_owned(), json)];
        let names =
            || vec!["ORIGIN_URLL".to_owned(), "MAX_ORIGIN_ATTEMPTS".to_owned(), "ADMIN_TOKN".to_owned()];
        for json in [false, true] {
            let s = Settings::from_held(&held(json), names(), true);
            assert_eq!(s.config.as_ref().unwrap().max_origin_attempts, 3, "json: {json}");
            assert!(s.metrics_bound);
            // The first misspelling in sorted order, whatever the order given.
            assert_eq!(s.problems().iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["ADMIN_TOKN"]);
        }
        let null = |json: bool| {
            Settings::from_held(&[("MAX_ORIGIN_ATTEMPTS", "null".to_owned(), json)], vec![], false)
        };
        assert!(null(true).problems()[0].detail.contains("it is null"), "{:?}", null(true).problems());
        assert!(!null(false).problems()[0].detail.contains("it is null"), "{:?}", null(false).problems());
    }

    #[test]
    fn an_empty_environment_is_valid_and_takes_the_defaults() {
        let s = settings(&[]);
        assert!(s.problems().is_empty(), "{:?}", s.problems());
        assert!(s.admin_token.is_none() && !s.trusted_client_ip && !s.storage_allow_unsealed);
        assert_eq!(s.config.as_ref().unwrap().origin_url, None);
    }

    /// Values as wrangler users write them: a `[vars]` number, boolean or array reaches the
    /// worker as a JSON value, and means what it says.
    #[test]
    fn numbers_booleans_and_arrays_in_vars_mean_what_they_say() {
        let s = settings(&[
            ("ORIGIN_DEDUPLICATES", EnvValue::Json("true")),
            ("MAX_ORIGIN_ATTEMPTS", EnvValue::Json("3")),
            (
                "IDEMPOTENCY_ROUTES",
                EnvValue::Json(r#"[{"pattern":"/v1/charges"},{"pattern":"/v1/refunds"}]"#),
            ),
        ]);
        assert!(s.problems().is_empty(), "{:?}", s.problems());
        let config = s.config.as_ref().unwrap();
        assert!(config.origin_deduplicates);
        assert_eq!(config.max_origin_attempts, 3);
        assert_eq!(config.routes.len(), 2);
        // The same as the quoted strings a user wrote before.
        let quoted = settings(&[
            ("ORIGIN_DEDUPLICATES", EnvValue::Text("true")),
            ("MAX_ORIGIN_ATTEMPTS", EnvValue::Text("3")),
            (
                "IDEMPOTENCY_ROUTES",
                EnvValue::Text(r#"[{"pattern":"/v1/charges"},{"pattern":"/v1/refunds"}]"#),
            ),
        ]);
        assert_eq!(format!("{:?}", quoted.config), format!("{:?}", s.config));
    }

    /// A value of the wrong shape is refused as its quoted text would be; a `null` (which
    /// would otherwise read as unset, its default applying in silence) is named as invalid.
    #[test]
    fn a_value_of_the_wrong_shape_or_null_is_named_and_never_defaults_in_silence() {
        for (name, value) in [
            ("IDEMPOTENCY_TTL_SECONDS", "[86400]"),
            ("IDEMPOTENCY_TTL_SECONDS", "true"),
            ("ORIGIN_DEDUPLICATES", "1"),
            ("IDEMPOTENCY_ROUTES", "{\"pattern\":\"/v1/charges\"}"),
        ] {
            let s = settings(&[(name, EnvValue::Json(value))]);
            let problem = s.first_problem().unwrap_or_else(|| panic!("{name} = {value} accepted"));
            assert_eq!(problem.name, name, "{value}");
            assert_eq!(problem.problem().status(), 500);
        }
        // Every variable and secret the worker reads is checked, none skipped.
        for name in variable_names() {
            let s = settings(&[(name, EnvValue::Json("null"))]);
            let problem = s.first_problem().unwrap_or_else(|| panic!("{name} = null accepted"));
            assert_eq!(problem.name, name);
            assert!(problem.detail.starts_with(&format!("{name} is invalid: it is null")), "{problem:?}");
        }
    }

    #[test]
    fn every_problem_is_reported_configuration_first() {
        let s = settings(&[
            ("IDEMPOTENCY_TTL_SECONDS", EnvValue::Text("forever")),
            ("TRUSTED_CLIENT_IP", EnvValue::Text("yes")),
            ("ADMIN_TOKEN", EnvValue::Text("short")),
            ("SCOPE_HEADERS", EnvValue::Text("Authorization")),
        ]);
        let names: Vec<&str> = s.problems().iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["IDEMPOTENCY_TTL_SECONDS", "SCOPE_HEADERS", "ADMIN_TOKEN", "TRUSTED_CLIENT_IP"]);
        assert!(s.problems().iter().all(|p| !p.detail.contains("short\"") && !p.detail.contains("forever")));
        let all = Settings::check(|_| None, &facts(&[])).map(|_| ());
        assert_eq!(all, Ok(()));
    }

    #[test]
    fn asynchronous_acceptance_without_a_key_ring_is_refused() {
        let s = settings(&[("ASYNC_ACCEPT", EnvValue::Text("prefer"))]);
        assert_eq!(s.first_problem().map(|p| p.name.as_str()), Some("STORAGE_ENCRYPTION_KEYS"));
    }

    #[test]
    fn a_reconcile_url_without_a_key_ring_is_refused_and_with_one_reaches_the_policy() {
        let routes =
            r#"[{"pattern":"/v1/charges","reconcile_url":"https://api.example/v1/charges?k={key}"}]"#;
        let s = settings(&[("IDEMPOTENCY_ROUTES", EnvValue::Text(routes))]);
        let problem = s.first_problem().expect("refused");
        assert_eq!(problem.name, "STORAGE_ENCRYPTION_KEYS");
        assert!(problem.detail.contains("reconcile_url"), "{}", problem.detail);
        let ring = r#"[{"id":"k1","key":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}]"#;
        let s = settings(&[
            ("IDEMPOTENCY_ROUTES", EnvValue::Text(routes)),
            ("STORAGE_ENCRYPTION_KEYS", EnvValue::Text(ring)),
        ]);
        assert!(s.problems().is_empty(), "{:?}", s.problems());
        let config = s.serving_config().unwrap();
        let route = config.policy_for("/v1/charges").reconcile.expect("the route's lookup");
        assert_eq!(route.url_for("a/b"), "https://api.example/v1/charges?k=a%2Fb");
        assert_eq!(route.not_found, 404);
        assert!(config.policy_for("/v1/refunds").reconcile.is_none(), "only where a route has one");
    }

    /// Defaults are valid in every configuration: one that depends on another value is
    /// derived from it, so only a value the operator set can be invalid.
    #[test]
    fn defaults_that_depend_on_another_value_follow_it() {
        let ring = r#"[{"id":"k1","key":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}]"#;
        let short_ttl = [
            ("ASYNC_ACCEPT", EnvValue::Text("prefer")),
            ("STORAGE_ENCRYPTION_KEYS", EnvValue::Text(ring)),
            ("IDEMPOTENCY_TTL_SECONDS", EnvValue::Text("600")),
        ];
        let s = settings(&short_ttl);
        assert!(s.problems().is_empty(), "{:?}", s.problems());
        let deadline = s.serving_config().unwrap().policy_for("/x").async_accept.unwrap().deadline_ms;
        assert_eq!(deadline, 600_000, "the deadline defaults to the TTL when it is under an hour");
        // A route's shorter TTL, and its unknown statuses against the default release ones.
        let routes =
            r#"[{"pattern":"/a/*","async_accept":"prefer","ttl_seconds":30,"unknown_statuses":[503]}]"#;
        let s = settings(&[
            ("IDEMPOTENCY_ROUTES", EnvValue::Text(routes)),
            ("STORAGE_ENCRYPTION_KEYS", EnvValue::Text(ring)),
        ]);
        assert!(s.problems().is_empty(), "{:?}", s.problems());
        assert_eq!(s.serving_config().unwrap().policy_for("/a/1").async_accept.unwrap().deadline_ms, 30_000);
        // The same deadline set by the operator is named.
        let mut set = short_ttl.to_vec();
        set.push(("ASYNC_DEADLINE_SECONDS", EnvValue::Text("3600")));
        let names: Vec<String> = settings(&set).problems().iter().map(|p| p.name.clone()).collect();
        assert_eq!(names, ["ASYNC_DEADLINE_SECONDS"]);
    }

    #[test]
    fn an_invalid_key_ring_is_named_without_its_value_and_kept_apart() {
        let s = settings(&[("STORAGE_ENCRYPTION_KEYS", EnvValue::Text("not-json-secret"))]);
        let error = s.storage_keys.as_ref().unwrap_err();
        assert!(error.detail.starts_with("STORAGE_ENCRYPTION_KEYS is invalid"));
        assert!(!error.detail.contains("not-json-secret"));
        // The configuration itself stays readable by the objects.
        assert!(s.config.is_ok());
    }
}
