//! Where the key's record is stored, and in what order its two layouts are read
//! (`runtime::key_storage` carries it out; its module doc says why there are two).
//!
//! This release writes the record as the value [`KV_KEY`] of the object's key-value store.
//! Releases before it wrote one row of the table `idempotency_record`; releases from
//! `032df08` on read the value first and the row after it, and this one reads both in the
//! same order, for the keys those releases claimed. Each release's write removes the other
//! layout in the same transaction, so a value means no row.

use super::key_record::{DecodeError, KeyRecord};
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

/// Reads the record: the key-value `value` if one is stored, else the legacy row (read by
/// `legacy_row` only then). Returns what is known of the legacy row after the read (a
/// record read with it left `Possible` came from the row) and the record. Anything stored
/// that is not a record (not bytes, or bytes that do not decode) is never read as absent,
/// which would forward the key again: it is an error the caller answers 503.
pub fn read(
    value: Stored,
    legacy_row: impl FnOnce() -> Result<Stored, StorageError>,
) -> (LegacyRow, Result<Option<KeyRecord>, StorageError>) {
    let decode = |stored: Stored| match stored {
        Stored::Absent => Ok(None),
        Stored::Bytes(bytes) => KeyRecord::decode(&bytes).map(Some).map_err(corrupt),
        Stored::NotBytes => Err(corrupt(DecodeError::NotARecord)),
    };
    if value != Stored::Absent {
        return (LegacyRow::Absent, decode(value));
    }
    match legacy_row() {
        Err(error) => (LegacyRow::Possible, Err(error)),
        Ok(Stored::Absent) => (LegacyRow::Absent, Ok(None)),
        Ok(row) => (LegacyRow::Possible, decode(row)),
    }
}

/// A record that does not decode.
pub fn corrupt(error: DecodeError) -> StorageError {
    StorageError::Corrupt(error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::formats::fingerprint::Digest256;
    use crate::core::formats::key_record::{AttemptId, InFlight};

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

    #[test]
    fn a_value_is_read_first_and_means_no_row() {
        assert_eq!(read(Stored::Bytes(claim_bytes()), never), (LegacyRow::Absent, Ok(Some(claim()))));
        let (legacy, read) = read(Stored::NotBytes, never);
        assert_eq!(legacy, LegacyRow::Absent);
        assert_eq!(read, Err(StorageError::Corrupt(DecodeError::NotARecord.to_string())), "never absent");
        let (_, garbled) = super::read(Stored::Bytes(vec![0xff, 1, 2]), never);
        assert!(matches!(garbled, Err(StorageError::Corrupt(_))));
    }

    #[test]
    fn without_a_value_the_legacy_row_is_read_and_kept_possible_when_found() {
        let row = || Ok(Stored::Bytes(claim_bytes()));
        assert_eq!(read(Stored::Absent, row), (LegacyRow::Possible, Ok(Some(claim()))));
        assert_eq!(read(Stored::Absent, || Ok(Stored::Absent)), (LegacyRow::Absent, Ok(None)));
        let (legacy, not_bytes) = read(Stored::Absent, || Ok(Stored::NotBytes));
        assert_eq!((legacy, not_bytes.is_err()), (LegacyRow::Possible, true));
        let failed = StorageError::Sql("SQLITE_BUSY".into());
        assert_eq!(read(Stored::Absent, || Err(failed.clone())), (LegacyRow::Possible, Err(failed)));
    }

    #[test]
    fn a_write_removes_a_row_unless_none_is_stored() {
        assert!(LegacyRow::Possible.removed_by_write());
        assert!(!LegacyRow::Absent.removed_by_write());
    }
}
