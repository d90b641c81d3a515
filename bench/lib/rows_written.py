#!/usr/bin/env python3
"""Rows written to the Durable Objects' SQLite databases under a `--persist-to` directory,
counted from the outside, transaction by transaction.

workerd keeps each object's database in WAL mode
(`<persist>/v3/do/<script>-<Class>/<object id>.sqlite` with `-wal` beside it while the
object is open). Every committed transaction appends its pages to the WAL, so the WAL holds
the database's history since the last checkpoint. For each object this copies the database
and its WAL, finds the commit frames, and opens the copy once per commit with the WAL cut
after that commit (SQLite then sees the database exactly as it was after it). Between two
consecutive states every inserted, updated or deleted row counts as one row written, per
table: what Cloudflare bills as "rows written" for a statement that changes those rows.

Rows of a table that disappears (`deleteAll()` drops the whole database's tables) are
reported apart as `dropped:<table>`, so a reader can price the wholesale deletion as the
platform does. What it cannot see, and says so: two writes of the same row in one transaction count once
(workerd coalesces the key-value API's writes of one turn into one transaction); and
history before a checkpoint (the WAL then starts later: `complete` is false for that
object, and its first state is diffed against an empty database, a lower bound). workerd
does not checkpoint a small database while the object lives; closing it does.

workerd closes an idle object's database after a few seconds (folding the WAL into it), so
a key's life from claim to deletion spans several WAL generations. With `--state FILE` the
count carries on from the last call: the state after the last commit seen is kept per object
(digests of its rows), a WAL of the same generation is read on from the next commit, and a
new generation (or none) is first diffed against that state. Call it often enough (every
second is plenty) and nothing is lost; what happened between two calls without any WAL left
counts once per changed row, a lower bound.

Usage: rows_written.py PERSIST_DIR [--state FILE] [OBJECT_ID_PREFIX ...]
Prints JSON: {"objects": [{"id", "class", "complete", "commits", "transactions" (commits
that changed a table other than miniflare's own), "rows_written": {table: n},
"rows_now": {table: n}}], "alarms": pending alarm rows}; with --state, rows_written is the
total since the first call.
"""
import hashlib
import json
import os
import shutil
import sqlite3
import struct
import sys
import tempfile

WAL_HEADER = 32
FRAME_HEADER = 24
# Tables that exist only in local dev (miniflare's bookkeeping of the object's name).
LOCAL_ONLY = {"__miniflare_do_name"}


def commit_offsets(wal):
    """Byte offsets just past each commit frame of the WAL's current generation."""
    if len(wal) < WAL_HEADER:
        return []
    magic, _version, page_size, _seq, salt1, salt2 = struct.unpack(">IIIIII", wal[:24])
    if magic not in (0x377F0682, 0x377F0683) or page_size == 0:
        return []
    offsets = []
    at = WAL_HEADER
    frame = FRAME_HEADER + page_size
    while at + frame <= len(wal):
        _page, commit_size, s1, s2 = struct.unpack(">IIII", wal[at:at + 16])
        if (s1, s2) != (salt1, salt2):
            break  # frames of an older generation: not part of this history
        at += frame
        if commit_size:
            offsets.append(at)
    return offsets


def digest(row):
    return hashlib.sha256(repr(row).encode()).hexdigest()[:32]


def wal_generation(wal):
    return wal[16:24].hex() if len(wal) >= WAL_HEADER else ""


def tables_of(db):
    rows = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return [name for (name,) in rows if not name.startswith("sqlite_")]


def state(db_bytes, wal_bytes, work):
    """{table: {row identity: row}} of a database with this WAL."""
    path = os.path.join(work, "s.sqlite")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    with open(path, "wb") as f:
        f.write(db_bytes)
    if wal_bytes:
        with open(path + "-wal", "wb") as f:
            f.write(wal_bytes)
    db = sqlite3.connect(path)
    try:
        out = {}
        for table in tables_of(db):
            quoted = '"' + table.replace('"', '""') + '"'
            try:
                rows = db.execute(f"SELECT rowid, * FROM {quoted}").fetchall()
                out[table] = {str(row[0]): digest(row[1:]) for row in rows}
            except sqlite3.OperationalError:  # WITHOUT ROWID: the whole row is its identity
                pk = [r[1] for r in db.execute(f"PRAGMA table_info({quoted})").fetchall() if r[5]]
                cols = [r[1] for r in db.execute(f"PRAGMA table_info({quoted})").fetchall()]
                rows = db.execute(f"SELECT * FROM {quoted}").fetchall()
                key_at = [cols.index(c) for c in pk] or list(range(len(cols)))
                out[table] = {repr(tuple(row[i] for i in key_at)): digest(row) for row in rows}
        return out
    finally:
        db.close()


def diff(before, after):
    """Rows changed per table between two states. Rows of a table that no longer exists
    (`deleteAll()` drops every table of the object's database) are counted apart, under
    "dropped:<table>": a wholesale removal, not a row-by-row write."""
    written = {}
    for table in set(before) | set(after):
        a, b = before.get(table, {}), after.get(table, {})
        n = sum(1 for k in set(a) | set(b) if a.get(k) != b.get(k))
        if n:
            name = table if table in after else f"dropped:{table}"
            written[name] = written.get(name, 0) + n
    return written


