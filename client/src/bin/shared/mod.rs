//! What both programs share (`idempotency-edge-send`, `idempotency-edge-check`; each
//! includes this module with `#[path]`): the endpoint and credential arguments, the HTTP
//! client built from them, where output goes, and the one exit-status table.
//!
//! Rules:
//! 1. One exit-status table ([`Exit`], [`EXIT_STATUS_HELP`]) for both programs, printed by
//!    both `--help` and quoted in docs/client.md: a script handles either program's status the
//!    same way.
//! 2. A credential can come from an environment variable (`--credential-env VAR`) or a file
//!    (`--credential-file FILE`), never only from the command line, where every user of the
//!    machine can read it (`ps`); `--credential-scheme Bearer` adds the scheme, so the
//!    variable can hold the bare token. A credential-looking `-H` still works, with a
//!    warning. No message ever shows a header value.
//! 3. `--json -` writes the JSON to stdout; what would have gone to stdout goes to stderr
//!    then, so that stdout is one JSON document.
//! 4. Bad usage (arguments clap refuses, an unreadable or invalid file, a credential
//!    variable that is not set) is 64, as sysexits' `EX_USAGE`; clap's own 2 would read as
//!    "retries ran out".

use std::fmt::Display;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Rule 1: the exit statuses of both programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(dead_code)] // each program uses its part of the table
pub enum Exit {
    /// send: a 2xx answer. check: every applicable check holds.
    Success,
    /// send: a final answer that is not a success (400, 422 key-reused, …). check: a check
    /// falls short.
    NotSuccess,
    /// send: retries ran out; the same key may be sent again later.
    GaveUp,
    /// send: the outcome is unknown; reconcile before anything else.
    Reconcile,
    /// send: a transport failure that retrying cannot fix.
    Transport,
    /// send: the worker accepted the operation as a job that had not finished by the poll
    /// deadline; poll later with the same key.
    StillPending,
    /// Bad usage (rule 4).
    Usage,
    /// The program itself failed (its async runtime did not start).
    Internal,
    /// The JSON could not be written.
    Output,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::NotSuccess => 1,
            Exit::GaveUp => 2,
            Exit::Reconcile => 3,
            Exit::Transport => 4,
            Exit::StillPending => 5,
            Exit::Usage => 64,
            Exit::Internal => 70,
            Exit::Output => 74,
        }
    }

    /// The name the JSON output gives the result.
    pub fn name(self) -> &'static str {
        match self {
            Exit::Success => "success",
            Exit::NotSuccess => "not-success",
            Exit::GaveUp => "gave-up",
            Exit::Reconcile => "reconciliation-needed",
            Exit::Transport => "transport-failure",
            Exit::StillPending => "still-pending",
            Exit::Usage => "usage",
            Exit::Internal => "internal",
            Exit::Output => "output",
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}

/// Rule 1, as both `--help` print it (and docs/client.md quotes it).
pub const EXIT_STATUS_HELP: &str = "\
Exit status (the same table for idempotency-edge-send and idempotency-edge-check):
  0   send: a 2xx answer                    check: every applicable check holds
  1   send: a final non-2xx answer          check: a check falls short
  2   send: retries ran out; the same key may be sent again later
  3   send: outcome unknown; reconcile with the payment system before anything else
  4   send: a transport failure that retrying cannot fix
  5   send: accepted as a job, still pending at the poll deadline; poll later, same key
  64  bad usage: arguments, an unreadable file, a credential variable not set
  70  internal error
  74  the JSON could not be written

Credentials: give them with --credential-env VAR or --credential-file FILE (the header
is --credential-header, default Authorization; --credential-scheme Bearer puts Bearer
before the value), not with -H: a command line is visible to every user of the machine.";

/// The arguments both programs take.
#[derive(clap::Args, Debug)]
pub struct Endpoint {
    /// The covered endpoint, an absolute http:// or https:// URL
    #[arg(long, value_name = "URL", value_parser = http_url)]
    pub url: String,

