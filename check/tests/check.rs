//! The configuration checker against small wrangler.toml files, one rule at a time, and
//! its binary's output and exit status.

use std::process::Command;

use idempotency_edge_config::{
    check, environments, Finding, Format, Report, Severity, WranglerConfig, PAYMENT_MINIMUM_SECRETS,
};

/// A minimal valid top level: the key objects, their migration, an origin.
const BASE: &str = r#"
name = "idempotency-edge"
main = "build/worker/shim.mjs"
compatibility_date = "2026-04-26"

[[durable_objects.bindings]]
name = "IDEMPOTENCY_KEYS"
class_name = "KeyObject"

[[migrations]]
tag = "v1"
new_sqlite_classes = ["KeyObject"]
"#;

fn with_vars(vars: &str) -> String {
    format!("{BASE}\n[vars]\nORIGIN_URL = \"https://payments.example.com\"\n{vars}\n")
}

fn top(toml: &str) -> Report {
    check(toml, None, None).unwrap_or_else(|e| panic!("{e}"))
}

fn names(findings: impl Iterator<Item = Finding>) -> Vec<String> {
    findings.map(|f| f.name).collect()
}

fn errors(report: &Report) -> Vec<String> {
    names(report.errors().cloned())
}

fn notes(report: &Report) -> Vec<String> {
    names(report.notes().cloned())
}

fn assert_clean(report: &Report) {
    assert!(report.findings.is_empty(), "{}", report.render("test.toml"));
}

#[test]
fn a_minimal_configuration_is_clean() {
    assert_clean(&top(&with_vars("")));
}

/// Values as wrangler users write them: a number, boolean or array of tables in [vars]
/// reaches the worker as that JSON value and means what it says; a value of the wrong shape
/// is named, as its quoted text would be.
#[test]
fn numbers_booleans_and_arrays_in_vars_mean_what_they_say() {
    assert_clean(&top(&with_vars(
        "IDEMPOTENCY_TTL_SECONDS = 604800\nORIGIN_DEDUPLICATES = true\nMAX_ORIGIN_ATTEMPTS = 3\nIDEMPOTENCY_ROUTES = [{ pattern = \"/v1/charges\", methods = [\"POST\"] }, { pattern = \"/v1/refunds\" }]",
    )));
    // Quoted, the same values are as valid.
    assert_clean(&top(&with_vars("IDEMPOTENCY_TTL_SECONDS = \"604800\"")));
    let report = top(&with_vars("IDEMPOTENCY_TTL_SECONDS = [604800]\nORIGIN_DEDUPLICATES = 1"));
    assert_eq!(errors(&report), ["IDEMPOTENCY_TTL_SECONDS", "ORIGIN_DEDUPLICATES"], "{}", report.render("t"));
    assert!(!report.passes());
}

/// `wrangler.jsonc`, as Cloudflare now recommends it: comments, trailing commas, the same
/// rules and the same findings as the TOML that says the same.
#[test]
fn wrangler_jsonc_is_read_like_wrangler_toml() {
    let jsonc = r#"{
  // The key objects and their migration.
  "name": "idempotency-edge",
  "main": "build/worker/shim.mjs",
  "durable_objects": { "bindings": [{ "name": "IDEMPOTENCY_KEYS", "class_name": "KeyObject" }] },
  "migrations": [{ "tag": "v1", "new_sqlite_classes": ["KeyObject"] }],
  "vars": {
    "ORIGIN_URL": "https://payments.example.com",
    "IDEMPOTENCY_TTL_SECONDS": 86400, /* a number */
    "IDEMPOTENCY_ROUTES": [{ "pattern": "/v1/charges" }],
  },
  "env": {
    "zeta": {},
    "alpha": {
      "vars": { "ORIGIN_URL": "https://payments.example.com", "MODE": "strict" },
      "durable_objects": { "bindings": [{ "name": "IDEMPOTENCY_KEYS", "class_name": "KeyObject" }] },
      "secrets": { "required": ["STORAGE_ENCRYPTION_KEYS", "ORIGIN_AUTH_SECRET", "OBJECT_NAME_KEY"] },
    },
  },
}"#;
    let config = WranglerConfig::parse(jsonc, Format::Jsonc).unwrap();
    assert_eq!(config.environments(), ["zeta", "alpha"], "file order");
    assert_clean(&config.check(None, None).unwrap());
    let alpha = config.check(Some("alpha"), None).unwrap();
    assert_eq!(errors(&alpha), ["MODE"], "{}", alpha.render("wrangler.jsonc"));
    assert_eq!(Format::of(std::path::Path::new("x/wrangler.jsonc")), Format::Jsonc);
    assert_eq!(Format::of(std::path::Path::new("wrangler.toml")), Format::Toml);
    assert!(WranglerConfig::parse("{ \"vars\": ", Format::Jsonc).unwrap_err().starts_with("not valid JSONC"));
}

