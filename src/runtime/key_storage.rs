//! The key object's storage, as one piece: the record (`storage`: its key-value value, and
//! the legacy row read after it), its sealed answer (`seal`), a large answer's chunk rows
//! (`chunks`), the alarm, and the test-only storage faults (`DELETE_FAULT_INJECTION`,
//! `CHUNK_WRITE_FAULT_INJECTION`).
//!
//! It reads, opens, seals and writes what it is handed, and remembers only what storage
//! itself needs (whether a legacy row may be stored, whether the last read held an answer in
//! the clear, which chunked answer this instance has checked). Which record to write and
//! when is the key's driver's (`core::key_rules::key_state`); the object (`runtime::object`) keeps the
//! driver, and hands this store each change the driver asks for.

use std::cell::{Cell, OnceCell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use worker::{console_error, console_log, ScheduledTime, SqlStorage, State, Storage};

use super::bindings::{self, SyncKv};
use super::chunks;
use super::seal::Sealer;
use super::settings;
use super::storage::{self, sql_error, LegacyRow, StorageError, Stores};
use crate::core::edge_rules::log::{event_line, StorageCalls};
use crate::core::formats::fingerprint::Digest256;
use crate::core::formats::key_record::{Completed, KeyRecord, StoredResponse};
use crate::core::formats::seal::{refuses_unsealed, KeyRing};
use worker::Env;

/// An alarm whose `setAlarm` call is made ([`KeyStorage::issue_alarm`]), to be awaited
/// ([`KeyStorage::confirm_alarm`]).
pub(super) type IssuedAlarm<'a> = Pin<Box<dyn Future<Output = worker::Result<()>> + 'a>>;

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
    /// `core::formats::seal::refuses_unsealed`); cleared by every write of this instance.
    read_in_clear: Cell<bool>,
    /// Whether a row of the legacy table may be stored (`runtime::storage`'s two layouts).
    legacy_row: Cell<LegacyRow>,
    /// Every call into storage this instance made, counted in [`KeyStorage::stores`]: what
    /// a request's line reports is the difference across its handling.
    calls: Cell<StorageCalls>,
}

/// Whether a call into storage reads or writes (an alarm set or deleted is a write).
#[derive(Clone, Copy)]
enum Access {
    Read,
    Write,
}

/// A record opened after it was read (its sealed answer, or its chunk rows checked): what
/// the object keeps in memory, if storage still holds what was opened.
pub(super) struct Opened {
    record: KeyRecord,
    checked: Option<chunks::Checked>,
}

impl Opened {
    /// Whether `current` (the record as the object knows it now) is still `opened_from`,
    /// the record that was opened: an alarm, a purge or another opener may have replaced it
    /// meanwhile.
    pub fn still_stored(opened_from: &KeyRecord, current: Option<&KeyRecord>) -> bool {
        matches!((opened_from, current), (KeyRecord::Completed(was), Some(KeyRecord::Completed(now)))
            if now.sealed_answer == was.sealed_answer && now.chunks == was.chunks)
    }
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

    /// Reads the stored record (synchronous: in the caller's turn).
    pub fn load(&self) -> Result<Option<KeyRecord>, StorageError> {
        let stored = storage::load(self.stores(Access::Read), &self.legacy_row)?;
        if stored.is_some() && self.legacy_row.get() == LegacyRow::Possible {
            // A key an older release stored (`runtime::storage`): the operator sees that such
            // keys are still retried, before a release stops reading their layout.
            console_log!("{}", event_line("legacy-record-read", self.object_id(), &[]));
        }
        let in_clear = matches!(&stored, Some(KeyRecord::Completed(Completed { sealed_answer: None, .. })));
        self.read_in_clear.set(in_clear);
        Ok(stored)
    }

    /// Deletes the record at once (synchronous), as for a record read past its expiry.
    pub fn delete_now(&self) -> Result<(), StorageError> {
        storage::delete(self.stores(Access::Write), &self.legacy_row)
    }