    /// A header for every request (repeatable); not for credentials, see --credential-env
    #[arg(short = 'H', long = "header", value_name = "'NAME: VALUE'", value_parser = HeaderLine)]
    pub headers: Vec<(String, String)>,

    /// Read the credential header's value from this environment variable
    #[arg(long, value_name = "VAR", conflicts_with = "credential_file")]
    pub credential_env: Option<String>,

    /// Read the credential header's value from this file (one line; a final newline is
    /// dropped)
    #[arg(long, value_name = "FILE")]
    pub credential_file: Option<PathBuf>,

    /// The header that carries the credential
    #[arg(long, value_name = "NAME", default_value = "Authorization", value_parser = header_name)]
    pub credential_header: String,

    /// An authentication scheme to put before the credential: `--credential-scheme Bearer`
    /// sends `Authorization: Bearer <the variable's or file's value>`
    #[arg(long, value_name = "SCHEME")]
    pub credential_scheme: Option<String>,

    /// Trust this PEM root certificate as well (a private CA: staging, wrangler dev over
    /// https); certificate checks stay on
    #[arg(long, value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,

    /// Write the result as JSON to FILE, or to stdout with `-` (the text then goes to
    /// stderr)
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<PathBuf>,
}

/// Headers whose value is a secret: given with -H, they earn a warning (rule 2).
const CREDENTIAL_HEADERS: [&str; 5] =
    ["authorization", "proxy-authorization", "cookie", "x-api-key", "api-key"];

impl Endpoint {
    /// The -H headers, then the credential header read from its variable or file.
    pub fn headers(&self) -> Result<Vec<(String, String)>, String> {
        let mut headers = self.headers.clone();
        if let Some(credential) = self.credential()? {
            headers.push(credential);
        }
        Ok(headers)
    }

    /// Rule 2: the credential from `--credential-env` or `--credential-file`, if given.
    fn credential(&self) -> Result<Option<(String, String)>, String> {
        let value = match (&self.credential_env, &self.credential_file) {
            (Some(var), _) => match std::env::var(var) {
                Ok(value) => value,
                Err(std::env::VarError::NotPresent) => {
                    return Err(format!("--credential-env: the environment variable {var} is not set"))
                }
                Err(std::env::VarError::NotUnicode(_)) => {
                    return Err(format!("--credential-env: {var} is not valid UTF-8"))
                }
            },
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("--credential-file: cannot read {}: {e}", path.display()))?;
                let line = text.strip_suffix('\n').unwrap_or(&text);
                let line = line.strip_suffix('\r').unwrap_or(line);
                if line.contains('\n') {
                    return Err(format!("--credential-file: {} holds more than one line", path.display()));
                }
                line.to_string()
            }
            (None, None) => return Ok(None),
        };
        if value.trim().is_empty() {
            return Err(format!("the credential for {} is empty", self.credential_header));
        }
        let value = match &self.credential_scheme {
            Some(scheme) => format!("{scheme} {value}"),
            None => value,
        };
        // The value is a secret: say what is wrong with it, never what it is.
        if http::HeaderValue::from_str(&value).is_err() {
            return Err(format!("the credential for {} is not a valid header value", self.credential_header));
        }
        Ok(Some((self.credential_header.clone(), value)))
    }

    /// Rule 2: a warning for each credential-looking -H (its name only).
    pub fn warnings(&self) -> Vec<String> {
        self.headers
            .iter()
            .filter(|(name, _)| CREDENTIAL_HEADERS.iter().any(|c| name.eq_ignore_ascii_case(c)))
            .map(|(name, _)| {
                format!(
                    "the {name} header is on the command line, where other users of this machine can read it; \
                     prefer --credential-env or --credential-file"
                )
            })
            .collect()
    }

    /// A reqwest client from `builder`, trusting `--ca-cert` as well.
    pub fn http_client(&self, mut builder: reqwest::ClientBuilder) -> Result<reqwest::Client, String> {
        if let Some(path) = &self.ca_cert {
            let pem = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let root = reqwest::Certificate::from_pem(&pem)
                .map_err(|e| format!("{} is not a PEM certificate: {e}", path.display()))?;
            builder = builder.tls_certs_merge([root]);
        }
        builder.build().map_err(|e| format!("cannot build the HTTP client: {e}"))
    }

    /// Where text goes (rule 3).
    pub fn out(&self) -> Out {
        Out { to_stderr: self.json.as_deref() == Some(Path::new("-")) }
    }

    /// Writes `value` to `--json` (a file, or stdout for `-`), if given.
    pub fn write_json(&self, value: &serde_json::Value) -> Result<(), String> {
        let Some(path) = &self.json else { return Ok(()) };
        let text =
            serde_json::to_string_pretty(value).map_err(|e| format!("cannot encode the JSON: {e}"))? + "\n";
        if path == Path::new("-") {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush())
        } else {
            std::fs::write(path, text)
        }
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
    }
}

