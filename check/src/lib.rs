//! Checks a worker's configuration before it is deployed: the `[vars]` of `wrangler.toml`
//! (its top level or one `[env.NAME]`), the bindings it declares, and `.dev.vars` in local
//! development, read with the worker's own parser (`core::edge_rules::settings::Settings::from_env`), so
//! that what fails here is what would make the deployed worker answer 500 `invalid-config`
//! to every request.
//!
//! Rules:
//! 1. Wrangler's inheritance: an environment inherits `route`, `routes`, `workers_dev` and
//!    `migrations` from the top level, but not `vars` nor any binding (Durable Objects,
//!    services, Analytics Engine datasets, rate limiters, version metadata). A key missing
//!    from an environment is read as wrangler reads it: absent.
//! 2. Every problem the parser finds is an error naming its variable. A `[vars]` value that
//!    is not a string (a number, boolean, array or table) is read as wrangler hands it to
//!    the worker, as that JSON value, which the worker reads as its JSON text.
//! 3. Secrets are not in `wrangler.toml`. A problem that setting a secret would solve (the
//!    key ring `ASYNC_ACCEPT` needs, an HS256 secret for a scope claim) is a note saying so,
//!    unless `.dev.vars` is checked too: then the secrets are known, and it is an error.
//!    A secret written under `[vars]` is an error.
//! 4. The worker must know where its origin is: an empty `ORIGIN_URL` without
//!    `ORIGIN_SERVICE` is route mode, which forwards each request to its own URL. Without a
//!    zone route (`route`/`routes`), or with `workers_dev = true`, or on a custom domain,
//!    that URL is the worker itself.
//! 5. What the worker needs bound is declared: `IDEMPOTENCY_KEYS` (class `KeyObject`, in a
//!    `new_sqlite_classes` migration), the `[[services]]` binding `ORIGIN_SERVICE` or a route
//!    names, and the `[[ratelimits]]` binding a route names.
//! 6. A deployed environment (every `[env.NAME]`) takes no traffic without the secrets a
//!    payment API needs ([`PAYMENT_MINIMUM_SECRETS`]): it must list them under
//!    `[env.NAME.secrets] required`, wrangler's own mechanism, so that `wrangler deploy`
//!    fails while one is unset. Left out, that is an error.
//!
//! The configuration is `wrangler.toml` or `wrangler.jsonc` (`wrangler.json`), read into
//! one JSON document whichever it is; messages name keys in TOML's dotted form.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use idempotency_edge::core::edge_rules::config::Config;
use idempotency_edge::core::edge_rules::env_names::{secret_names, NameKind, NAMES};
use idempotency_edge::core::edge_rules::routes::RouteRateLimit;
use idempotency_edge::core::edge_rules::settings::{EnvFacts, EnvValue, Settings};
use idempotency_edge::core::primitives::url::host_and_port;
use serde_json::{Map, Value};

/// The Durable Object binding and class every request goes through.
pub const KEY_BINDING: &str = "IDEMPOTENCY_KEYS";
pub const KEY_CLASS: &str = "KeyObject";
/// The Analytics Engine dataset the worker writes its metrics to, when bound.
pub const METRICS_BINDING: &str = "IDEMPOTENCY_METRICS";

/// The secrets without which a deployed environment must not take traffic: answers would be
/// stored in the clear, the origin hop unsigned, and the objects named by the raw key.
pub const PAYMENT_MINIMUM_SECRETS: [&str; 3] =
    ["STORAGE_ENCRYPTION_KEYS", "ORIGIN_AUTH_SECRET", "OBJECT_NAME_KEY"];

/// Binding kinds wrangler does not let environments inherit, that this worker reads.
const NOT_INHERITED: [&str; 8] = [
    "vars",
    "durable_objects",
    "services",
    "analytics_engine_datasets",
    "ratelimits",
    "version_metadata",
    // OUTCOME_QUEUE's producer: an environment without it publishes nothing.
    "queues",
    "secrets",
];

