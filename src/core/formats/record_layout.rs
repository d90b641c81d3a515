//! Where the key's record is stored, in what order its two layouts are read, and what a
//! read learns (`runtime::key_storage` carries it out).
//!
//! Two layouts, one record. This release writes the record as the value [`KV_KEY`] of the
//! object's key-value store (`ctx.storage.kv`, a `Uint8Array` of the
//! `core::formats::key_record` bytes): workerd creates that store's table as a system
//! query, which is not billed, where a table of the worker's own costs a billed `CREATE
//! TABLE` (two rows written) on every new key. Earlier releases wrote one row of the table
//! `idempotency_record`. Those from `032df08` on read the key-value value first and the
//! row after it, so they are the ones this release may be rolled back to: an older one
//! would not see a claim written here, would take the key for new and forward it again
//! (docs/deploy.md, rule 6). This release reads both in the same order ([`read`]), for the
//! keys those releases claimed, until their time to live has passed. A write removes the
//! row in the same transaction when one may exist ([`LegacyRow`]), so the two layouts
//! never both hold a record, and a row can never come back from under a deleted value.

use super::key_record::{Completed, DecodeError, KeyRecord};
use crate::core::vocabulary::fault::StorageError;

/// The record's key in the object's key-value store (its value: the encoded record, as a
/// `Uint8Array`).
pub const KV_KEY: &str = "record";

/// The legacy table's SQL: its one row (`id = 1`) holds the record in the column `record`.
pub mod legacy_sql {
    pub const SELECT: &str = "SELECT record FROM idempotency_record WHERE id = 1";
    /// A read of the schema: no thrown error when the table does not exist.
    pub const TABLE_EXISTS: &str =
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'idempotency_record'";
    pub const DELETE_ROW: &str = "DELETE FROM idempotency_record";
}

/// What this instance knows of a record in the legacy table (`idempotency_record`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LegacyRow {
    /// None stored: the common case, where a write is one key-value `put`.
    Absent,
    /// One may be stored (an older release wrote it), or this instance has not read yet,
    /// or a write that would have removed it failed: a write removes whatever is there.
    Possible,
}

impl LegacyRow {
    /// Whether a write of the record must remove a row, in one transaction with the value
    /// (a claim whose value could not be written keeps the row it would have replaced).
    pub fn removed_by_write(self) -> bool {
        self == LegacyRow::Possible
    }
}

/// One layout's stored record, as storage returned it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stored {
    /// Nothing stored (no value; no table, or no row).
    Absent,
    /// The stored bytes.
    Bytes(Vec<u8>),
    /// Something that is not bytes.
    NotBytes,
}

/// What a read of the record learns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    /// What is known of the legacy row after the read.
    pub legacy_row: LegacyRow,
    /// The record (`None`: absent), or why what is stored cannot be taken for one.
    pub record: Result<Option<KeyRecord>, StorageError>,
}

impl Read {
    /// Whether the record came from the legacy row: the operator is told, so as to see that
    /// keys an older release stored are still retried before a release stops reading them.
    pub fn from_legacy_row(&self) -> bool {
        self.legacy_row == LegacyRow::Possible && matches!(self.record, Ok(Some(_)))
    }

    /// Whether the record as stored holds its answer in the clear (what
    /// `core::formats::seal::opening` calls `read_in_clear`); `false` when none was read.
    pub fn in_clear(&self) -> bool {
        matches!(&self.record, Ok(Some(KeyRecord::Completed(Completed { sealed_answer: None, .. }))))
    }
}

/// Reads the record: the key-value `value` if one is stored, else the legacy row (read by
/// `legacy_row` only then). A record read with the legacy row left `Possible` came from
/// the row; a failed read leaves a row possible. Anything stored that is not a record (not
/// bytes, or bytes that do not decode) is never read as absent, which would forward the
/// key again: it is an error the caller answers 503.
pub fn read(
    value: Result<Stored, StorageError>,
    legacy_row: impl FnOnce() -> Result<Stored, StorageError>,
) -> Read {
    let decode = |stored: Stored| match stored {
        Stored::Absent => Ok(None),
        Stored::Bytes(bytes) => KeyRecord::decode(&bytes).map(Some).map_err(corrupt),
        Stored::NotBytes => Err(corrupt(DecodeError::NotARecord)),
    };
    let (legacy_row, record) = match value {
        Err(error) => (LegacyRow::Possible, Err(error)),
        Ok(Stored::Absent) => match legacy_row() {
            Err(error) => (LegacyRow::Possible, Err(error)),
            Ok(Stored::Absent) => (LegacyRow::Absent, Ok(None)),
            Ok(row) => (LegacyRow::Possible, decode(row)),
        },
        Ok(value) => (LegacyRow::Absent, decode(value)),
    };
    Read { legacy_row, record }
}