/// A deployed environment lists the payment-minimum secrets as required (wrangler then
/// refuses to deploy while one is unset); one that does not is an error naming the command.
#[test]
fn a_deployed_environment_must_require_the_payment_minimum_secrets() {
    let env = "[env.live.vars]\nORIGIN_URL = \"https://payments.example.com\"\n[[env.live.durable_objects.bindings]]\nname = \"IDEMPOTENCY_KEYS\"\nclass_name = \"KeyObject\"\n";
    let without = format!("{}\n{env}", with_vars(""));
    let report = check(&without, Some("live"), None).unwrap();
    assert_eq!(errors(&report), ["secrets"]);
    let message = &report.errors().next().unwrap().message;
    for name in PAYMENT_MINIMUM_SECRETS {
        assert!(message.contains(name), "{message}");
    }
    assert!(message.contains("npx wrangler secret put NAME --env live"), "{message}");
    let partial = format!("{without}[env.live.secrets]\nrequired = [\"ORIGIN_AUTH_SECRET\"]\n");
    let report = check(&partial, Some("live"), None).unwrap();
    assert_eq!(errors(&report), ["secrets"]);
    assert!(!report.errors().next().unwrap().message.contains("ORIGIN_AUTH_SECRET,"));
    let full = format!(
        "{without}[env.live.secrets]\nrequired = [\"STORAGE_ENCRYPTION_KEYS\", \"ORIGIN_AUTH_SECRET\", \"OBJECT_NAME_KEY\"]\n"
    );
    assert_clean(&check(&full, Some("live"), None).unwrap());
    // The top level is local development: wrangler dev, no deploy target of its own.
    assert_clean(&check(&full, None, None).unwrap());
}

/// The worker stops at the configuration's first invalid variable; the checker goes on,
/// each refused variable left at its default, and names them all.
#[test]
fn every_problem_is_reported_at_once_with_its_variable() {
    let report = top(&format!(
        "{BASE}\n[vars]\nORIGIN_URL = \"ftp://payments.example.com\"\nIDEMPOTENCY_TTL_SECONDS = \"forever\"\nMODE = \"strict\"\nTRUSTED_CLIENT_IP = \"yes\"\nSCOPE_HEADERS = \"X-Api-Key\"\nMAX_BODY_BYTES = \"a lot\"\n"
    ));
    let mut found = errors(&report);
    found.sort();
    assert_eq!(
        found,
        [
            "IDEMPOTENCY_TTL_SECONDS",
            "MAX_BODY_BYTES",
            "MODE",
            "ORIGIN_URL",
            "SCOPE_HEADERS",
            "TRUSTED_CLIENT_IP"
        ],
        "{}",
        report.render("t")
    );
    assert!(report.errors().all(|f| !f.message.contains("forever")), "values are never printed");
    // The refused ORIGIN_URL is not read as empty: no second finding about route mode.
    assert_eq!(
        report.findings.iter().filter(|f| f.name == "ORIGIN_URL").count(),
        1,
        "{}",
        report.render("t")
    );
}