/// Keys whose entries are bindings (named by `binding`, or `name`), for the misspelling check.
const BINDING_KINDS: [&str; 20] = [
    "services",
    "analytics_engine_datasets",
    "ratelimits",
    "version_metadata",
    "kv_namespaces",
    "r2_buckets",
    "d1_databases",
    "hyperdrive",
    "vectorize",
    "workflows",
    "mtls_certificates",
    "dispatch_namespaces",
    "secrets_store_secrets",
    "send_email",
    "ai",
    "browser",
    "images",
    "assets",
    "worker_loaders",
    "pipelines",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Error,
    Note,
}

/// One finding: the variable (or `wrangler.toml` key) it is about, and what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub severity: Severity,
    pub name: String,
    pub message: String,
}

impl Finding {
    fn error(name: &str, message: impl Into<String>) -> Finding {
        Finding { severity: Severity::Error, name: name.to_owned(), message: message.into() }
    }

    fn note(name: &str, message: impl Into<String>) -> Finding {
        Finding { severity: Severity::Note, name: name.to_owned(), message: message.into() }
    }
}

/// What one configuration was checked against, and what was found.
#[derive(Clone, Debug)]
pub struct Report {
    /// `None`: the top level.
    pub env: Option<String>,
    /// Whether secrets were read from a `.dev.vars` file.
    pub with_dev_vars: bool,
    /// Errors first, then notes.
    pub findings: Vec<Finding>,
}

impl Report {
    pub fn errors(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.severity == Severity::Error)
    }

    pub fn notes(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.severity == Severity::Note)
    }

    /// No error: the configuration may be deployed (notes say what else to do).
    pub fn passes(&self) -> bool {
        self.errors().next().is_none()
    }

    /// What was checked, as `wrangler.toml [env.production]`.
    pub fn target(&self, config_name: &str) -> String {
        let section = match &self.env {
            Some(env) => format!("[env.{env}]"),
            None => "top level".to_owned(),
        };
        let dev_vars = if self.with_dev_vars { " with .dev.vars" } else { "" };
        format!("{config_name} {section}{dev_vars}")
    }

    /// The report as lines for a terminal: a heading, then one line per finding.
    pub fn render(&self, config_name: &str) -> String {
        let errors = self.errors().count();
        let notes = self.notes().count();
        let verdict = match (errors, notes) {
            (0, 0) => "ok".to_owned(),
            (0, n) => format!("ok, {n} note(s)"),
            (e, n) => format!("{e} error(s), {n} note(s)"),
        };
        let mut out = format!("{}: {verdict}\n", self.target(config_name));
        for finding in &self.findings {
            let label = match finding.severity {
                Severity::Error => "error",
                Severity::Note => "note ",
            };
            out.push_str(&format!("  {label} {}: {}\n", finding.name, finding.message));
        }
        out
    }
}

/// How a wrangler configuration is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Toml,
    /// JSON with comments and trailing commas (`wrangler.jsonc`, `wrangler.json`).
    Jsonc,
}

impl Format {
    /// The format wrangler infers from a file's name: `.json`/`.jsonc` are JSONC, the rest TOML.
    pub fn of(path: &Path) -> Format {
        match path.extension().and_then(|e| e.to_str()) {
            Some("json" | "jsonc") => Format::Jsonc,
            _ => Format::Toml,
        }
    }
}

/// A wrangler configuration, read: one JSON document, and its environments in file order.
#[derive(Clone, Debug)]
pub struct WranglerConfig {
    doc: Map<String, Value>,
    env_names: Vec<String>,
}

impl WranglerConfig {
    pub fn parse(text: &str, format: Format) -> Result<WranglerConfig, String> {
        let doc: Value = match format {
            Format::Toml => toml::from_str(text).map_err(|e| format!("not valid TOML: {e}"))?,
            Format::Jsonc => jsonc_parser::parse_to_serde_value::<Value>(text, &jsonc_options())
                .map_err(|e| format!("not valid JSONC: {e}"))?,
        };
        let Value::Object(doc) = doc else {
            return Err("expected a table (an object) at the top level".to_owned());
        };
        // serde_json's map is sorted; the report lists environments as the file does.
        let env_names = match format {
            Format::Toml => {
                let table: toml::Table = toml::from_str(text).map_err(|e| format!("not valid TOML: {e}"))?;
                table.get("env").and_then(toml::Value::as_table).map(|envs| envs.keys().cloned().collect())
            }
            Format::Jsonc => match jsonc_parser::parse_to_value(text, &jsonc_options()) {
                Ok(Some(jsonc_parser::JsonValue::Object(top))) => match top.get("env") {
                    Some(jsonc_parser::JsonValue::Object(envs)) => {
                        Some(envs.clone().into_iter().map(|(name, _)| name.into_owned()).collect())
                    }
                    _ => None,
                },
                _ => None,
            },
        }
        .unwrap_or_default();
        Ok(WranglerConfig { doc, env_names })
    }

