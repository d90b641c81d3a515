//! Names and requests the tests send: unique keys, paths and credentials, and the standard
//! covered request.
//!
//! Every request carries an `Authorization` header, the test's own or `http`'s
//! [`DEFAULT_CREDENTIAL`] (added when the request is sent): the scope of a key is the caller's
//! credential, and the worker refuses a covered request without one (401
//! `missing-credential`). `Request::anonymous` sends none, on purpose.
//!
//! Keys, credentials and body markers are *secrets*: they are recorded, and
//! `logs::scan_for_leaks` (and the suite's final scan, `scripts/scan-e2e-logs.py`) fails if
//! any shows up in a worker's log. Every value a request carries in a key or credential
//! header ([`SECRET_HEADERS`]) is recorded when it is sent (`http::Request::send`), however
//! the test made it: with [`secret`], [`unique`] or by hand.

use super::http::Request;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

pub use super::http::DEFAULT_CREDENTIAL;

/// The body of the standard covered request.
pub const PAYMENT_BODY: &str = r#"{"amount":1000,"currency":"eur"}"#;

/// A value unique to this call: `<tag>-<24 hex>`, from the time, a process-wide counter,
/// the thread id and the process id. Used for keys and paths, so tests never collide.
pub fn unique(tag: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let mut hasher = Sha256::new();
    hasher.update(nanos.to_le_bytes());
    hasher.update(n.to_le_bytes());
    hasher.update(format!("{:?}", std::thread::current().id()).as_bytes());
    hasher.update(std::process::id().to_le_bytes());
    let digest = hasher.finalize();
    let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
    format!("{tag}-{hex}")
}

/// The headers whose values are keys or credentials (names in lowercase): every value sent
/// under one of them is a secret ([`register_sent_header`]).
pub const SECRET_HEADERS: &[&str] =
    &["idempotency-key", "authorization", "proxy-authorization", "x-api-key", "cookie"];

/// Every secret recorded in this process so far: the values, and their unique parts.
struct Secrets {
    values: BTreeSet<String>,
    /// The 24-hex-digit part of each value made by [`unique`] (see [`unique_tails`]).
    tokens: BTreeSet<String>,
    /// The values with no such part, of at least [`MIN_PLAIN_SECRET`] bytes.
    plain: BTreeSet<String>,
}

static SECRETS: Mutex<Secrets> =
    Mutex::new(Secrets { values: BTreeSet::new(), tokens: BTreeSet::new(), plain: BTreeSet::new() });

/// A recorded value with no unique part is looked for whole, when it is at least this
/// long: a shorter one (`k1`, `.`) would be found in any log by chance.
pub const MIN_PLAIN_SECRET: usize = 8;

/// A unique value that must never be logged: a key, a credential, a body marker.
pub fn secret(tag: &str) -> String {
    let value = unique(tag);
    register_secret(&value);
    value
}

/// Records the value of a header a request is about to carry, when the header is one of
/// [`SECRET_HEADERS`]: keys and credentials are secrets whoever made them.
pub fn register_sent_header(name: &str, value: &[u8]) {
    if SECRET_HEADERS.iter().any(|secret| name.eq_ignore_ascii_case(secret)) {
        if let Ok(value) = std::str::from_utf8(value) {
            register_secret(value.trim());
        }
    }
}

/// Every run of exactly 24 lowercase hex digits after a `-` in `text`: the unique part of a
/// value made by [`unique`] (a log that printed half a key still leaked it).
pub fn unique_tails(text: &str) -> BTreeSet<&str> {
    let bytes = text.as_bytes();
    let is_hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    let mut out = BTreeSet::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'-' {
            let run = bytes[i + 1..].iter().take_while(|&&b| is_hex(b)).count();
            if run == 24 {
                out.insert(&text[i + 1..i + 25]);
            }
            i += run.max(1);
        } else {
            i += 1;
        }
    }
    out
}

/// The file where every secret of the suite's processes is written, one per line, for the
/// leak scan that `scripts/test.sh` runs over every instance's log once all tests are done
/// (`scripts/scan-e2e-logs.py`), whichever tests ran.
pub fn secrets_file() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-secrets.txt")
}

/// Records a value that must never appear in a worker's log (a token, a claim value, a
/// key), for this process's scans and the final leak scan. Values made by [`secret`], and
/// the values of [`SECRET_HEADERS`] a request sends, are recorded already.
pub fn register_secret(value: &str) {
    use std::io::Write;
    // One value a line: a value with a control character (a hostile key) cannot be written
    // as one, and is never printed whole by anyone anyway.
    if value.is_empty() || value.chars().any(char::is_control) {
        return;
    }
    {
        let mut secrets = SECRETS.lock().unwrap_or_else(|e| e.into_inner());
        if !secrets.values.insert(value.to_owned()) {
            return;
        }
        let tails: Vec<String> = unique_tails(value).into_iter().map(str::to_owned).collect();
        if tails.is_empty() {
            if value.len() >= MIN_PLAIN_SECRET {
                secrets.plain.insert(value.to_owned());
            }
        } else {
            secrets.tokens.extend(tails);
        }
    }
    if let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(secrets_file()) {
        // One write per line: appends from several threads and processes do not interleave.
        let _ = file.write_all(format!("{value}\n").as_bytes());
    }
}

/// The 24-hex-digit parts of every secret recorded in this process so far.
pub fn secret_tokens() -> Vec<String> {
    SECRETS.lock().unwrap_or_else(|e| e.into_inner()).tokens.iter().cloned().collect()
}

/// Every secret recorded in this process so far that has no unique part and is at least
/// [`MIN_PLAIN_SECRET`] bytes long (a JWT, an API key, a key spelt by hand): looked for whole.
pub fn plain_secrets() -> Vec<String> {
    SECRETS.lock().unwrap_or_else(|e| e.into_inner()).plain.iter().cloned().collect()
}

/// A new idempotency key (a secret).
pub fn new_key() -> String {
    secret("key")
}

/// A new credential, `Bearer <secret>`.
pub fn new_credential(tag: &str) -> String {
    format!("Bearer {}", secret(tag))
}

/// A new payment path.
pub fn new_path() -> String {
    format!("/v1/payments/{}", unique("p"))
}

/// A request from the standard caller (with its `Authorization`).
pub fn request(method: &str, path: &str) -> Request {
    Request::new(method, path).header("Authorization", DEFAULT_CREDENTIAL)
}

/// The standard covered request: `POST path` with this key and [`PAYMENT_BODY`].
pub fn payment(path: &str, key: &str) -> Request {
    covered("POST", path, key, PAYMENT_BODY)
}

/// A covered request with this method, key and JSON body.
pub fn covered(method: &str, path: &str, key: &str, json: &str) -> Request {
    request(method, path).header("Idempotency-Key", key).json(json)
}
