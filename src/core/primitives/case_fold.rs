//! The case fold of the fingerprint's lookalike-key rule (`canonical_json::folded_key`,
//! `body_shape`'s `fingerprint_only` names): which JSON member names a case-insensitive
//! decoder reads as one.
//!
//! Owns the rule, not the tables: a character folds to its full upper case, then that
//! string's full lower case, both from the standard library (`char::to_uppercase` and
//! `char::to_lowercase`: Unicode's default mappings, including the unconditional
//! multi-character ones of SpecialCasing.txt, without locale rules). So `S`, `s` and the
//! long s `ſ` fold to `s`; the Kelvin sign to `k`; `ß` and `SS` to `ss` (and the capital
//! sharp s `ẞ` to `ß`, below); `Σ`, `σ` and the final `ς` to `σ`; the micro sign `µ` to Greek
//! `μ`; the titlecase `ǅ` with `Ǆ` and `ǆ`; the Turkish dotless `ı` to `i` (its upper case
//! is `I`). The dotted `İ` folds to `i` followed by U+0307, not to `i`, as Unicode's full
//! lower case has it; no locale (Turkish `I`↔`ı`) is applied.
//!
//! Why this rule: it joins every pair of characters that simple case folding joins
//! (CaseFolding.txt's `C`+`S`: Go's `strings.EqualFold`, `unicase`, most "case-insensitive"
//! comparisons; checked, when the rule was adopted, for every pair of the Unicode 16.0
//! table that `regex-syntax` 0.8 ships) and more (`ß`/`ss`,
//! `ŉ`/`ʼn`, the ligature `ﬀ`/`ff`, `ᾈ`/`ᾀ`). Joining more only keeps more objects in
//! written order, which errs towards a 422, never towards replaying one payload's answer
//! for another.
//!
//! It is the fold of every earlier release (a table generated from these same mappings,
//! equal to them for every character under Unicode 17.0.0), kept exactly so that every
//! fingerprint stays what it was. One pair simple case folding joins stays apart: the
//! capital sharp s `ẞ` (U+1E9E) folds to `ß`, which a second fold would take on to `ss`.
//! Joining it would keep `{"ẞ":…,"ß":…}` in written order rather than sorted, which changes
//! that object's fingerprint: a change of the fingerprint's rule, left to a decision of its
//! own (docs/hand-written.md notes it).
//!
//! The mappings are the toolchain's: a toolchain with a newer Unicode version may fold a
//! newly encoded character differently, which changes the fingerprint of a body whose keys
//! hold it (a retry then refused with 422, never a wrong replay). The test
//! `the_unicode_version_is_the_one_fingerprints_were_recorded_with` stops such an upgrade
//! from passing unnoticed.

