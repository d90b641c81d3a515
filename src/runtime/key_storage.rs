//! The key object's storage, as one piece: the record (its key-value value, and the legacy
//! row read after it), its sealed answer (`seal`), a large answer's chunk rows
//! (`chunks`), a job's or a claim's lookup's stored request (`seal_request`, `open_request`),
//! the alarm, and the test-only storage faults (`DELETE_FAULT_INJECTION`,
//! `CHUNK_WRITE_FAULT_INJECTION`).
//!
//! It reads, opens, seals and writes what it is handed, and remembers only what storage
//! itself needs (whether a legacy row may be stored, whether the last read held an answer in
//! the clear, which chunked answer this instance has checked). Which record to write and
//! when is the key's driver's (`core::key_rules::key_state`); the object (`runtime::object`) keeps the
//! driver, and hands this store each change the driver asks for.
//!
//! ## The stored record
//!
//! Its two layouts, their keys and SQL, and what a read learns: `core::formats::record_layout`.
//! Every record call is synchronous (SQLite-backed Durable Objects run SQL and their
//! key-value API in the same turn), so a claim is written before the handler awaits
//! anything, and the runtime's output gate holds the origin fetch until the write is durable.

use std::cell::{Cell, OnceCell, RefCell};
use std::sync::Arc;

use js_sys::Uint8Array;
use wasm_bindgen::{JsCast, JsValue};
use worker::{console_error, console_log, Env, ScheduledTime, SqlStorage, SqlStorageValue, State, Storage};

use super::bindings::{self, SyncKv};
use super::chunks;
use super::seal::{SealError, Sealer};
use super::settings;
use crate::core::edge_rules::log::{event_line, StorageAccess as Access, StorageCalls};
use crate::core::formats::fingerprint::Digest256;
use crate::core::formats::job::StoredRequest;
use crate::core::formats::key_record::{KeyRecord, StoredResponse};
use crate::core::formats::record_layout::{self, legacy_sql, LegacyRow, Stored, KV_KEY};
use crate::core::formats::seal::{self, opening, KeyRing, Opening, SealContext};
use crate::core::vocabulary::fault::transaction_outcome;
pub use crate::core::vocabulary::fault::StorageError;

/// One object's storage (see the module doc).
pub(super) struct KeyStorage {
    state: State,
    env: Env,
    /// The object id as text, for log lines and as sealing's associated data.
    id: OnceCell<String>,
    storage: OnceCell<Storage>,
    sql: OnceCell<SqlStorage>,
    kv: OnceCell<SyncKv>,
    /// Seals and opens the key's stored answer when `STORAGE_ENCRYPTION_KEYS` is set.
    pub sealer: Sealer,
    /// The caller scope's key salt, from the first key request (it never changes: the
    /// object's name is derived from the scope).
    pub scope_salt: OnceCell<Digest256>,
    /// Record deletions of this instance so far (for `DELETE_FAULT_INJECTION`).
    deletions: Cell<u32>,
    /// Chunked answer writes of this instance so far (for `CHUNK_WRITE_FAULT_INJECTION`).
    chunk_writes: Cell<u32>,
    /// The chunked answer whose rows this instance has checked (`runtime::chunks`).
    chunk_check: RefCell<Option<chunks::Checked>>,
    /// Whether the record as last read from storage held an answer in the clear (see
    /// `core::formats::seal::opening`); cleared by every write of this instance.
    read_in_clear: Cell<bool>,
    /// Whether a row of the legacy table may be stored (the record's two layouts, above).
    legacy_row: Cell<LegacyRow>,
    /// Every call into storage this instance made, counted in [`KeyStorage::count`]: what
    /// a request's line reports is the difference across its handling.
    calls: Cell<StorageCalls>,
}

/// A record opened after it was read (its sealed answer, or its chunk rows checked): what
/// the object keeps in memory, if storage still holds what was opened
/// (`core::formats::seal::still_stored`).
pub(super) struct Opened {
    record: KeyRecord,
    checked: Option<chunks::Checked>,
}

