//! Large answers stored in chunks: the plan, the manifest the record carries (record
//! extension tag 4, `core::formats::chunk_manifest`), and what each sealed chunk is bound to. No I/O: the runtime
//! (`runtime::chunks`) writes and reads the rows, digests and seals them.
//!
//! 1. An answer whose record would not fit one SQLite row (`INLINE_MAX_BYTES`, under the
//!    2 MB per row limit of Durable Objects) keeps its status and headers in the record and
//!    its body in rows of a chunk table, `CHUNK_BYTES` of body each, the last one shorter.
//!    Every other answer keeps today's one-row layout exactly: no tag 4, nothing else
//!    written, so an older release reads it as before.
//! 2. The record says how the body is chunked ([`ChunkManifest`]): the body's length, the
//!    chunk length, the attempt whose rows they are, and the SHA-256 of every stored row in
//!    order. A missing, extra, reordered or changed row is detected before anything is
//!    replayed: the object answers 503, never a wrong answer and never a second forward.
//!    Tag 4 is critical: a release that does not know it refuses the record (503).
//! 3. The rows and the record are written in one synchronous transaction: either the whole
//!    answer is stored or none of it.
//! 4. Sealed (`STORAGE_ENCRYPTION_KEYS`): the head (status and headers) is the record's
//!    sealed answer (tag 2), whose associated data also binds the manifest
//!    ([`head_associated_data`]), so the manifest cannot be changed or stripped without the
//!    head failing to open. Each chunk is an envelope of its own (a fresh nonce), bound by
//!    [`chunk_associated_data`] to the object, the record version, the attempt, its index
//!    and the chunk count: a chunk cannot be moved to another place, another record or
//!    another key's object. The digests are over the stored (sealed) rows, so they say
//!    nothing about the plaintext.
//! 5. Over `MAX_STORED_RESPONSE_BYTES` nothing changes: the answer goes to its one caller
//!    as a stream and the key is held outcome-unknown.

use std::ops::Range;

use sha2::{Digest, Sha256};

use super::chunk_manifest::{ChunkManifest, RowDigest};
use super::key_record::{Completed, KeyRecord, StoredResponse, SEALED_RECORD_VERSION};
use super::seal::{Envelope, SealContext, ANSWER_KEY_INFO, NONCE_LEN};
use crate::core::vocabulary::fault::StorageError;

/// The largest answer kept in the record's own row (the encoded response: status, headers,
/// body). SQLite-backed Durable Objects hold at most 2 MB per row; the rest is headroom for
/// the record's other fields and a seal.
pub const INLINE_MAX_BYTES: usize = 1_900_000;

/// Body bytes per chunk row (the last one may be shorter).
pub const CHUNK_BYTES: usize = 1 << 20;

/// Whether `response` is too large for the record's own row and is stored in chunks.
pub fn needs_chunks(response: &StoredResponse) -> bool {
    encoded_len(response) > INLINE_MAX_BYTES
}

/// The length of the response's encoding (as `StoredResponse::encode` writes it).
pub fn encoded_len(response: &StoredResponse) -> usize {
    2 + 4
        + response.headers.iter().map(|(n, v)| 8 + n.len() + v.len()).sum::<usize>()
        + 4
        + response.body.len()
}

/// The body ranges of the chunks of a body of `body_len` bytes, `chunk_len` each.
pub fn plan(body_len: usize, chunk_len: usize) -> Vec<Range<usize>> {
    (0..body_len.div_ceil(chunk_len.max(1)))
        .map(|i| i * chunk_len..((i + 1) * chunk_len).min(body_len))
        .collect()
}

/// SHA-256 of a stored row (the runtime may compute the same with WebCrypto).
pub fn row_digest(row: &[u8]) -> RowDigest {
    Sha256::digest(row).into()
}

/// Whether stored rows (as read back, in order) are exactly the ones the manifest names.
/// `digests` holds the SHA-256 of each row read, `None` for a row that is missing.
pub fn rows_match(manifest: &ChunkManifest, digests: &[Option<RowDigest>], extra_rows: bool) -> bool {
    !extra_rows
        && digests.len() == manifest.count()
        && digests.iter().zip(&manifest.digests).all(|(read, expected)| read.as_ref() == Some(expected))
}