def count_object(path, work, before=None):
    """Counts one object's rows written; `before` is what the last call left (or None)."""
    with open(path, "rb") as f:
        db_bytes = f.read()
    wal_path = path + "-wal"
    wal = b""
    if os.path.exists(wal_path):
        with open(wal_path, "rb") as f:
            wal = f.read()
    generation = wal_generation(wal)
    offsets = commit_offsets(wal)
    written = dict(before["rows_written"]) if before else {}
    transactions = before["transactions"] if before else 0
    complete = before["complete"] if before else True

    def changed(delta):
        return any(table.replace("dropped:", "", 1) not in LOCAL_ONLY for table in delta)

    # The same WAL generation read on; without a WAL the database file itself may have
    # changed (folded in, or emptied by deleteAll), so it is read again whole.
    if before and generation and before["generation"] == generation and before["commits"] <= len(offsets):
        previous = before["state"]
        done = before["commits"]
    else:
        base = state(db_bytes, b"", work) if len(db_bytes) else {}
        if before:
            delta = diff(before["state"], base)
            for table, n in delta.items():
                written[table] = written.get(table, 0) + n
            # Commits folded in since the last call: at least one, how many is not known.
            transactions += 1 if changed(delta) else 0
        else:
            # The history is whole when the database file itself holds no row yet; rows of
            # local-only tables (miniflare's name of the object, which it may write before the
            # object's first turn) are never counted, so they do not make it partial.
            complete = all(len(rows) == 0 for table, rows in base.items() if table not in LOCAL_ONLY)
        previous = base
        done = 0
    for end in offsets[done:]:
        now = state(db_bytes, wal[:end], work)
        delta = diff(previous, now)
        for table, n in delta.items():
            written[table] = written.get(table, 0) + n
        transactions += 1 if changed(delta) else 0
        previous = now
    return {
        "complete": complete,
        "transactions": transactions,
        "commits": len(offsets),
        "generation": generation,
        "rows_written": written,
        "rows_now": {table: len(rows) for table, rows in previous.items()},
        "state": previous,
    }


def pending_alarms(do_dir, work):
    total = 0
    for name in os.listdir(do_dir):
        meta = os.path.join(do_dir, name, "metadata.sqlite")
        if not os.path.exists(meta):
            continue
        copy = os.path.join(work, "meta.sqlite")
        for suffix in ("", "-wal"):
            if os.path.exists(meta + suffix):
                shutil.copyfile(meta + suffix, copy + suffix)
            elif os.path.exists(copy + suffix):
                os.remove(copy + suffix)
        db = sqlite3.connect(copy)
        try:
            if "_cf_ALARM" in tables_of(db):
                total += db.execute('SELECT count(*) FROM "_cf_ALARM"').fetchone()[0]
        finally:
            db.close()
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(copy + suffix):
                os.remove(copy + suffix)
    return total


def main():
    args = sys.argv[1:]
    state_file = None
    if "--state" in args:
        at = args.index("--state")
        state_file = args[at + 1]
        del args[at : at + 2]
    persist, prefixes = args[0], args[1:]
    tracked = {}
    if state_file and os.path.exists(state_file):
        with open(state_file) as f:
            tracked = json.load(f)
    seen = set()
    do_dir = os.path.join(persist, "v3", "do")
    objects = []
    with tempfile.TemporaryDirectory(prefix="rows-written-") as work:
        if os.path.isdir(do_dir):
            for cls in sorted(os.listdir(do_dir)):
                folder = os.path.join(do_dir, cls)
                for name in sorted(os.listdir(folder)):
                    if not name.endswith(".sqlite") or name == "metadata.sqlite":
                        continue
                    if prefixes and not any(name.startswith(p) for p in prefixes):
                        continue
                    # Copy the database and its WAL together first, so the running workerd
                    # is never disturbed and the pair is consistent.
                    src = os.path.join(folder, name)
                    copy = os.path.join(work, "obj.sqlite")
                    for suffix in ("", "-wal"):
                        if os.path.exists(copy + suffix):
                            os.remove(copy + suffix)
                    shutil.copyfile(src, copy)
                    if os.path.exists(src + "-wal"):
                        shutil.copyfile(src + "-wal", copy + "-wal")
                    key = f"{cls}/{name}"
                    seen.add(key)
                    counted = count_object(copy, work, tracked.get(key))
                    tracked[key] = counted
                    shown = {k: v for k, v in counted.items() if k not in ("state", "generation")}
                    objects.append({"id": name[: -len(".sqlite")], "class": cls, **shown})
        alarms = pending_alarms(do_dir, work) if os.path.isdir(do_dir) else 0
    # An object whose file is gone was removed whole: its last rows count as deleted.
    for key, before in tracked.items():
        if key in seen or (prefixes and not any(key.split("/")[-1].startswith(p) for p in prefixes)):
            continue
        if before["state"]:
            counted = dict(before)
            counted["rows_written"] = dict(before["rows_written"])
            for table, n in diff(before["state"], {}).items():
                counted["rows_written"][table] = counted["rows_written"].get(table, 0) + n
            counted["transactions"] = before.get("transactions", 0) + 1
            counted["state"] = {}
            counted["rows_now"] = {}
            tracked[key] = counted
        cls, name = key.split("/", 1)
        shown = {k: v for k, v in tracked[key].items() if k not in ("state", "generation")}
        objects.append({"id": name[: -len(".sqlite")], "class": cls, "file_gone": True, **shown})
    if state_file:
        with open(state_file, "w") as f:
            json.dump(tracked, f)
    json.dump({"objects": objects, "alarms": alarms, "local_only_tables": sorted(LOCAL_ONLY)}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