/// Text output: stdout, or stderr when stdout carries the JSON (rule 3).
#[derive(Clone, Copy, Debug)]
pub struct Out {
    to_stderr: bool,
}

impl Out {
    pub fn line(&self, text: impl Display) {
        if self.to_stderr {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    }
}

/// Parses the command line; help and version go to stdout with 0, anything clap refuses to
/// stderr with 64 (rule 4).
pub fn parse<T: clap::Parser>() -> Result<T, ExitCode> {
    T::try_parse().map_err(|e| {
        use clap::error::ErrorKind;
        match e.kind() {
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                let _ = e.print();
                ExitCode::SUCCESS
            }
            _ => {
                let _ = e.print();
                Exit::Usage.into()
            }
        }
    })
}

/// Parses a header line with [`header_line`] for clap, whose own errors quote the value: a
/// header value may be a credential, so this parser's errors never do.
#[derive(Clone, Copy, Debug)]
pub struct HeaderLine;

impl clap::builder::TypedValueParser for HeaderLine {
    type Value = (String, String);

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Self::Value, clap::Error> {
        use clap::error::ErrorKind;
        let line = value.to_str().ok_or_else(|| {
            clap::Error::raw(ErrorKind::InvalidUtf8, "a header is not valid UTF-8\n").with_cmd(cmd)
        })?;
        header_line(line)
            .map_err(|why| clap::Error::raw(ErrorKind::ValueValidation, format!("{why}\n")).with_cmd(cmd))
    }
}

/// `Name: value`, both valid in HTTP; `Idempotency-Key` is refused: the programs set it.
pub fn header_line(line: &str) -> Result<(String, String), String> {
    let (name, value) = line.split_once(':').ok_or("a header is 'Name: value'; this one has no colon")?;
    let (name, value) = (header_name(name.trim())?, value.trim());
    if http::HeaderValue::from_str(value).is_err() {
        // The value may be a credential: name the header only.
        return Err(format!("the value of {name} is not a valid header value"));
    }
    Ok((name, value.to_string()))
}

/// A header name valid in HTTP, other than `Idempotency-Key`.
pub fn header_name(name: &str) -> Result<String, String> {
    if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Err(format!("{name:?} is not a valid header name"));
    }
    if name.eq_ignore_ascii_case("idempotency-key") {
        return Err("the Idempotency-Key header is the program's to set (send: --key or --id)".into());
    }
    Ok(name.to_string())
}

/// An absolute http:// or https:// URL.
pub fn http_url(url: &str) -> Result<String, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("not an absolute URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err("only http:// and https:// URLs are supported".into());
    }
    Ok(url.to_string())
}

/// An HTTP method, upper-cased.
pub fn method(method: &str) -> Result<String, String> {
    let method = method.to_ascii_uppercase();
    http::Method::from_bytes(method.as_bytes()).map_err(|_| format!("{method:?} is not an HTTP method"))?;
    Ok(method)
}

