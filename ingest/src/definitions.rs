//! Short forms a text defines: "Application Protocol Data Unit (APDU)", "AFP (AppleTalk Filing
//! Protocol)", "LF stands for Long Form".
//!
//! The rule is Schwartz and Hearst's ("A simple algorithm for identifying abbreviation
//! definitions in biomedical text", 2003), not one fitted to a vault: a short form is one word of
//! at most ten characters with a letter, starting with a letter or digit; its long form is the
//! shortest run of words next to it in which every letter and digit of the short form appears in
//! order, the first at the start of a word; and the long form has at most min(|SF| + 5, 2·|SF|)
//! words. Both orders are read: a long form followed by its short form in parentheses, and a
//! short form followed by its long form in parentheses (more than two words inside) or by
//! "stands for".

/// The words between a short form and its long form in the third pattern.
const STANDS_FOR: &str = " stands for ";

/// One definition, as written in the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Definition {
    pub short: String,
    pub long: String,
}

/// Characters of inline markup that are not words (`**APDU**`, `[[Page]]`, `` `x` ``).
fn unmarked(text: &str) -> String {
    text.chars().map(|c| if matches!(c, '*' | '_' | '`' | '[' | ']' | '|') { ' ' } else { c }).collect()
}

/// Whether a word can be a short form.
fn short_form(word: &str) -> bool {
    let n = word.chars().count();
    (2..=10).contains(&n)
        && word.chars().next().is_some_and(char::is_alphanumeric)
        && word.chars().any(char::is_alphabetic)
}

/// The most words a long form of `short` may have.
fn max_words(short: &str) -> usize {
    let n = short.chars().count();
    (n + 5).min(2 * n)
}

/// Where each letter and digit of `short` is found in `words`, matched from the last backwards
/// (the first at a word's start): the index of the word holding the first, or `None`.
fn matched_from(short: &str, words: &[&str]) -> Option<usize> {
    let wanted: Vec<char> =
        short.chars().filter(|c| c.is_alphanumeric()).flat_map(char::to_lowercase).collect();
    // (word, char) positions, the text as one sequence.
    let chars: Vec<(usize, usize, char)> = words
        .iter()
        .enumerate()
        .flat_map(|(w, word)| {
            word.chars().flat_map(char::to_lowercase).enumerate().map(move |(i, c)| (w, i, c))
        })
        .collect();
    let mut at = chars.len();
    for (k, want) in wanted.iter().enumerate().rev() {
        let first = k == 0;
        at = chars[..at].iter().rposition(|&(_, i, c)| c == *want && (!first || i == 0))?;
    }
    Some(chars.get(at)?.0)
}

/// The long form ending at the last of `before`'s words, for `short`.
fn long_before(short: &str, before: &[&str]) -> Option<String> {
    let window = &before[before.len().saturating_sub(max_words(short))..];
    let start = matched_from(short, window)?;
    let long = &window[start..];
    // The short form must not be the last word of its own long form ("APDU (APDU)").
    (long.len() > 1 || long[0].chars().count() > short.chars().count()).then(|| long.join(" "))
}

/// The long form starting at the first of `after`'s words: the shortest run that holds the
/// short form's letters with its last word holding the last of them.
fn long_after(short: &str, after: &[&str]) -> Option<String> {
    let last = short.chars().filter(|c| c.is_alphanumeric()).flat_map(char::to_lowercase).last()?;
    (1..=after.len().min(max_words(short))).find_map(|n| {
        let run = &after[..n];
        let ends_right = run[n - 1].chars().flat_map(char::to_lowercase).any(|c| c == last);
        (ends_right && matched_from(short, run) == Some(0)).then(|| run.join(" "))
    })
}

/// The words of a clause: split on white space, a word's edge punctuation dropped.
fn words(clause: &str) -> Vec<&str> {
    clause
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()))
        .filter(|w| !w.is_empty())
        .collect()
}

/// The clause a parenthesis ends or starts: up to a sentence's or clause's punctuation.
fn clause_before(text: &str) -> &str {
    let cut = text.rfind(['.', ';', ':', '!', '?', '(', ')', '\n']).map_or(0, |i| i + 1);
    &text[cut..]
}

fn clause_after(text: &str) -> &str {
    let cut = text.find(['.', ';', ':', '!', '?', ',', '(', ')', '\n']).unwrap_or(text.len());
    &text[..cut]
}

