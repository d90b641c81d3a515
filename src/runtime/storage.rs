//! The object's stored record: one row in the object's own SQLite database, and, read
//! first, the key-value copy a release after this one writes instead.
//!
//! Owns the SQL and the record's key-value key. Every call is synchronous (SQLite-backed
//! Durable Objects run SQL and their key-value API in the same turn), so a claim is
//! written before the handler awaits anything, and the runtime's output gate holds the
//! origin fetch until the write is durable.
//!
//! Two layouts, one record (issue 23.1). This release writes the record as one row of its
//! own table (`idempotency_record`), as the releases before it did. The next writes it as
//! one value of the object's key-value store (`ctx.storage.kv`, key [`KV_KEY`]): workerd
//! creates that store's table as a system query, which is not billed, where the worker's
//! own `CREATE TABLE` is billed as two rows written. This release reads both, key-value
//! first, so that a deploy of the next one can be rolled back to this one without a key
//! it claimed looking new (which would forward it again): a release that cannot read
//! where its successor writes must not be the one rolled back to. A write here removes
//! a key-value copy in the same transaction, so the two layouts never both hold a record.
//! The bytes are the same `core::record` encoding in either place.

use std::cell::Cell;

use js_sys::Uint8Array;
use wasm_bindgen::{JsCast, JsValue};

use super::platform::{describe, sql_blob, sql_bytes, DurableObjectStorage, SqlStorage, SyncKvStorage};

use crate::core::record::{DecodeError, Record};
use crate::core::text;

const CREATE_TABLE: &str =
    "CREATE TABLE IF NOT EXISTS idempotency_record (id INTEGER PRIMARY KEY CHECK (id = 1), record BLOB NOT NULL)";
const SELECT: &str = "SELECT record FROM idempotency_record WHERE id = 1";
const TABLE_EXISTS: &str = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'idempotency_record'";
const UPSERT: &str = "INSERT OR REPLACE INTO idempotency_record (id, record) VALUES (1, ?)";
const DELETE: &str = "DELETE FROM idempotency_record";

/// The record's key in the object's key-value store (its value: the encoded record, as a
/// `Uint8Array`).
pub const KV_KEY: &str = "record";

/// What this instance knows of a key-value copy of the record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvCopy {
    /// None stored: the common case, where a write is one statement.
    Absent,
    /// One may be stored (written by a later release), or this instance has not read yet,
    /// or a write that would have removed it failed: a write removes whatever is there.
    Possible,
}

/// The object's two stores, as the record's reads and writes use them.
#[derive(Clone, Copy)]
pub struct Stores<'a> {
    pub storage: &'a DurableObjectStorage,
    pub sql: &'a SqlStorage,
    pub kv: &'a SyncKvStorage,
}

/// Why the record could not be read or written.
#[derive(Debug)]
pub enum StorageError {
    Sql(String),
    Corrupt(DecodeError),
    /// A stored answer could not be sealed or opened (see `runtime::seal`).
    Seal(String),
    /// A chunked answer's rows are missing or do not match its record (`runtime::chunks`).
    Chunks(String),
    /// An outcome whose claim stopped being the live one while its answer was sealed (a
    /// purge, then a new claim): not written, so the new claim's record stays.
    Fenced,
}

impl std::fmt::Display for StorageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StorageError::Sql(message) => write!(f, "SQL error: {message}"),
            StorageError::Corrupt(error) => write!(f, "stored record is unreadable: {error}"),
            StorageError::Seal(error) => write!(f, "stored answer: {error}"),
            StorageError::Chunks(error) => write!(f, "stored answer chunks: {error}"),
            StorageError::Fenced => write!(f, "the claim is no longer the live one; outcome not written"),
        }
    }
}

/// Reads the record: the key-value copy if one is stored, else the row. The table is
/// created by the first claim, not before, so an object that only ever refused requests
/// leaves no storage behind; a missing table means no record. Whether the table exists is
/// asked first: a new object (every first attempt) would otherwise meet "no such table" as
/// a thrown JavaScript error, with its stack trace built and turned into a string, on the
/// path that creates objects (issue 23); an object that has a record pays one statement
/// more on the first read of its life. `kv_copy` is set to what the read found.
pub fn load(stores: Stores<'_>, kv_copy: &Cell<KvCopy>) -> Result<Option<Record>, StorageError> {
    kv_copy.set(KvCopy::Possible);
    let value = stores.kv.get(KV_KEY).map_err(|e| StorageError::Sql(describe(e)))?;
    if !value.is_undefined() {
        // Anything but bytes is not a record: never read as absent (that would forward the
        // key again), an error the caller answers 503.
        let bytes = value.dyn_ref::<Uint8Array>().map(Uint8Array::to_vec);
        let bytes = bytes.ok_or(StorageError::Corrupt(DecodeError::NotARecord))?;
        return Record::decode(&bytes).map(Some).map_err(StorageError::Corrupt);
    }
    kv_copy.set(KvCopy::Absent);
    let sql = stores.sql;
    let exists = sql.run(TABLE_EXISTS, &[]).and_then(|cursor| cursor.first_row());
    if exists.map_err(|e| StorageError::Sql(e.to_string()))?.is_none() {
        return Ok(None);
    }
    let cursor = match sql.run(SELECT, &[]) {
        Ok(cursor) => cursor,
        Err(error) if text::contains(&error.to_string(), "no such table") => return Ok(None),
        Err(error) => return Err(StorageError::Sql(error.to_string())),
    };
    let Some(row) = cursor.first_row().map_err(|e| StorageError::Sql(e.to_string()))? else {
        return Ok(None);
    };
    match sql_bytes(&row.get(0)) {
        Some(bytes) => Record::decode(&bytes).map(Some).map_err(StorageError::Corrupt),
        None => Err(StorageError::Corrupt(DecodeError::NotARecord)),
    }
}