    /// Reads `path`, in the format its name says.
    pub fn read(path: &Path) -> Result<WranglerConfig, String> {
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        WranglerConfig::parse(&text, Format::of(path))
    }

    /// The names of the `[env.NAME]` sections, in file order.
    pub fn environments(&self) -> Vec<String> {
        self.env_names.clone()
    }

    /// Checks environment `env` (`None`: the top level), with the text of a `.dev.vars` file
    /// when local secrets are to be checked too.
    pub fn check(&self, env: Option<&str>, dev_vars: Option<&str>) -> Result<Report, String> {
        check_document(self, env, dev_vars)
    }
}

fn jsonc_options() -> jsonc_parser::ParseOptions {
    jsonc_parser::ParseOptions {
        allow_comments: true,
        allow_trailing_commas: true,
        allow_loose_object_property_names: false,
        ..Default::default()
    }
}

/// The names of the `[env.NAME]` sections of a `wrangler.toml`, in file order.
pub fn environments(toml: &str) -> Result<Vec<String>, String> {
    Ok(WranglerConfig::parse(toml, Format::Toml)?.environments())
}

/// Checks `toml` (the text of a `wrangler.toml`) for environment `env` (`None`: the top
/// level), with the text of a `.dev.vars` file when local secrets are to be checked too.
pub fn check(toml: &str, env: Option<&str>, dev_vars: Option<&str>) -> Result<Report, String> {
    WranglerConfig::parse(toml, Format::Toml)?.check(env, dev_vars)
}

fn check_document(
    config: &WranglerConfig,
    env: Option<&str>,
    dev_vars: Option<&str>,
) -> Result<Report, String> {
    let view = View::new(config, env)?;
    let mut findings = Vec::new();

    // The environment the worker would see: [vars], then .dev.vars over it (as wrangler dev).
    let mut values: BTreeMap<String, Held> = BTreeMap::new();
    if let Some(vars) = view.own("vars") {
        match vars.as_object() {
            Some(vars) => {
                for (name, value) in vars {
                    let held = match value {
                        Value::String(text) => Held::Text(text.clone()),
                        other => Held::Json(other.to_string()),
                    };
                    values.insert(name.to_owned(), held);
                }
            }
            None => findings.push(Finding::error("vars", "expected a table of NAME = value lines")),
        }
    }
    let from_toml: BTreeSet<String> = values.keys().cloned().collect();
    if let Some(text) = dev_vars {
        for (name, value) in parse_dev_vars(text) {
            values.insert(name, Held::Text(value));
        }
    }
    for name in &from_toml {
        match kind_of(name) {
            Some(NameKind::Secret) => findings.push(Finding::error(
                name,
                format!("{name} is a secret: remove it from [vars] (the dashboard shows them, git keeps them) and set it with `{}`.", secret_put(name, env)),
            )),
            Some(NameKind::TestOnly) => findings.push(Finding::error(
                name,
                format!("{name} injects faults for the tests: it never belongs in wrangler.toml."),
            )),
            _ => {}
        }
    }

    let bindings = view.bindings();
    let mut names: Vec<&str> = values.keys().map(String::as_str).collect();
    names.extend(bindings.iter().map(|b| b.name.as_str()));
    names.sort_unstable();
    names.dedup();
    let facts = EnvFacts { names: &names, metrics_bound: bindings.iter().any(|b| b.is(METRICS_BINDING)) };

    // The parser, with what is known; without .dev.vars, again with every unset secret set
    // to a valid stand-in, to tell what only a secret can fix from what is wrong regardless.
    let unset: Vec<&str> = secret_names().filter(|name| !values.contains_key(*name)).collect();
    let stand_ins: Vec<(&str, &str)> = match dev_vars {
        Some(_) => Vec::new(),
        None => unset.iter().map(|name| (*name, stand_in(name))).collect(),
    };
    let known = every_problem(&values, &[], &facts);
    let assumed = every_problem(&values, &stand_ins, &facts);
    for problem in &known.problems {
        if assumed.problems.contains(problem) {
            continue;
        }
        let (name, detail) = problem;
        let solving: Vec<&str> = stand_ins
            .iter()
            .filter(|one| !every_problem(&values, &[**one], &facts).problems.contains(problem))
            .map(|(secret, _)| *secret)
            .collect();
        let how = match solving.as_slice() {
            [] => format!("the secrets it needs with `{}`", secret_put("NAME", env)),
            secrets => secrets
                .iter()
                .map(|s| format!("{s} with `{}`", secret_put(s, env)))
                .collect::<Vec<_>>()
                .join(", or "),
        };
        findings.push(Finding::note(
            name,
            format!("{}. Secrets are not in wrangler.toml, so this check cannot see them: set {how} before the deploy.", detail.trim_end_matches('.')),
        ));
    }
    for (name, detail) in &assumed.problems {
        findings.push(Finding::error(name, detail.clone()));
    }
    if let Some(config) = &assumed.config {
        // A variable the parser refused reads as its default here: say nothing more of it.
        let refused = |name: &str| assumed.refused.iter().any(|r| r == name);
        if !refused("ORIGIN_URL") && !refused("ORIGIN_SERVICE") {
            check_origin(config, &view, &mut findings);
        }
        check_named_bindings(config, &bindings, &mut findings);
    }
    check_key_objects(&view, &bindings, &mut findings);
    if let Some((env, _)) = view.env {
        check_required_secrets(env, &view, &mut findings);
    }
    if let Some((env, _)) = view.env {
        for kind in NOT_INHERITED {
            if view.top.get(kind).is_some()
                && view.own(kind).is_none()
                && !matches!(kind, "durable_objects" | "secrets")
            {
                findings.push(Finding::note(
                    kind,
                    format!("\"{kind}\" is set at the top level but not in [env.{env}]: wrangler does not let environments inherit it, so [env.{env}] has none. Repeat it under [env.{env}] if this environment needs it."),
                ));
            }
        }
    }
    findings.sort_by_key(|f| f.severity);
    Ok(Report { env: env.map(str::to_owned), with_dev_vars: dev_vars.is_some(), findings })
}