impl KeyStorage {
    pub fn new(state: State, env: Env) -> KeyStorage {
        KeyStorage {
            state,
            env,
            id: OnceCell::new(),
            storage: OnceCell::new(),
            sql: OnceCell::new(),
            kv: OnceCell::new(),
            sealer: Sealer::default(),
            scope_salt: OnceCell::new(),
            deletions: Cell::new(0),
            chunk_writes: Cell::new(0),
            chunk_check: RefCell::new(None),
            read_in_clear: Cell::new(false),
            legacy_row: Cell::new(LegacyRow::Possible),
            calls: Cell::new(StorageCalls::default()),
        }
    }

    /// The storage calls this instance has made so far (see [`StorageCalls::since`]).
    pub fn calls(&self) -> StorageCalls {
        self.calls.get()
    }

    /// Counts one call into storage, as a read or a write: each operation below that reaches
    /// storage (the record read, written or deleted, a chunked answer's rows, the alarm,
    /// `deleteAll`) counts itself here, once.
    fn count(&self, access: Access) {
        self.calls.set(self.calls.get().and(access));
    }

    /// Reads the stored record, synchronously (in the caller's turn): the key-value value
    /// first, the legacy row only without one (`core::formats::record_layout::read`).
    pub fn load(&self) -> Result<Option<KeyRecord>, StorageError> {
        self.count(Access::Read);
        let value =
            self.kv().get(KV_KEY).map_err(sql_error).map(|value| match value.dyn_ref::<Uint8Array>() {
                _ if value.is_undefined() => Stored::Absent,
                Some(bytes) => Stored::Bytes(bytes.to_vec()),
                None => Stored::NotBytes,
            });
        let read = record_layout::read(value, || self.read_legacy_row());
        if read.from_legacy_row() {
            console_log!("{}", event_line("legacy-record-read", self.object_id(), &[]));
        }
        self.legacy_row.set(read.legacy_row);
        self.read_in_clear.set(read.in_clear());
        read.record
    }

    /// The legacy row, if any. Whether the legacy table exists is asked before it is read: a
    /// new object (every first attempt) would otherwise meet "no such table" as a thrown
    /// JavaScript error, with its stack trace built and turned into a string, on the path
    /// that creates objects.
    fn read_legacy_row(&self) -> Result<Stored, StorageError> {
        if !self.legacy_table_exists()? {
            return Ok(Stored::Absent);
        }
        let cursor = self.sql().exec(legacy_sql::SELECT, None).map_err(sql_error)?;
        Ok(match cursor.raw().next().transpose().map_err(sql_error)?.map(|row| row.into_iter().next()) {
            None => Stored::Absent,
            Some(Some(SqlStorageValue::Blob(bytes))) => Stored::Bytes(bytes),
            Some(_) => Stored::NotBytes,
        })
    }

    /// Deletes the record (value and legacy row) and any chunk rows of a large answer at
    /// once, synchronously, in one transaction (so nothing can read part of them after it),
    /// as for a record read past its expiry. The alarm stays; the next alarm deletes
    /// everything. A row is looked for whatever `legacy_row` says: a deletion must leave
    /// nothing a later read could take for the key's record, even where a rollback past the
    /// rule of docs/deploy.md left a row beside the value. Deletions are rare.
    pub fn delete_now(&self) -> Result<(), StorageError> {
        self.count(Access::Write);
        self.legacy_row.set(LegacyRow::Possible);
        self.in_transaction(&mut || {
            self.remove_legacy_row()?;
            self.kv().delete(KV_KEY).map_err(sql_error)?;
            chunks::delete(self.sql())
        })
    }