/// An error and its causes on one line (reqwest's own message rarely names the cause).
#[allow(dead_code)] // the checker describes reqwest errors its own way
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        endpoint: Endpoint,
    }

    fn parse_line(line: &[&str]) -> Result<Endpoint, clap::Error> {
        Cli::try_parse_from(std::iter::once("prog").chain(line.iter().copied())).map(|c| c.endpoint)
    }

    #[test]
    fn the_exit_table_is_the_one_in_the_help() {
        for exit in [
            Exit::Success,
            Exit::NotSuccess,
            Exit::GaveUp,
            Exit::Reconcile,
            Exit::Transport,
            Exit::StillPending,
            Exit::Usage,
            Exit::Internal,
            Exit::Output,
        ] {
            let row = format!("\n  {:<3} ", exit.code());
            assert!(EXIT_STATUS_HELP.contains(&row), "{exit:?} ({}) is in the help table", exit.code());
        }
    }

    #[test]
    fn credentials_come_from_a_variable_or_a_file() {
        let dir = std::env::temp_dir().join(format!("shared-args-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "from-a-file\n").unwrap();
        let e = parse_line(&[
            "--url",
            "https://x/y",
            "--credential-file",
            file.to_str().unwrap(),
            "--credential-scheme",
            "Bearer",
        ])
        .unwrap();
        assert_eq!(e.headers().unwrap(), [("Authorization".to_string(), "Bearer from-a-file".to_string())]);

        std::env::set_var("SHARED_ARGS_TEST_TOKEN", "sk_test_123");
        let e = parse_line(&[
            "--url",
            "https://x/y",
            "-H",
            "X-Trace: 1",
            "--credential-env",
            "SHARED_ARGS_TEST_TOKEN",
            "--credential-header",
            "X-Api-Key",
        ])
        .unwrap();
        assert_eq!(
            e.headers().unwrap(),
            [("X-Trace".into(), "1".into()), ("X-Api-Key".to_string(), "sk_test_123".to_string())]
        );
        assert!(e.warnings().is_empty());

        let unset =
            parse_line(&["--url", "https://x/y", "--credential-env", "SHARED_ARGS_TEST_UNSET"]).unwrap();
        assert!(unset.headers().unwrap_err().contains("SHARED_ARGS_TEST_UNSET is not set"));
        std::fs::write(&file, "line one\nline two\n").unwrap();
        let two = parse_line(&["--url", "https://x/y", "--credential-file", file.to_str().unwrap()]).unwrap();
        assert!(two.headers().is_err());
        std::fs::write(&file, "bad\x01value").unwrap();
        let bad = parse_line(&["--url", "https://x/y", "--credential-file", file.to_str().unwrap()]).unwrap();
        let why = bad.headers().unwrap_err();
        assert!(!why.contains("bad"), "the value is never shown: {why}");
        assert!(
            parse_line(&["--url", "https://x/y", "--credential-env", "A", "--credential-file", "f"]).is_err()
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_credential_on_the_command_line_is_warned_about_by_name() {
        let e = parse_line(&["--url", "https://x/y", "-H", "authorization: Bearer secret-x"]).unwrap();
        let warnings = e.warnings();
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("authorization") && !warnings[0].contains("secret-x"), "{warnings:?}");
    }

    #[test]
    fn bad_values_are_refused() {
        for line in [
            &["--url", "ftp://x/y"][..],
            &["--url", "not a url"][..],
            &["--url", "https://x/y", "-H", "no colon"][..],
            &["--url", "https://x/y", "-H", "Idempotency-Key: k"][..],
            &["--url", "https://x/y", "-H", "Bad Name: v"][..],
            &["--url", "https://x/y", "--credential-header", "Idempotency-Key", "--credential-env", "A"][..],
            &["--url"][..],
            &[][..],
        ] {
            assert!(parse_line(line).is_err(), "{line:?}");
        }
        let e = parse_line(&["--url", "https://x/y", "-H", "X-A: b\u{1}c"]).unwrap_err().to_string();
        assert!(!e.contains("b\u{1}c"), "{e}");
    }

    #[test]
    fn json_to_stdout_sends_the_text_to_stderr() {
        assert!(parse_line(&["--url", "https://x/y", "--json", "-"]).unwrap().out().to_stderr);
        assert!(!parse_line(&["--url", "https://x/y", "--json", "r.json"]).unwrap().out().to_stderr);
        assert!(!parse_line(&["--url", "https://x/y"]).unwrap().out().to_stderr);
    }
}
