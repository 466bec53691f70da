//! The analyzer every keyword match in the product reads words with (LanceDB's own tokenizer
//! crate, so the resident keyword index and LanceDB's full-text index agree), in each source's
//! language: Snowball's stemmer and stop words for the 18 languages it has, character bigrams for
//! Chinese, Japanese and Korean (written without spaces), and words as written for any other.

use lance_tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter,
    TextAnalyzer,
};
use std::collections::HashMap;

/// A source's language, as its keyword analyzer reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lang {
    #[default]
    English,
    /// One of Snowball's other languages.
    Snowball(Language),
    /// Chinese, Japanese or Korean: overlapping pairs of characters (a word has no spaces).
    Cjk,
    /// Any other: words as written (lower case, accents folded), none left out.
    Other,
}

/// Each language with its ISO 639-1 code and whatlang's ISO 639-3 one.
const CODES: [(Language, &str, &str); 18] = [
    (Language::English, "en", "eng"),
    (Language::Arabic, "ar", "ara"),
    (Language::Danish, "da", "dan"),
    (Language::Dutch, "nl", "nld"),
    (Language::Finnish, "fi", "fin"),
    (Language::French, "fr", "fra"),
    (Language::German, "de", "deu"),
    (Language::Greek, "el", "ell"),
    (Language::Hungarian, "hu", "hun"),
    (Language::Italian, "it", "ita"),
    (Language::Norwegian, "no", "nob"),
    (Language::Portuguese, "pt", "por"),
    (Language::Romanian, "ro", "ron"),
    (Language::Russian, "ru", "rus"),
    (Language::Spanish, "es", "spa"),
    (Language::Swedish, "sv", "swe"),
    (Language::Tamil, "ta", "tam"),
    (Language::Turkish, "tr", "tur"),
];

/// The codes a source's `language` may be, for messages.
pub const LANGUAGE_CODES: &str =
    "en, ar, da, nl, fi, fr, de, el, hu, it, no, pt, ro, ru, es, sv, ta, tr, zh, ja, ko, other";

impl Lang {
    fn of(language: Language) -> Self {
        match language {
            Language::English => Lang::English,
            l => Lang::Snowball(l),
        }
    }

    /// The language a code names (ISO 639-1 as in `LANGUAGE_CODES`; `nb` is Norwegian too).
    pub fn parse(code: &str) -> Option<Self> {
        let code = code.trim().to_ascii_lowercase();
        match code.as_str() {
            "zh" | "ja" | "ko" | "cjk" => return Some(Lang::Cjk),
            "other" | "none" => return Some(Lang::Other),
            "nb" | "nn" => return Some(Lang::Snowball(Language::Norwegian)),
            _ => {}
        }
        CODES.iter().find(|(_, two, three)| *two == code || *three == code).map(|(l, _, _)| Lang::of(*l))
    }

    /// Its code (what `parse` reads back; `cjk` for the three bigram languages).
    pub fn code(self) -> &'static str {
        match self {
            Lang::English => "en",
            Lang::Snowball(l) => CODES.iter().find(|(c, _, _)| *c == l).map_or("en", |(_, two, _)| two),
            Lang::Cjk => "cjk",
            Lang::Other => "other",
        }
    }

    /// The language of a sample of a source's text, when it can be told (whatlang, by trigrams and
    /// scripts): `None` when the sample is too short or too mixed to say.
    ///
    /// A sample whose CJK characters outnumber its words in other scripts is CJK first: a
    /// character of Han or kana carries about what a word does, so that is where most of its
    /// meaning is written. (whatlang weighs scripts by characters, so Japanese manual pages,
    /// full of options and commands in Latin letters, read as English, and every sentence of
    /// theirs became one unsearchable token.)
    pub fn detect(sample: &str) -> Option<Self> {
        let cjk = sample.chars().filter(|c| is_cjk(*c)).count();
        let other_words = sample
            .split(|c: char| !c.is_alphanumeric() || is_cjk(c))
            .filter(|w| w.chars().any(char::is_alphabetic))
            .count();
        if cjk > 0 && cjk >= other_words {
            return Some(Lang::Cjk);
        }
        let info = whatlang::detect(sample)?;
        if !info.is_reliable() {
            return None;
        }
        let code = info.lang().code();
        Some(match code {
            "cmn" | "jpn" | "kor" => Lang::Cjk,
            _ => CODES
                .iter()
                .find(|(_, _, three)| *three == code)
                .map_or(Lang::Other, |(l, _, _)| Lang::of(*l)),
        })
    }

    fn snowball(self) -> Option<Language> {
        match self {
            Lang::English => Some(Language::English),
            Lang::Snowball(l) => Some(l),
            Lang::Cjk | Lang::Other => None,
        }
    }
}

