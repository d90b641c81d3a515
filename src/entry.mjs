// The Worker's JavaScript entry module: what workerd calls, handed on to what the Rust crate
// exports through wasm-bindgen (`worker`'s `#[event(fetch)]` in `runtime::entry`, and the
// `KeyObject` of its `#[durable_object]` in `runtime::object`). scripts/build.sh bundles it
// with wasm-bindgen's output into build/index.js. It decides nothing. What stays JavaScript,
// each because the platform requires it and workers-rs cannot express it:
//
// 1. The module's shape. workerd finds the Worker as the default export (a
//    `WorkerEntrypoint` class) and the Durable Object as an exported class of its name;
//    wasm-bindgen's output has neither, which is why worker-build writes a `shim.js` too.
//    Ours has plain classes with direct calls, not that shim's per-call `Proxy` objects.
// 2. Recovery after a trap. The release build aborts on panic, which traps as a
//    `WebAssembly.RuntimeError` and leaves the instance's memory unusable. The panic hook
//    (`worker`'s `init`) sets `criticalError` on the shared init state; the next call here
//    resets the instance (wasm-bindgen's `--experimental-reset-state-function`), whose start
//    function bumps `instanceId`. A Durable Object whose Rust half belongs to an older
//    instance builds a new one, which starts empty and reads its key's record from storage
//    on its first request: the object holds nothing in memory that storage does not also
//    hold (`core::key_state`), so a reset loses live waiters but never a claim.
// 3. Every call in flight rejected after a trap, which worker-build's shim does not do. A
//    trap inside a Rust future leaves that call's promise unsettled for ever: the future is
//    polled from a microtask, and the trap ends the microtask, not the promise. An object
//    call left so would hold its caller until the client gave up, and workerd does not see
//    the hang while the Worker awaits the object. So every call in flight is rejected with
//    the trap (the Worker then answers as for any failed object call: 503, nothing
//    forwarded), and so is every other call into the same instance.
// 4. The replay's hot path: the object answers a replay it can give at once without a Rust
//    future (`KeyObject.replay`), and this module awaits the drain of its body; the `fetch`
//    that `#[durable_object]` generates is always one.
import { WorkerEntrypoint } from "cloudflare:workers";
import * as wasm from "./index.js";

const initState = wasm.__worker_init_state();

function resetAfterTrap() {
  if (initState.criticalError) {
    console.log("idempotency-edge: resetting the Wasm instance after a trap");
    wasm.__wbg_reset_state();
    initState.criticalError = false;
  }
}

// The rejections of the calls in flight into the current instance.
const callsInFlight = new Set();

// The trap last noted: one trap reaches noteTrap twice (the isolate's error event, and the
// rejected call's own catch), and the second must not reset the instance again, nor reject
// calls made since into the new one.
let lastTrap = null;

function noteTrap(error) {
  if (error instanceof WebAssembly.RuntimeError && error !== lastTrap) {
    lastTrap = error;
    console.error("idempotency-edge: Wasm trap", error);
    initState.criticalError = true;
    for (const reject of callsInFlight) reject(error);
    callsInFlight.clear();
  }
}

// `call`'s promise, or the trap that ends it first.
async function untilSettledOrTrapped(call) {
  let reject;
  const trapped = new Promise((_, rejectCall) => {
    reject = rejectCall;
  });
  callsInFlight.add(reject);
  try {
    return await Promise.race([call(), trapped]);
  } catch (error) {
    noteTrap(error);
    throw error;
  } finally {
    callsInFlight.delete(reject);
  }
}

// A trap inside a promise callback reaches no caller below; the isolate reports it here.
addEventListener("error", (event) => noteTrap(event.error));

export default class Worker extends WorkerEntrypoint {
  fetch(request) {
    resetAfterTrap();
    return untilSettledOrTrapped(() => wasm.fetch(request, this.env, this.ctx));
  }
}

// `answer` once `drained` has settled (it never rejects).
async function drainedThen([answer, drained]) {
  await drained;
  return answer;
}

export class KeyObject {
  #state;
  #env;
  #inner;
  #instanceId;

  constructor(state, env) {
    this.#state = state;
    this.#env = env;
    resetAfterTrap();
    this.#build();
  }

  #build() {
    this.#inner = new wasm.KeyObject(this.#state, this.#env);
    this.#instanceId = initState.instanceId;
  }

  #current() {
    resetAfterTrap();
    if (this.#instanceId !== initState.instanceId) this.#build();
    return this.#inner;
  }

  // A replay the object can give at once (`KeyObject::replay`) is answered once its body is
  // drained; any other request is the Rust `fetch`'s, whole.
  fetch(request) {
    const inner = this.#current();
    return untilSettledOrTrapped(() => {
      const replayed = inner.replay(request);
      return replayed === undefined ? inner.fetch(request) : drainedThen(replayed);
    });
  }

  // A trapped alarm is rejected like any failed alarm: the platform retries it.
  alarm() {
    const inner = this.#current();
    return untilSettledOrTrapped(() => inner.alarm());
  }
}