/// What a name holds in the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Held {
    Text(String),
    /// A number, boolean, array or table from `[vars]`, as its JSON text.
    Json(String),
}

fn settings(values: &BTreeMap<String, Held>, extra: &[(&str, &str)], facts: &EnvFacts<'_>) -> Settings {
    Settings::from_env(
        |name| match extra.iter().find(|(n, _)| *n == name) {
            Some((_, value)) => Some(EnvValue::Text(value)),
            None => values.get(name).map(|held| match held {
                Held::Text(text) => EnvValue::Text(text),
                Held::Json(json) => EnvValue::Json(json),
            }),
        },
        facts,
    )
}

/// What the parser finds in an environment: every problem, and the configuration.
struct Parsed {
    /// (variable, detail), in the order found.
    problems: Vec<(String, String)>,
    /// The configuration once every refused variable is left unset (its default).
    config: Option<Config>,
    /// The variables the configuration refused, one per pass.
    refused: Vec<String>,
}

/// [`Settings::from_env`] reports the first invalid variable of the configuration (the
/// worker needs no more), so each one it refuses is left unset, as if it took its default,
/// and the environment parsed again: every problem is found, in one run.
fn every_problem(values: &BTreeMap<String, Held>, extra: &[(&str, &str)], facts: &EnvFacts<'_>) -> Parsed {
    let mut values = values.clone();
    let mut parsed = Parsed { problems: Vec::new(), config: None, refused: Vec::new() };
    loop {
        let settings = settings(&values, extra, facts);
        for problem in settings.problems() {
            let problem = (problem.name.clone(), problem.detail.clone());
            if !parsed.problems.contains(&problem) {
                parsed.problems.push(problem);
            }
        }
        match settings.config {
            Ok(config) => {
                parsed.config = Some(config);
                return parsed;
            }
            Err(error) => {
                if values.remove(&error.name).is_none() {
                    return parsed;
                }
                parsed.refused.push(error.name);
            }
        }
    }
}

