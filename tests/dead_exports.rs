//! `scripts/dead-exports.mjs`, the build step that drops the exports of wasm-bindgen classes no
//! JavaScript can hold: run on a made-up glue and a made-up Wasm with one exported function per
//! name, it must drop exactly a dead class's own exports, keep every class JavaScript can reach
//! (a constructor, a static member, `__wrap`, a name the entry uses) and every export something
//! else calls, and write a module that still compiles.

use std::path::{Path, PathBuf};

#[path = "javascript/node.rs"]
mod node;
use node::node;

const GLUE: &str = r#"import source wasmModule from "./index_bg.wasm";

export class Unmade {
    free() {
        wasm.__wbg_unmade_free(ptr, 0);
    }
    get size() {
        const ret = wasm.__wbg_get_unmade_size(this.__wbg_ptr);
        wasm.__wbindgen_free(ret[0], ret[1], 1);
        return ret;
    }
    pull(controller) {
        return wasm.unmade_pull(this.__wbg_ptr, controller);
    }
    shared() {
        return wasm.unmade_shared(this.__wbg_ptr);
    }
}
if (Symbol.dispose) Unmade.prototype[Symbol.dispose] = Unmade.prototype.free;

class Wrapped {
    static __wrap(ptr) {
        const obj = Object.create(Wrapped.prototype);
        return obj;
    }
    pull(controller) {
        return wasm.wrapped_pull(this.__wbg_ptr, controller);
    }
}

export class Built {
    constructor(state) {
        const ret = wasm.built_new(state);
    }
    fetch(req) {
        return wasm.built_fetch(this.__wbg_ptr, req);
    }
}

export class Factory {
    static make() {
        return wasm.factory_make();
    }
    free() {
        wasm.__wbg_factory_free(ptr, 0);
    }
}

export class Named {
    free() {
        wasm.__wbg_named_free(ptr, 0);
    }
}

export function fetch(req) {
    return wasm.fetch(req, wasm.unmade_shared(0));
}

const UnmadeFinalization = (typeof FinalizationRegistry === 'undefined')
    ? { register: () => {}, unregister: () => {} }
    : new FinalizationRegistry(({ ptr, instance }) => {
    if (instance === __wbg_instance_id) wasm.__wbg_unmade_free(ptr, 1);
});
"#;

const ENTRY: &str = "import * as wasm from \"./index.js\";\nexport const named = wasm.Named;\n";

const EXPORTS: &[&str] = &[
    "__wbg_unmade_free",
    "__wbg_get_unmade_size",
    "unmade_pull",
    "unmade_shared",
    "__wbindgen_free",
    "wrapped_pull",
    "built_new",
    "built_fetch",
    "factory_make",
    "__wbg_factory_free",
    "__wbg_named_free",
    "fetch",
];

/// A module with one empty function, exported under each of `names`.
fn module_exporting(names: &[&str]) -> Vec<u8> {
    fn section(id: u8, body: Vec<u8>) -> Vec<u8> {
        let mut out = vec![id];
        leb128(&mut out, body.len());
        out.extend(body);
        out
    }
    fn leb128(out: &mut Vec<u8>, mut value: usize) {
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            out.push(if value == 0 { byte } else { byte | 0x80 });
            if value == 0 {
                break;
            }
        }
    }
    let mut wasm = b"\0asm\x01\0\0\0".to_vec();
    wasm.extend(section(1, vec![1, 0x60, 0, 0]));
    wasm.extend(section(3, vec![1, 0]));
    let mut exports = Vec::new();
    leb128(&mut exports, names.len());
    for name in names {
        leb128(&mut exports, name.len());
        exports.extend(name.as_bytes());
        exports.extend([0, 0]);
    }
    wasm.extend(section(7, exports));
    wasm.extend(section(10, vec![1, 2, 0, 0x0b]));
    wasm
}

/// The export names of `wasm`, as Node's WebAssembly reads them (which also proves it valid).
fn exports_of(wasm: &Path) -> Vec<String> {
    let script = "const m = new WebAssembly.Module(require('fs').readFileSync(process.argv[1]));\
                  console.log(WebAssembly.Module.exports(m).map((e) => e.name).join('\\n'));";
    let out = node().args(["-e", script]).arg(wasm).output().expect("run node");
    assert!(out.status.success(), "node could not read the written module: {out:?}");
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_owned).collect()
}

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("idempotency-edge-dead-exports-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn only_the_own_exports_of_a_class_no_javascript_can_hold_are_dropped() {
    let dir = scratch();
    let (glue, entry, input, output) =
        (dir.join("index.js"), dir.join("entry.mjs"), dir.join("in.wasm"), dir.join("out.wasm"));
    std::fs::write(&glue, GLUE).unwrap();
    std::fs::write(&entry, ENTRY).unwrap();
    std::fs::write(&input, module_exporting(EXPORTS)).unwrap();
    assert_eq!(exports_of(&input), EXPORTS, "the made-up module reads back whole");

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/dead-exports.mjs");
    let run = node().arg(script).args([&glue, &entry, &input, &output]).output().expect("run node");
    assert!(run.status.success(), "{run:?}");
    let report = String::from_utf8_lossy(&run.stdout);
    assert!(report.contains("3 exports of Unmade dropped"), "{report}");

    let kept = exports_of(&output);
    let expected: Vec<&str> = EXPORTS
        .iter()
        .copied()
        // `Unmade` has no way in: its free and getter go. Its method `shared` is also called by
        // `fetch`, and `__wbindgen_free` is not its own: both stay.
        .filter(|name| !matches!(*name, "__wbg_unmade_free" | "__wbg_get_unmade_size" | "unmade_pull"))
        .collect();
    assert_eq!(kept, expected);
    let _ = std::fs::remove_dir_all(&dir);
}
