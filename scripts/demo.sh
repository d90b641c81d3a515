#!/usr/bin/env bash
# Runs the worker locally (wrangler dev, local Durable Objects) in front of the demo payment
# origin (demo/origin.py), both on loopback. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh

WORKER_PORT=${WORKER_PORT:-8787}
ORIGIN_PORT=${ORIGIN_PORT:-8788}
python3 demo/origin.py "$ORIGIN_PORT" &
origin_pid=$!
trap 'kill $origin_pid 2>/dev/null' EXIT
sleep 0.5
if ! kill -0 "$origin_pid" 2>/dev/null; then
  echo "demo: the demo origin could not start on port $ORIGIN_PORT (set ORIGIN_PORT to another port)" >&2
  exit 1
fi

cat <<EOT

  idempotency-edge on http://127.0.0.1:$WORKER_PORT, in front of the demo origin on :$ORIGIN_PORT.
  In another terminal, charge once and retry with the same key:

    curl -i -X POST http://127.0.0.1:$WORKER_PORT/v1/charges \\
      -H 'Authorization: Bearer sk_test_demo' \\
      -H 'Idempotency-Key: order-42-charge' -H 'content-type: application/json' \\
      -d '{"amount": 1000, "currency": "eur"}'

  The retry answers with the same charge and 'idempotent-replayed: true'; the origin logs one
  execution. Keys are scoped by caller: without an Authorization header the worker answers
  401 missing-credential. Then look at the ledger: curl http://127.0.0.1:$WORKER_PORT/v1/ledger

  Or run the scripted walkthrough (first charge and replay, 10 concurrent duplicates, a lost
  reply, a mismatched payload, a dropped reply reconciled by lookup, the ledger):
  python3 demo/walkthrough.py http://127.0.0.1:$WORKER_PORT

EOT
# The demo origin offers a lookup, so /v1/charges reconciles unknown outcomes
# (reconcile_url). That stores each key's lookup sealed, which needs a storage key: one is
# made for this demo's state on its first run and kept beside it (never a production key:
# production keys are secrets, `wrangler secret put STORAGE_ENCRYPTION_KEYS`).
mkdir -p .wrangler/demo-state
storage_keys_file=.wrangler/demo-state/demo-storage-keys.json
if [[ ! -s $storage_keys_file ]]; then
  python3 -c 'import base64, json, os; print(json.dumps([{"id": "demo", "key": base64.b64encode(os.urandom(32)).decode()}]))' \
    >"$storage_keys_file"
fi
routes='[{"pattern":"/v1/charges","reconcile_url":"http://127.0.0.1:'"$ORIGIN_PORT"'/v1/charges?idempotency_key={key}"}]'
WRANGLER_SEND_METRICS=false CLOUDFLARE_CF_FETCH_ENABLED=false \
  node_modules/.bin/wrangler dev --ip 127.0.0.1 --port "$WORKER_PORT" \
  --persist-to .wrangler/demo-state --show-interactive-dev-session=false \
  --var "ORIGIN_URL:http://127.0.0.1:$ORIGIN_PORT" \
  --var "IDEMPOTENCY_ROUTES:$routes" \
  --var "STORAGE_ENCRYPTION_KEYS:$(cat "$storage_keys_file")"
