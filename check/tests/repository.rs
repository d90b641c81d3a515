//! The repository's own wrangler.toml: clean for every environment it ships, and accepted
//! by wrangler itself (`wrangler deploy --dry-run`, which needs no network and no account).

use std::path::{Path, PathBuf};
use std::process::Command;

use idempotency_edge_config::{check, environments};

const WRANGLER_TOML: &str = include_str!("../../wrangler.toml");

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("check/ is in the repository").to_path_buf()
}

/// The top level is local development: its only finding is the note that its origin is the
/// demo's, on this machine.
#[test]
fn the_top_level_has_only_the_local_origin_note() {
    let report = check(WRANGLER_TOML, None, None).unwrap();
    assert!(report.passes(), "{}", report.render("wrangler.toml"));
    let notes: Vec<&str> = report.notes().map(|f| f.name.as_str()).collect();
    assert_eq!(notes, ["ORIGIN_URL"], "{}", report.render("wrangler.toml"));
}

#[test]
fn staging_and_production_are_clean() {
    assert_eq!(environments(WRANGLER_TOML).unwrap(), ["staging", "production"]);
    for env in ["staging", "production"] {
        let report = check(WRANGLER_TOML, Some(env), None).unwrap();
        assert!(report.findings.is_empty(), "{}", report.render("wrangler.toml"));
    }
}

/// What the production recipe promises: observe mode first, a real origin URL, the
/// metrics dataset bound, logs on, the payment-minimum secrets required, and no rate limit
/// unless the operator opts in.
#[test]
fn production_observes_first_with_metrics_logs_and_required_secrets() {
    let doc: toml_edit::DocumentMut = WRANGLER_TOML.parse().unwrap();
    let production = &doc["env"]["production"];
    assert_eq!(production["vars"]["MODE"].as_str(), Some("observe"));
    assert!(production["vars"]["ORIGIN_URL"].as_str().is_some_and(|url| url.starts_with("https://")));
    assert_eq!(production["observability"]["enabled"].as_bool(), Some(true));
    let first = |kind: &str, field: &str| {
        production[kind]
            .as_array_of_tables()
            .and_then(|t| t.get(0))
            .and_then(|t| t[field].as_str().map(str::to_owned))
    };
    assert_eq!(first("analytics_engine_datasets", "binding").as_deref(), Some("IDEMPOTENCY_METRICS"));
    assert!(production.get("ratelimits").is_none(), "a rate limit is opt-in");
    let required: Vec<&str> = production["secrets"]["required"]
        .as_array()
        .map(|names| names.iter().filter_map(|n| n.as_str()).collect())
        .unwrap_or_default();
    assert_eq!(required, idempotency_edge_config::PAYMENT_MINIMUM_SECRETS);
}

/// `wrangler deploy --dry-run --env production`: wrangler's own validation of the
/// environment, its bundle and its bindings, offline. Runs the [build] command, so the
/// configuration check too (WRANGLER_COMMAND=deploy).
#[test]
fn wrangler_accepts_every_environment_in_a_dry_run() {
    let root = repo_root();
    let wrangler = root.join("node_modules/.bin/wrangler");
    assert!(
        wrangler.exists(),
        "{} is missing: run ./scripts/setup.sh (it runs npm ci), then this test again. It runs \
         `npx wrangler deploy --dry-run --env production` from the repository root.",
        wrangler.display()
    );
    for env in ["staging", "production"] {
        let outdir =
            std::env::temp_dir().join(format!("idempotency-edge-dry-run-{env}-{}", std::process::id()));
        let out = Command::new(&wrangler)
            .args(["deploy", "--dry-run", "--env", env, "--outdir"])
            .arg(&outdir)
            .current_dir(&root)
            .env("WRANGLER_SEND_METRICS", "false")
            .env("CLOUDFLARE_CF_FETCH_ENABLED", "false")
            .output()
            .expect("run wrangler");
        let _ = std::fs::remove_dir_all(&outdir);
        let output =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(
            out.status.success(),
            "`npx wrangler deploy --dry-run --env {env}` failed ({}); if the build is what failed, \
             run ./scripts/setup.sh, then bash scripts/build.sh:\n{output}",
            out.status
        );
        for expected in [
            "--dry-run: exiting now",
            "env.IDEMPOTENCY_KEYS (KeyObject)",
            "env.IDEMPOTENCY_METRICS",
            "env.ORIGIN_URL (\"https://",
        ] {
            assert!(output.contains(expected), "{env}: no {expected:?} in:\n{output}");
        }
        assert!(
            output.contains(&format!("wrangler.toml [env.{env}]: ok")),
            "the [build] checked the configuration:\n{output}"
        );
        assert!(
            !output.contains("is not inherited") && !output.contains("[WARNING]"),
            "{env}: a wrangler warning:\n{output}"
        );
    }
}
