//! `idempotency-edge-config check`: the worker's configuration, checked before a deploy.
//!
//! ```sh
//! cargo run -p idempotency-edge-config -- check [--env NAME | --every-env] [-c FILE]
//!     [--dev-vars FILE | --no-dev-vars]
//! ```
//!
//! Reads `wrangler.toml`, `wrangler.jsonc` or `wrangler.json` (its top level, or
//! `[env.NAME]` with wrangler's inheritance rules; the environment wrangler would deploy,
//! `CLOUDFLARE_ENV`, when `--env` is not given)
//! and applies the worker's own settings parser; prints every problem at once, each with its
//! variable. The top level is checked with `.dev.vars` beside the file when there is one
//! (the secrets of `wrangler dev`); an environment is a deploy target, whose secrets are set
//! with `wrangler secret put`, so a secret it needs is a note unless `--dev-vars` names a
//! file. Exit status: 0 without errors (notes may remain), 1 with an error, 2 for bad usage
//! or a file that cannot be read.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args as ClapArgs, Parser, Subcommand};
use idempotency_edge_config::{Report, WranglerConfig};

/// Checks a wrangler configuration with the worker's own settings parser, before a deploy.
#[derive(Parser)]
#[command(
    name = "idempotency-edge-config",
    version,
    after_help = "Exit status: 0 without errors, 1 with an error, 2 for bad usage or an unreadable file."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check the top level, one environment, or every environment.
    Check(Args),
}

#[derive(ClapArgs)]
struct Args {
    /// Check [env.NAME] (wrangler's inheritance: vars and bindings are not inherited);
    /// CLOUDFLARE_ENV, as wrangler reads it, when not given.
    #[arg(short, long, value_name = "NAME", env = "CLOUDFLARE_ENV", conflicts_with = "every_env")]
    env: Option<String>,
    /// Check the top level and every [env.NAME].
    #[arg(long)]
    every_env: bool,
    /// The wrangler configuration (default, as wrangler looks: wrangler.json, wrangler.jsonc,
    /// then wrangler.toml).
    #[arg(short, long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Read secrets and variables from FILE, as wrangler dev does with .dev.vars.
    #[arg(long, value_name = "FILE", conflicts_with = "no_dev_vars")]
    dev_vars: Option<PathBuf>,
    /// Ignore .dev.vars (the top level reads it when it is beside the configuration).
    #[arg(long)]
    no_dev_vars: bool,
}

impl Args {
    fn config_path(&self) -> PathBuf {
        self.config.clone().unwrap_or_else(|| {
            ["wrangler.json", "wrangler.jsonc", "wrangler.toml"]
                .into_iter()
                .map(PathBuf::from)
                .find(|path| path.is_file())
                .unwrap_or_else(|| PathBuf::from("wrangler.toml"))
        })
    }
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return if error.use_stderr() { ExitCode::from(2) } else { ExitCode::SUCCESS };
        }
    };
    let Command::Check(args) = cli.command;
    let config = args.config_path();
    match run(&args, &config) {
        Ok(reports) => {
            let name = config.display().to_string();
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

fn run(args: &Args, path: &Path) -> Result<Vec<Report>, String> {
    let config = WranglerConfig::read(path)?;
    let beside = path.parent().unwrap_or(Path::new("")).join(".dev.vars");
    let dev_vars_for = |env: Option<&str>| -> Result<Option<String>, String> {
        match (&args.dev_vars, env) {
            (Some(file), _) => read(file).map(Some),
            (None, None) if !args.no_dev_vars && beside.is_file() => read(&beside).map(Some),
            _ => Ok(None),
        }
    };
    // An empty CLOUDFLARE_ENV is wrangler's top level.
    let env = args.env.clone().filter(|name| !name.is_empty());
    let envs: Vec<Option<String>> = match args.every_env {
        true => std::iter::once(None).chain(config.environments().into_iter().map(Some)).collect(),
        false => vec![env],
    };
    envs.iter()
        .map(|env| {
            let dev_vars = dev_vars_for(env.as_deref())?;
            config.check(env.as_deref(), dev_vars.as_deref())
        })
        .collect()
}
