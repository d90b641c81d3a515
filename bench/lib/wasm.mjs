// A small reader of a .wasm file's sections, enough to say where its bytes go: section
// sizes, code size per crate (from the `name` section that wasm-bindgen keeps) and the
// largest functions, and the same module without the `name` section.
const SECTION_NAMES = {
  0: "custom", 1: "type", 2: "import", 3: "function", 4: "table", 5: "memory", 6: "global",
  7: "export", 8: "start", 9: "element", 10: "code", 11: "data", 12: "datacount", 13: "tag",
};

/** scripts/build.sh's wasm-opt features: `--all-features` would write imports V8 cannot read. */
export const WASM_OPT_FEATURES = [
  "mutable-globals", "sign-ext", "nontrapping-float-to-int", "bulk-memory", "multivalue",
  "reference-types", "exception-handling",
].map((feature) => `--enable-${feature}`);

/** scripts/build.sh's optimisation of the shipped Wasm (its `assume`, `-Oz` and `inline`). */
export const WASM_OPT_SHIPPED = ["--low-memory-unused", "-Oz", "--one-caller-inline-max-function-size", "20"];

/** A LEB128 reader over `buf` from `start`: `byte`, `u32`, `s32`, `name`, and `pos`. */
export function reader(buf, start = 0) {
  let p = start;
  // One LEB128 number, in arithmetic rather than 32-bit operators so that no width wraps;
  // a signed one is negative when its last byte's 0x40 bit is set.
  const leb = (signed) => {
    let result = 0;
    let shift = 0;
    let b;
    do {
      b = buf[p++];
      result += (b & 0x7f) * 2 ** shift;
      shift += 7;
    } while (b & 0x80);
    return signed && b & 0x40 ? result - 2 ** shift : result;
  };
  return {
    get pos() { return p; },
    set pos(v) { p = v; },
    byte() { return buf[p++]; },
    u32: () => leb(false),
    s32: () => leb(true),
    name() {
      const len = this.u32();
      const s = buf.subarray(p, p + len).toString("utf8");
      p += len;
      return s;
    },
  };
}

export function sections(buf) {
  const out = [];
  const r = reader(buf, 8);
  while (r.pos < buf.length) {
    const start = r.pos;
    const id = r.byte();
    const size = r.u32();
    const body = r.pos;
    let name = SECTION_NAMES[id] ?? `unknown-${id}`;
    if (id === 0) {
      const rr = reader(buf, body);
      name = `custom:${rr.name()}`;
    }
    out.push({ id, name, start, body, end: body + size, bytes: body + size - start });
    r.pos = body + size;
  }
  return out;
}

/** The module without its `name` custom section (what stripping debug names gives). */
export function withoutNameSection(buf) {
  const parts = [buf.subarray(0, 8)];
  for (const s of sections(buf)) if (s.name !== "custom:name") parts.push(buf.subarray(s.start, s.end));
  return Buffer.concat(parts);
}

/** The crate a function's name says it belongs to (a trait impl counts as the trait's crate). */
export function crateOf(name) {
  if (name.startsWith("__wbg_") || name.startsWith("__wbindgen")) return "(wasm-bindgen glue)";
  let n = name.replace(/\[[0-9a-f]+\]/g, "");
  const asTrait = n.match(/^<+(?:&|mut |dyn )*([A-Za-z_][A-Za-z0-9_]*)(::)?.*? as ([A-Za-z_][A-Za-z0-9_]*)/);
  if (asTrait) return asTrait[2] ? asTrait[1] : asTrait[3];
  n = n.replace(/^<+/, "").replace(/^(&|dyn |mut )+/, "");
  const m = n.match(/^([A-Za-z0-9_]+)::/);
  return m ? m[1] : "(other)";
}

/** Code bytes per crate and the largest functions, from the name section. */
export function codeBreakdown(buf) {
  const secs = sections(buf);
  let importedFunctions = 0;
  const imp = secs.find((s) => s.name === "import");
  if (imp) {
    const r = reader(buf, imp.body);
    const count = r.u32();
    for (let i = 0; i < count; i++) {
      r.name();
      r.name();
      const kind = r.byte();
      if (kind === 0) {
        r.u32();
        importedFunctions += 1;
      } else if (kind === 1) {
        r.byte();
        const flags = r.byte();
        r.u32();
        if (flags & 1) r.u32();
      } else if (kind === 2) {
        const flags = r.byte();
        r.u32();
        if (flags & 1) r.u32();
      } else if (kind === 3) {
        r.byte();
        r.byte();
      } else if (kind === 4) {
        r.byte();
        r.u32();
      }
    }
  }
  const names = new Map();
  const nameSec = secs.find((s) => s.name === "custom:name");
  if (nameSec) {
    const r = reader(buf, nameSec.body);
    r.name();
    while (r.pos < nameSec.end) {
      const sub = r.byte();
      const size = r.u32();
      const next = r.pos + size;
      if (sub === 1) {
        const count = r.u32();
        for (let i = 0; i < count; i++) {
          const idx = r.u32();
          names.set(idx, r.name());
        }
      }
      r.pos = next;
    }
  }
  const code = secs.find((s) => s.name === "code");
  const functions = [];
  if (code) {
    const r = reader(buf, code.body);
    const count = r.u32();
    for (let i = 0; i < count; i++) {
      const size = r.u32();
      const idx = importedFunctions + i;
      functions.push({ name: names.get(idx) ?? `func${idx}`, bytes: size });
      r.pos += size;
    }
  }
  const perCrate = {};
  for (const f of functions) perCrate[crateOf(f.name)] = (perCrate[crateOf(f.name)] ?? 0) + f.bytes;
  const crates = Object.entries(perCrate)
    .sort((a, b) => b[1] - a[1])
    .map(([crate, bytes]) => ({ crate, bytes }));
  const largest = [...functions].sort((a, b) => b.bytes - a.bytes).slice(0, 15);
  const all = functions;
  return { functions: functions.length, crates, largest, all };
}

/** Printable strings of at least `min` characters in the data section, by total size. */
export function dataStrings(buf, min = 24) {
  const data = sections(buf).find((s) => s.name === "data");
  if (!data) return { bytes: 0, stringBytes: 0 };
  const bytes = buf.subarray(data.body, data.end);
  let stringBytes = 0;
  let run = 0;
  const samples = [];
  for (let i = 0; i <= bytes.length; i++) {
    const c = bytes[i];
    if (i < bytes.length && c >= 0x20 && c < 0x7f) {
      run += 1;
      continue;
    }
    if (run >= min) {
      stringBytes += run;
      if (samples.length < 400) samples.push(bytes.subarray(i - run, i).toString("latin1"));
    }
    run = 0;
  }
  return { bytes: bytes.length, stringBytes, samples };
}
