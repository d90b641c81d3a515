//! The repository's own scripts, tested through Node's test runner so that none is a test
//! that nothing runs: `scripts/release.test.mjs` (the release and deploy flow of
//! `scripts/release.mjs` against stand-ins for wrangler, the conformance checker and the
//! Analytics Engine SQL API on loopback).

use std::path::Path;

#[path = "javascript/node.rs"]
mod node;

#[test]
fn the_release_script_promotes_rolls_back_and_refuses_as_docs_deploy_says() {
    node::node_tests_pass("scripts/release.test.mjs");
}

/// The Node verifier docs/operations.md shows, run as written (`http-message-signatures`
/// from npm) against a signature this crate's signer makes now: it accepts it as
/// `protected`, then refuses it replayed, with another body, another key, or relabelled.
#[test]
fn the_documented_node_verifier_accepts_the_edges_signature_and_refuses_changes() {
    use idempotency_edge::core::edge_rules::message_signature::{sign, Covered};
    use idempotency_edge::core::edge_rules::origin_auth::Protection;
    use sha2::{Digest, Sha256};

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert!(
        root.join("node_modules/http-message-signatures").is_dir(),
        "node_modules/http-message-signatures is missing: run ./scripts/setup.sh (npm ci)"
    );
    let docs = std::fs::read_to_string(root.join("docs/operations.md")).expect("docs/operations.md");
    let after = docs.split("In Node, with `http-message-signatures`").nth(1).expect("the Node example");
    let example =
        after.split("```js\n").nth(1).and_then(|rest| rest.split("\n```").next()).expect("its code");

    let secret = "whsec-test-0123456789abcdef0123456789abcdef";
    let body = br#"{"amount":1000,"currency":"eur"}"#;
    let url = "https://payments.example.com/v1/charges?expand=customer";
    let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let covered = Covered {
        method: "POST",
        target_uri: url,
        key: Some(("idempotency-key", "order-42-charge")),
        protection: Protection::Protected,
        claimed_at: None,
        created,
        nonce: "0123456789abcdef0123456789abcdef",
    };
    let signed = sign(secret.as_bytes(), &covered, &Sha256::digest(body));
    let mut headers = serde_json::Map::new();
    for (name, value) in signed.pairs() {
        headers.insert(name.to_owned(), value.into());
    }
    headers.insert("idempotency-key".to_owned(), "order-42-charge".into());

    let driver = format!(
        "{example}\n\nconst headers = {headers};\nconst req = {{ method: \"POST\", url: {url:?}, headers }};\n\
         const body = Buffer.from({body:?});\n\
         const results = [await fromTheEdge(req, body), await fromTheEdge(req, body)];\n\
         seen.clear();\n\
         results.push(await fromTheEdge(req, Buffer.from('{{\"amount\":9999,\"currency\":\"eur\"}}')));\n\
         results.push(await fromTheEdge({{ ...req, headers: {{ ...headers, \"idempotency-key\": \"order-43-charge\" }} }}, body));\n\
         results.push(await fromTheEdge({{ ...req, headers: {{ ...headers, \"idempotency-edge-protection\": \"passed\" }} }}, body));\n\
         console.log(JSON.stringify(results));\n",
        headers = serde_json::Value::Object(headers),
        body = std::str::from_utf8(body).unwrap(),
    );
    // Beside the repository's node_modules, so that the import resolves as an origin's would.
    std::fs::create_dir_all(root.join("target")).unwrap();
    let file = root.join("target").join("node-verifier-example.mjs");
    std::fs::write(&file, driver).unwrap();
    let run = node::node()
        .current_dir(root)
        .arg(&file)
        .env("ORIGIN_AUTH_SECRET", secret)
        .output()
        .expect("run node");
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "the Node example failed: {out}\n{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(
        out.trim(),
        r#"["protected",null,null,null,null]"#,
        "accepted once as protected; refused replayed, altered, re-keyed and relabelled"
    );
}
