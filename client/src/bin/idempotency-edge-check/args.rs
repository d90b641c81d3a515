//! The checker's command line.

use std::path::PathBuf;
use std::time::Duration;

pub const USAGE: &str = "\
usage: idempotency-edge-check --url URL [options]

Checks an Idempotency-Key endpoint with fresh keys. Every request executes for real:
use a test route or a staging deployment, with a test credential.

  --url URL              the covered endpoint (http:// or https://)
  --url2 URL             another covered path of the same API: the same key there must get 422
  -H, --header 'N: v'    a header for every request, e.g. a test credential (repeatable)
  --body BODY            the request body (default {}); sent as application/json when it
                         is JSON and no Content-Type header is given
  --method METHOD        default POST
  --slow-header 'N: v'   a header that makes the endpoint answer slowly (several seconds),
                         for the retry-while-running check; without it that check is not
                         applicable
  --slow-lead-ms MS      how long the slow first attempt runs before the retry (default 1000)
  --concurrency N        duplicates sent at once (default 8)
  --keys-optional        the endpoint executes requests without a key by design
  --ca-cert FILE         trust this PEM root certificate as well (a private CA)
  --timeout-secs S       time one request may take (default 60)
  --json FILE            write the report as JSON

exit status: 0 every applicable check holds, 1 a check falls short, 2 bad usage";

#[derive(Debug)]
pub struct Args {
    pub url: String,
    pub url2: Option<String>,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub method: String,
    pub slow_header: Option<(String, String)>,
    pub slow_lead: Duration,
    pub concurrency: usize,
    pub keys_optional: bool,
    pub ca_cert: Option<PathBuf>,
    pub timeout: Duration,
    pub json: Option<PathBuf>,
}

pub enum Usage {
    Help,
    Bad(String),
}

fn header(value: &str) -> Result<(String, String), Usage> {
    let (name, v) = value
        .split_once(':')
        .ok_or_else(|| Usage::Bad("a header is 'Name: value'; got one without a colon".to_string()))?;
    let (name, v) = (name.trim(), v.trim());
    if http::HeaderName::from_bytes(name.as_bytes()).is_err() || http::HeaderValue::from_str(v).is_err() {
        // The value may be a credential: name the header only.
        return Err(Usage::Bad(format!("invalid header {name:?}")));
    }
    if name.eq_ignore_ascii_case("idempotency-key") {
        return Err(Usage::Bad(
            "the checker chooses the keys itself; remove the Idempotency-Key header".into(),
        ));
    }
    Ok((name.to_string(), v.to_string()))
}

pub fn parse(mut argv: impl Iterator<Item = String>) -> Result<Args, Usage> {
    let mut args = Args {
        url: String::new(),
        url2: None,
        headers: Vec::new(),
        body: b"{}".to_vec(),
        method: "POST".into(),
        slow_header: None,
        slow_lead: Duration::from_millis(1000),
        concurrency: 8,
        keys_optional: false,
        ca_cert: None,
        timeout: Duration::from_secs(60),
        json: None,
    };
    let number = |flag: &str, value: &str| -> Result<u64, Usage> {
        value.parse().map_err(|_| Usage::Bad(format!("{flag} takes a number, got {value:?}")))
    };
    while let Some(flag) = argv.next() {
        match flag.as_str() {
            "-h" | "--help" => return Err(Usage::Help),
            "--keys-optional" => {
                args.keys_optional = true;
                continue;
            }
            _ => {}
        }
        let value = argv.next().ok_or_else(|| Usage::Bad(format!("{flag} needs a value")))?;
        match flag.as_str() {
            "--url" => args.url = value,
            "--url2" => args.url2 = Some(value),
            "-H" | "--header" => args.headers.push(header(&value)?),
            "--body" => args.body = value.into_bytes(),
            "--method" => args.method = value.to_ascii_uppercase(),
            "--slow-header" => args.slow_header = Some(header(&value)?),
            "--slow-lead-ms" => args.slow_lead = Duration::from_millis(number(&flag, &value)?),
            "--concurrency" => args.concurrency = number(&flag, &value)?.clamp(2, 100) as usize,
            "--ca-cert" => args.ca_cert = Some(PathBuf::from(value)),
            "--timeout-secs" => args.timeout = Duration::from_secs(number(&flag, &value)?.max(1)),
            "--json" => args.json = Some(PathBuf::from(value)),
            other => return Err(Usage::Bad(format!("unknown option {other}"))),
        }
    }
    if args.url.is_empty() {
        return Err(Usage::Bad("--url is required".into()));
    }
    for url in std::iter::once(&args.url).chain(args.url2.iter()) {
        let parsed =
            reqwest::Url::parse(url).map_err(|e| Usage::Bad(format!("{url:?} is not a URL: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(Usage::Bad(format!("{url:?}: only http:// and https:// URLs")));
        }
    }
    if http::Method::from_bytes(args.method.as_bytes()).is_err() {
        return Err(Usage::Bad(format!("invalid method {:?}", args.method)));
    }
    let has_type = args.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("content-type"));
    if !has_type && serde_json::from_slice::<serde_json::Value>(&args.body).is_ok() {
        args.headers.push(("Content-Type".into(), "application/json".into()));
    }
    Ok(args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_line(line: &[&str]) -> Result<Args, Usage> {
        parse(line.iter().map(|s| s.to_string()))
    }

    #[test]
    fn flags_and_defaults() {
        let args = parse_line(&[
            "--url",
            "https://api.example.com/v1/charges",
            "-H",
            "Authorization: Bearer t",
            "--slow-header",
            "X-Test-Delay-Ms: 4000",
            "--json",
            "r.json",
        ])
        .unwrap_or_else(|_| panic!("valid"));
        assert_eq!(args.method, "POST");
        assert_eq!(args.body, b"{}");
        assert_eq!(args.slow_header, Some(("X-Test-Delay-Ms".into(), "4000".into())));
        assert!(args.headers.contains(&("Content-Type".into(), "application/json".into())));
        assert!(args.headers.contains(&("Authorization".into(), "Bearer t".into())));
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
            &["--url"][..],
        ] {
            assert!(matches!(parse_line(line), Err(Usage::Bad(_))), "{line:?}");
        }
        assert!(matches!(parse_line(&["--help"]), Err(Usage::Help)));
    }
}