#[test]
fn an_empty_origin_url_needs_a_route_or_a_service() {
    let route_mode = format!("{BASE}\n[vars]\nORIGIN_URL = \"\"\n");
    let report = top(&route_mode);
    assert_eq!(errors(&report), ["ORIGIN_URL"]);
    assert!(report.errors().next().unwrap().message.contains("forward to itself"));
    // Unset is the same as empty.
    assert_eq!(errors(&top(BASE)), ["ORIGIN_URL"]);
    // A zone route in front of the origin is route mode's purpose.
    let routed = format!("routes = [\"api.example.com/v1/*\"]\n{route_mode}");
    assert_clean(&top(&routed));
    let one_route =
        format!("route = {{ pattern = \"api.example.com/*\", zone_name = \"example.com\" }}\n{route_mode}");
    assert_clean(&top(&one_route));
    // ... but not when workers.dev is on too, nor on a custom domain.
    let also_workers_dev = format!("workers_dev = true\n{routed}");
    assert_eq!(errors(&top(&also_workers_dev)), ["ORIGIN_URL"]);
    let custom_domain =
        format!("routes = [{{ pattern = \"pay.example.com\", custom_domain = true }}]\n{route_mode}");
    assert_eq!(errors(&top(&custom_domain)), ["ORIGIN_URL"]);
    // A service binding is an origin too, when it is declared.
    let service = format!("{BASE}\n[vars]\nORIGIN_SERVICE = \"PAYMENTS\"\n");
    assert_eq!(errors(&top(&service)), ["ORIGIN_SERVICE"]);
    let declared = format!("{service}\n[[services]]\nbinding = \"PAYMENTS\"\nservice = \"payments-api\"\n");
    assert_clean(&top(&declared));
}

#[test]
fn a_loopback_origin_is_a_note_for_local_development() {
    let report = top(&format!("{BASE}\n[vars]\nORIGIN_URL = \"http://127.0.0.1:8788\"\n"));
    assert!(report.passes());
    assert_eq!(notes(&report), ["ORIGIN_URL"]);
}

#[test]
fn bindings_that_routes_name_must_be_declared() {
    let routes = r#"IDEMPOTENCY_ROUTES = '[{"pattern":"/v1/*","rate_limit":"STRICT_LIMITER"},{"pattern":"/svc/*","origin_service":"PAYMENTS"}]'"#;
    let report = top(&with_vars(routes));
    assert_eq!(errors(&report), ["IDEMPOTENCY_ROUTES", "IDEMPOTENCY_ROUTES"]);
    let declared = format!(
        "{}\n[[ratelimits]]\nname = \"STRICT_LIMITER\"\nnamespace_id = \"1001\"\nsimple = {{ limit = 10, period = 60 }}\n\n[[services]]\nbinding = \"PAYMENTS\"\nservice = \"payments-api\"\n",
        with_vars(routes)
    );
    assert_clean(&top(&declared));
}

#[test]
fn the_key_objects_binding_and_migration_are_required() {
    let no_binding = "name = \"x\"\n[[migrations]]\ntag = \"v1\"\nnew_sqlite_classes = [\"KeyObject\"]\n[vars]\nORIGIN_URL = \"https://payments.example.com\"\n";
    assert_eq!(errors(&top(no_binding)), ["IDEMPOTENCY_KEYS"]);
    let no_migration = "name = \"x\"\n[[durable_objects.bindings]]\nname = \"IDEMPOTENCY_KEYS\"\nclass_name = \"KeyObject\"\n[vars]\nORIGIN_URL = \"https://payments.example.com\"\n";
    assert_eq!(errors(&top(no_migration)), ["migrations"]);
}

#[test]
fn a_secret_in_vars_is_an_error() {
    let report = top(&with_vars("ADMIN_TOKEN = \"0123456789abcdef0123456789abcdef\""));
    assert_eq!(errors(&report), ["ADMIN_TOKEN"]);
    assert!(report.errors().next().unwrap().message.contains("wrangler secret put ADMIN_TOKEN"));
}