    /// Opens `record` as read from storage: its sealed answer, or its chunked answer's head
    /// and rows (checked once per instance). `None` when there is nothing to open; an error
    /// for one that cannot be opened or is refused (`core::formats::seal`, rule 4).
    pub async fn open(&self, record: &KeyRecord) -> Result<Option<Opened>, StorageError> {
        let KeyRecord::Completed(done) = record else { return Ok(None) };
        match self.opening(record) {
            Opening::Refuse => return Err(StorageError::stored_in_clear()),
            Opening::Nothing => return Ok(None),
            Opening::Open => {}
        }
        let opened = |record, checked| Opened { record: KeyRecord::Completed(record), checked };
        let salt = seal::opening_scope(done, self.scope_salt.get())?;
        if done.chunks.is_some() {
            self.count(Access::Read);
            let (record, checked) = chunks::open(self, done, salt).await?;
            return Ok(Some(opened(record, Some(checked))));
        }
        let Some(sealed) = &done.sealed_answer else { return Ok(None) };
        let context = seal::answer_opening(salt, self.object_id(), done);
        let record = seal::opened_answer(done, &self.sealer.open(self.ring(), &context, sealed).await?)?;
        Ok(Some(opened(record, None)))
    }

    /// Whether [`KeyStorage::open`] has anything to do with `record`: open it, check its
    /// chunk rows, or refuse it. When not, `open` answers `None` without awaiting, and a
    /// replay of it can be answered at once (`runtime::object`).
    pub fn has_to_open(&self, record: &KeyRecord) -> bool {
        self.opening(record) != Opening::Nothing
    }

    /// What `record` needs (`core::formats::seal::opening`), as storage held it and with
    /// what this instance has checked.
    fn opening(&self, record: &KeyRecord) -> Opening {
        let settings = settings::get(&self.env);
        let ring_set = matches!(settings.storage_keys, Ok(Some(_)));
        let checked = self.chunk_check.borrow().as_ref().map(|checked| checked.attempt);
        opening(record, self.read_in_clear.get(), ring_set, settings.storage_allow_unsealed, checked)
    }

    /// Keeps what opening checked (a chunked answer's rows), once the object kept the
    /// opened record.
    pub fn keep(&self, opened: Opened) -> KeyRecord {
        if let Some(checked) = opened.checked {
            *self.chunk_check.borrow_mut() = Some(checked);
        }
        opened.record
    }

    /// Writes `record` (a claim, a job, an outcome); returns the record as the object keeps
    /// it in memory. A claim is written at once, in the caller's turn, before it awaits
    /// anything. A completed answer is sealed first when `STORAGE_ENCRYPTION_KEYS` is set
    /// (an await), and written only if `still_current()` still holds after that await, in
    /// the same turn as the write; an answer over one row goes into chunk rows with its
    /// record, in one transaction, and is kept as its head and manifest, not its body.
    pub async fn put(
        &self,
        record: &KeyRecord,
        still_current: impl Fn() -> bool,
    ) -> Result<KeyRecord, StorageError> {
        self.read_in_clear.set(false);
        let KeyRecord::Completed(done) = record else {
            self.put_record(record)?;
            return Ok(record.clone());
        };
        let settings = settings::get(&self.env);
        let keys = settings.storage_keys.as_ref().map(Option::as_ref).map_err(|error| error.detail.as_str());
        let sealing = seal::answer_sealing(keys, self.scope_salt.get())?;
        if crate::core::formats::chunks::needs_chunks(&done.response) {
            // CHUNK_WRITE_FAULT_INJECTION (tests only): this write fails half-way.
            let fail_half_way = settings.fault_injection.chunk_write_fails(next(&self.chunk_writes));
            self.count(Access::Write);
            let (cached, checked) = chunks::put(self, done, sealing, still_current, fail_half_way).await?;
            *self.chunk_check.borrow_mut() = Some(checked);
            return Ok(cached);
        }
        let sealed = match sealing {
            None => None,
            Some((ring, salt)) => {
                // Sealed bound to its attempt and fingerprint (record tag 5).
                let context = seal::answer_seal(salt, self.object_id(), done);
                let sealed = self.sealer.seal(ring, &context, &done.response.encode()).await?;
                Some(seal::with_sealed_answer(done, sealed))
            }
        };
        // The sealing await let other requests in: write only if the claim is still the
        // live one, checked in the same turn as the write.
        if !still_current() {
            return Err(StorageError::Fenced);
        }
        self.put_record(sealed.as_ref().unwrap_or(record))?;
        Ok(record.clone())
    }