    /// Opens `record` as read from storage: its sealed answer, or its chunked answer's head
    /// and rows (checked once per instance). `None` when there is nothing to open. A record
    /// that cannot be opened, or that is stored in the clear while sealing is required, is an
    /// error: never treated as absent.
    pub async fn open(&self, record: &KeyRecord) -> Result<Option<Opened>, StorageError> {
        if self.refused_in_clear(record) {
            return Err(StorageError::Seal(
                "an answer is stored in the clear while STORAGE_ENCRYPTION_KEYS is set (STORAGE_ALLOW_UNSEALED is not true)"
                    .to_owned(),
            ));
        }
        let KeyRecord::Completed(done) = record else { return Ok(None) };
        if !self.needs_opening(record) {
            return Ok(None);
        }
        let ring = settings::get(&self.env).storage_keys.as_ref().ok().and_then(Option::as_ref);
        let opened = |record, checked| Opened { record: KeyRecord::Completed(record), checked };
        if done.chunks.is_some() {
            // Only a sealed head needs the scope's key (an unsealed answer is checked without it).
            let salt = match (&done.sealed_answer, self.scope_salt.get()) {
                (Some(_), None) => return Err(no_scope_salt()),
                (_, salt) => salt.map_or(&[][..], |salt| &salt.0[..]),
            };
            let sealing =
                chunks::Sealing { sealer: &self.sealer, ring, scope: salt, object_id: self.object_id() };
            let (record, checked) = chunks::open(self.stores(Access::Read).sql, done, sealing).await?;
            return Ok(Some(opened(record, Some(checked))));
        }
        let Some(sealed) = &done.sealed_answer else { return Ok(None) };
        let salt = self.scope_salt.get().ok_or_else(no_scope_salt)?;
        let binding = done.sealed_bound.then_some((done.attempt, &done.fingerprint));
        let answer = self
            .sealer
            .open(ring, &salt.0, self.object_id(), binding, sealed)
            .await
            .map_err(|error| StorageError::Seal(error.to_string()))?;
        let record = Completed { response: Arc::new(answer), sealed_answer: None, ..done.clone() };
        Ok(Some(opened(record, None)))
    }

    /// Whether [`KeyStorage::open`] has anything to do with `record`: open it, check its
    /// chunk rows, or refuse it. When not, `open` answers `None` without awaiting, and a
    /// replay of it can be answered at once (`runtime::object`).
    pub fn has_to_open(&self, record: &KeyRecord) -> bool {
        self.refused_in_clear(record) || self.needs_opening(record)
    }

    /// Whether `record`, as storage held it, is in the clear while sealing is required. Only
    /// what storage held: an answer this instance opened is kept unsealed in memory.
    fn refused_in_clear(&self, record: &KeyRecord) -> bool {
        let settings = settings::get(&self.env);
        let ring_set = matches!(settings.storage_keys, Ok(Some(_)));
        self.read_in_clear.get() && refuses_unsealed(ring_set, settings.storage_allow_unsealed, record)
    }

