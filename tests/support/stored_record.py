# The key's stored record in one object's SQLite database, read and written from the
# outside by the e2e tests (prepended to their Python scripts; see support::storage).
#
# Two layouts, as runtime::key_storage reads them: the `record` value of workerd's key-value
# table `_cf_KV`, which the worker writes (V8's serialization of a Uint8Array holding the
# record's bytes), read first; else the one row of the table `idempotency_record`, which
# earlier releases wrote (before the key-value layout).

import glob
import os
import sqlite3

LEGACY_TABLE = "idempotency_record"


def varint(n):
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def read_varint(data, at):
    value, shift = 0, 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


# A value as workerd's key-value store keeps it: V8's serialization (version 15) of a
# Uint8Array (its ArrayBuffer, then the view over all of it), or of a one-byte string.
def v8_uint8array(payload):
    return b"\xff\x0f" + b"B" + varint(len(payload)) + payload + b"VB" + varint(0) + varint(len(payload)) + varint(0)


def v8_string(text):
    return b"\xff\x0f" + b'"' + varint(len(text)) + text.encode("latin-1")


def uint8array_payload(value):
    """The bytes of a serialized Uint8Array that views all of its buffer; ValueError else."""
    value = bytes(value)
    if value[:1] != b"\xff":
        raise ValueError("no V8 serialization header: %r" % value[:4])
    _, at = read_varint(value, 1)
    while value[at] == 0:  # padding
        at += 1
    if value[at : at + 1] != b"B":
        raise ValueError("not an ArrayBuffer: tag %r" % value[at : at + 1])
    length, at = read_varint(value, at + 1)
    payload, rest = value[at : at + length], value[at + length :]
    if rest[:2] != b"VB":
        raise ValueError("the buffer is not viewed as a Uint8Array: %r" % rest[:4])
    offset, at = read_varint(rest, 2)
    viewed, at = read_varint(rest, at)
    if (offset, viewed) != (0, length):
        raise ValueError("the view is not the whole buffer")
    return payload


def has_table(con, name):
    row = con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()
    return row is not None


def read_record(con):
    """(layout, bytes) of the stored record: ("kv", ...) or ("row", ...); None when none."""
    if has_table(con, "_cf_KV"):
        row = con.execute("SELECT value FROM _cf_KV WHERE key = 'record'").fetchone()
        if row is not None:
            return "kv", uint8array_payload(row[0])
    if has_table(con, LEGACY_TABLE):
        row = con.execute("SELECT record FROM %s WHERE id = 1" % LEGACY_TABLE).fetchone()
        if row is not None:
            return "row", bytes(row[0])
    return None


def put_kv(con, value):
    """Stores `value` (already serialized) as the `record` value of the key-value table."""
    con.execute("CREATE TABLE IF NOT EXISTS _cf_KV (key TEXT PRIMARY KEY, value BLOB) WITHOUT ROWID")
    con.execute("INSERT OR REPLACE INTO _cf_KV VALUES ('record', ?)", (value,))


def put_row(con, value):
    """Stores `value` as the legacy table's one row, as earlier releases did."""
    con.execute("CREATE TABLE IF NOT EXISTS %s (id INTEGER PRIMARY KEY CHECK (id = 1), record BLOB NOT NULL)" % LEGACY_TABLE)
    con.execute("INSERT OR REPLACE INTO %s VALUES (1, ?)" % LEGACY_TABLE, (value,))


def write_record(con, layout, record):
    """Replaces the stored record's bytes where `read_record` found them."""
    if layout == "kv":
        put_kv(con, v8_uint8array(record))
    else:
        put_row(con, record)


def move_record_to_row(con):
    """Moves the stored key-value record, bytes unchanged, to the legacy table's row."""
    layout, record = read_record(con)
    assert layout == "kv", "a record in the key-value store"
    con.execute("DELETE FROM _cf_KV WHERE key = 'record'")
    put_row(con, record)


def change_each_record(root, change):
    """Calls change(con, layout, record) for each object database under `root` (a
    `--persist-to` folder) that stores a record, and commits; returns how many."""
    changed = 0
    for path in sorted(glob.glob(os.path.join(root, "v3", "do", "*", "*.sqlite"))):
        con = sqlite3.connect(path)
        stored = read_record(con)
        if stored is not None:
            change(con, *stored)
            con.commit()
            changed += 1
        con.close()
    return changed