    /// Writes the record: one key-value `put`, and, when a legacy row may be stored, the
    /// row's removal in the same transaction (a claim whose value could not be written
    /// keeps the row it would have replaced).
    fn put_record(&self, record: &KeyRecord) -> Result<(), StorageError> {
        self.count(Access::Write);
        let encoded = record.encode();
        if !self.legacy_row.get().removed_by_write() {
            return self.put_encoded(&encoded);
        }
        self.in_transaction(&mut || self.put_encoded(&encoded))
    }

    /// Writes an encoded record (see [`KeyStorage::put_record`]), removing a legacy row
    /// unless there is none. Callers that may remove one run it in a transaction.
    pub fn put_encoded(&self, record: &[u8]) -> Result<(), StorageError> {
        self.remove_legacy_row()?;
        self.kv().put(KV_KEY, &Uint8Array::from(record)).map_err(sql_error)
    }

    /// Deletes the legacy row unless there is none.
    fn remove_legacy_row(&self) -> Result<(), StorageError> {
        if self.legacy_row.get().removed_by_write() {
            if self.legacy_table_exists()? {
                self.sql().exec(legacy_sql::DELETE_ROW, None).map_err(sql_error)?;
            }
            self.legacy_row.set(LegacyRow::Absent);
        }
        Ok(())
    }

    /// Whether the legacy table exists (a read of the schema: no thrown error when it does
    /// not).
    fn legacy_table_exists(&self) -> Result<bool, StorageError> {
        let cursor = self.sql().exec(legacy_sql::TABLE_EXISTS, None).map_err(sql_error)?;
        Ok(cursor.raw().next().transpose().map_err(sql_error)?.is_some())
    }

    /// Runs `write` in one transaction (`transactionSync`): every statement of it is rolled
    /// back when it fails, and its error returned (`core::vocabulary::fault::
    /// transaction_outcome`). The legacy row's removal is rolled back with it, so a failed
    /// transaction leaves a legacy row possible again.
    pub fn in_transaction(
        &self,
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
        let thrown = bindings::transaction_sync(self.raw_storage(), &mut callback).err();
        transaction_outcome(thrown.map(|thrown| worker::Error::from(thrown).to_string()), failure)
            .inspect_err(|_| self.legacy_row.set(LegacyRow::Possible))
    }