impl std::hash::Hash for Lang {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.code().hash(h);
    }
}

impl std::fmt::Display for Lang {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}

/// LanceDB's default analyzer, in `lang`: simple split, tokens over 40 bytes dropped, lower case,
/// the language's stemmer and stop words, ASCII folding.
fn analyzer(lang: Lang) -> TextAnalyzer {
    let mut b = TextAnalyzer::builder(SimpleTokenizer::default())
        .dynamic()
        .filter_dynamic(RemoveLongFilter::limit(40))
        .filter_dynamic(LowerCaser);
    if let Some(l) = lang.snowball() {
        b = b.filter_dynamic(Stemmer::new(l));
        if let Some(stop) = StopWordFilter::new(l) {
            b = b.filter_dynamic(stop);
        }
    }
    b.filter_dynamic(AsciiFoldingFilter).build()
}

thread_local! {
    static ANALYZERS: std::cell::RefCell<HashMap<Lang, TextAnalyzer>> = std::cell::RefCell::new(HashMap::new());
    static STOP: std::cell::RefCell<HashMap<Lang, TextAnalyzer>> = std::cell::RefCell::new(HashMap::new());
}

/// Whether a word is one of the English stop words the keyword arm (LanceDB's tokenizer)
/// leaves out.
pub fn is_stop_word(word: &str) -> bool {
    is_stop_word_in(Lang::English, word)
}

/// Whether a word is one of `lang`'s stop words (a language without a list has none).
pub fn is_stop_word_in(lang: Lang, word: &str) -> bool {
    STOP.with(|a| {
        let mut a = a.borrow_mut();
        let a = a.entry(lang).or_insert_with(|| {
            let b = TextAnalyzer::builder(SimpleTokenizer::default()).dynamic().filter_dynamic(LowerCaser);
            match lang.snowball().and_then(StopWordFilter::new) {
                Some(stop) => b.filter_dynamic(stop).build(),
                None => b.build(),
            }
        });
        let mut kept = false;
        a.token_stream(word).process(&mut |_| kept = true);
        !kept
    })
}

/// The terms of an English text, as LanceDB's full-text index sees them.
pub fn terms(text: &str) -> Vec<String> {
    terms_in(Lang::English, text)
}

/// The terms of a text in `lang`.
pub fn terms_in(lang: Lang, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    ANALYZERS.with(|a| {
        let mut a = a.borrow_mut();
        let a = a.entry(lang).or_insert_with(|| analyzer(lang));
        a.token_stream(text).process(&mut |t| out.push(t.text.clone()));
    });
    if lang == Lang::Cjk { bigrams(out) } else { out }
}

/// Han, kana and Hangul: scripts written without spaces between words.
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF // hiragana, katakana
        | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x20000..=0x2FA1F // Han
        | 0x1100..=0x11FF | 0x3130..=0x318F | 0xAC00..=0xD7AF // Hangul
    )
}