/// A record that does not decode.
pub fn corrupt(error: DecodeError) -> StorageError {
    StorageError::Corrupt(error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::formats::fingerprint::Digest256;
    use crate::core::formats::key_record::{AttemptId, InFlight, StoredResponse};

    fn claim() -> KeyRecord {
        KeyRecord::decode(&claim_bytes()).unwrap()
    }

    fn claim_bytes() -> Vec<u8> {
        let claimed = InFlight {
            attempt: AttemptId(3),
            fingerprint: Digest256([7; 32]),
            origin_attempts: 1,
            claimed_at: 100,
            lease_until: 200,
            expires_at: 300,
            async_job: None,
            reconcile: None,
        };
        KeyRecord::InFlight(claimed).encode()
    }

    fn never() -> Result<Stored, StorageError> {
        panic!("the legacy row is read only when no value is stored")
    }

    fn read_of(legacy_row: LegacyRow, record: Result<Option<KeyRecord>, StorageError>) -> Read {
        Read { legacy_row, record }
    }

    #[test]
    fn a_value_is_read_first_and_means_no_row() {
        let read = read(Ok(Stored::Bytes(claim_bytes())), never);
        assert_eq!(read, read_of(LegacyRow::Absent, Ok(Some(claim()))));
        assert!(!read.from_legacy_row(), "a value is this release's layout");
        let not_bytes = super::read(Ok(Stored::NotBytes), never);
        let unreadable = Err(StorageError::Corrupt(DecodeError::NotARecord.to_string()));
        assert_eq!(not_bytes, read_of(LegacyRow::Absent, unreadable), "never absent");
        let garbled = super::read(Ok(Stored::Bytes(vec![0xff, 1, 2])), never);
        assert!(matches!(garbled.record, Err(StorageError::Corrupt(_))));
    }

    #[test]
    fn without_a_value_the_legacy_row_is_read_and_kept_possible_when_found() {
        let from_row = read(Ok(Stored::Absent), || Ok(Stored::Bytes(claim_bytes())));
        assert_eq!(from_row, read_of(LegacyRow::Possible, Ok(Some(claim()))));
        assert!(from_row.from_legacy_row());
        let nothing = read(Ok(Stored::Absent), || Ok(Stored::Absent));
        assert_eq!(nothing, read_of(LegacyRow::Absent, Ok(None)));
        assert!(!nothing.from_legacy_row());
        let not_bytes = read(Ok(Stored::Absent), || Ok(Stored::NotBytes));
        assert_eq!((not_bytes.legacy_row, not_bytes.record.is_err()), (LegacyRow::Possible, true));
        assert!(!not_bytes.from_legacy_row(), "nothing was read from it");
        let failed = StorageError::Sql("SQLITE_BUSY".into());
        let row_failed = read(Ok(Stored::Absent), || Err(failed.clone()));
        assert_eq!(row_failed, read_of(LegacyRow::Possible, Err(failed.clone())));
    }

    #[test]
    fn a_failed_read_of_the_value_leaves_a_row_possible_and_reads_no_row() {
        let failed = StorageError::Sql("SQLITE_BUSY".into());
        assert_eq!(read(Err(failed.clone()), never), read_of(LegacyRow::Possible, Err(failed)));
    }

    #[test]
    fn a_read_learns_whether_the_answer_was_stored_in_the_clear() {
        let completed = |sealed_answer: Option<Vec<u8>>| {
            KeyRecord::Completed(Completed {
                attempt: AttemptId(3),
                fingerprint: Digest256([7; 32]),
                completed_at: 100,
                expires_at: 300,
                response: std::sync::Arc::new(StoredResponse {
                    status: 201,
                    headers: Vec::new(),
                    body: Vec::new(),
                }),
                sealed_answer,
                sealed_bound: true,
                chunks: None,
            })
        };
        assert!(read_of(LegacyRow::Absent, Ok(Some(completed(None)))).in_clear());
        assert!(!read_of(LegacyRow::Absent, Ok(Some(completed(Some(vec![1]))))).in_clear());
        assert!(!read_of(LegacyRow::Absent, Ok(Some(claim()))).in_clear(), "a claim holds no answer");
        assert!(!read_of(LegacyRow::Absent, Ok(None)).in_clear());
    }

    #[test]
    fn a_write_removes_a_row_unless_none_is_stored() {
        assert!(LegacyRow::Possible.removed_by_write());
        assert!(!LegacyRow::Absent.removed_by_write());
    }
}
