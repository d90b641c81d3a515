//! Stable sorting, in one small function for every element type.
//!
//! The worker sorts a few short lists: a JSON object's members for the fingerprint
//! (`core::canonical_json`), the same keys folded to look for lookalikes, and the
//! environment's names once per isolate. `std`'s sorts (driftsort, and ipnsort under
//! `sort_by_cached_key`) are fast on long slices but are compiled anew for each element type
//! and comparison, about 12 KB of the Wasm for these three call sites (issue 23.3). Here the
//! sorting itself is one non-generic merge sort over indices ([`stable_order`]); what is
//! generic is only the swap that moves the items into that order ([`arrange`]).
//!
//! It is stable (equal items keep their order), which the fingerprint relies on: members
//! that compare equal are exact duplicates, and their written order decides which one a
//! last-wins decoder keeps. It makes at most `n·⌈log2 n⌉` comparisons, so a body with many
//! keys costs what `std`'s sort would, within a small factor, never quadratic time.

/// The indices `0..len` in the order `less` sorts them, equal items keeping their order.
///
/// `less(a, b)` says whether the item at index `a` sorts strictly before the one at `b`.
/// A bottom-up merge sort: runs of width 1, 2, 4, … merged into a second vector and back.
pub fn stable_order(len: usize, less: &mut dyn FnMut(usize, usize) -> bool) -> Vec<usize> {
    let mut order: Vec<usize> = (0..len).collect();
    let mut merged = vec![0; len];
    let mut width = 1;
    while width < len {
        let mut start = 0;
        while start < len {
            let middle = (start + width).min(len);
            let end = (start + 2 * width).min(len);
            let (mut left, mut right, mut out) = (start, middle, start);
            while left < middle && right < end {
                // The right run's item goes first only when strictly less: that is stability.
                if less(order[right], order[left]) {
                    merged[out] = order[right];
                    right += 1;
                } else {
                    merged[out] = order[left];
                    left += 1;
                }
                out += 1;
            }
            let rest_of_left = middle - left;
            merged[out..out + rest_of_left].copy_from_slice(&order[left..middle]);
            merged[out + rest_of_left..end].copy_from_slice(&order[right..end]);
            start = end;
        }
        std::mem::swap(&mut order, &mut merged);
        width *= 2;
    }
    order
}

/// Sorts `items` stably by `less` (whether the first sorts strictly before the second).
pub fn sort_stable_by<T>(items: &mut [T], mut less: impl FnMut(&T, &T) -> bool) {
    let order = stable_order(items.len(), &mut |a, b| less(&items[a], &items[b]));
    arrange(items, order);
}

/// Moves `items` into `order` (as [`stable_order`] gives it: the new first item is the one
/// at `order[0]`), in place: each cycle of the permutation is walked once, so `n` swaps at
/// most, and nothing but the swap depends on the items' type.
pub fn arrange<T>(items: &mut [T], mut order: Vec<usize>) {
    for start in 0..order.len() {
        let mut at = start;
        while order[at] != start {
            // `at` receives the item its slot names; the one it held moves on along the cycle.
            let from = order[at];
            items.swap(at, from);
            order[at] = at;
            at = from;
        }
        order[at] = at;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sorts_the_short_lists_it_is_given() {
        for len in 0..40usize {
            let mut items: Vec<usize> = (0..len).rev().collect();
            sort_stable_by(&mut items, |a, b| a < b);
            assert_eq!(items, (0..len).collect::<Vec<_>>(), "length {len}");
        }
        let mut names = vec!["b".to_string(), "a".to_string(), "c".to_string(), "a".to_string()];
        sort_stable_by(&mut names, |a, b| a < b);
        assert_eq!(names, ["a", "a", "b", "c"]);
    }

    #[test]
    fn counts_at_most_n_log_n_comparisons() {
        // Reversed, sorted and shuffled inputs of 10,000 items: a quadratic sort would make
        // about 50 million comparisons; this one makes fewer than 140,000.
        let len = 10_000usize;
        let shuffled: Vec<usize> = (0..len).map(|i| (i * 7_919) % len).collect();
        for input in [(0..len).rev().collect::<Vec<_>>(), (0..len).collect(), shuffled] {
            let mut comparisons = 0usize;
            let order = stable_order(len, &mut |a, b| {
                comparisons += 1;
                input[a] < input[b]
            });
            assert!(order.windows(2).all(|pair| input[pair[0]] <= input[pair[1]]));
            assert!(comparisons <= len * 14, "{comparisons} comparisons for {len} items");
        }
    }

    proptest! {
        /// Any order, applied in place, puts each item where the order says.
        #[test]
        fn arranges_items_in_any_order(seeds in proptest::collection::vec(any::<u32>(), 0..100)) {
            let mut order: Vec<usize> = (0..seeds.len()).collect();
            order.sort_by_key(|&index| seeds[index]);
            let mut items: Vec<String> = (0..seeds.len()).map(|index| index.to_string()).collect();
            arrange(&mut items, order.clone());
            let expected: Vec<String> = order.iter().map(|index| index.to_string()).collect();
            prop_assert_eq!(items, expected);
        }

        /// The same order as `std`'s stable sort, ties included: items that compare equal
        /// (the same `key`) keep their written order (`tag`).
        #[test]
        fn orders_as_std_stable_sort_does(keys in proptest::collection::vec(0u8..8, 0..200)) {
            let items: Vec<(u8, usize)> = keys.iter().copied().zip(0..).collect();
            let mut ours = items.clone();
            sort_stable_by(&mut ours, |a, b| a.0 < b.0);
            let mut theirs = items;
            theirs.sort_by_key(|item| item.0);
            prop_assert_eq!(ours, theirs);
        }
    }
}
