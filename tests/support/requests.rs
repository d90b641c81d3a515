//! Names and requests the tests send: unique keys, paths and credentials, and the standard
//! covered request.
//!
//! Every request carries an `Authorization` header, the test's own or `http`'s
//! [`DEFAULT_CREDENTIAL`] (added when the request is sent): the scope of a key is the caller's
//! credential, and the worker refuses a covered request without one (401
//! `missing-credential`). `Request::anonymous` sends none, on purpose.
//!
//! Keys, credentials and body markers are *secrets*: their unique parts are recorded, and
//! `logs::scan_for_leaks` fails if any shows up in a worker's log.

use super::http::Request;
use sha2::{Digest, Sha256};
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

/// The unique parts of every secret made so far (see [`secret`]).
static SECRETS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// A unique value that must never be logged: a key, a credential, a body marker.
pub fn secret(tag: &str) -> String {
    let value = unique(tag);
    let token = value.rsplit('-').next().unwrap_or_default().to_string();
    SECRETS.lock().unwrap_or_else(|e| e.into_inner()).push(token);
    register_secret(&value);
    value
}

/// The file where every secret of the suite's processes is written, one per line, for the
/// leak scan that `scripts/test.sh` runs over every instance's log once all tests are done
/// (`scripts/scan-e2e-logs.py`), whichever tests ran.
pub fn secrets_file() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-secrets.txt")
}

/// Records a value that must never appear in a worker's log (a token, a claim value, a
/// key), for the final leak scan. Values made by [`secret`] are recorded already.
pub fn register_secret(value: &str) {
    use std::io::Write;
    if value.is_empty() || value.contains('\n') {
        return;
    }
    if let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(secrets_file()) {
        // One write per line: appends from several threads and processes do not interleave.
        let _ = file.write_all(format!("{value}\n").as_bytes());
    }
}

/// The 24-hex-digit parts of every secret made in this process so far.
pub fn secret_tokens() -> Vec<String> {
    SECRETS.lock().unwrap_or_else(|e| e.into_inner()).clone()
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
