//! Large answers in chunk rows (see `core::formats::chunks` for the rules): writing them with their
//! record in one transaction, checking them before the first replay, and replaying them as
//! a stream that reads one row at a time.
//!
//! Runs the chunk table's SQL (`core::formats::chunks::sql`). Rows cross into JavaScript
//! once and stay there: a replay reads a row, digests it (and opens it, when sealed) with
//! WebCrypto and hands it to the response stream, so no replay copies the body into Wasm
//! memory or holds it whole.
//!
//! Atomicity (rule 3 there): the rows, the deletion of any older rows and the record (its
//! key-value value) are written inside `ctx.storage.transactionSync(...)`, which rolls every
//! statement back should one throw. The same writes in one synchronous turn would also be
//! coalesced into one durable write by the output gate; the explicit transaction adds the
//! rollback. `worker` 0.8.7 does not bind `transactionSync`; `runtime::bindings` does.

use std::sync::Arc;

use js_sys::{Reflect, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};
use web_sys::CryptoKey;
use worker::{console_error, SqlStorage};

use super::boundary;
use super::key_storage::{sql_error, KeyStorage, StorageError};
use super::seal;
use crate::core::formats::chunk_manifest::ChunkManifest;
use crate::core::formats::chunks::{self, chunk_fault as fault, sql, CHUNK_BYTES};
use crate::core::formats::key_record::{Completed, KeyRecord};
use crate::core::formats::seal::{Envelope, KeyRing};

/// The opener of `manifest`'s chunks in `store`, sealed under the caller scope's salt
/// `scope`, whose head is `sealed_head`: every chunk of an answer is sealed under its head's
/// ring key.
async fn opener(
    store: &KeyStorage,
    scope: &[u8],
    sealed_head: &[u8],
    manifest: &ChunkManifest,
) -> Result<Opener, StorageError> {
    let key_id = Envelope::decode(sealed_head).map(|envelope| envelope.key_id).unwrap_or_default();
    let object_id = store.object_id();
    let context = chunks::chunk_seal(scope, object_id, manifest.attempt, 0, manifest.count());
    let key = store.sealer.key(store.ring(), &context, &key_id).await?;
    Ok(Opener { key, key_id, scope: scope.to_vec(), object_id: object_id.to_owned() })
}

/// Opens sealed chunks of one record: the derived key and what each chunk is bound to.
#[derive(Clone)]
pub struct Opener {
    key: CryptoKey,
    key_id: String,
    scope: Vec<u8>,
    object_id: String,
}

/// A chunked answer whose rows this object life has checked against its manifest.
#[derive(Clone)]
pub struct Checked {
    pub attempt: u64,
    pub opener: Option<Opener>,
}

/// Where a replay reads a chunked body from.
#[derive(Clone)]
pub struct Source {
    sql: SqlStorage,
    manifest: ChunkManifest,
    opener: Option<Opener>,
}

impl Source {
    /// The opener comes from this instance's check of the same answer (without one, a
    /// sealed row fails `core::formats::chunks::check_len`: no ciphertext is sent).
    pub fn new(sql: SqlStorage, manifest: ChunkManifest, checked: Option<&Checked>) -> Source {
        let opener = checked.filter(|c| c.attempt == manifest.attempt).and_then(|c| c.opener.clone());
        Source { sql, manifest, opener }
    }

    /// The body as a stream that reads, checks (and opens) one row per pull. A row that is
    /// missing or does not match errors the stream: the replay breaks off, never completes
    /// with wrong bytes.
    pub fn stream(&self) -> web_sys::ReadableStream {
        let source = self.clone();
        let count = self.manifest.count() as u32;
        let stream = boundary::pulled_stream(count, move |index| {
            let source = source.clone();
            wasm_bindgen_futures::future_to_promise(async move {
                source.chunk(index as usize).await.map(JsValue::from).map_err(|error| {
                    console_error!("replaying a chunked answer: {}", error);
                    JsValue::from(js_sys::Error::new("stored answer chunk unreadable"))
                })
            })
        });
        fixed_length(&stream, self.manifest.body_len).unwrap_or(stream)
    }

    /// Chunk `index` of the body, checked against the manifest and opened.
    async fn chunk(&self, index: usize) -> Result<Uint8Array, StorageError> {
        let row = chunks::checked_row(&self.manifest, index, digested_row(&self.sql, index).await?)?;
        let plain = match &self.opener {
            None => row,
            Some(opener) => opener.open(&self.manifest, index, &row).await?,
        };
        chunks::check_len(&self.manifest, index, plain.length().into())?;
        Ok(plain)
    }
}