/// Secrets are not in wrangler.toml: one that a setting needs is a note naming the command,
/// unless .dev.vars is checked (then the secrets are known).
#[test]
fn a_secret_a_setting_needs_is_a_note_unless_dev_vars_are_checked() {
    let toml = format!(
        "{}\n[env.production.vars]\nORIGIN_URL = \"https://payments.example.com\"\nASYNC_ACCEPT = \"prefer\"\n\n[[env.production.durable_objects.bindings]]\nname = \"IDEMPOTENCY_KEYS\"\nclass_name = \"KeyObject\"\n\n[env.production.secrets]\nrequired = [\"STORAGE_ENCRYPTION_KEYS\", \"ORIGIN_AUTH_SECRET\", \"OBJECT_NAME_KEY\"]\n",
        with_vars("ASYNC_ACCEPT = \"prefer\"")
    );
    let report = top(&toml);
    assert!(report.passes(), "{}", report.render("t"));
    assert_eq!(notes(&report), ["STORAGE_ENCRYPTION_KEYS"]);
    assert!(report
        .notes()
        .next()
        .unwrap()
        .message
        .contains("`npx wrangler secret put STORAGE_ENCRYPTION_KEYS`"));
    let production = check(&toml, Some("production"), None).unwrap();
    assert!(production.passes());
    assert!(production
        .notes()
        .next()
        .unwrap()
        .message
        .contains("`npx wrangler secret put STORAGE_ENCRYPTION_KEYS --env production`"));
    // With .dev.vars, a missing secret is an error, and a valid one is enough.
    let without = check(&toml, None, Some("ADMIN_TOKEN=0123456789abcdef0123456789abcdef\n")).unwrap();
    assert_eq!(errors(&without), ["STORAGE_ENCRYPTION_KEYS"]);
    let ring =
        r#"STORAGE_ENCRYPTION_KEYS='[{"id":"dev","key":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}]'"#;
    assert_clean(&check(&toml, None, Some(ring)).unwrap());
}

/// A claim needs a key: a JWKS in [vars], or the HS256 secret. The note names the secret,
/// and a second problem that the first one hid is still reported.
#[test]
fn a_problem_only_a_secret_solves_does_not_hide_the_others() {
    let report = top(&with_vars("SCOPE_JWT_CLAIM = \"sub\"\nMODE = \"strict\""));
    assert_eq!(errors(&report), ["MODE"]);
    assert_eq!(notes(&report), ["SCOPE_JWT_CLAIM"]);
    assert!(report.notes().next().unwrap().message.contains("wrangler secret put SCOPE_JWT_HS256_SECRET"));
}

/// Wrangler's inheritance: vars and bindings are not inherited, routes and migrations are.
#[test]
fn environments_inherit_what_wrangler_lets_them_inherit() {
    let toml = format!(
        "routes = [\"api.example.com/*\"]\n{}\n[env.bare]\n\n[env.routed]\n[env.routed.vars]\nORIGIN_URL = \"\"\n[[env.routed.durable_objects.bindings]]\nname = \"IDEMPOTENCY_KEYS\"\nclass_name = \"KeyObject\"\n[env.routed.secrets]\nrequired = [\"STORAGE_ENCRYPTION_KEYS\", \"ORIGIN_AUTH_SECRET\", \"OBJECT_NAME_KEY\"]\n",
        with_vars("IDEMPOTENCY_TTL_SECONDS = \"600\"")
    );
    assert_eq!(environments(&toml).unwrap(), ["bare", "routed"]);
    let bare = check(&toml, Some("bare"), None).unwrap();
    // No binding of its own; no vars of its own (a note), but the top level's routes.
    assert_eq!(errors(&bare), ["IDEMPOTENCY_KEYS", "secrets"]);
    assert_eq!(notes(&bare), ["vars"]);
    assert!(bare.errors().next().unwrap().message.contains("[[env.bare.durable_objects.bindings]]"));
    // Its own binding, the inherited route and migration: route mode is fine.
    assert_clean(&check(&toml, Some("routed"), None).unwrap());
    // A queue producer (OUTCOME_QUEUE) at the top level only: the environment has none.
    // (An array-of-tables header is absolute: appended last, it is still the top level's.)
    let queued = format!("{toml}\n[[queues.producers]]\nbinding = \"OUTCOME_QUEUE\"\nqueue = \"outcomes\"\n");
    assert_eq!(notes(&check(&queued, Some("routed"), None).unwrap()), ["queues"]);
    let unknown = check(&toml, Some("prod"), None).unwrap_err();
    assert!(unknown.contains("[env.prod]") && unknown.contains("bare, routed"), "{unknown}");
}

#[test]
fn a_misspelt_variable_is_named() {
    let report = top(&with_vars("IDEMPOTENCY_TTL_SECOND = \"600\""));
    assert_eq!(errors(&report), ["IDEMPOTENCY_TTL_SECOND"]);
    assert!(report.errors().next().unwrap().message.contains("IDEMPOTENCY_TTL_SECONDS"));
}

#[test]
fn errors_come_before_notes() {
    let report = top(&format!("{BASE}\n[vars]\nORIGIN_URL = \"http://localhost:8788\"\nMODE = 1\n"));
    let order: Vec<Severity> = report.findings.iter().map(|f| f.severity).collect();
    assert_eq!(order, [Severity::Error, Severity::Note]);
}

