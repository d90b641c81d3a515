// The one benchmark command (bench/bench.mjs): every sub-command names a module that exists,
// arguments reach it, and help is printed for what is not a command.
import test from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import { COMMANDS, resolve } from "./bench.mjs";

test("every command and sub-command names a module of bench/lib/commands", () => {
  const modules = Object.values(COMMANDS).flatMap((spec) => (Array.isArray(spec) ? [spec] : Object.values(spec)));
  assert.ok(modules.length >= 9);
  for (const [file] of modules) assert.ok(fs.existsSync(new URL(`./lib/commands/${file}`, import.meta.url)), file);
  for (const name of ["run", "ab", "cold", "cost", "profile"]) assert.ok(name in COMMANDS, name);
});

test("a command gets the arguments after its name, a sub-command those after its own", () => {
  const run = resolve(["run", "--quick", "--origin-ms", "300"]);
  assert.match(run.module, /lib\/commands\/run\.mjs$/);
  assert.deepEqual(run.args, ["--quick", "--origin-ms", "300"]);
  const cold = resolve(["profile", "cold", "build"]);
  assert.match(cold.module, /lib\/commands\/profile-cold\.mjs$/);
  assert.deepEqual(cold.args, ["build"]);
});

test("help for no command, an unknown one, a missing sub-command or --help; never a run", () => {
  assert.equal(resolve([]).ok, true);
  assert.match(resolve(["help", "cost"]).help, /--origin-ms/);
  assert.equal(resolve(["bogus"]).ok, false);
  assert.equal(resolve(["wasm"]).ok, false);
  assert.match(resolve(["wasm"]).help, /wasm floor/);
  assert.equal(resolve(["ab", "--help"]).module, undefined);
});