    /// The ring of `STORAGE_ENCRYPTION_KEYS`, where it is set (and valid).
    pub fn ring(&self) -> Option<&'static KeyRing> {
        settings::get(&self.env).storage_keys.as_ref().ok().and_then(Option::as_ref)
    }

    /// Seals `request` (a job's, or a claim's lookup) for this object, bound to its claim's
    /// time and fingerprint (`SealContext::request`), under the ring's newest key.
    pub async fn seal_request(
        &self,
        (claimed_at, fingerprint): (u64, &Digest256),
        request: &StoredRequest,
    ) -> Result<Vec<u8>, SealError> {
        let ring = self.ring().ok_or_else(|| SealError("no STORAGE_ENCRYPTION_KEYS".to_owned()))?;
        let context = SealContext::request(self.object_id(), Some((claimed_at, &fingerprint.0)));
        self.sealer.seal(ring, &context, &request.encode()).await
    }

    /// Opens a request sealed by [`KeyStorage::seal_request`]; `binding` `None` for one
    /// sealed by an earlier release (job version 1).
    pub async fn open_request(
        &self,
        binding: Option<(u64, &Digest256)>,
        sealed: &[u8],
    ) -> Result<StoredRequest, SealError> {
        let context =
            SealContext::request(self.object_id(), binding.map(|(at, fingerprint)| (at, &fingerprint.0)));
        let plaintext = self.sealer.open(self.ring(), &context, sealed).await?;
        StoredRequest::decode(&plaintext)
            .ok_or_else(|| SealError("the opened request is unreadable".to_owned()))
    }

    /// Deletes everything the key stored: the record, its chunk rows, every table and its
    /// alarm (`deleteAll`). A released or expired key leaves nothing behind.
    pub async fn delete_all(&self) -> Result<(), StorageError> {
        self.read_in_clear.set(false);
        // Until `deleteAll()` has succeeded, a legacy row may still be there.
        self.legacy_row.set(LegacyRow::Possible);
        if let Some(why) = settings::get(&self.env).fault_injection.deletion_fails(next(&self.deletions)) {
            return Err(StorageError::Sql(why));
        }
        self.count(Access::Write);
        self.raw_storage().delete_all().await.map_err(sql_error)?;
        self.legacy_row.set(LegacyRow::Absent);
        Ok(())
    }

    /// Cancels the alarm (a purged job's).
    pub async fn delete_alarm(&self) -> bool {
        self.count(Access::Write);
        self.raw_storage().delete_alarm().await.is_ok()
    }

    /// Sets the alarm, and once more in the same request if that fails; whether it is set.
    /// A caller that cannot do without it fails closed. `setAlarm` is called when this is
    /// first polled, in the caller's turn, so that a record written in the same turn and the
    /// alarm reach storage as one durable write.
    pub async fn set_alarm(&self, at: u64) -> bool {
        for again in [true, false] {
            self.count(Access::Write);
            let when = ScheduledTime::new(js_sys::Date::new(&(at as f64).into()));
            // What the runtime threw, as `Name: message`.
            let Err(error) = self.raw_storage().set_alarm(when).await else { return true };
            let failed = if again { "failed, trying again" } else { "failed twice" };
            console_error!("object {}: setting the alarm {failed}: {}", self.short_id(), error);
        }
        false
    }

    /// Where a replay of `stored` reads its body from, when it is `current`'s chunked
    /// answer (`runtime::chunks`); `None` for an answer held whole in memory.
    pub fn chunk_source(
        &self,
        current: Option<&KeyRecord>,
        stored: &Arc<StoredResponse>,
    ) -> Option<chunks::Source> {
        let manifest = current?.chunks_of(stored)?;
        self.count(Access::Read);
        Some(chunks::Source::new(self.sql().clone(), manifest.clone(), self.chunk_check.borrow().as_ref()))
    }

    /// The object id as text (64 hex digits), read once.
    pub fn object_id(&self) -> &str {
        self.id.get_or_init(|| self.state.id().to_string())
    }

    /// The object id's first 16 digits, for log lines.
    pub fn short_id(&self) -> &str {
        &self.object_id()[..16]
    }

    pub fn sql(&self) -> &SqlStorage {
        self.sql.get_or_init(|| self.raw_storage().sql())
    }

    fn raw_storage(&self) -> &Storage {
        self.storage.get_or_init(|| self.state.storage())
    }

    fn kv(&self) -> &SyncKv {
        self.kv.get_or_init(|| bindings::sync_kv(self.raw_storage()))
    }
}

/// Counts one more of an instance's operations in `counter`; how many came before it.
fn next(counter: &Cell<u32>) -> u32 {
    let before = counter.get();
    counter.set(before.saturating_add(1));
    before
}

impl From<SealError> for StorageError {
    fn from(error: SealError) -> StorageError {
        StorageError::Seal(error.0)
    }
}

/// A failed storage call as the log shows it (`Name: message`).
pub fn sql_error(error: impl Into<worker::Error>) -> StorageError {
    StorageError::Sql(error.into().to_string())
}
