//! The object's stored record: one row in the object's own SQLite database.
//!
//! Owns the SQL. Every call is synchronous (SQLite-backed Durable Objects run SQL in the
//! same turn), so a claim is written before the handler awaits anything, and the runtime's
//! output gate holds the origin fetch until the write is durable.

use std::cell::Cell;

use super::platform::{sql_blob, sql_bytes, SqlStorage};

use crate::core::record::{DecodeError, Record};
use crate::core::text;

const CREATE_TABLE: &str =
    "CREATE TABLE IF NOT EXISTS idempotency_record (id INTEGER PRIMARY KEY CHECK (id = 1), record BLOB NOT NULL)";
const SELECT: &str = "SELECT record FROM idempotency_record WHERE id = 1";
const TABLE_EXISTS: &str = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'idempotency_record'";
const UPSERT: &str = "INSERT OR REPLACE INTO idempotency_record (id, record) VALUES (1, ?)";
const DELETE: &str = "DELETE FROM idempotency_record";

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

/// Reads the record. The table is created by the first claim, not before, so an object that
/// only ever refused requests leaves no storage behind; a missing table means no record.
/// Whether the table exists is asked first: a new object (every first attempt) would
/// otherwise meet "no such table" as a thrown JavaScript error, with its stack trace built
/// and turned into a string, on the path that creates objects (issue 23); an object that
/// has a record pays one statement more on the first read of its life.
pub fn load(sql: &SqlStorage) -> Result<Option<Record>, StorageError> {
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
pub fn put(sql: &SqlStorage, record: &Record, table: &Cell<bool>) -> Result<(), StorageError> {
    if table.get() {
        sql.run(UPSERT, &[sql_blob(&record.encode())]).map_err(|e| StorageError::Sql(e.to_string()))?;
        return Ok(());
    }
    put_encoded(sql, record.encode())?;
    table.set(true);
    Ok(())
}

/// Writes an encoded record (see [`put`]).
pub fn put_encoded(sql: &SqlStorage, record: Vec<u8>) -> Result<(), StorageError> {
    sql.run(CREATE_TABLE, &[]).map_err(|e| StorageError::Sql(e.to_string()))?;
    sql.run(UPSERT, &[sql_blob(&record)]).map_err(|e| StorageError::Sql(e.to_string()))?;
    Ok(())
}

/// Deletes the record row and any chunk rows of a large answer at once (synchronously, in
/// one turn, so nothing can read them after it). The alarm and the tables stay; the next
/// alarm deletes everything.
pub fn delete(sql: &SqlStorage) -> Result<(), StorageError> {
    match sql.run(DELETE, &[]) {
        Ok(_) => {}
        Err(error) if text::contains(&error.to_string(), "no such table") => {}
        Err(error) => return Err(StorageError::Sql(error.to_string())),
    }
    super::chunks::delete(sql)
}
