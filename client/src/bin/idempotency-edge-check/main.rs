//! `idempotency-edge-check`: checks an endpoint for what the Idempotency-Key draft
//! promises, with fresh keys, from the outside.
//!
//! ```sh
//! idempotency-edge-check --url https://api.example.com/v1/charges \
//!   [--header 'Authorization: Bearer …'] [--body '{"amount":1}'] [--method POST] \
//!   [--url2 https://api.example.com/v1/refunds] [--slow-header 'X-Test-Delay-Ms: 4000'] \
//!   [--ca-cert staging-ca.pem] [--json report.json]
//! ```
//!
//! Every check holds, falls short, or is not applicable, and says why (see [`checks`]). The
//! table goes to stdout and the same report as JSON to `--json`. Exit status: 0 when every
//! applicable check holds, 1 when one falls short, 2 for bad usage or an unwritable report.
//!
//! The checker sees only what the endpoint returns. Where a check needs to count
//! executions, it relies on answers that differ between executions (an id, a serial
//! number): it first sends the same request under two fresh keys, and when the two answers
//! are equal, those checks say that they cannot tell and are not applicable.
//!
//! Every request really executes what it asks for at the endpoint (twice, for the checks
//! that a non-idempotent endpoint fails): point it at a test route or a staging
//! deployment, with a test credential. Header values and keys are never printed.

mod args;
mod checks;
mod report;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args = match args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(args::Usage::Help) => {
            println!("{}", args::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(args::Usage::Bad(why)) => {
            eprintln!("idempotency-edge-check: {why}\n\n{}", args::USAGE);
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("idempotency-edge-check: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let report = match runtime.block_on(checks::run(&args)) {
        Ok(report) => report,
        Err(why) => {
            eprintln!("idempotency-edge-check: {why}");
            return ExitCode::from(2);
        }
    };
    print!("{}", report.table());
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&report.json()).unwrap_or_default();
        if let Err(e) = std::fs::write(path, json + "\n") {
            eprintln!("idempotency-edge-check: cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
