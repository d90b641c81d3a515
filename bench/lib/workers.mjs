// Starts a worker in local workerd through wrangler's programmatic API (the DevEnv behind
// `unstable_startWorker`) the way the benchmark needs it:
// - no DevTools inspector (with it, every subrequest costs ~2.5 ms of wrangler CPU);
// - no build step: a generated config whose `main` is the already-built file and which has
//   no [build] command;
// - the address of the user worker's own workerd socket, so load skips wrangler's proxy
//   worker (read from the `reloadComplete` event, which carries it to the proxy);
// - the pid of that workerd process, for CPU and memory figures.
import { fork } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { unstable_DevEnv } from "wrangler";
import { ourWorkerdPids, pidListeningOn } from "./proc.mjs";

/**
 * Writes a wrangler config for a benchmark target.
 * - `from`: a wrangler.toml to derive from (its [build] table is dropped, `main` replaced);
 * - or `base`: the whole config text.
 * `vars` are set in [vars] (replaced when present, appended otherwise).
 */
export function writeConfig(file, { from, base, main, vars = {} }) {
  let text = from ? fs.readFileSync(from, "utf8") : base;
  const lines = text.split("\n");
  const kept = [];
  let inBuild = false;
  for (const line of lines) {
    const header = line.match(/^\s*\[\[?([^\]]*)\]\]?\s*$/);
    if (header) inBuild = header[1].trim() === "build" || header[1].trim().startsWith("build.");
    if (inBuild) continue;
    kept.push(line);
  }
  text = kept.join("\n").replace(/^main\s*=.*$/m, `main = ${JSON.stringify(main)}`);
  if (!/^main\s*=/m.test(text)) text = `main = ${JSON.stringify(main)}\n` + text;
  if (Object.keys(vars).length && !/^\[vars\]\s*$/m.test(text)) text += "\n[vars]\n";
  for (const [name, value] of Object.entries(vars)) {
    const line = new RegExp(`^${name}\\s*=.*$`, "m");
    const assignment = `${name} = ${JSON.stringify(value)}`;
    text = line.test(text) ? text.replace(line, assignment) : text.replace(/^\[vars\]\s*$/m, `[vars]\n${assignment}`);
  }
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, text);
  return file;
}

/**
 * Starts one worker; resolves { name, host, port, proxyUrl, pid, dispose }. `logLevel`
 * (default "error") is wrangler's: "log" passes the worker's own lines on to this process's
 * console.
 */
export async function startWorker({ name, config, persistDir, registryDir, logLevel = "error" }) {
  fs.rmSync(persistDir, { recursive: true, force: true });
  fs.mkdirSync(persistDir, { recursive: true });
  const devEnv = new unstable_DevEnv();
  let resolveProxyData;
  const proxyDataReady = new Promise((resolve) => (resolveProxyData = resolve));
  const dispatch = devEnv.dispatch.bind(devEnv);
  devEnv.dispatch = (event) => {
    if (event.type === "reloadComplete") resolveProxyData(event.proxyData);
    return dispatch(event);
  };
  const before = new Set(ourWorkerdPids());
  const worker = await devEnv.startWorker({
    config,
    sendMetrics: false,
    dev: {
      inspector: false,
      watch: false,
      liveReload: false,
      logLevel,
      persist: persistDir,
      server: { hostname: "127.0.0.1", port: 0 },
      enableContainers: false,
      ...(registryDir ? { registry: registryDir } : {}),
    },
  });
  await worker.ready;
  const proxyData = await proxyDataReady;
  const proxyUrl = await worker.url;
  const port = Number(proxyData.userWorkerUrl.port);
  const host = proxyData.userWorkerUrl.hostname;
  const fresh = ourWorkerdPids().filter((pid) => !before.has(pid));
  const pid = pidListeningOn(port, fresh);
  if (!pid) throw new Error(`${name}: could not find the workerd process listening on ${host}:${port}`);
  const proxyPid = pidListeningOn(Number(proxyUrl.port), fresh);
  return { name, host, port, proxyUrl: String(proxyUrl), pid, proxyPid, dispose: () => worker.dispose() };
}

/**
 * `bench/origin.mjs` under `rootDir` in a node process of its own, once it listens:
 * `{ pid, port, ask(command), stop() }` (`ask` sends a control message, see the origin).
 */
export function startBenchOrigin(rootDir) {
  const child = fork(path.join(rootDir, "bench/origin.mjs"), [], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
  let nextId = 1;
  const pending = new Map();
  return new Promise((resolve) =>
    child.on("message", (m) => {
      if (m.ready) {
        resolve({
          pid: child.pid,
          port: m.port,
          ask: (command) =>
            new Promise((res) => {
              const id = nextId++;
              pending.set(id, res);
              child.send({ ...command, id });
            }),
          stop: () => (child.disconnect(), child.kill()),
        });
      } else if (pending.has(m.id)) {
        pending.get(m.id)(m);
        pending.delete(m.id);
      }
    }),
  );
}

/**
 * A copy of the worker built in `build` (index.js, index_bg.wasm, worker/shim.mjs), run with
 * `rootDir`'s wrangler.toml in front of a new `bench/origin.mjs`, its state under `work`:
 * what the counting tools (`bench.mjs wasm crossings`, `wasm first-code`) measure.
 * `stop()` ends the worker and the origin.
 */
export async function startCopyWithOrigin({ rootDir, build, name, work }) {
  const origin = await startBenchOrigin(rootDir);
  const config = writeConfig(path.join(work, "wrangler.toml"), {
    from: path.join(rootDir, "wrangler.toml"),
    main: path.join(build, "worker/shim.mjs"),
    vars: { ORIGIN_URL: `http://127.0.0.1:${origin.port}` },
  });
  const worker = await startWorker({ name, config, persistDir: path.join(work, "state") });
  return {
    worker,
    async stop() {
      await worker.dispose();
      origin.stop();
    },
  };
}