    /// Whether `record` holds a sealed answer, or chunk rows this instance has not checked.
    fn needs_opening(&self, record: &KeyRecord) -> bool {
        let KeyRecord::Completed(done) = record else { return false };
        let checked = || self.chunk_check.borrow().as_ref().map(|checked| checked.attempt);
        done.sealed_answer.is_some()
            || done.chunks.as_ref().is_some_and(|manifest| checked() != Some(manifest.attempt))
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
            storage::put(self.stores(Access::Write), record, &self.legacy_row)?;
            return Ok(record.clone());
        };
        let settings = settings::get(&self.env);
        let ring = match &settings.storage_keys {
            Ok(ring) => ring.as_ref(),
            // Never store in the clear what the operator asked to seal.
            Err(problem) => return Err(StorageError::Seal(problem.detail.clone())),
        };
        if crate::core::formats::chunks::needs_chunks(&done.response) {
            let sealing = match ring {
                None => None,
                Some(ring) => {
                    let salt = self.scope_salt.get().ok_or_else(no_scope_salt)?;
                    Some(chunks::Sealing {
                        sealer: &self.sealer,
                        ring: Some(ring),
                        scope: &salt.0,
                        object_id: self.object_id(),
                    })
                }
            };
            // CHUNK_WRITE_FAULT_INJECTION (tests only): this write fails half-way.
            let writes = self.chunk_writes.get();
            self.chunk_writes.set(writes.saturating_add(1));
            let fail_half_way = writes < settings.fault_injection.chunk_write_failures;
            let (cached, checked) = chunks::put(
                self.stores(Access::Write),
                &self.legacy_row,
                done,
                sealing,
                still_current,
                fail_half_way,
            )
            .await?;
            *self.chunk_check.borrow_mut() = Some(checked);
            return Ok(cached);
        }
        let sealed = match ring {
            None => None,
            Some(ring) => Some(self.sealed(ring, done).await?),
        };
        // The sealing await let other requests in: write only if the claim is still the
        // live one, checked in the same turn as the write.
        if !still_current() {
            return Err(StorageError::Fenced);
        }
        storage::put(self.stores(Access::Write), sealed.as_ref().unwrap_or(record), &self.legacy_row)?;
        Ok(record.clone())
    }

    /// `done` as it is stored when sealing is on: its answer sealed, bound to its attempt
    /// and fingerprint.
    async fn sealed(&self, ring: &KeyRing, done: &Completed) -> Result<KeyRecord, StorageError> {
        let salt = self.scope_salt.get().ok_or_else(no_scope_salt)?;
        let binding = (done.attempt, &done.fingerprint);
        let sealed = self
            .sealer
            .seal(ring, &salt.0, self.object_id(), binding, &done.response)
            .await
            .map_err(|error| StorageError::Seal(error.to_string()))?;
        Ok(KeyRecord::Completed(Completed {
            sealed_answer: Some(sealed),
            sealed_bound: true,
            ..done.clone()
        }))
    }

    /// Deletes everything the key stored: the record, its chunk rows, every table and its
    /// alarm (`deleteAll`). A released or expired key leaves nothing behind.
    pub async fn delete_all(&self) -> Result<(), StorageError> {
        self.read_in_clear.set(false);
        // Until `deleteAll()` has succeeded, a legacy row may still be there.
        self.legacy_row.set(LegacyRow::Possible);
        let deletions = self.deletions.get();
        self.deletions.set(deletions.saturating_add(1));
        if deletions < settings::get(&self.env).fault_injection.delete_failures {
            // As a `deleteAll()` that fails without deleting anything.
            return Err(StorageError::Sql(format!(
                "DELETE_FAULT_INJECTION: deletion {} fails on purpose",
                deletions + 1
            )));
        }
        self.stores(Access::Write).storage.delete_all().await.map_err(sql_error)?;
        self.legacy_row.set(LegacyRow::Absent);
        Ok(())
    }

    /// Cancels the alarm (a purged job's).
    pub async fn delete_alarm(&self) -> bool {
        self.stores(Access::Write).storage.delete_alarm().await.is_ok()
    }

    /// Sets the alarm (and tries once more if that fails); whether it is set.
    pub async fn set_alarm(&self, at: u64) -> bool {
        let alarm = self.issue_alarm(at);
        self.confirm_alarm(at, alarm).await
    }

    /// Calls `setAlarm` now (`worker`'s `Storage::set_alarm`, polled once so that its call
    /// is made in this turn), without awaiting it: issued in the same turn as a record write,
    /// the two reach storage as one durable write.
    pub fn issue_alarm(&self, at: u64) -> IssuedAlarm<'_> {
        let when = ScheduledTime::new(js_sys::Date::new(&(at as f64).into()));
        let mut pending: IssuedAlarm<'_> = Box::pin(self.stores(Access::Write).storage.set_alarm(when));
        // The first poll makes the call; what it answers is read when the alarm is confirmed
        // (a promise settles in a later turn, and its waker is the one of that await).
        if let Poll::Ready(done) = pending.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            pending = Box::pin(std::future::ready(done));
        }
        pending
    }

    /// Awaits an issued alarm; when it failed, sets it once more in the same request.
    /// Whether the alarm is set. A caller that cannot do without it fails closed.
    pub async fn confirm_alarm(&self, at: u64, alarm: IssuedAlarm<'_>) -> bool {
        // What the runtime threw, as `Name: message`.
        let Err(error) = alarm.await else { return true };
        console_error!("object {}: setting the alarm failed, trying again: {}", self.short_id(), error);
        match self.issue_alarm(at).await {
            Ok(()) => true,
            Err(error) => {
                console_error!("object {}: setting the alarm failed twice: {}", self.short_id(), error);
                false
            }
        }
    }

    /// Where a replay of `stored` reads its body from, when it is `current`'s chunked
    /// answer (`runtime::chunks`); `None` for an answer held whole in memory.
    pub fn chunk_source(
        &self,
        current: Option<&KeyRecord>,
        stored: &Arc<StoredResponse>,
    ) -> Option<chunks::Source> {
        let Some(KeyRecord::Completed(done)) = current else { return None };
        let manifest = done.chunks.as_ref().filter(|_| Arc::ptr_eq(&done.response, stored))?;
        let sql = self.stores(Access::Read).sql.clone();
        Some(chunks::Source::new(sql, manifest.clone(), self.chunk_check.borrow().as_ref()))
    }

    /// The object id as text (64 hex digits), read once.
    pub fn object_id(&self) -> &str {
        self.id.get_or_init(|| self.state.id().to_string())
    }

    /// The object id's first 16 digits, for log lines.
    pub fn short_id(&self) -> &str {
        &self.object_id()[..16]
    }

    /// The one way to storage: every call counts here, as a read or a write (a record
    /// operation of `runtime::storage` or `runtime::chunks`, the alarm, `deleteAll`).
    fn stores(&self, access: Access) -> Stores<'_> {
        let StorageCalls { reads, writes } = self.calls.get();
        self.calls.set(match access {
            Access::Read => StorageCalls { reads: reads.wrapping_add(1), writes },
            Access::Write => StorageCalls { reads, writes: writes.wrapping_add(1) },
        });
        let storage = self.storage.get_or_init(|| self.state.storage());
        let sql = self.sql.get_or_init(|| storage.sql());
        let kv = self.kv.get_or_init(|| bindings::sync_kv(storage));
        Stores { storage, sql, kv }
    }
}

fn no_scope_salt() -> StorageError {
    StorageError::Seal("no scope salt".to_owned())
}
