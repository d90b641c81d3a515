//! Support for the end-to-end tests: a std-only HTTP/1.1 client, a controllable test
//! origin, and the harness that runs the built worker in `wrangler dev` (local workerd).

#![allow(dead_code)]

pub mod hostile;
pub mod http;
pub mod origin;
pub mod rng;
pub mod storage;
pub mod worker;

use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

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
