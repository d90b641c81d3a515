//! `idempotency-edge-config check`: the worker's configuration, checked before a deploy.
//!
//! ```sh
//! cargo run -p idempotency-edge-config -- check [--env NAME | --every-env] [--config wrangler.toml]
//!     [--dev-vars FILE | --no-dev-vars]
//! ```
//!
//! Reads `wrangler.toml` (its top level, or `[env.NAME]` with wrangler's inheritance rules)
//! and applies the worker's own settings parser; prints every problem at once, each with its
//! variable. The top level is checked with `.dev.vars` beside the file when there is one
//! (the secrets of `wrangler dev`); an environment is a deploy target, whose secrets are set
//! with `wrangler secret put`, so a secret it needs is a note unless `--dev-vars` names a
//! file. Exit status: 0 without errors (notes may remain), 1 with an error, 2 for bad usage
//! or a file that cannot be read.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use idempotency_edge_config::{check, environments, Report};

const USAGE: &str = "usage: idempotency-edge-config check [--env NAME | --every-env] [--config FILE] [--dev-vars FILE | --no-dev-vars]

  --env NAME     check [env.NAME] (wrangler's inheritance: vars and bindings are not inherited)
  --every-env    check the top level and every [env.NAME]
  --config FILE  the wrangler configuration (default: wrangler.toml)
  --dev-vars FILE  read secrets and variables from FILE, as wrangler dev does with .dev.vars
  --no-dev-vars  ignore .dev.vars (the top level reads it when it is beside the configuration)

Exit status: 0 without errors, 1 with an error, 2 for bad usage or an unreadable file.";

enum Envs {
    Top,
    One(String),
    Every,
}

enum DevVars {
    /// `.dev.vars` beside the configuration, for the top level, when it exists.
    Auto,
    File(PathBuf),
    Off,
}

struct Args {
    config: PathBuf,
    envs: Envs,
    dev_vars: DevVars,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    match args.next().as_deref() {
        Some("check") => {}
        Some("-h" | "--help") => return Err(String::new()),
        Some(other) => return Err(format!("unknown command {other:?}")),
        None => return Err("a command is needed: check".to_owned()),
    }
    let mut parsed =
        Args { config: PathBuf::from("wrangler.toml"), envs: Envs::Top, dev_vars: DevVars::Auto };
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| args.next().ok_or_else(|| format!("{flag} needs a value"));
        match arg.as_str() {
            "--env" | "-e" => parsed.envs = Envs::One(value("--env")?),
            "--every-env" => parsed.envs = Envs::Every,
            "--config" | "-c" => parsed.config = PathBuf::from(value("--config")?),
            "--dev-vars" => parsed.dev_vars = DevVars::File(PathBuf::from(value("--dev-vars")?)),
            "--no-dev-vars" => parsed.dev_vars = DevVars::Off,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(parsed)
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(why) if why.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(why) => {
            eprintln!("idempotency-edge-config: {why}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(reports) => {
            let name = args.config.display().to_string();
            for report in &reports {
                print!("{}", report.render(&name));
            }
            if reports.iter().any(|r| r.env.is_some() && !r.with_dev_vars) {
                println!(
                    "Secrets are not in {name}: `npx wrangler secret list --env NAME` shows which are set; docs/deploy.md, \"Before first traffic\", lists those a payment API needs."
                );
            }
            if reports.iter().all(Report::passes) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(why) => {
            eprintln!("idempotency-edge-config: {why}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &Args) -> Result<Vec<Report>, String> {
    let toml = read(&args.config)?;
    let beside = args.config.parent().unwrap_or(Path::new("")).join(".dev.vars");
    let dev_vars_for = |env: Option<&str>| -> Result<Option<String>, String> {
        match (&args.dev_vars, env) {
            (DevVars::File(path), _) => read(path).map(Some),
            (DevVars::Auto, None) if beside.is_file() => read(&beside).map(Some),
            _ => Ok(None),
        }
    };
    let envs: Vec<Option<String>> = match &args.envs {
        Envs::Top => vec![None],
        Envs::One(name) => vec![Some(name.clone())],
        Envs::Every => std::iter::once(None).chain(environments(&toml)?.into_iter().map(Some)).collect(),
    };
    envs.iter()
        .map(|env| {
            let dev_vars = dev_vars_for(env.as_deref())?;
            check(&toml, env.as_deref(), dev_vars.as_deref())
        })
        .collect()
}