/// Appends the fold of `c` to `out`.
pub fn push_folded(out: &mut String, c: char) {
    out.extend(c.to_uppercase().flat_map(char::to_lowercase));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fold(text: &str) -> String {
        let mut out = String::new();
        text.chars().for_each(|c| push_folded(&mut out, c));
        out
    }

    /// Each input and its fold as every release so far folded it (the table of d5eb51d,
    /// generated from the standard library's mappings), written out code point by code
    /// point.
    #[test]
    fn folds_as_every_release_folded() {
        let cases: &[(&str, &str)] = &[
            // ASCII.
            ("amount", "amount"),
            ("Amount", "amount"),
            ("AMOUNT_ID-2", "amount_id-2"),
            // Latin-1.
            ("\u{c9}", "\u{e9}"),
            ("\u{e9}", "\u{e9}"),
            ("\u{ff}", "\u{ff}"),
            ("\u{178}", "\u{ff}"),
            ("\u{c5}", "\u{e5}"),
            ("\u{b5}", "\u{3bc}"),
            ("\u{d7}\u{f7}", "\u{d7}\u{f7}"),
            // Greek sigma: capital, small and final fold alike.
            ("\u{3a3}", "\u{3c3}"),
            ("\u{3c3}", "\u{3c3}"),
            ("\u{3c2}", "\u{3c3}"),
            ("\u{39f}\u{394}\u{39f}\u{3a3}", "\u{3bf}\u{3b4}\u{3bf}\u{3c3}"),
            // German sharp s.
            ("\u{df}", "ss"),
            ("\u{1e9e}", "\u{df}"), // folded once: `ß`, not `ss` (module doc).
            ("Stra\u{df}e", "strasse"),
            ("STRASSE", "strasse"),
            // Turkish dotted and dotless I (no locale rules).
            ("I", "i"),
            ("\u{131}", "i"),
            ("\u{130}", "i\u{307}"),
            ("i\u{307}", "i\u{307}"),
            // Kelvin sign, Ångström sign, long s.
            ("\u{212a}", "k"),
            ("\u{212b}", "\u{e5}"),
            ("\u{17f}", "s"),
            // Titlecase digraphs, ligatures, a character that folds to two.
            ("\u{1c4}", "\u{1c6}"),
            ("\u{1c5}", "\u{1c6}"),
            ("\u{fb00}", "ff"),
            ("\u{149}", "\u{2bc}n"),
            ("\u{1f88}", "\u{1f00}\u{3b9}"),
            ("\u{390}", "\u{3b9}\u{308}\u{301}"),
            // Uncased text and the replacement character stay as they are.
            ("\u{5317}\u{4eac}\u{1f600}", "\u{5317}\u{4eac}\u{1f600}"),
            ("\u{fffd}", "\u{fffd}"),
        ];
        for (input, folded) in cases {
            assert_eq!(fold(input), *folded, "{input:?}");
        }
    }

    /// Which names one member name is refused beside (kept in written order, `canonical_json`
    /// rule 2), and which it is not: as every release decided.
    #[test]
    fn lookalikes_are_the_names_every_release_joined() {
        let alike: &[(&str, &str)] = &[
            ("amount", "Amount"),
            ("\u{e9}", "\u{c9}"),
            ("\u{ff}", "\u{178}"),
            ("\u{3c3}", "\u{3a3}"),
            ("\u{3c2}", "\u{3c3}"),
            ("\u{df}", "SS"),
            ("\u{df}", "ss"),
            ("stra\u{df}e", "STRASSE"),
            ("\u{131}", "I"),
            ("\u{131}", "i"),
            ("\u{130}", "i\u{307}"),
            ("\u{212a}", "k"),
            ("\u{212a}", "K"),
            ("\u{17f}", "s"),
            ("\u{3bc}", "\u{b5}"),
            ("\u{1c5}", "\u{1c4}"),
            ("\u{212b}", "\u{e5}"),
            ("\u{fb00}", "ff"),
            ("\u{149}", "\u{2bc}N"),
            ("\u{1f88}", "\u{1f80}"),
        ];
        let apart: &[(&str, &str)] = &[
            ("\u{130}", "i"),
            ("\u{130}", "I"),
            // Every release folded `ẞ` once, to `ß`: apart from `ss` and `SS` (module doc).
            ("\u{1e9e}", "SS"),
            ("e", "\u{e9}"),
            ("s", "\u{3c3}"),
            ("k", "\u{3ba}"),
            ("\u{3bc}", "u"),
            ("a", "b"),
        ];
        for (a, b) in alike {
            assert_eq!(fold(a), fold(b), "{a:?} and {b:?} must fold alike");
        }
        for (a, b) in apart {
            assert_ne!(fold(a), fold(b), "{a:?} and {b:?} must stay apart");
        }
    }

    /// The fold comes from the toolchain's Unicode tables. The known answers pin it for the
    /// characters they hold; this pins the version, so that a toolchain upgrade that could
    /// fold a newly encoded character differently (and so change the fingerprint of a body
    /// whose keys hold one) is a decision, not an accident. Before raising it, read the
    /// module doc.
    #[test]
    fn the_unicode_version_is_the_one_fingerprints_were_recorded_with() {
        assert_eq!(
            char::UNICODE_VERSION,
            (17, 0, 0),
            "the toolchain's Unicode version changed; see core::primitives::case_fold"
        );
    }
}