impl Opener {
    async fn open(
        &self,
        manifest: &ChunkManifest,
        index: usize,
        row: &Uint8Array,
    ) -> Result<Uint8Array, StorageError> {
        let total = row.length() as usize;
        let head = row.subarray(0, total.min(Envelope::MAX_HEADER_LEN) as u32).to_vec();
        let (nonce, at) = chunks::chunk_envelope(&head, total, &self.key_id, index)?;
        let context =
            chunks::chunk_seal(&self.scope, &self.object_id, manifest.attempt, index, manifest.count());
        Ok(seal::open_view(&self.key, &nonce, &context.aad, &row.subarray(at as u32, total as u32)).await?)
    }
}

/// `stream` piped through workerd's `FixedLengthStream(len)`: the replay then says its
/// `Content-Length`, as the original answer did, and a stream that ends short is an error
/// rather than a shorter body. `None` where the runtime has no such stream.
fn fixed_length(stream: &web_sys::ReadableStream, len: u64) -> Option<web_sys::ReadableStream> {
    let fixed = worker::worker_sys::FixedLengthStream::new(u32::try_from(len).ok()?).ok()?;
    // `pipeThrough` marks its pipe's promise as handled: a broken row aborts the pipe, which
    // errors the readable side (the replay breaks off) and leaves no unhandled rejection.
    let pipe_through: js_sys::Function = Reflect::get(stream, &"pipeThrough".into()).ok()?.dyn_into().ok()?;
    pipe_through.call1(stream, &fixed).ok()?.dyn_into().ok()
}

/// Stores a completed answer whose body is over one row: the body in chunk rows, the
/// record (status, headers and manifest, sealed when `sealing`, the ring and the caller
/// scope's salt, is given) as its key-value value, in one transaction. Returns the record as
/// this object keeps it (`core::formats::chunks::chunked_records`) and the check its rows pass.
pub async fn put(
    store: &KeyStorage,
    done: &Completed,
    sealing: Option<(&KeyRing, &[u8])>,
    still_current: impl Fn() -> bool,
    fail_half_way: bool,
) -> Result<(KeyRecord, Checked), StorageError> {
    let body = &done.response.body;
    let ranges = chunks::plan(body.len(), CHUNK_BYTES);
    let (count, attempt) = (ranges.len(), done.attempt.0);
    let (mut rows, mut digests) = (Vec::with_capacity(count), Vec::with_capacity(count));
    // Unsealed, one copy of the body in JavaScript; each row is a view of it.
    let whole = Uint8Array::from(if sealing.is_none() { body.as_slice() } else { &[] });
    for (index, range) in ranges.into_iter().enumerate() {
        let row = match &sealing {
            Some((ring, scope)) => {
                let context = chunks::chunk_seal(scope, store.object_id(), attempt, index, count);
                Uint8Array::from(store.sealer.seal(ring, &context, &body[range]).await?.as_slice())
            }
            None => whole.subarray(range.start as u32, range.end as u32),
        };
        digests.push(seal::sha256(&row).await?);
        rows.push(row);
    }
    let manifest = chunks::manifest(body.len(), attempt, digests);
    let (opener, sealed_head) = match &sealing {
        None => (None, None),
        Some((ring, scope)) => {
            let context = chunks::head_seal(scope, store.object_id(), &manifest);
            let sealed = store.sealer.seal(ring, &context, &done.response.head().encode()).await?;
            (Some(opener(store, scope, &sealed, &manifest).await?), Some(sealed))
        }
    };
    let (stored, kept) = chunks::chunked_records(done, manifest, sealed_head);
    let record = stored.encode();
    // Every await above let other requests in: the outcome is written only if its claim
    // is still the live one (a purge and a new claim may have come meanwhile).
    if !still_current() {
        return Err(StorageError::Fenced);
    }
    // From here to the end of the transaction nothing is awaited.
    let sql = store.sql();
    let mut write = || -> Result<(), StorageError> {
        sql.exec(sql::CREATE_TABLE, None).map_err(sql_error)?;
        sql.exec(sql::CLEAR, None).map_err(sql_error)?;
        for (index, row) in rows.iter().enumerate() {
            // The row as JavaScript holds it (`exec_raw`): no copy through Wasm memory.
            sql.exec_raw(sql::INSERT, vec![JsValue::from(index as f64), JsValue::from(row)])
                .map_err(sql_error)?;
            // CHUNK_WRITE_FAULT_INJECTION (tests only): a throw after some rows are written,
            // which must roll every statement of the transaction back.
            if fail_half_way && chunks::fails_after_row(index, rows.len()) {
                return Err(StorageError::Sql("CHUNK_WRITE_FAULT_INJECTION: fails on purpose".to_owned()));
            }
        }
        store.put_encoded(&record)
    };
    // A legacy row's removal, if any, is rolled back with the rest.
    store.in_transaction(&mut write)?;
    Ok((kept, Checked { attempt, opener }))
}