#[test]
fn invalid_toml_is_refused() {
    assert!(check("[vars\n", None, None).unwrap_err().starts_with("not valid TOML"));
}

// ---------------------------------------------------------------------------------------
// The binary

fn run(dir: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_idempotency-edge-config"))
        .args(args)
        .env_remove("CLOUDFLARE_ENV")
        .current_dir(dir)
        .output()
        .expect("run idempotency-edge-config");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("idempotency-edge-config-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_binary_prints_every_problem_and_exits_1() {
    let dir = scratch("problems");
    std::fs::write(
        dir.join("wrangler.toml"),
        with_vars("IDEMPOTENCY_TTL_SECONDS = \"forever\"\nMODE = \"strict\""),
    )
    .unwrap();
    let (code, stdout, _) = run(&dir, &["check"]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("error IDEMPOTENCY_TTL_SECONDS:") && stdout.contains("error MODE:"), "{stdout}");
    // .dev.vars beside the file is read for the top level, and can be switched off.
    std::fs::write(dir.join("wrangler.toml"), with_vars("ASYNC_ACCEPT = \"prefer\"")).unwrap();
    std::fs::write(
        dir.join(".dev.vars"),
        "# local secrets\nADMIN_TOKEN=\"0123456789abcdef0123456789abcdef\"\n",
    )
    .unwrap();
    let (code, stdout, _) = run(&dir, &["check"]);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("with .dev.vars") && stdout.contains("error STORAGE_ENCRYPTION_KEYS"),
        "{stdout}"
    );
    let (code, stdout, _) = run(&dir, &["check", "--no-dev-vars"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("note  STORAGE_ENCRYPTION_KEYS"), "{stdout}");
    let (code, _, stderr) = run(&dir, &["check", "--env", "production"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("no [env.production]"), "{stderr}");
    let (code, _, stderr) = run(&dir, &["lint"]);
    assert_eq!(code, 2, "{stderr}");
    let (code, stdout, _) = run(&dir, &["--help"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("check"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `-c`/`--config` names the file, JSONC or TOML by its name; without it the binary looks
/// as wrangler does (wrangler.json, wrangler.jsonc, then wrangler.toml); without `--env`,
/// CLOUDFLARE_ENV names the environment, as it does for wrangler.
#[test]
fn the_binary_takes_the_file_and_environment_wrangler_would() {
    let dir = scratch("config");
    let jsonc = r#"{
  // staging is missing its secrets declaration
  "durable_objects": { "bindings": [{ "name": "IDEMPOTENCY_KEYS", "class_name": "KeyObject" }] },
  "migrations": [{ "tag": "v1", "new_sqlite_classes": ["KeyObject"] }],
  "vars": { "ORIGIN_URL": "https://payments.example.com" },
  "env": { "staging": { "vars": { "ORIGIN_URL": "https://payments.example.com" },
    "durable_objects": { "bindings": [{ "name": "IDEMPOTENCY_KEYS", "class_name": "KeyObject" }] } } },
}"#;
    std::fs::write(dir.join("wrangler.toml"), with_vars("MODE = \"strict\"")).unwrap();
    std::fs::write(dir.join("edge.jsonc"), jsonc).unwrap();
    let (code, stdout, _) = run(&dir, &["check"]);
    assert_eq!(code, 1, "wrangler.toml is the one found: {stdout}");
    let (code, stdout, _) = run(&dir, &["check", "-c", "edge.jsonc"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("edge.jsonc top level: ok"), "{stdout}");
    let (code, stdout, _) = run(&dir, &["check", "--config", "edge.jsonc", "--env", "staging"]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("error secrets:"), "{stdout}");
    let out = Command::new(env!("CARGO_BIN_EXE_idempotency-edge-config"))
        .args(["check", "-c", "edge.jsonc"])
        .env("CLOUDFLARE_ENV", "staging")
        .current_dir(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("[env.staging]"), "{stdout}");
    std::fs::write(dir.join("wrangler.jsonc"), jsonc).unwrap();
    let (code, stdout, _) = run(&dir, &["check"]);
    assert_eq!(code, 0, "wrangler.jsonc comes before wrangler.toml: {stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}
