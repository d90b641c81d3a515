//! The object's stored record: one value of the object's key-value store, and, read after
//! it, the row of its own table that releases before this one wrote.
//!
//! Owns the record's key-value key and the legacy table's SQL. Every call is synchronous
//! (SQLite-backed Durable Objects run SQL and their key-value API in the same turn), so a
//! claim is written before the handler awaits anything, and the runtime's output gate holds
//! the origin fetch until the write is durable.
//!
//! Two layouts, one record. This release writes the record as the value
//! [`KV_KEY`] of the object's key-value store (`ctx.storage.kv`, a `Uint8Array` of the
//! `core::formats::key_record` bytes): workerd creates that store's table as a system query, which is
//! not billed, where a table of the worker's own costs a billed `CREATE TABLE` (two rows
//! written) on every new key. Earlier releases wrote one row of the table
//! `idempotency_record`. Those from `032df08` on read the key-value value first and the
//! row after it, so they are the ones this release may be rolled back to: an older one
//! would not see a claim written here, would take the key for new and forward it again
//! (docs/deploy.md, rule 6). This release reads both in the same order, for the keys
//! those releases claimed, until their time to live has passed. A write here removes the
//! row in the same transaction when one may exist, so the two layouts never both hold a
//! record, and a row can never come back from under a deleted value.

use std::cell::Cell;

use js_sys::Uint8Array;
use wasm_bindgen::{JsCast, JsValue};

use worker::{SqlStorage, SqlStorageValue, Storage};

use super::bindings::{self, SyncKv};

use crate::core::formats::key_record::{DecodeError, KeyRecord};
pub use crate::core::vocabulary::fault::StorageError;

const SELECT: &str = "SELECT record FROM idempotency_record WHERE id = 1";
const TABLE_EXISTS: &str = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'idempotency_record'";
const DELETE_ROW: &str = "DELETE FROM idempotency_record";

/// The record's key in the object's key-value store (its value: the encoded record, as a
/// `Uint8Array`).
pub const KV_KEY: &str = "record";

/// What this instance knows of a record in the legacy table (`idempotency_record`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LegacyRow {
    /// None stored: the common case, where a write is one key-value `put`.
    Absent,
    /// One may be stored (an older release wrote it), or this instance has not read yet,
    /// or a write that would have removed it failed: a write removes whatever is there.
    Possible,
}

/// The object's two stores, as the record's reads and writes use them.
#[derive(Clone, Copy)]
pub struct Stores<'a> {
    pub storage: &'a Storage,
    pub sql: &'a SqlStorage,
    pub kv: &'a SyncKv,
}

impl From<super::seal::SealError> for StorageError {
    fn from(error: super::seal::SealError) -> StorageError {
        StorageError::Seal(error.0)
    }
}

/// Reads the record: the key-value value if one is stored, else the legacy row. Whether
/// the legacy table exists is asked before it is read: a new object (every first attempt)
/// would otherwise meet "no such table" as a thrown JavaScript error, with its stack trace
/// built and turned into a string, on the path that creates objects. `legacy`
/// is set to what the read found: a record read with `legacy` left `Possible` came from
/// the row.
pub fn load(stores: Stores<'_>, legacy: &Cell<LegacyRow>) -> Result<Option<KeyRecord>, StorageError> {
    legacy.set(LegacyRow::Possible);
    let value = stores.kv.get(KV_KEY).map_err(sql_error)?;
    if !value.is_undefined() {
        // Each release's write removes the other layout in the same transaction (this one
        // the row, the release before it the value), so a value means no row.
        legacy.set(LegacyRow::Absent);
        // Anything but bytes is not a record: never read as absent (that would forward the
        // key again), an error the caller answers 503.
        let bytes = value.dyn_ref::<Uint8Array>().map(Uint8Array::to_vec);
        let bytes = bytes.ok_or(corrupt(DecodeError::NotARecord))?;
        return KeyRecord::decode(&bytes).map(Some).map_err(corrupt);
    }
    if !legacy_table_exists(stores.sql)? {
        legacy.set(LegacyRow::Absent);
        return Ok(None);
    }
    let cursor = stores.sql.exec(SELECT, None).map_err(sql_error)?;
    let Some(row) = cursor.raw().next().transpose().map_err(sql_error)? else {
        legacy.set(LegacyRow::Absent);
        return Ok(None);
    };
    match row.into_iter().next() {
        Some(SqlStorageValue::Blob(bytes)) => KeyRecord::decode(&bytes).map(Some).map_err(corrupt),
        _ => Err(corrupt(DecodeError::NotARecord)),
    }
}