/// Opens a chunked record read from storage (its head, when sealed, under the caller scope's
/// salt `scope`) and checks every row (`core::formats::chunks::check_rows`). Returns the
/// record as this object keeps it (head opened, no body) and the check.
pub async fn open(
    store: &KeyStorage,
    done: &Completed,
    scope: &[u8],
) -> Result<(Completed, Checked), StorageError> {
    let manifest = done.chunks.as_ref().ok_or_else(|| fault("not a chunked answer".to_owned()))?;
    let (head, opener) = match &done.sealed_answer {
        None => (done.response.clone(), None),
        Some(sealed) => {
            let context = chunks::head_seal(scope, store.object_id(), manifest);
            let plain = store.sealer.open(store.ring(), &context, sealed).await?;
            let head = chunks::opened_head(&plain).map_err(fault)?;
            (Arc::new(head), Some(opener(store, scope, sealed, manifest).await?))
        }
    };
    let sql = store.sql();
    let rows = count_rows(sql)?;
    let mut read = Vec::with_capacity(manifest.count());
    for index in 0..manifest.count() {
        read.push(digested_row(sql, index).await?.map(|(_, digest)| digest));
    }
    chunks::check_rows(manifest, &read, rows)?;
    let opened = Completed { response: head, sealed_answer: None, ..done.clone() };
    Ok((opened, Checked { attempt: manifest.attempt, opener }))
}
/// Deletes every chunk row (synchronously; a missing table is nothing to delete).
pub fn delete(sql: &SqlStorage) -> Result<(), StorageError> {
    query(sql, sql::CLEAR, Vec::new()).map(drop)
}

/// Row `index` ([`read_row`]) with the SHA-256 of its stored bytes, or `None`.
async fn digested_row(
    sql: &SqlStorage,
    index: usize,
) -> Result<Option<(Uint8Array, [u8; 32])>, StorageError> {
    let Some(row) = read_row(sql, index)? else { return Ok(None) };
    let digest = seal::sha256(&row).await?;
    Ok(Some((row, digest)))
}

/// Row `index`'s bytes as the runtime returns them (an `ArrayBuffer`, viewed), or `None`.
fn read_row(sql: &SqlStorage, index: usize) -> Result<Option<Uint8Array>, StorageError> {
    let Some(row) = query(sql, sql::SELECT_ONE, vec![JsValue::from(index as f64)])? else { return Ok(None) };
    let bytes = Reflect::get(&row, &JsValue::from_str("bytes")).map_err(sql_error)?;
    if let Some(buffer) = bytes.dyn_ref::<js_sys::ArrayBuffer>() {
        return Ok(Some(Uint8Array::new(buffer)));
    }
    bytes.dyn_into::<Uint8Array>().map(Some).map_err(|_| fault(format!("chunk {index} is not a blob")))
}

fn count_rows(sql: &SqlStorage) -> Result<usize, StorageError> {
    let n =
        query(sql, sql::COUNT, Vec::new())?.and_then(|row| Reflect::get(&row, &"n".into()).ok()?.as_f64());
    Ok(n.unwrap_or(0.0) as usize)
}

/// Runs a query and returns its first row as a JavaScript object (`worker`'s `SqlCursor` as
/// an iterator of rows: no copy of its bytes into Wasm). A missing table reads as no rows.
fn query(sql: &SqlStorage, statement: &str, bindings: Vec<JsValue>) -> Result<Option<JsValue>, StorageError> {
    match sql.exec_raw(statement, bindings).map_err(sql_error) {
        Ok(mut cursor) => Iterator::next(&mut cursor).transpose().map_err(sql_error),
        Err(StorageError::Sql(error)) if sql::no_table(&error) => Ok(None),
        Err(error) => Err(error),
    }
}