/// What a sealed chunked answer's head (the record's tag 2 envelope) is bound to: the
/// object, the record version and the whole manifest.
pub fn head_associated_data(object_id: &str, record_version: u8, manifest: &ChunkManifest) -> Vec<u8> {
    let mut aad = super::seal::answer_associated_data(object_id, record_version);
    aad.extend_from_slice(b"\0chunked\0");
    aad.extend_from_slice(&manifest.encode());
    aad
}

/// What one sealed chunk is bound to: the object, the record version, the attempt, the
/// chunk's index and the chunk count. Domain-separated from a head's associated data.
pub fn chunk_associated_data(
    object_id: &str,
    record_version: u8,
    attempt: u64,
    index: usize,
    count: usize,
) -> Vec<u8> {
    let mut aad = Vec::with_capacity(64 + object_id.len());
    aad.extend_from_slice(b"idempotency-edge/answer-chunk\0");
    aad.extend_from_slice(object_id.as_bytes());
    aad.push(0);
    aad.push(record_version);
    aad.extend_from_slice(&attempt.to_be_bytes());
    aad.extend_from_slice(&(index as u32).to_be_bytes());
    aad.extend_from_slice(&(count as u32).to_be_bytes());
    aad
}

/// The manifest of a body of `body_len` bytes in [`CHUNK_BYTES`] rows, written by
/// `attempt`, whose stored rows digest to `digests` (in order).
pub fn manifest(body_len: usize, attempt: u64, digests: Vec<RowDigest>) -> ChunkManifest {
    ChunkManifest { body_len: body_len as u64, chunk_len: CHUNK_BYTES as u32, attempt, digests }
}

/// How a chunked answer's head is sealed (rule 4): with the answer key of the scope whose
/// key salt is `scope`, bound by [`head_associated_data`].
pub fn head_seal(scope: &[u8], object_id: &str, manifest: &ChunkManifest) -> SealContext {
    let aad = head_associated_data(object_id, SEALED_RECORD_VERSION, manifest);
    SealContext { salt: scope.to_vec(), info: ANSWER_KEY_INFO, aad }
}

/// How chunk `index` of `count` of `attempt`'s answer is sealed (rule 4): with the same key
/// as its head, bound by [`chunk_associated_data`].
pub fn chunk_seal(scope: &[u8], object_id: &str, attempt: u64, index: usize, count: usize) -> SealContext {
    let aad = chunk_associated_data(object_id, SEALED_RECORD_VERSION, attempt, index, count);
    SealContext { salt: scope.to_vec(), info: ANSWER_KEY_INFO, aad }
}

/// A chunked answer's two records: as stored (its head and manifest, the head in the clear
/// or, with `sealed_head`, sealed in place of an empty answer) and as the object keeps it
/// in memory (the head in the clear and the manifest). Neither holds the body (rule 1).
pub fn chunked_records(
    done: &Completed,
    manifest: ChunkManifest,
    sealed_head: Option<Vec<u8>>,
) -> (KeyRecord, KeyRecord) {
    let head = std::sync::Arc::new(done.response.head());
    let stored_answer = match sealed_head {
        Some(_) => std::sync::Arc::new(StoredResponse { status: 0, headers: Vec::new(), body: Vec::new() }),
        None => head.clone(),
    };
    let chunks = Some(manifest);
    let stored = Completed {
        response: stored_answer,
        sealed_answer: sealed_head,
        chunks: chunks.clone(),
        ..done.clone()
    };
    let kept = Completed { response: head, sealed_answer: None, chunks, ..done.clone() };
    (KeyRecord::Completed(stored), KeyRecord::Completed(kept))
}

/// A sealed chunked answer's head, as opened: its status and headers. One that does not
/// decode, or that carries a body (a head never does), is refused: the object answers 503.
pub fn opened_head(plain: &[u8]) -> Result<StoredResponse, String> {
    let head =
        StoredResponse::decode(plain).map_err(|error| format!("the opened head is unreadable: {error}"))?;
    if !head.body.is_empty() {
        return Err("the sealed head of a chunked answer has a body".to_owned());
    }
    Ok(head)
}

