//! How far a typed name is from a page's name: the optimal-string-alignment distance (insert,
//! delete, substitute, or swap two neighbours: each one edit), bounded, over characters.
//!
//! Used by the fuzzy name lane: a query a key or two away from a page's title, alias or file name
//! ("kubernets", "stack ovwrflow") still finds that page, as a *probable* match, never as proof
//! that the page exists.
//!
//! Among names one edit away, a typing slip (a letter dropped, doubled or struck beside its key's
//! neighbour, two neighbours swapped, a neighbouring key struck) is likelier than any other edit
//! (Damerau 1964; most substitutions in typing are of adjacent keys, Grudin 1983), so [`cost`]
//! counts it as half an edit less: a three-letter acronym has many names one edit away, and the
//! slip is the one meant far more often than the rest.

/// Edits a name of `chars` characters may be away and still be taken for it: Lucene's and
/// Elasticsearch's `AUTO` fuzziness, as it stands (none up to 2 characters, one up to 5, two
/// beyond), not a bound fitted here.
pub fn max_edits(chars: usize) -> usize {
    match chars {
        0..=2 => 0,
        3..=5 => 1,
        _ => 2,
    }
}

/// The edit distance between `a` and `b` when it is at most `max`, else `None`. Cost is
/// O(len × (2·max + 1)): only the band of the table within `max` of the diagonal is filled.
pub fn distance_within(a: &str, b: &str, max: usize) -> Option<usize> {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    if a.len().abs_diff(b.len()) > max {
        return None;
    }
    let (n, m) = (a.len(), b.len());
    let big = max + 1;
    // Three rows of the table: i-2, i-1, i (for the swap of neighbours).
    let mut prev2 = vec![big; m + 1];
    let mut prev: Vec<usize> = (0..=m).map(|j| j.min(big)).collect();
    let mut cur = vec![big; m + 1];
    for i in 1..=n {
        let lo = i.saturating_sub(max).max(1);
        let hi = (i + max).min(m);
        cur.iter_mut().for_each(|c| *c = big);
        cur[0] = i.min(big);
        let mut row_min = cur[0];
        for j in lo..=hi {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (prev[j - 1] + cost).min(prev[j] + 1).min(cur[j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(prev2[j - 2] + 1);
            }
            cur[j] = d.min(big);
            row_min = row_min.min(cur[j]);
        }
        if row_min > max {
            return None;
        }
        std::mem::swap(&mut prev2, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    (prev[m] <= max).then_some(prev[m])
}

/// Keyboard rows of QWERTY, and of QWERTZ (`y` and `z` swapped), each row's keys half a key
/// right of the row above.
const LAYOUTS: [[&str; 3]; 2] =
    [["qwertyuiop", "asdfghjkl", "zxcvbnm"], ["qwertzuiop", "asdfghjkl", "yxcvbnm"]];

/// Whether `a` and `b` are neighbouring keys on either layout: beside each other in a row, or
/// touching in the row above or below.
fn near(a: char, b: char) -> bool {
    LAYOUTS.iter().any(|rows| {
        let at =
            |c: char| rows.iter().enumerate().find_map(|(r, row)| row.find(c).map(|i| (r as i64, i as i64)));
        let (Some((ra, ia)), Some((rb, ib))) = (at(a), at(b)) else { return false };
        match rb - ra {
            0 => ia.abs_diff(ib) == 1,
            -1 => ib == ia || ib == ia + 1,
            1 => ib == ia || ib == ia - 1,
            _ => false,
        }
    })
}

/// Whether `typed` is `name` with one typing slip (see the module).
pub fn is_slip(typed: &str, name: &str) -> bool {
    let (t, n): (Vec<char>, Vec<char>) = (typed.chars().collect(), name.chars().collect());
    let without = |v: &[char], i: usize| v[..i].iter().chain(&v[i + 1..]).copied().collect::<Vec<char>>();
    if t.len() + 1 == n.len() {
        return (0..n.len()).any(|i| without(&n, i) == t);
    }
    if t.len() == n.len() + 1 {
        // A letter struck twice, or with its neighbour's key.
        return (0..t.len()).any(|i| {
            let beside =
                |j: Option<usize>| j.and_then(|j| t.get(j)).is_some_and(|&c| c == t[i] || near(c, t[i]));
            without(&t, i) == n && (beside(i.checked_sub(1)) || beside(Some(i + 1)))
        });
    }
    if t.len() != n.len() {
        return false;
    }
    let differ: Vec<usize> = (0..t.len()).filter(|&i| t[i] != n[i]).collect();
    match differ[..] {
        [i] => near(t[i], n[i]),
        [i, j] => j == i + 1 && t[i] == n[j] && t[j] == n[i],
        _ => false,
    }
}

/// What taking `typed` for `name` costs, when it is at most `max` edits away: two per edit, one
/// less for a single edit that is a typing slip; `None` beyond `max` edits.
pub fn cost(typed: &str, name: &str, max: usize) -> Option<usize> {
    let d = distance_within(typed, name, max)?;
    Some(2 * d - usize::from(d == 1 && is_slip(typed, name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_typo_is_one_edit() {
        let d = |a, b| distance_within(a, b, 2);
        assert_eq!(d("kubernetes", "kubernetes"), Some(0));
        assert_eq!(d("kubernets", "kubernetes"), Some(1), "dropped");
        assert_eq!(d("kubernnetes", "kubernetes"), Some(1), "doubled");
        assert_eq!(d("kubrenetes", "kubernetes"), Some(1), "swapped neighbours");
        assert_eq!(d("kubermetes", "kubernetes"), Some(1), "neighbouring key");
        assert_eq!(d("stack ovwrflow", "stack overflow"), Some(1));
        assert_eq!(d("stak ovwrflow", "stack overflow"), Some(2));
        assert_eq!(d("stak ovwrflw", "stack overflow"), None, "three edits");
        assert_eq!(d("", "ab"), Some(2));
        assert_eq!(d("abc", ""), None);
        // Characters, not bytes.
        assert_eq!(d("café", "cafe"), Some(1));
        assert_eq!(d("straße", "strasse"), Some(2));
    }

    #[test]
    fn a_typing_slip_costs_less_than_any_other_edit() {
        // "akm" is one edit from each; only "alm" is a slip (k and l are neighbouring keys).
        assert_eq!(cost("akm", "alm", 1), Some(1));
        assert_eq!(cost("akm", "acm", 1), Some(2));
        assert_eq!(cost("adn", "and", 1), Some(1), "swapped neighbours");
        assert_eq!(cost("adn", "adc", 1), Some(2), "n and c are not neighbours");
        assert_eq!(cost("coc", "conc", 1), Some(1), "dropped");
        assert_eq!(cost("fll", "fl", 1), Some(1), "doubled");
        assert_eq!(cost("adfn", "adn", 1), Some(1), "struck with its neighbour's key");
        assert_eq!(cost("adpn", "adn", 1), Some(2), "a letter from nowhere");
        assert_eq!(cost("daz", "das", 1), Some(1), "z beside s");
        assert_eq!(cost("uebra", "zebra", 1), Some(1), "QWERTZ: u beside z");
        assert_eq!(cost("qebra", "zebra", 1), Some(2), "q is beside z on neither");
        assert_eq!(cost("kubrenetes", "kubernetes", 2), Some(1));
        assert_eq!(cost("stak ovwrflow", "stack overflow", 2), Some(4), "two edits: no slip discount");
        assert_eq!(cost("akm", "akm", 1), Some(0));
        assert_eq!(cost("akmxx", "akm", 1), None);
    }

    #[test]
    fn the_bound_cuts_the_work_and_the_answer() {
        assert_eq!(distance_within("abcdefgh", "abcdefgh", 0), Some(0));
        assert_eq!(distance_within("abcdefgh", "abcdefgx", 0), None);
        assert_eq!(distance_within("interpreter", "compiler", 2), None);
        // Agrees with a plain full table on a spread of pairs.
        let words = ["parse", "parser", "parsed", "sparse", "spares", "pares", "apres", "prase", "p", ""];
        for a in words {
            for b in words {
                let full = full_osa(a, b);
                for max in 0..4 {
                    assert_eq!(distance_within(a, b, max), (full <= max).then_some(full), "{a} {b} {max}");
                }
            }
        }
    }

    fn full_osa(a: &str, b: &str) -> usize {
        let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
        let mut t = vec![vec![0usize; b.len() + 1]; a.len() + 1];
        for (i, row) in t.iter_mut().enumerate() {
            row[0] = i;
        }
        t[0] = (0..=b.len()).collect();
        for i in 1..=a.len() {
            for j in 1..=b.len() {
                let cost = usize::from(a[i - 1] != b[j - 1]);
                t[i][j] = (t[i - 1][j - 1] + cost).min(t[i - 1][j] + 1).min(t[i][j - 1] + 1);
                if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                    t[i][j] = t[i][j].min(t[i - 2][j - 2] + 1);
                }
            }
        }
        t[a.len()][b.len()]
    }

    #[test]
    fn short_names_get_no_edits() {
        assert_eq!((max_edits(2), max_edits(3), max_edits(5), max_edits(6)), (0, 1, 1, 2));
    }
}
