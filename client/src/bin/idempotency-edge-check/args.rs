//! The checker's command line: the shared endpoint arguments (`--url`, `-H`, credentials,
//! `--ca-cert`, `--json`) and the checks' own.

use std::time::Duration;

use clap::Parser;

use crate::shared::{self, Endpoint, EXIT_STATUS_HELP};

/// Checks an Idempotency-Key endpoint with fresh keys. Every request executes for real: use
/// a test route or a staging deployment, with a test credential.
#[derive(Parser, Debug)]
#[command(name = "idempotency-edge-check", version, after_help = EXIT_STATUS_HELP)]
pub struct Cli {
    #[command(flatten)]
    pub endpoint: Endpoint,

    /// Another covered path of the same API: the same key there must get 422
    #[arg(long, value_name = "URL", value_parser = shared::http_url)]
    pub url2: Option<String>,

    /// The request body; sent as application/json when it is JSON and no Content-Type
    /// header is given
    #[arg(long, visible_alias = "data", value_name = "BODY", default_value = "{}")]
    pub body: String,

    /// The request method
    #[arg(long, value_name = "METHOD", default_value = "POST", value_parser = shared::method)]
    pub method: String,

    /// A header that makes the endpoint answer slowly (several seconds), for the
    /// retry-while-running check; without it that check is not applicable
    #[arg(long, value_name = "'NAME: VALUE'", value_parser = shared::HeaderLine)]
    pub slow_header: Option<(String, String)>,

    /// How long the slow first attempt runs before the retry
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub slow_lead_ms: u64,

    /// Duplicates sent at once (2 to 100)
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub concurrency: usize,

    /// The endpoint executes requests without a key by design
    #[arg(long)]
    pub keys_optional: bool,

    /// Time one request may take
    #[arg(long, value_name = "S", default_value_t = 60)]
    pub timeout_secs: u64,
}

/// What the checks need, with the credential read and the defaults applied.
#[derive(Debug)]
pub struct Args {
    pub url: String,
    pub url2: Option<String>,
    /// Every header of every request: `-H`, then the credential.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub method: String,
    pub slow_header: Option<(String, String)>,
    pub slow_lead: Duration,
    pub concurrency: usize,
    pub keys_optional: bool,
    pub timeout: Duration,
}

impl Cli {
    /// The checks' arguments; an error (bad usage) when the credential cannot be read.
    pub fn args(&self) -> Result<Args, String> {
        let mut headers = self.endpoint.headers()?;
        let body = self.body.clone().into_bytes();
        let has_type = headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("content-type"));
        if !has_type && serde_json::from_slice::<serde_json::Value>(&body).is_ok() {
            headers.push(("Content-Type".into(), "application/json".into()));
        }
        Ok(Args {
            url: self.endpoint.url.clone(),
            url2: self.url2.clone(),
            headers,
            body,
            method: self.method.clone(),
            slow_header: self.slow_header.clone(),
            slow_lead: Duration::from_millis(self.slow_lead_ms),
            concurrency: self.concurrency.clamp(2, 100),
            keys_optional: self.keys_optional,
            timeout: Duration::from_secs(self.timeout_secs.max(1)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_line(line: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("idempotency-edge-check").chain(line.iter().copied()))
    }

    #[test]
    fn flags_and_defaults() {
        let cli = parse_line(&[
            "--url",
            "https://api.example.com/v1/charges",
            "-H",
            "Authorization: Bearer t",
            "--slow-header",
            "X-Test-Delay-Ms: 4000",
            "--json",
            "r.json",
        ])
        .unwrap_or_else(|e| panic!("valid: {e}"));
        let args = cli.args().unwrap();
        assert_eq!(args.method, "POST");
        assert_eq!(args.body, b"{}");
        assert_eq!(args.slow_header, Some(("X-Test-Delay-Ms".into(), "4000".into())));
        assert!(args.headers.contains(&("Content-Type".into(), "application/json".into())));
        assert!(args.headers.contains(&("Authorization".into(), "Bearer t".into())));
        assert_eq!(args.concurrency, 8);
        assert_eq!(cli.endpoint.json.as_deref(), Some(std::path::Path::new("r.json")));
        let args =
            parse_line(&["--url", "http://x/y", "--concurrency", "1000", "--method", "patch", "--data", "x"])
                .unwrap()
                .args()
                .unwrap();
        assert_eq!((args.concurrency, args.method.as_str(), args.body.as_slice()), (100, "PATCH", &b"x"[..]));
        assert!(!args.headers.iter().any(|(n, _)| n == "Content-Type"), "x is not JSON");
    }

    #[test]
    fn bad_lines_are_refused() {
        for line in [
            &[][..],
            &["--url", "ftp://x/y"][..],
            &["--url", "not a url"][..],
            &["--url", "https://x/y", "-H", "no colon"][..],
            &["--url", "https://x/y", "-H", "Idempotency-Key: k"][..],
            &["--url", "https://x/y", "--method", "P O"][..],
            &["--url", "https://x/y", "--bogus", "1"][..],
            &["--url", "https://x/y", "--url2", "mailto:a@b"][..],
            &["--url"][..],
        ] {
            assert!(parse_line(line).is_err(), "{line:?}");
        }
        let help = parse_line(&["--help"]).unwrap_err();
        assert_eq!(help.kind(), clap::error::ErrorKind::DisplayHelp);
        assert!(help.to_string().contains("Exit status"), "{help}");
        assert_eq!(parse_line(&["--version"]).unwrap_err().kind(), clap::error::ErrorKind::DisplayVersion);
    }
}
