//! Reads the Durable Object storage that `wrangler dev --persist-to` leaves on disk, from
//! the outside, with Python's `sqlite3` module (Python 3 is a prerequisite of the project).
//!
//! Layout (wrangler 4.86, local mode): `<persist>/v3/do/<script>-<Class>/<object id>.sqlite`
//! is one object's own SQLite database (with `-wal` and `-shm` beside it while workerd has
//! it open), and `metadata.sqlite` in the same directory holds the pending alarms
//! (`_cf_ALARM`, one row per object with an alarm). An object's database holds its tables
//! (the key-value store's `_cf_KV`, whose `record` value is the key's record serialized as
//! V8 serializes a `Uint8Array`; a large answer's `idempotency_chunk`), workerd's
//! `_cf_METADATA` (alarm bookkeeping) and miniflare's `__miniflare_do_name` (the name the
//! object was addressed by); `deleteAll()` drops them all and leaves an empty 4 KiB file.
//! The record's legacy layout, which the worker reads after the key-value value
//! (`runtime::key_storage`), is the one row of `idempotency_record`. `stored_record.py` reads
//! and writes either.
//!
//! Each database is copied (with its WAL) to a temporary directory before it is read, so
//! the running workerd is never disturbed and never locked out.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One object's database.
#[derive(Clone, Debug)]
pub struct ObjectFile {
    /// The object id (the file name without `.sqlite`): a hex digest, never a name.
    pub id: String,
    /// Every table with its row count.
    pub tables: Vec<(String, u64)>,
    /// The name the object was addressed by (`__miniflare_do_name`), while stored.
    pub name: Option<String>,
}

impl ObjectFile {
    /// Rows over every table.
    pub fn rows(&self) -> u64 {
        self.tables.iter().map(|(_, rows)| rows).sum()
    }

    /// No row in any table: nothing of the object is stored any more.
    pub fn is_empty(&self) -> bool {
        self.rows() == 0
    }

    /// Stored records: rows of the worker's own record table, and values of the key-value
    /// table (where the worker stores nothing but its record).
    pub fn records(&self) -> u64 {
        self.rows_of("idempotency_record") + self.rows_of("_cf_KV")
    }

    /// Rows of one table (0 where it does not exist).
    pub fn rows_of(&self, table: &str) -> u64 {
        self.tables.iter().filter(|(name, _)| name == table).map(|(_, rows)| rows).sum()
    }
}

/// Everything stored for the key objects of one persist directory.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub objects: Vec<ObjectFile>,
    /// Pending alarms (rows of `_cf_ALARM` in every `metadata.sqlite`).
    pub alarms: u64,
}

impl Snapshot {
    pub fn non_empty(&self) -> Vec<&ObjectFile> {
        self.objects.iter().filter(|o| !o.is_empty()).collect()
    }

    pub fn records(&self) -> u64 {
        self.objects.iter().map(ObjectFile::records).sum()
    }

    /// One line per object that still stores something, for failure messages.
    pub fn describe(&self) -> String {
        let mut lines =
            vec![format!("{} object file(s), {} pending alarm(s)", self.objects.len(), self.alarms)];
        for object in self.non_empty() {
            lines.push(format!("  {}: {:?}", &object.id[..16.min(object.id.len())], object.tables));
        }
        lines.join("\n")
    }
}

const INSPECT: &str = r#"
import glob, json, os, shutil, sqlite3, sys, tempfile
root = sys.argv[1]
objects, alarms = [], 0
tmp = tempfile.mkdtemp(prefix="do-inspect-")
try:
    for path in sorted(glob.glob(os.path.join(root, "v3", "do", "*", "*.sqlite"))):
        copy = os.path.join(tmp, "copy.sqlite")
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(copy + suffix):
                os.remove(copy + suffix)
        shutil.copyfile(path, copy)
        if os.path.exists(path + "-wal"):
            shutil.copyfile(path + "-wal", copy + "-wal")
        con = sqlite3.connect(copy)
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        tables = [[t, con.execute('SELECT count(*) FROM "%s"' % t.replace('"', '""')).fetchone()[0]] for t in names]
        base = os.path.basename(path)[: -len(".sqlite")]
        if base == "metadata":
            alarms += sum(rows for t, rows in tables if t == "_cf_ALARM")
        else:
            name = None
            if "__miniflare_do_name" in names:
                row = con.execute("SELECT * FROM __miniflare_do_name").fetchone()
                name = None if row is None else str(row[-1])
            objects.append({"id": base, "tables": tables, "name": name})
        con.close()
