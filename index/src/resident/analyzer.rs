//! The analyzer every keyword match in the product reads words with (LanceDB's own, so the
//! resident keyword index and LanceDB's full-text index agree).

use lance_tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter,
    TextAnalyzer,
};

fn analyzer() -> TextAnalyzer {
    let mut b = TextAnalyzer::builder(SimpleTokenizer::default())
        .dynamic()
        .filter_dynamic(RemoveLongFilter::limit(40))
        .filter_dynamic(LowerCaser)
        .filter_dynamic(Stemmer::new(Language::English));
    if let Some(stop) = StopWordFilter::new(Language::English) {
        b = b.filter_dynamic(stop);
    }
    b.filter_dynamic(AsciiFoldingFilter).build()
}

thread_local! {
    static ANALYZER: std::cell::RefCell<TextAnalyzer> = std::cell::RefCell::new(analyzer());
    static STOP: std::cell::RefCell<TextAnalyzer> = std::cell::RefCell::new({
        let b = TextAnalyzer::builder(SimpleTokenizer::default()).dynamic().filter_dynamic(LowerCaser);
        match StopWordFilter::new(Language::English) {
            Some(stop) => b.filter_dynamic(stop).build(),
            None => b.build(),
        }
    });
}

/// Whether a word is one of the English stop words the keyword arm (LanceDB's tokenizer)
/// leaves out.
pub fn is_stop_word(word: &str) -> bool {
    STOP.with(|a| {
        let mut a = a.borrow_mut();
        let mut kept = false;
        a.token_stream(word).process(&mut |_| kept = true);
        !kept
    })
}

/// The terms of a text, as LanceDB's full-text index sees them.
pub fn terms(text: &str) -> Vec<String> {
    ANALYZER.with(|a| {
        let mut a = a.borrow_mut();
        let mut out = Vec::new();
        a.token_stream(text).process(&mut |t| out.push(t.text.clone()));
        out
    })
}