/// The chunk table's SQL (`runtime::chunks` runs it): one row per chunk, `seq` its index
/// from 0, `bytes` the stored (sealed, when sealing) row.
pub mod sql {
    pub const CREATE_TABLE: &str =
        "CREATE TABLE IF NOT EXISTS idempotency_chunk (seq INTEGER PRIMARY KEY, bytes BLOB NOT NULL)";
    /// Bound to the row's index, then its bytes.
    pub const INSERT: &str = "INSERT INTO idempotency_chunk (seq, bytes) VALUES (?, ?)";
    pub const CLEAR: &str = "DELETE FROM idempotency_chunk";
    /// Bound to the row's index; its one column is `bytes`.
    pub const SELECT_ONE: &str = "SELECT bytes FROM idempotency_chunk WHERE seq = ?";
    /// Its one column is `n`.
    pub const COUNT: &str = "SELECT count(*) AS n FROM idempotency_chunk";

    /// Whether a statement failed (`error`, as the runtime threw it) only because the chunk
    /// table does not exist: it is created with the first chunked answer, so without it
    /// there are no rows to read or delete.
    pub fn no_table(error: &str) -> bool {
        error.contains("no such table")
    }
}

/// Row `index` as read for a replay (`None`: missing), with the digest of its stored bytes,
/// checked against the manifest (rule 2): the row, or the error that breaks the replay off.
pub fn checked_row<R>(
    manifest: &ChunkManifest,
    index: usize,
    read: Option<(R, RowDigest)>,
) -> Result<R, StorageError> {
    match read {
        None => Err(chunk_fault(format!("chunk {index} is missing"))),
        Some((_, digest)) if manifest.digests.get(index) != Some(&digest) => {
            Err(chunk_fault(format!("chunk {index} does not match its digest")))
        }
        Some((row, _)) => Ok(row),
    }
}

/// Checks that chunk `index`, as replayed (opened, when sealed), is `len` bytes: its range of
/// the body. A sealed row streamed without opening it is longer, so it never passes.
pub fn check_len(manifest: &ChunkManifest, index: usize, len: u64) -> Result<(), StorageError> {
    let range = manifest.range(index);
    if len != range.end - range.start {
        return Err(chunk_fault(format!("chunk {index} has the wrong length")));
    }
    Ok(())
}

/// A sealed chunk's nonce and where its ciphertext starts, from the first bytes `head` of a
/// row of `total` bytes. Every chunk is sealed with its head's key (`key_id`, rule 4): a row
/// that is no envelope, or is sealed under another key, is refused.
pub fn chunk_envelope(
    head: &[u8],
    total: usize,
    key_id: &str,
    index: usize,
) -> Result<([u8; NONCE_LEN], usize), StorageError> {
    let (sealed_under, nonce, at) = Envelope::decode_header(head, total)
        .ok_or_else(|| chunk_fault(format!("chunk {index} is not a sealed envelope")))?;
    if sealed_under != key_id {
        return Err(chunk_fault(format!("chunk {index} is sealed under another key than its record")));
    }
    Ok((nonce, at))
}

/// Checks every stored row (`read`, in order, `rows` in the table) against the manifest before
/// the first replay ([`rows_match`]): anything missing, extra or changed is an error.
pub fn check_rows(
    manifest: &ChunkManifest,
    read: &[Option<RowDigest>],
    rows: usize,
) -> Result<(), StorageError> {
    if !rows_match(manifest, read, rows != manifest.count()) {
        return Err(chunk_fault(format!(
            "the stored chunks do not match the record ({rows} rows for {} chunks, or a changed row)",
            manifest.count()
        )));
    }
    Ok(())
}

/// Where `CHUNK_WRITE_FAULT_INJECTION` (tests only) throws in a write of `count` rows: after
/// row `index`, half-way, so that rows are written before the transaction rolls back.
pub fn fails_after_row(index: usize, count: usize) -> bool {
    index + 1 == count.div_ceil(2)
}