/// Writes the record: one row, one statement once `table` says the table exists (this
/// instance read or wrote it), so an outcome's write does not ask to create it again.
pub fn put(
    stores: Stores<'_>,
    record: &Record,
    table: &Cell<bool>,
    kv_copy: &Cell<KvCopy>,
) -> Result<(), StorageError> {
    if table.get() && kv_copy.get() == KvCopy::Absent {
        stores
            .sql
            .run(UPSERT, &[sql_blob(&record.encode())])
            .map_err(|e| StorageError::Sql(e.to_string()))?;
        return Ok(());
    }
    let encoded = record.encode();
    if kv_copy.get() == KvCopy::Absent {
        put_encoded(stores, encoded, kv_copy)?;
    } else {
        // The row and the copy's removal in one transaction: a claim whose row could not be
        // written keeps the copy it would have replaced.
        in_transaction(stores.storage, || put_encoded(stores, encoded, kv_copy))
            .inspect_err(|_| kv_copy.set(KvCopy::Possible))?;
    }
    table.set(true);
    Ok(())
}

/// Writes an encoded record (see [`put`]), removing a key-value copy unless `kv_copy` says
/// there is none. Callers that may remove one run it in a transaction.
pub fn put_encoded(stores: Stores<'_>, record: Vec<u8>, kv_copy: &Cell<KvCopy>) -> Result<(), StorageError> {
    remove_kv_copy(stores, kv_copy)?;
    stores.sql.run(CREATE_TABLE, &[]).map_err(|e| StorageError::Sql(e.to_string()))?;
    stores.sql.run(UPSERT, &[sql_blob(&record)]).map_err(|e| StorageError::Sql(e.to_string()))?;
    Ok(())
}

/// Deletes the record (row and key-value copy) and any chunk rows of a large answer at once
/// (synchronously, in one turn, so nothing can read them after it). The alarm and the
/// tables stay; the next alarm deletes everything.
pub fn delete(stores: Stores<'_>, kv_copy: &Cell<KvCopy>) -> Result<(), StorageError> {
    let delete_all = || {
        remove_kv_copy(stores, kv_copy)?;
        match stores.sql.run(DELETE, &[]) {
            Ok(_) => {}
            Err(error) if text::contains(&error.to_string(), "no such table") => {}
            Err(error) => return Err(StorageError::Sql(error.to_string())),
        }
        super::chunks::delete(stores.sql)
    };
    if kv_copy.get() == KvCopy::Absent {
        delete_all()
    } else {
        in_transaction(stores.storage, delete_all).inspect_err(|_| kv_copy.set(KvCopy::Possible))
    }
}

/// Deletes the key-value copy of the record unless `kv_copy` says there is none.
fn remove_kv_copy(stores: Stores<'_>, kv_copy: &Cell<KvCopy>) -> Result<(), StorageError> {
    if kv_copy.get() == KvCopy::Possible {
        stores.kv.delete(KV_KEY).map_err(|e| StorageError::Sql(describe(e)))?;
        kv_copy.set(KvCopy::Absent);
    }
    Ok(())
}

/// Runs `write` in one transaction (`transactionSync`): every statement of it is rolled
/// back when it fails, and its error returned. What a [`KvCopy`] says is not rolled back
/// with it: a caller whose transaction failed sets it back to `Possible`.
pub fn in_transaction(
    storage: &DurableObjectStorage,
    write: impl FnOnce() -> Result<(), StorageError>,
) -> Result<(), StorageError> {
    // `transactionSync` calls back once; the `Option` lets the write own what it moves.
    let mut write = Some(write);
    run_transaction(storage, &mut || write.take().map_or(Ok(()), |write| write()))
}

/// [`in_transaction`]'s body, compiled once for every caller.
fn run_transaction(
    storage: &DurableObjectStorage,
    write: &mut dyn FnMut() -> Result<(), StorageError>,
) -> Result<(), StorageError> {
    let mut failure = None;
    let mut callback = || -> Result<JsValue, JsValue> {
        write().map(|()| JsValue::UNDEFINED).map_err(|error| {
            let thrown = JsValue::from(js_sys::Error::new(&error.to_string()));
            failure = Some(error);
            thrown
        })
    };
    let outcome = storage.transaction_sync(&mut callback);
    match (outcome, failure) {
        (Ok(_), _) => Ok(()),
        (Err(_), Some(error)) => Err(error),
        (Err(thrown), None) => Err(StorageError::Sql(describe(thrown))),
    }
}