finally:
    shutil.rmtree(tmp, ignore_errors=True)
print(json.dumps({"objects": objects, "alarms": alarms}))
"#;

/// Reads every key object's database under `persist_dir`. Panics with Python's error if
/// the files cannot be read.
/// Whether any file under `dir` (databases, WAL files, metadata) contains `needle`: how
/// the at-rest tests look for bytes that must never be stored in the clear.
pub fn files_contain(dir: &Path, needle: &[u8]) -> bool {
    let Ok(entries) = fs::read_dir(dir) else { return false };
    entries.flatten().any(|entry| {
        let path = entry.path();
        if path.is_dir() {
            files_contain(&path, needle)
        } else {
            fs::read(&path).is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
        }
    })
}

pub fn snapshot(persist_dir: &Path) -> Snapshot {
    let what = format!("read the SQLite files under {}", persist_dir.display());
    let printed = python_on_files(&what, INSPECT, persist_dir, &[]);
    let json: serde_json::Value =
        serde_json::from_str(&printed).unwrap_or_else(|e| panic!("python3 printed no JSON ({e}): {printed}"));
    let objects = json["objects"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|o| ObjectFile {
                    id: o["id"].as_str().unwrap_or_default().to_string(),
                    tables: o["tables"]
                        .as_array()
                        .map(|ts| {
                            ts.iter()
                                .map(|t| {
                                    (
                                        t[0].as_str().unwrap_or_default().to_string(),
                                        t[1].as_u64().unwrap_or(0),
                                    )
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                    name: o["name"].as_str().map(str::to_string),
                })
                .collect()
        })
        .unwrap_or_default();
    Snapshot { objects, alarms: json["alarms"].as_u64().unwrap_or(0) }
}

/// Every file and directory name under `dir`, recursively (to check that no name carries
/// a raw key or credential).
pub fn file_names(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path.clone());
            }
            out.push(path);
        }
    }
    out
}

/// A fault written into one object's SQLite database from the outside, while its instance
/// is stopped ([`super::worker::Worker::crash`]). workerd then opens the changed file on
/// restart, and the worker meets the fault through its ordinary storage calls.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// The record (the key-value value) holds bytes that are not a record.
    GarbageRecord,
    /// The record's key-value value is a string, not bytes.
    RecordOfTheWrongType,
    /// The file is not an SQLite database any more (its first page overwritten).
    UnreadableFile,
    /// No record, and every write of one fails (the key-value table made with a `CHECK`
    /// constraint no record meets): the claim write fails.
    EveryWriteFails,
    /// No record; the claim's write succeeds and a completed record's fails (a `CHECK`
    /// constraint on the key-value table that refuses a completed record's header; workerd
    /// refuses to run a trigger on its own table): the outcome write fails.
    WritesAfterTheClaimFail,
    /// The stored record moved, bytes unchanged, from the key-value store to a row of the
    /// table releases before this layout wrote: read from there.
    RecordMovedToTheLegacyTable,
    /// No key-value value, and a legacy row that is bytes but not a record.
    GarbageInTheLegacyTable,
    /// No key-value value, and a legacy row that is a text value.
    TextInTheLegacyTable,
}

/// The Python helpers that read and write a stored record in either layout
/// (`stored_record.py`), to put before a script that needs them.
pub const STORED_RECORD_PY: &str = include_str!("stored_record.py");