/// A valid value for a secret that is set elsewhere (`wrangler secret put`): only its
/// presence matters to the check, never a value.
pub fn stand_in(secret: &str) -> &'static str {
    match secret {
        "STORAGE_ENCRYPTION_KEYS" => {
            r#"[{"id":"stand-in","key":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}]"#
        }
        _ => "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    }
}

fn kind_of(name: &str) -> Option<NameKind> {
    NAMES.iter().find(|(known, _)| *known == name).map(|(_, kind)| *kind)
}

fn secret_put(name: &str, env: Option<&str>) -> String {
    match env {
        Some(env) => format!("npx wrangler secret put {name} --env {env}"),
        None => format!("npx wrangler secret put {name}"),
    }
}

/// Rule 4: where requests go.
fn check_origin(config: &Config, view: &View<'_>, findings: &mut Vec<Finding>) {
    let vars = match view.env {
        Some((env, _)) => format!("[env.{env}.vars]"),
        None => "[vars]".to_owned(),
    };
    if let Some(url) = &config.origin_url {
        let host = host_and_port(url).map(|(host, _)| host.to_ascii_lowercase()).unwrap_or_default();
        if host == "localhost" || host.starts_with("127.") || host == "[::1]" {
            findings.push(Finding::note(
                "ORIGIN_URL",
                format!("ORIGIN_URL is {url}, this machine: right for wrangler dev, but a deployed worker cannot reach it. Deploy an environment whose {vars} name the real origin."),
            ));
        }
        return;
    }
    if config.origin_service.is_some() {
        return;
    }
    let routes = view.routes();
    if routes.is_empty() {
        findings.push(Finding::error(
            "ORIGIN_URL",
            format!("ORIGIN_URL is empty and neither ORIGIN_SERVICE nor a route (`route`/`routes`) is set. An empty ORIGIN_URL is route mode: each request goes on to its own URL, which on workers.dev is this worker, so it would forward to itself. Set ORIGIN_URL under {vars} (e.g. ORIGIN_URL = \"https://payments.example.com\"), or deploy on a zone route in front of the origin."),
        ));
        return;
    }
    if view.inherited("workers_dev").and_then(Value::as_bool) == Some(true) {
        findings.push(Finding::error(
            "ORIGIN_URL",
            "ORIGIN_URL is empty (route mode) and workers_dev = true: a request to the workers.dev hostname goes on to its own URL, this worker. Set workers_dev = false, or set ORIGIN_URL.",
        ));
    }
    for route in routes.iter().filter(|route| route.custom_domain) {
        findings.push(Finding::error(
            "ORIGIN_URL",
            format!("ORIGIN_URL is empty (route mode), but the route {} is a custom domain: the worker is that hostname's origin, so it would forward to itself. Use a zone route in front of the origin, or set ORIGIN_URL.", route.pattern),
        ));
    }
}

/// Rule 5: the `[[services]]` and `[[ratelimits]]` bindings the configuration names.
fn check_named_bindings(config: &Config, bindings: &[Binding], findings: &mut Vec<Finding>) {
    let declared = |kind: &str, name: &str| bindings.iter().any(|b| b.kind == kind && b.name == name);
    let mut services: Vec<(&str, &str)> = Vec::new();
    if let Some(name) = &config.origin_service {
        services.push(("ORIGIN_SERVICE", name));
    }
    services.extend(
        config.routes.iter().filter_map(|r| r.origin_service.as_deref()).map(|n| ("IDEMPOTENCY_ROUTES", n)),
    );
    for (variable, name) in services {
        if !declared("services", name) {
            findings.push(Finding::error(
                variable,
                format!("{variable} names the service binding {name}, which is not declared: add [[services]] binding = \"{name}\" service = \"<the origin Worker>\" (bindings are not inherited by environments). Unbound, every request it covers is 500 invalid-config."),
            ));
        }
    }
    for route in &config.routes {
        if let Some(RouteRateLimit::Binding(name)) = &route.rate_limit {
            if !declared("ratelimits", name) {
                findings.push(Finding::error(
                    "IDEMPOTENCY_ROUTES",
                    format!("the route {} names the rate-limiting binding {name}, which is not declared: add [[ratelimits]] name = \"{name}\". Unbound, every request it covers is 500 invalid-config.", route.pattern),
                ));
            }
        }
    }
}