/// Writes the record: one key-value `put`, and, when `legacy` says a row may be stored,
/// the row's removal in the same transaction (a claim whose value could not be written
/// keeps the row it would have replaced).
pub fn put(stores: Stores<'_>, record: &KeyRecord, legacy: &Cell<LegacyRow>) -> Result<(), StorageError> {
    let encoded = record.encode();
    if legacy.get() == LegacyRow::Absent {
        return put_encoded(stores, encoded, legacy);
    }
    in_transaction(stores.storage, || put_encoded(stores, encoded, legacy))
        .inspect_err(|_| legacy.set(LegacyRow::Possible))
}

/// Writes an encoded record (see [`put`]), removing a legacy row unless `legacy` says
/// there is none. Callers that may remove one run it in a transaction.
pub fn put_encoded(
    stores: Stores<'_>,
    record: Vec<u8>,
    legacy: &Cell<LegacyRow>,
) -> Result<(), StorageError> {
    remove_legacy_row(stores.sql, legacy)?;
    let value = Uint8Array::from(record.as_slice());
    stores.kv.put(KV_KEY, &value).map_err(sql_error)
}

/// Deletes the record (value and legacy row) and any chunk rows of a large answer at once,
/// in one transaction (so nothing can read part of them after it). The alarm stays; the
/// next alarm deletes everything. A row is looked for whatever `legacy` says: a deletion
/// must leave nothing a later read could take for the key's record, even where a rollback
/// past the rule of docs/deploy.md left a row beside the value. Deletions are rare (a
/// record read past its expiry).
pub fn delete(stores: Stores<'_>, legacy: &Cell<LegacyRow>) -> Result<(), StorageError> {
    legacy.set(LegacyRow::Possible);
    let delete_all = || {
        remove_legacy_row(stores.sql, legacy)?;
        stores.kv.delete(KV_KEY).map_err(sql_error)?;
        super::chunks::delete(stores.sql)
    };
    in_transaction(stores.storage, delete_all).inspect_err(|_| legacy.set(LegacyRow::Possible))
}

/// Deletes the legacy row unless `legacy` says there is none.
fn remove_legacy_row(sql: &SqlStorage, legacy: &Cell<LegacyRow>) -> Result<(), StorageError> {
    if legacy.get() == LegacyRow::Possible {
        if legacy_table_exists(sql)? {
            sql.exec(DELETE_ROW, None).map_err(sql_error)?;
        }
        legacy.set(LegacyRow::Absent);
    }
    Ok(())
}

/// Whether the legacy table exists (a read of the schema: no thrown error when it does not).
fn legacy_table_exists(sql: &SqlStorage) -> Result<bool, StorageError> {
    let cursor = sql.exec(TABLE_EXISTS, None).map_err(sql_error)?;
    Ok(cursor.raw().next().transpose().map_err(sql_error)?.is_some())
}

/// A record that does not decode.
fn corrupt(error: DecodeError) -> StorageError {
    StorageError::Corrupt(error.to_string())
}

/// A failed storage call as the log shows it (`Name: message`).
pub fn sql_error(error: impl Into<worker::Error>) -> StorageError {
    StorageError::Sql(error.into().to_string())
}

/// Runs `write` in one transaction (`transactionSync`): every statement of it is rolled
/// back when it fails, and its error returned. What a [`LegacyRow`] says is not rolled back
/// with it: a caller whose transaction failed sets it back to `Possible`.
pub fn in_transaction(
    storage: &Storage,
    write: impl FnOnce() -> Result<(), StorageError>,
) -> Result<(), StorageError> {
    // `transactionSync` calls back once; the `Option` lets the write own what it moves.
    let mut write = Some(write);
    run_transaction(storage, &mut || write.take().map_or(Ok(()), |write| write()))
}

/// [`in_transaction`]'s body, compiled once for every caller.
fn run_transaction(
    storage: &Storage,
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
    let outcome = bindings::transaction_sync(storage, &mut callback);
    match (outcome, failure) {
        (Ok(_), _) => Ok(()),
        (Err(_), Some(error)) => Err(error),
        (Err(thrown), None) => Err(sql_error(thrown)),
    }
}
