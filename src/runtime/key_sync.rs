//! The object's record kept in step: the key's driver (`core::key_rules::key_state`, what the object
//! knows of its record) and storage (`runtime::key_storage`) are read and changed together
//! here, so that no handler can change one without the other.
//!
//! - The record is read from storage once per object life, then from memory; a record past
//!   its expiry is deleted when read (one synchronous statement), so a record whose alarm
//!   was missed is gone the moment anything looks at it.
//! - A sealed or chunked answer is opened once and kept opened in memory, if storage still
//!   holds what was opened; one that cannot be opened is an error, never an absent record.
//! - A change is written to storage first, then to memory, and the driver is told whether
//!   the write held (`handle_written`, `handle_write_failed`).

use super::key_storage::StorageError;
use super::now_ms;
use super::object::KeyObject;
use crate::core::edge_rules::log::event_line;
use crate::core::formats::key_record::KeyRecord;
use crate::core::formats::seal::still_stored;
use crate::core::key_rules::key_state::{Decided, Fence, Pending};
use crate::core::key_rules::machine::KeyRecordChange;
use crate::core::vocabulary::fault::{FaultSource, StorageOperation};
use worker::{console_error, console_log};

impl KeyObject {
    /// The record, read from storage the first time and from memory afterwards; one past
    /// its expiry (`KeyState::expired_on_read` says) is deleted here and read as absent.
    pub(super) fn record(&self) -> std::result::Result<Option<KeyRecord>, StorageError> {
        if !self.key.borrow().is_loaded() {
            let stored = self.store.load()?;
            self.key.borrow_mut().remember(stored);
        }
        if self.key.borrow().expired_on_read(now_ms()) {
            self.store.delete_now()?;
            self.key.borrow_mut().handle_deleting();
            console_log!("{}", event_line("expired-on-read", self.object_id(), &[]));
        }
        Ok(self.cached_record())
    }

    /// Opens the cached record's sealed or chunked answer, if it has one, and keeps the
    /// opened record in memory. A record that cannot be opened is an error: never treated
    /// as absent.
    pub(super) async fn open_sealed_record(&self) -> std::result::Result<(), StorageError> {
        let Some(record) = self.record()? else { return Ok(()) };
        let Some(opened) = self.store.open(&record).await? else { return Ok(()) };
        let mut key = self.key.borrow_mut();
        if still_stored(&record, key.record()) {
            key.remember(Some(self.store.keep(opened)));
        }
        Ok(())
    }

    /// Writes a record change to storage, then to memory. A claim's `Put` is synchronous,
    /// so it is in place before the caller awaits anything; only a completed answer that is
    /// sealed awaits (WebCrypto) before it is written, and only while the record it
    /// replaces is still current (`fence`, the driver's fencing).
    pub(super) async fn apply(
        &self,
        change: &KeyRecordChange,
        fence: Fence,
    ) -> std::result::Result<(), StorageError> {
        match change {
            KeyRecordChange::Keep => Ok(()),
            KeyRecordChange::Put(record) => {
                let attempt = record.attempt();
                let cached = self.store.put(record, || self.key.borrow().is_current(fence, attempt)).await?;
                self.key.borrow_mut().remember(Some(cached));
                Ok(())
            }
            KeyRecordChange::Delete => {
                // Forgotten in memory in this turn, so that a request arriving while the
                // deletion is confirmed finds no record (and claims anew: its claim's write
                // is ordered after this deletion).
                self.key.borrow_mut().handle_deleting();
                let deleted = self.store.delete_all().await;
                // The record (a claim) may still be in storage: read it again rather than
                // believe it gone (`KeyState::handle_delete_failed`).
                if deleted.is_err() && self.key.borrow_mut().handle_delete_failed() {
                    if let Err(error) = self.record() {
                        let source = FaultSource::Storage { operation: error.operation() };
                        console_error!(
                            "{}",
                            source.log_line(&self.subject(), "reading the record again", &error)
                        );
                    }
                }
                deleted
            }
        }
    }

    /// Writes a pending step's record change and tells the driver how it went: the step
    /// to carry out (a failure is logged here; the driver decides what it leaves).
    pub(super) async fn write(&self, pending: Pending) -> Decided {
        match self.apply(&pending.step().change, pending.fence()).await {
            Ok(()) => self.key.borrow_mut().handle_written(pending),
            Err(error) => {
                let source = FaultSource::Storage { operation: StorageOperation::Write };
                let what = format!("writing {}", pending.describe());
                console_error!("{}", source.log_line(&self.subject(), &what, &error));
                self.key.borrow_mut().handle_write_failed(pending, now_ms())
            }
        }
    }

    pub(super) fn cached_record(&self) -> Option<KeyRecord> {
        self.key.borrow().record().cloned()
    }
}