/// Rule 5: the key objects' binding and their SQLite migration.
fn check_key_objects(view: &View<'_>, bindings: &[Binding], findings: &mut Vec<Finding>) {
    let section = match view.env {
        Some((env, _)) => format!("env.{env}."),
        None => String::new(),
    };
    match bindings.iter().find(|b| b.kind == "durable_objects" && b.name == KEY_BINDING) {
        None => findings.push(Finding::error(
            KEY_BINDING,
            format!("no Durable Object binding {KEY_BINDING}: add [[{section}durable_objects.bindings]] name = \"{KEY_BINDING}\" class_name = \"{KEY_CLASS}\" (wrangler does not let environments inherit it). Without it no request can be protected."),
        )),
        Some(binding) if binding.class.as_deref() != Some(KEY_CLASS) => findings.push(Finding::error(
            KEY_BINDING,
            format!("the Durable Object binding {KEY_BINDING} must have class_name = \"{KEY_CLASS}\"."),
        )),
        Some(_) => {}
    }
    let migrated = view.inherited("migrations").map(entries).unwrap_or_default().iter().any(|migration| {
        migration
            .get("new_sqlite_classes")
            .and_then(Value::as_array)
            .is_some_and(|classes| classes.iter().any(|class| class.as_str() == Some(KEY_CLASS)))
    });
    if !migrated {
        findings.push(Finding::error(
            "migrations",
            format!("no migration creates {KEY_CLASS} with SQLite storage: add [[migrations]] tag = \"v1\" new_sqlite_classes = [\"{KEY_CLASS}\"]."),
        ));
    }
}

/// Rule 6: a deployed environment declares the payment-minimum secrets as required.
fn check_required_secrets(env: &str, view: &View<'_>, findings: &mut Vec<Finding>) {
    let required: Vec<&str> = view
        .own("secrets")
        .and_then(|secrets| secrets.get("required"))
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let missing: Vec<&str> =
        PAYMENT_MINIMUM_SECRETS.into_iter().filter(|name| !required.contains(name)).collect();
    if missing.is_empty() {
        return;
    }
    let listed = PAYMENT_MINIMUM_SECRETS.map(|name| format!("\"{name}\"")).join(", ");
    findings.push(Finding::error(
        "secrets",
        format!("[env.{env}.secrets] required does not list {}: a deployed environment without them stores answers in the clear, sends the origin hop unsigned or names objects by the raw key. Add [env.{env}.secrets] required = [{listed}] (wrangler then refuses to deploy while one is unset), and set each with `{}`.", missing.join(", "), secret_put("NAME", Some(env))),
    ));
}

/// The top level, and the environment being checked (if any), read with wrangler's rules.
struct View<'a> {
    top: &'a Map<String, Value>,
    env: Option<(&'a str, &'a Map<String, Value>)>,
}