/// Runs `script` (Python) with `glob`, `os`, `sqlite3` and `sys` imported and the helpers of
/// `stored_record.py` defined, `path` as its first argument and `args` after it; returns
/// what it printed, trimmed. Panics with Python's error, saying what it was doing.
pub fn python_on_files(what: &str, script: &str, path: &Path, args: &[&str]) -> String {
    let output = Command::new("python3")
        .arg("-c")
        .arg(format!("import glob, os, sqlite3, sys\n{STORED_RECORD_PY}\n{script}"))
        .arg(path)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run python3 to {what}: {e}"));
    assert!(output.status.success(), "{what} failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

const INJECT: &str = r#"
path, fault = sys.argv[1], sys.argv[2]
for suffix in ("-wal", "-shm"):
    if os.path.exists(path + suffix):
        # Fold the WAL into the database first, so that the change below is the last word.
        con = sqlite3.connect(path)
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.close()
        break
if fault == "UnreadableFile":
    with open(path, "r+b") as f:
        f.write(b"\x00not a database any more\x00" * 64)
    for suffix in ("-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    sys.exit(0)
con = sqlite3.connect(path)
GARBAGE = b"\xffnot a record\x00\x01\x02"
KV_TABLE = "CREATE TABLE _cf_KV (key TEXT PRIMARY KEY, value BLOB%s) WITHOUT ROWID"
if fault == "GarbageRecord":
    assert read_record(con)[0] == "kv", "a record in the key-value store"
    put_kv(con, v8_uint8array(GARBAGE))
elif fault == "RecordOfTheWrongType":
    assert read_record(con)[0] == "kv", "a record in the key-value store"
    put_kv(con, v8_string("a text value"))
elif fault == "EveryWriteFails":
    assert read_record(con) is None and not has_table(con, "_cf_KV"), "a released key"
    con.execute(KV_TABLE % ", CHECK (key <> 'record')")
elif fault == "WritesAfterTheClaimFail":
    assert read_record(con) is None and not has_table(con, "_cf_KV"), "a released key"
    # A completed record starts "IE", its version (1 or 2), its kind (2).
    con.execute(KV_TABLE % ", CHECK (instr(value, X'49450102') = 0 AND instr(value, X'49450202') = 0)")
elif fault == "RecordMovedToTheLegacyTable":
    move_record_to_row(con)
elif fault in ("GarbageInTheLegacyTable", "TextInTheLegacyTable"):
    assert read_record(con)[0] == "kv", "a record in the key-value store"
    con.execute("DELETE FROM _cf_KV WHERE key = 'record'")
    put_row(con, GARBAGE if fault == "GarbageInTheLegacyTable" else "a text value")
else:
    sys.exit("unknown fault " + fault)
con.commit()
con.close()
"#;

/// Moves every stored record under `persist_dir` (the instance stopped), bytes unchanged,
/// to the legacy table, where releases before the key-value layout wrote it; returns how
/// many it moved.
pub fn move_records_to_the_legacy_table(persist_dir: &Path) -> u64 {
    const MOVE: &str = r#"
print(change_each_record(sys.argv[1], lambda con, _layout, _record: move_record_to_row(con)))
"#;
    python_on_files("move the records", MOVE, persist_dir, &[]).parse().expect("a count")
}

/// The database file of one object under `persist_dir`.
pub fn object_file(persist_dir: &Path, object_id: &str) -> PathBuf {
    let pattern = format!("{object_id}.sqlite");
    file_names(persist_dir)
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy() == pattern))
        .unwrap_or_else(|| panic!("no database file for object {object_id} under {}", persist_dir.display()))
}

/// Writes `fault` into the database of `object_id`. The instance must be stopped.
pub fn inject(persist_dir: &Path, object_id: &str, fault: Fault) {
    let file = object_file(persist_dir, object_id);
    let what = format!("write the fault {fault:?} into {}", file.display());
    python_on_files(&what, INJECT, &file, &[&format!("{fault:?}")]);
}