/// Every definition in `text`, each pair once, in the order found.
pub fn definitions(text: &str) -> Vec<Definition> {
    // Most chunks define nothing: they are passed by without a copy (every chunk of a source
    // comes through here when it loads from its tables).
    if !text.contains('(') && !text.contains(STANDS_FOR) {
        return Vec::new();
    }
    let text = unmarked(text);
    let mut out: Vec<Definition> = Vec::new();
    let mut push = |short: &str, long: Option<String>| {
        if let Some(long) = long {
            let d = Definition { short: short.to_string(), long };
            if !out.contains(&d) {
                out.push(d);
            }
        }
    };
    let mut from = 0;
    while let Some(open) = text[from..].find('(').map(|i| i + from) {
        let Some(close) = text[open + 1..].find([')', '(', '\n']).map(|i| i + open + 1) else { break };
        from = close;
        if text.as_bytes()[close] != b')' {
            continue;
        }
        let inside = words(&text[open + 1..close]);
        let before = words(clause_before(&text[..open]));
        match inside.as_slice() {
            [short] if short_form(short) => push(short, long_before(short, &before)),
            inside if inside.len() > 2 => {
                if let Some(short) = before.last().filter(|w| short_form(w)) {
                    push(short, long_after(short, inside));
                }
            }
            _ => {}
        }
    }
    for (at, _) in text.match_indices(STANDS_FOR) {
        let before = words(clause_before(&text[..at]));
        let after = words(clause_after(&text[at + STANDS_FOR.len()..]));
        if let Some(short) = before.last().filter(|w| short_form(w)) {
            push(short, long_after(short, &after));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(text: &str) -> Vec<(String, String)> {
        definitions(text).into_iter().map(|d| (d.short, d.long)).collect()
    }

    fn pair(short: &str, long: &str) -> (String, String) {
        (short.into(), long.into())
    }

    #[test]
    fn a_long_form_followed_by_its_short_form() {
        assert_eq!(
            pairs("The card answers each Application Protocol Data Unit (APDU) in turn."),
            vec![pair("APDU", "Application Protocol Data Unit")]
        );
        // The shortest run that holds the letters: "The card answers each" is not part of it.
        assert_eq!(
            pairs("We use the **Domain Name System** (DNS)."),
            vec![pair("DNS", "Domain Name System")]
        );
        // Letters inside words count, the first at a word's start.
        assert_eq!(
            pairs("the Portable Document Format (PDF)"),
            vec![pair("PDF", "Portable Document Format")]
        );
        assert_eq!(pairs("running Kubernetes (K8s) here"), vec![], "no 8 in the words before");
    }

    #[test]
    fn a_short_form_followed_by_its_long_form() {
        assert_eq!(
            pairs("Mount it over AFP (AppleTalk Filing Protocol), then copy."),
            vec![pair("AFP", "AppleTalk Filing Protocol")]
        );
        assert_eq!(
            pairs("Here LF stands for Long Form and nothing else."),
            vec![pair("LF", "Long Form")],
            "the run ends at the word holding the last letter"
        );
    }

    #[test]
    fn parentheses_that_define_nothing_are_passed_by() {
        assert!(pairs("The results (see Table 2) hold.").is_empty());
        assert!(pairs("Python (programming language) is a page.").is_empty());
        assert!(pairs("It was late (2019).").is_empty(), "a short form has a letter");
        assert!(pairs("APDU (APDU)").is_empty(), "a short form is not its own long form");
        assert!(pairs("an unclosed (ABC").is_empty());
        // The long form does not reach back over a sentence's end.
        assert!(pairs("Data Unit. Protocol (DU)").is_empty());
    }

    #[test]
    fn a_long_form_has_a_bounded_number_of_words() {
        // min(2 + 5, 2 · 2) = 4 words at most for a two-letter short form.
        assert_eq!(pairs("the Long Form (LF)"), vec![pair("LF", "Long Form")]);
        assert!(pairs("Lots of words in a row before the Five (LF)").is_empty());
    }

    #[test]
    fn each_definition_is_given_once() {
        let text = "Domain Name System (DNS). Again: Domain Name System (DNS).";
        assert_eq!(pairs(text), vec![pair("DNS", "Domain Name System")]);
    }
}