/// Each run of CJK characters in `words` as its overlapping pairs (a run of one as itself), the
/// other runs as they are: a query's words then match a text's without knowing where its words
/// end (the bigram indexing of Lucene's CJK analyzer).
fn bigrams(words: Vec<String>) -> Vec<String> {
    let mut out = Vec::with_capacity(words.len());
    for w in words {
        let mut rest = w.as_str();
        while let Some(c) = rest.chars().next() {
            let cjk = is_cjk(c);
            let end = rest.find(|c: char| is_cjk(c) != cjk).unwrap_or(rest.len());
            let (run, tail) = rest.split_at(end);
            if cjk {
                let chars: Vec<char> = run.chars().collect();
                match chars.len() {
                    1 => out.push(run.to_string()),
                    _ => out.extend(chars.windows(2).map(|p| p.iter().collect::<String>())),
                }
            } else {
                out.push(run.to_string());
            }
            rest = tail;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_language_stems_and_drops_its_own_stop_words() {
        let de = Lang::parse("de").unwrap();
        // German plurals and cases meet their stem; English's stemmer would leave them apart.
        assert_eq!(terms_in(de, "Häuser"), terms_in(de, "Haus"));
        assert_eq!(terms_in(de, "der Katzen"), terms_in(de, "Katze"));
        assert_ne!(terms("Häuser"), terms("Haus"));
        assert!(terms_in(de, "und die oder").is_empty(), "German stop words");
        assert_eq!(
            terms_in(Lang::parse("fr").unwrap(), "les maisons"),
            terms_in(Lang::parse("fr").unwrap(), "maison")
        );
        assert_eq!(terms_in(Lang::English, "The Running Dogs"), vec!["run", "dog"]);
        // Words as written: no stemming, nothing left out, accents folded.
        assert_eq!(terms_in(Lang::Other, "The Running Café"), vec!["the", "running", "cafe"]);
    }

    #[test]
    fn cjk_text_is_read_as_pairs_of_characters_so_a_word_inside_a_sentence_matches() {
        let sentence = terms_in(Lang::Cjk, "東京都の天気予報");
        let word = terms_in(Lang::Cjk, "天気");
        assert_eq!(word, vec!["天気"]);
        assert!(sentence.contains(&word[0]), "{sentence:?}");
        assert_eq!(terms_in(Lang::Cjk, "rust和東京"), vec!["rust", "和東", "東京"]);
        assert_eq!(terms_in(Lang::Cjk, "猫"), vec!["猫"]);
    }

    #[test]
    fn a_code_reads_back_and_a_sample_tells_its_language() {
        for code in LANGUAGE_CODES.split(", ") {
            let lang = Lang::parse(code).unwrap_or_else(|| panic!("{code}"));
            assert_eq!(Lang::parse(lang.code()), Some(lang), "{code}");
        }
        assert_eq!(Lang::parse("DE"), Lang::parse("deu"));
        assert_eq!(Lang::parse("xx"), None);
        let german = "Die Katze sitzt auf der Matte und schaut aus dem Fenster. Der Hund schläft im \
                      Garten, während die Kinder in der Schule sind und ihre Hausaufgaben machen.";
        assert_eq!(Lang::detect(german), Lang::parse("de"));
        let english = "The cat sits on the mat and looks out of the window while the dog sleeps in \
                       the garden and the children are at school doing their homework.";
        assert_eq!(Lang::detect(english), Some(Lang::English));
        assert_eq!(Lang::detect("東京都の天気予報によると、明日は雨が降るでしょう。"), Some(Lang::Cjk));
        assert_eq!(Lang::detect("ok"), None, "too short to say");
        // A Japanese manual page: more Latin letters than kana and Han, fewer Latin words.
        let manual = "ls - ディレクトリの内容をリスト表示する\n-a, --all . で始まる要素も表示する。\n\
                      -l 詳細リスト形式で表示する。--color[=WHEN] ファイルの種類を色で区別する。";
        assert_eq!(Lang::detect(manual), Some(Lang::Cjk));
        let visit = "We flew to 東京 in the spring and walked through the old gardens while the cherry \
                     trees were in bloom, then took the train north to see the mountains.";
        assert_eq!(Lang::detect(visit), Some(Lang::English), "two Han characters among many words");
    }
}
