//! The leak and panic scan of every instance the suite started, once all the tests that
//! use instances are done. libtest starts tests in name order, so this one (in the module
//! that sorts last) starts after every other; it then waits for the ones still running.
//!
//! For each instance still running, a request that the worker answers itself (a covered
//! request without a key) must add a decision line to the log first: everything printed
//! before it is then in the file. The log must hold no secret made by the tests (keys,
//! credentials, body markers), no value of a secret variable (`ADMIN_TOKEN`), and no sign
//! of a panic.

use std::time::Duration;

use crate::support::logs;
use crate::support::origin::Origin;
use crate::support::requests::{covered, new_credential, new_key, new_path, payment, secret};
use crate::support::worker::{instances, wait_for_other_tests, Readiness, Worker, WorkerConfig};

#[test]
fn every_instance_log_is_free_of_secrets_and_panics() {
    assert!(
        wait_for_other_tests(Duration::from_secs(1800)),
        "the other tests did not finish within 30 minutes"
    );
    // Run on its own, it starts an instance and sends it what could leak, so that the scan
    // reads a log with something in it.
    let own = if instances().is_empty() { Some(exercised_instance()) } else { None };
    let mut failures = Vec::new();
    for instance in instances() {
        logs::flush_recorded(&instance);
        let secrets: Vec<&str> = instance.secrets.iter().map(String::as_str).collect();
        if let Err(e) = logs::scan_log(&instance.name, &instance.log, &instance.dir, &secrets) {
            failures.push(e);
        }
    }
    drop(own);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn exercised_instance() -> (Worker, Origin) {
    let origin = Origin::start();
    let vars =
        vec![("ORIGIN_URL".to_string(), origin.url()), ("ADMIN_TOKEN".to_string(), secret("admin-token"))];
    let w = Worker::start(WorkerConfig { name: "scan".into(), vars, readiness: Readiness::OriginAnswers })
        .unwrap_or_else(|e| panic!("{e}"));
    let key = new_key();
    let path = new_path();
    let marker = secret("body");
    let req = covered("POST", &path, &key, &format!(r#"{{"note":"{marker}"}}"#))
        .set_header("Authorization", new_credential("caller"));
    w.send(&req);
    w.send(&req);
    w.send(&covered("POST", &path, &key, "{}"));
    w.send(&payment(&new_path(), &new_key()).header("x-test-reset", "1"));
    (w, origin)
}