/// A chunked answer that cannot be replayed as stored: the object answers 503.
pub fn chunk_fault(message: String) -> StorageError {
    StorageError::Chunks(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::formats::chunk_manifest::MAX_CHUNKS;
    use proptest::prelude::*;

    fn manifest(body_len: u64, chunk_len: u32) -> ChunkManifest {
        let count = body_len.div_ceil(u64::from(chunk_len)) as usize;
        ChunkManifest {
            body_len,
            chunk_len,
            attempt: 0xfeed,
            digests: (0..count).map(|i| row_digest(&[i as u8])).collect(),
        }
    }

    #[test]
    fn the_plan_covers_the_body_once_in_order() {
        assert_eq!(plan(0, CHUNK_BYTES), Vec::<Range<usize>>::new());
        assert_eq!(plan(5, 2), vec![0..2, 2..4, 4..5]);
        assert_eq!(plan(4, 2), vec![0..2, 2..4]);
        let five_mib = 5 * CHUNK_BYTES + 17;
        let ranges = plan(five_mib, CHUNK_BYTES);
        assert_eq!(ranges.len(), 6);
        assert_eq!(ranges.last(), Some(&(5 * CHUNK_BYTES..five_mib)));
        let m = manifest(five_mib as u64, CHUNK_BYTES as u32);
        for (i, range) in ranges.iter().enumerate() {
            assert_eq!(m.range(i), range.start as u64..range.end as u64);
        }
    }

    #[test]
    fn only_a_missing_chunk_table_reads_as_no_rows() {
        assert!(sql::no_table("Error: no such table: idempotency_chunk: SQLITE_ERROR"));
        assert!(!sql::no_table("Error: database or disk is full: SQLITE_FULL"));
        assert!(!sql::no_table("Error: no such column: bytes: SQLITE_ERROR"));
    }

    #[test]
    fn only_answers_over_one_row_are_chunked() {
        let answer = |len: usize| StoredResponse {
            status: 200,
            headers: vec![("content-type".into(), "application/octet-stream".into())],
            body: vec![7; len],
        };
        let fits = INLINE_MAX_BYTES - encoded_len(&answer(0));
        assert!(!needs_chunks(&answer(fits)));
        assert!(needs_chunks(&answer(fits + 1)));
        assert_eq!(encoded_len(&answer(10)), answer(10).encode().len(), "counted as it is encoded");
        let head = answer(10).head();
        assert_eq!((head.status, head.headers.len(), head.body.len()), (200, 1, 0));
    }

    #[test]
    fn inconsistent_manifests_are_refused() {
        let good = manifest(3 * 1024 + 1, 1024);
        assert_eq!(ChunkManifest::decode(&good.encode()), Some(good.clone()));
        let mut fewer = good.clone();
        fewer.digests.pop();
        assert_eq!(ChunkManifest::decode(&fewer.encode()), None, "a count that does not match the length");
        let mut more = good.clone();
        more.digests.push([0; 32]);
        assert_eq!(ChunkManifest::decode(&more.encode()), None);
        assert_eq!(ChunkManifest::decode(&manifest(0, 1024).encode()), None, "no chunk at all");
        let zero = ChunkManifest { chunk_len: 0, ..good.clone() };
        assert_eq!(ChunkManifest::decode(&zero.encode()), None);
        let mut version = good.encode();
        version[0] = 2;
        assert_eq!(ChunkManifest::decode(&version), None);
        // A forged count far over the limit is refused before any digest is read.
        let mut forged = good.encode();
        forged[21..25].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(ChunkManifest::decode(&forged), None);
        assert_eq!(ChunkManifest::decode(&manifest(200 * 1024, 1024).encode()), None, "over MAX_CHUNKS");
    }

    #[test]
    fn a_missing_extra_reordered_or_changed_row_does_not_match() {
        let rows: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i; 10]).collect();
        let m = ChunkManifest {
            body_len: 40,
            chunk_len: 10,
            attempt: 1,
            digests: rows.iter().map(|r| row_digest(r)).collect(),
        };
        let read =
            |rows: &[Option<&Vec<u8>>]| rows.iter().map(|r| r.map(|r| row_digest(r))).collect::<Vec<_>>();
        let all: Vec<Option<&Vec<u8>>> = rows.iter().map(Some).collect();
        assert!(rows_match(&m, &read(&all), false));
        assert!(!rows_match(&m, &read(&all), true), "an extra row");
        let mut missing = all.clone();
        missing[2] = None;
        assert!(!rows_match(&m, &read(&missing), false));
        let mut swapped = all.clone();
        swapped.swap(0, 1);
        assert!(!rows_match(&m, &read(&swapped), false));
        let changed = vec![9u8; 10];
        let mut one_changed = all.clone();
        one_changed[3] = Some(&changed);
        assert!(!rows_match(&m, &read(&one_changed), false));
        assert!(!rows_match(&m, &read(&all[..3]), false), "a short read");
    }

    #[test]
    fn chunked_records_never_hold_the_body() {
        use crate::core::formats::fingerprint::Digest256;
        use crate::core::formats::key_record::AttemptId;
        let done = Completed {
            attempt: AttemptId(7),
            fingerprint: Digest256([1; 32]),
            completed_at: 10,
            expires_at: 20,
            response: std::sync::Arc::new(StoredResponse {
                status: 201,
                headers: vec![("content-type".into(), "application/json".into())],
                body: vec![5; 3 * CHUNK_BYTES],
            }),
            sealed_answer: None,
            sealed_bound: false,
            chunks: None,
        };
        let m = super::manifest(3 * CHUNK_BYTES, 7, vec![[0; 32]; 3]);
        assert_eq!((m.body_len, m.chunk_len, m.count()), (3 * CHUNK_BYTES as u64, CHUNK_BYTES as u32, 3));
        let head = done.response.head();
        let completed = |record: KeyRecord| match record {
            KeyRecord::Completed(done) => done,
            other => panic!("not completed: {other:?}"),
        };
        let (stored, kept) = chunked_records(&done, m.clone(), None);
        let (stored, kept) = (completed(stored), completed(kept));
        assert_eq!((*stored.response).clone(), head, "in the clear: the head, no body");
        assert_eq!((stored.sealed_answer, stored.chunks.as_ref()), (None, Some(&m)));
        assert_eq!(((*kept.response).clone(), kept.chunks), (head.clone(), Some(m.clone())));
        let (stored, kept) = chunked_records(&done, m.clone(), Some(vec![9; 40]));
        let (stored, kept) = (completed(stored), completed(kept));
        assert_eq!(
            (stored.response.status, stored.response.headers.len(), stored.response.body.len()),
            (0, 0, 0)
        );
        assert_eq!((stored.sealed_answer, stored.chunks), (Some(vec![9; 40]), Some(m.clone())));
        assert_eq!(((*kept.response).clone(), kept.sealed_answer), (head.clone(), None), "kept opened");
        assert_eq!((stored.attempt, stored.expires_at), (AttemptId(7), 20));
        assert_eq!(opened_head(&head.encode()), Ok(head));
        assert!(opened_head(&done.response.encode()).unwrap_err().contains("has a body"));
        assert!(opened_head(b"\x01").unwrap_err().contains("unreadable"));
    }

    #[test]
    fn heads_and_chunks_are_sealed_with_the_scopes_answer_key() {
        let m = super::manifest(4096, 7, vec![[0; 32]]);
        let head = head_seal(b"salt", "obj", &m);
        assert_eq!(
            (head.salt.as_slice(), head.info, head.aad.clone()),
            (&b"salt"[..], ANSWER_KEY_INFO, head_associated_data("obj", SEALED_RECORD_VERSION, &m))
        );
        let chunk = chunk_seal(b"salt", "obj", 7, 1, 5);
        assert_eq!((chunk.salt.as_slice(), chunk.info), (&b"salt"[..], ANSWER_KEY_INFO));
        assert_eq!(chunk.aad, chunk_associated_data("obj", SEALED_RECORD_VERSION, 7, 1, 5));
    }

    #[test]
    fn associated_data_binds_place_record_and_key() {
        let base = chunk_associated_data("obj", 2, 7, 1, 5);
        for other in [
            chunk_associated_data("obk", 2, 7, 1, 5),
            chunk_associated_data("obj", 3, 7, 1, 5),
            chunk_associated_data("obj", 2, 8, 1, 5),
            chunk_associated_data("obj", 2, 7, 2, 5),
            chunk_associated_data("obj", 2, 7, 1, 4),
        ] {
            assert_ne!(base, other);
        }
        let m = manifest(4096, 1024);
        let head = head_associated_data("obj", 2, &m);
        assert_ne!(
            head,
            crate::core::formats::seal::answer_associated_data("obj", 2),
            "a chunked head is not a whole answer"
        );
        let mut changed = m.clone();
        changed.digests[0][0] ^= 1;
        assert_ne!(head, head_associated_data("obj", 2, &changed), "the head binds every digest");
        assert_ne!(head, head_associated_data("obk", 2, &m));
    }

    #[test]
    fn a_replayed_row_passes_only_with_its_digest_and_length() {
        let rows: Vec<Vec<u8>> = vec![vec![1; 10], vec![2; 10], vec![3; 5]];
        let m = ChunkManifest {
            body_len: 25,
            chunk_len: 10,
            attempt: 1,
            digests: rows.iter().map(|r| row_digest(r)).collect(),
        };
        let read = |i: usize| Some((i, row_digest(&rows[i])));
        assert_eq!(checked_row(&m, 2, read(2)), Ok(2));
        let missing = checked_row::<usize>(&m, 1, None).unwrap_err();
        assert_eq!(missing, StorageError::Chunks("chunk 1 is missing".into()));
        assert!(checked_row(&m, 0, read(1)).unwrap_err().to_string().contains("chunk 0 does not match"));
        assert!(checked_row(&m, 3, read(2)).is_err(), "a row past the manifest");
        assert_eq!(check_len(&m, 0, 10), Ok(()));
        assert_eq!(check_len(&m, 2, 5), Ok(()), "the last chunk is shorter");
        assert!(check_len(&m, 2, 10).is_err());
        assert!(check_len(&m, 0, 10 + 16 + 13).is_err(), "a sealed row, not opened");
    }

    #[test]
    fn a_chunk_opens_only_as_an_envelope_under_its_heads_key() {
        let envelope = Envelope { key_id: "k1".into(), nonce: [4; NONCE_LEN], ciphertext: vec![0; 20] };
        let bytes = envelope.encode();
        let head = &bytes[..bytes.len().min(Envelope::MAX_HEADER_LEN)];
        assert_eq!(chunk_envelope(head, bytes.len(), "k1", 3), Ok(([4; NONCE_LEN], 1 + 2 + NONCE_LEN)));
        let other = chunk_envelope(head, bytes.len(), "k2", 3).unwrap_err();
        assert!(other.to_string().contains("chunk 3 is sealed under another key"), "{other}");
        let plain = chunk_envelope(b"", 0, "k1", 0).unwrap_err();
        assert!(plain.to_string().contains("chunk 0 is not a sealed envelope"));
        assert!(chunk_envelope(head, 1 + 2 + NONCE_LEN + 15, "k1", 0).is_err(), "shorter than a tag");
    }

    #[test]
    fn the_rows_are_checked_as_a_whole_and_the_fault_says_how_many() {
        let m = manifest(2048, 1024);
        let all: Vec<_> = m.digests.iter().copied().map(Some).collect();
        assert_eq!(check_rows(&m, &all, 2), Ok(()));
        let extra = check_rows(&m, &all, 3).unwrap_err();
        assert_eq!(extra.operation(), crate::core::vocabulary::fault::StorageOperation::Open);
        assert!(extra.to_string().contains("(3 rows for 2 chunks"), "{extra}");
        assert!(check_rows(&m, &[all[0], None], 1).is_err());
    }

    #[test]
    fn the_injected_write_fault_comes_half_way() {
        assert!(fails_after_row(0, 1) && fails_after_row(0, 2) && fails_after_row(1, 3));
        assert!(!fails_after_row(2, 3) && !fails_after_row(0, 3));
        assert_eq!((0..6).filter(|&i| fails_after_row(i, 6)).collect::<Vec<_>>(), vec![2]);
    }

    proptest! {
        #[test]
        fn manifests_round_trip_and_never_panic(
            body_len in 1u64..(MAX_CHUNKS as u64 * 4096),
            chunk_len in 4096u32..8192,
            attempt in any::<u64>(),
            noise in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let _ = ChunkManifest::decode(&noise);
            let m = ChunkManifest { attempt, ..manifest(body_len, chunk_len) };
            let bytes = m.encode();
            prop_assert_eq!(ChunkManifest::decode(&bytes), Some(m.clone()));
            for cut in 0..bytes.len() {
                prop_assert_eq!(ChunkManifest::decode(&bytes[..cut]), None);
            }
            let ranges = plan(body_len as usize, chunk_len as usize);
            prop_assert_eq!(ranges.len(), m.count());
            prop_assert_eq!(ranges.iter().map(|r| r.len() as u64).sum::<u64>(), body_len);
        }
    }
}
