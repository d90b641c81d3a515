//! `idempotency-edge-check`: checks an endpoint for what the Idempotency-Key draft
//! promises, with fresh keys, from the outside.
//!
//! ```sh
//! TEST_API_KEY='Bearer …' idempotency-edge-check --url https://api.example.com/v1/charges \
//!   --credential-env TEST_API_KEY [--body '{"amount":1}'] [--method POST] \
//!   [--url2 https://api.example.com/v1/refunds] [--slow-header 'X-Test-Delay-Ms: 4000'] \
//!   [--ca-cert staging-ca.pem] [--json report.json | --json -]
//! ```
//!
//! Every check holds, falls short, or is not applicable, and says why (see [`checks`]). The
//! table goes to stdout (to stderr with `--json -`) and the same report as JSON to
//! `--json`. The exit status follows the table both programs share (`shared::Exit`): 0 when
//! every applicable check holds, 1 when one falls short, 64 for bad usage, 74 when the
//! report cannot be written.
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
#[path = "../shared/mod.rs"]
mod shared;

use std::process::ExitCode;

use shared::Exit;

fn main() -> ExitCode {
    let cli = match shared::parse::<args::Cli>() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    let out = cli.endpoint.out();
    let fail = |exit: Exit, why: String| {
        eprintln!("idempotency-edge-check: {why}");
        ExitCode::from(exit)
    };
    for warning in cli.endpoint.warnings() {
        eprintln!("idempotency-edge-check: warning: {warning}");
    }
    let args = match cli.args() {
        Ok(args) => args,
        Err(why) => return fail(Exit::Usage, why),
    };
    let http = match cli.endpoint.http_client(reqwest::Client::builder().timeout(args.timeout)) {
        Ok(http) => http,
        Err(why) => return fail(Exit::Usage, why),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => return fail(Exit::Internal, format!("cannot start the async runtime: {e}")),
    };
    let report = runtime.block_on(checks::run(&args, http));
    for line in report.table().lines() {
        out.line(line);
    }
    let exit = if report.passed() { Exit::Success } else { Exit::NotSuccess };
    let mut json = report.json();
    json["exit_status"] = exit.code().into();
    if let Err(why) = cli.endpoint.write_json(&json) {
        return fail(Exit::Output, why);
    }
    exit.into()
}