impl<'a> View<'a> {
    fn new(config: &'a WranglerConfig, env: Option<&'a str>) -> Result<View<'a>, String> {
        let top = &config.doc;
        let env = match env {
            None => None,
            Some(name) => {
                let section = top.get("env").and_then(|envs| envs.get(name)).and_then(Value::as_object);
                match section {
                    Some(section) => Some((name, section)),
                    None => {
                        let known = config.environments();
                        return Err(format!(
                            "there is no [env.{name}] section (environments: {})",
                            if known.is_empty() { "none".to_owned() } else { known.join(", ") }
                        ));
                    }
                }
            }
        };
        Ok(View { top, env })
    }

    /// A key that environments do not inherit: the environment's own.
    fn own(&self, key: &str) -> Option<&'a Value> {
        match self.env {
            Some((_, env)) => env.get(key),
            None => self.top.get(key),
        }
    }

    /// A key that environments inherit: the environment's own, else the top level's.
    fn inherited(&self, key: &str) -> Option<&'a Value> {
        self.env.and_then(|(_, env)| env.get(key)).or_else(|| self.top.get(key))
    }

    /// `route` and `routes`, as wrangler reads them: inherited when the environment sets
    /// neither.
    fn routes(&self) -> Vec<RouteEntry> {
        let source = match self.env {
            Some((_, env)) if env.contains_key("route") || env.contains_key("routes") => env,
            _ => self.top,
        };
        let from_value = |value: &Value| match value {
            Value::String(pattern) => Some(RouteEntry { pattern: pattern.clone(), custom_domain: false }),
            Value::Object(table) => Some(RouteEntry {
                pattern: table.get("pattern").and_then(Value::as_str).unwrap_or("?").to_owned(),
                custom_domain: table.get("custom_domain").and_then(Value::as_bool) == Some(true),
            }),
            _ => None,
        };
        let mut routes = Vec::new();
        routes.extend(source.get("route").and_then(from_value));
        if let Some(Value::Array(array)) = source.get("routes") {
            routes.extend(array.iter().filter_map(from_value));
        }
        routes
    }

    /// Every binding the environment declares.
    fn bindings(&self) -> Vec<Binding> {
        let mut found = Vec::new();
        if let Some(objects) = self.own("durable_objects") {
            for binding in objects.get("bindings").map(entries).unwrap_or_default() {
                if let Some(name) = binding.get("name").and_then(Value::as_str) {
                    found.push(Binding {
                        kind: "durable_objects",
                        name: name.to_owned(),
                        class: binding.get("class_name").and_then(Value::as_str).map(str::to_owned),
                    });
                }
            }
        }
        for kind in BINDING_KINDS {
            let Some(item) = self.own(kind) else { continue };
            let tables = match item.as_object() {
                Some(single) => vec![single],
                None => entries(item),
            };
            for table in tables {
                let name = table.get("binding").or_else(|| table.get("name")).and_then(Value::as_str);
                if let Some(name) = name {
                    found.push(Binding { kind, name: name.to_owned(), class: None });
                }
            }
        }
        if let Some(queues) = self.own("queues") {
            for producer in queues.get("producers").map(entries).unwrap_or_default() {
                if let Some(name) = producer.get("binding").and_then(Value::as_str) {
                    found.push(Binding { kind: "queues", name: name.to_owned(), class: None });
                }
            }
        }
        found
    }
}

struct RouteEntry {
    pattern: String,
    custom_domain: bool,
}

struct Binding {
    kind: &'static str,
    name: String,
    /// A Durable Object binding's `class_name`.
    class: Option<String>,
}

impl Binding {
    fn is(&self, name: &str) -> bool {
        self.name == name
    }
}

/// The tables of an array of tables.
fn entries(item: &Value) -> Vec<&Map<String, Value>> {
    item.as_array().map(|array| array.iter().filter_map(Value::as_object).collect()).unwrap_or_default()
}

/// The `NAME=value` lines of a `.dev.vars` file (dotenv syntax: `#` comments, optional
/// `export`, values optionally quoted; `\n` in a double-quoted value is a newline).
pub fn parse_dev_vars(text: &str) -> Vec<(String, String)> {
    let mut vars = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((name, value)) = line.split_once('=') else { continue };
        let value = value.trim();
        let value = if let Some(inner) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
            inner.replace("\\n", "\n")
        } else if let Some(inner) = value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')) {
            inner.to_owned()
        } else {
            value.split(" #").next().unwrap_or_default().trim_end().to_owned()
        };
        vars.push((name.trim().to_owned(), value));
    }
    vars
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in must be a valid value, or the check would report it as the problem.
    #[test]
    fn every_stand_in_is_valid_for_its_secret() {
        let stand_ins: Vec<(&str, &str)> = secret_names().map(|name| (name, stand_in(name))).collect();
        let facts = EnvFacts { names: &[], metrics_bound: false };
        let parsed = every_problem(&BTreeMap::new(), &stand_ins, &facts);
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        assert!(parsed.config.is_some());
    }

    #[test]
    fn dev_vars_are_read_as_wrangler_reads_them() {
        let vars = parse_dev_vars(
            "# local\n\nA=1\nexport B = two # comment\nC=\"x\\ny\"\nD='[{\"id\":\"k\"}]'\nnot a line\nE=\n",
        );
        let expected = [("A", "1"), ("B", "two"), ("C", "x\ny"), ("D", "[{\"id\":\"k\"}]"), ("E", "")];
        assert_eq!(vars, expected.map(|(n, v)| (n.to_owned(), v.to_owned())));
    }
}
