//! Full case folding as the fingerprint's lookalike-key rule (`canonical_json::folded_key`)
//! folds: a character's upper case, then that's lower case, so that `ſ`, `S` and `s` fold
//! alike, and so do the Kelvin sign and `k`.
//!
//! Owns the fold and its table. Why not `char::to_uppercase` and `to_lowercase`: their
//! tables were about 38 KB of the Wasm's data section (about 15 KB gzipped) for this one
//! rule, and this table is about 4 KB. It holds the same mapping: generated from the
//! standard library's (`table.rs` names the Unicode version), and checked against it for
//! every character by the tests, so a fingerprint is the same byte for byte either way.
//! It also freezes the fold: a toolchain with newer Unicode tables fails that test instead
//! of quietly changing the fingerprints of bodies whose keys it folds differently (a retry
//! then refused with 422); regenerate the table only knowing that
//! (`IDEMPOTENCY_EDGE_WRITE_CASE_FOLD=1 cargo test --lib case_fold` rewrites `table.rs`).

mod table;

use table::{MULTIPLE, SINGLE};

/// Appends the fold of `c` to `out`.
pub fn push_folded(out: &mut String, c: char) {
    let code_point = u32::from(c);
    if let Ok(i) = MULTIPLE.binary_search_by_key(&code_point, |&(from, _)| from) {
        out.extend(MULTIPLE[i].1.iter().filter(|&&c| c != '\0'));
        return;
    }
    out.push(single(code_point).unwrap_or(c));
}

/// The one character `code_point` folds to, where it is another one.
fn single(code_point: u32) -> Option<char> {
    // The last run starting at or before `code_point`.
    let i = SINGLE.partition_point(|&(start, _, _, _)| start <= code_point).checked_sub(1)?;
    let (start, count, step, delta) = SINGLE[i];
    let offset = code_point - start;
    let inside = offset % u32::from(step) == 0 && offset / u32::from(step) < u32::from(count);
    inside.then(|| char::from_u32(code_point.wrapping_add_signed(delta))).flatten()
}

#[cfg(test)]
mod tests;
