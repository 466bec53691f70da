//! The real model through ort (provisioned from the package registries on first use).

use cairn_index::{Embedder, OrtEmbedder, OrtOptions, cosine};
use std::sync::OnceLock;

fn embedder() -> &'static OrtEmbedder {
    static E: OnceLock<OrtEmbedder> = OnceLock::new();
    E.get_or_init(|| OrtEmbedder::open(OrtOptions::default()).expect("real model must load"))
}

/// (anchor, related, unrelated): the related text must score the higher cosine.
const TRIPLES: [(&str, &str, &str); 22] = [
    (
        "How many people live in Berlin?",
        "Berlin has about 3.7 million inhabitants.",
        "Sushi is rice with raw fish.",
    ),
    (
        "greek amphitheater",
        "An indoor amphitheater in the Greek style for public debate.",
        "Quarterly tax filing checklist.",
    ),
    (
        "how do I bake sourdough bread",
        "Feed the starter, mix flour and water, proof overnight, bake hot.",
        "The kernel scheduler picks the next runnable task.",
    ),
    (
        "who leads the data platform team",
        "Maria Chen is the lead of the data platform team.",
        "The parking garage opens at seven.",
    ),
    (
        "python list comprehension",
        "In Python, [x * 2 for x in items] builds a new list.",
        "The Alps span eight European countries.",
    ),
    (
        "symptoms of the flu",
        "Influenza causes fever, cough, sore throat and muscle aches.",
        "A balance sheet lists assets and liabilities.",
    ),
    (
        "capital of France",
        "Paris is the capital and largest city of France.",
        "Photosynthesis converts light into chemical energy.",
    ),
    (
        "reset my password",
        "To change your password, open settings and choose security.",
        "The orchestra tuned to the oboe's A.",
    ),
    (
        "electric car battery range",
        "Most EVs travel 300 to 500 km on a full charge.",
        "Medieval monks copied manuscripts by hand.",
    ),
    (
        "quarterly revenue report",
        "Revenue for Q3 grew 12 percent over the previous quarter.",
        "Cats sleep for most of the day.",
    ),
    (
        "how to water succulents",
        "Water succulents deeply but rarely, letting the soil dry out.",
        "TCP uses a three-way handshake.",
    ),
    (
        "database index performance",
        "A B-tree index makes lookups on the column much faster.",
        "The recipe calls for two eggs.",
    ),
    (
        "train schedule to Munich",
        "Trains to Munich leave hourly from the central station.",
        "Glaciers carve U-shaped valleys.",
    ),
    (
        "learning to play guitar",
        "Beginners should practise chords and strumming daily.",
        "Interest rates affect mortgage payments.",
    ),
    (
        "climate change effects",
        "Rising temperatures melt ice sheets and raise sea levels.",
        "The chess opening is called the Sicilian.",
    ),
    (
        "meeting notes from Monday",
        "Monday's meeting: we agreed to ship the beta next week.",
        "Volcanoes form at plate boundaries.",
    ),
    (
        "civic feedback platform",
        "A tool for residents to send feedback to the city council.",
        "How to knit a scarf.",
    ),
    (
        "memory leak in the server",
        "The service's heap grows until the process is killed: a leak.",
        "The marathon route passes the river.",
    ),
    (
        "vegan dessert recipe",
        "A chocolate mousse made with aquafaba instead of eggs.",
        "The satellite entered a polar orbit.",
    ),
    (
        "job interview tips",
        "Prepare examples of past work and research the company.",
        "Tides are caused by the moon's gravity.",
    ),
    (
        "rust borrow checker error",
        "error[E0502]: cannot borrow as mutable because it is also borrowed as immutable",
        "The painting hangs in the Louvre.",
    ),
    (
        "hall of light",
        "The Hall of Light is the nickname of the glass-roofed amphitheater.",
        "A spreadsheet of monthly expenses.",
    ),
];

#[test]
fn related_pairs_score_above_unrelated_ones() {
    let e = embedder();
    let mut failures = Vec::new();
    for (anchor, related, unrelated) in TRIPLES {
        let out = e.embed_documents(&[anchor, related, unrelated]).unwrap();
        let (r, u) = (cosine(&out.vectors[0], &out.vectors[1]), cosine(&out.vectors[0], &out.vectors[2]));
        if r <= u {
            failures.push(format!("{anchor:?}: related {r:.3} <= unrelated {u:.3}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn vectors_are_unit_length_deterministic_and_sized() {
    let e = embedder();
    assert_eq!(e.dim(), 384);
    assert!(e.model_id().starts_with("all-MiniLM-L6-v2-int8@"), "{}", e.model_id());
    let a = e.embed_documents(&["identical text"]).unwrap().vectors.remove(0);
    let b = e.embed_documents(&["identical text"]).unwrap().vectors.remove(0);
    assert_eq!(a, b);
    assert_eq!(a.len(), 384);
    assert!((cosine(&a, &a) - 1.0).abs() < 1e-4);
    assert_eq!(e.embed_query("identical text").unwrap(), a, "a query is embedded like a document");
}

/// The model loaded again in place of the one that ran batches (what the indexing worker does
/// once a backfill is over) embeds exactly as before.
#[test]
fn a_released_model_embeds_as_before() {
    let e = OrtEmbedder::open(OrtOptions::default()).expect("real model must load");
    let texts: Vec<&str> = TRIPLES.iter().flat_map(|(a, b, c)| [*a, *b, *c]).collect();
    let before = e.embed_documents(&texts).unwrap().vectors;
    e.release();
    assert_eq!(e.embed_documents(&texts).unwrap().vectors, before);
    e.release();
    e.release();
    assert_eq!(e.embed_query(texts[0]).unwrap(), before[0]);
}

#[test]
fn a_batch_equals_one_by_one() {
    let e = embedder();
    let texts: Vec<String> =
        TRIPLES.iter().flat_map(|(a, b, c)| [a.to_string(), b.to_string(), c.to_string()]).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let batched = e.embed_documents(&refs).unwrap().vectors;
    for (text, vb) in refs.iter().zip(&batched) {
        let single = e.embed_documents(&[text]).unwrap().vectors.remove(0);
        let max_diff = single.iter().zip(vb).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(max_diff < 1e-5, "{text:?}: batch differs from single by {max_diff}");
    }
}

#[test]
fn empty_and_huge_inputs_are_handled_and_truncation_reported() {
    let e = embedder();
    let huge = "lorem ipsum dolor sit amet ".repeat(4000); // ~100 KB
    let out = e.embed_documents(&["", &huge, "short"]).unwrap();
    assert_eq!(out.vectors.len(), 3);
    assert!(out.vectors.iter().all(|v| v.len() == 384 && v.iter().all(|x| x.is_finite())));
    assert_eq!(out.truncated, vec![1]);
    assert!(e.embed_documents(&[]).unwrap().vectors.is_empty());
}

#[test]
fn vectors_match_the_python_onnxruntime_reference() {
    #[derive(serde::Deserialize)]
    struct Reference {
        sentences: Vec<Sentence>,
    }
    #[derive(serde::Deserialize)]
    struct Sentence {
        text: String,
        vector: Vec<f32>,
    }
    let path = std::path::Path::new(&std::env::var_os("CARGO_MANIFEST_DIR").expect("run by cargo"))
        .join("../fixtures/embeddings/reference.json");
    let reference: Reference = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(reference.sentences.len() >= 5);
    for s in &reference.sentences {
        let ours = embedder().embed_documents(&[&s.text]).unwrap().vectors.remove(0);
        let c = cosine(&ours, &s.vector);
        assert!(c >= 0.999, "{:?}: cosine with the Python reference is {c}", s.text);
    }
}

#[test]
fn a_second_configuration_of_the_bundled_model_reads_otherwise_and_says_so_in_its_id() {
    use cairn_index::embed::Pooling;
    let cls = OrtOptions {
        pooling: Pooling::Cls,
        query_prefix: "query: ".into(),
        document_prefix: "passage: ".into(),
        ..OrtOptions::default()
    };
    let other = OrtEmbedder::open(cls).unwrap();
    let e = embedder();
    assert_eq!(other.dim(), 384, "the width is read from the model");
    assert_ne!(other.model_id(), e.model_id(), "vectors of other settings never share a table");
    assert!(other.model_id().contains("pooling=cls"), "{}", other.model_id());
    let doc = other.embed_documents(&["tide tables"]).unwrap().vectors.remove(0);
    assert!((cosine(&doc, &doc) - 1.0).abs() < 1e-4, "unit length");
    let mean = e.embed_documents(&["tide tables"]).unwrap().vectors.remove(0);
    assert!(cosine(&doc, &mean) < 0.99, "the first token's vector is not the mean");
    let query = other.embed_query("tide tables").unwrap();
    assert!(cosine(&doc, &query) < 0.999, "a query and a document are read with their own prefixes");
    let wrong = OrtEmbedder::open(OrtOptions { dim: Some(768), ..OrtOptions::default() }).unwrap_err();
    assert!(wrong.to_string().contains("dim = 768"), "{wrong}");
}

#[test]
fn without_heading_context_a_chunk_is_embedded_from_its_own_text_alone() {
    let bare = OrtEmbedder::open(OrtOptions { heading_context: false, ..OrtOptions::default() }).unwrap();
    let e = embedder();
    assert!(bare.model_id().contains("heading_context=false"), "{}", bare.model_id());
    assert_ne!(bare.model_id(), e.model_id(), "vectors of other settings never share a table");
    let chunk = "Harbour › Ferries\n\nBoats leave at dawn.";
    let alone = bare.embed_documents(&[chunk]).unwrap().vectors.remove(0);
    let text = e.embed_documents(&["Boats leave at dawn."]).unwrap().vectors.remove(0);
    assert!(cosine(&alone, &text) > 0.9999, "the heading path is left out");
    let with = e.embed_documents(&[chunk]).unwrap().vectors.remove(0);
    assert!(cosine(&with, &text) < 0.99, "by default the heading path is read too");
    let query = bare.embed_query("Harbour › Ferries\n\nBoats").unwrap();
    assert!(
        cosine(&query, &e.embed_query("Harbour › Ferries\n\nBoats").unwrap()) > 0.9999,
        "a query is read whole"
    );
}

#[test]
fn a_model_whose_vectors_come_out_under_another_name_is_read_the_same() {
    // The bundled model with its output renamed (a name of the same length, so the file's
    // lengths hold): found by its rank, the vectors are the same.
    let files = cairn_index::provision::provision().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(&files.model).unwrap();
    let (from, to) = (b"last_hidden_state", b"token_vectors_out");
    let mut renamed = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at..].starts_with(from) {
            renamed.extend_from_slice(to);
            at += from.len();
        } else {
            renamed.push(bytes[at]);
            at += 1;
        }
    }
    assert_ne!(renamed, bytes, "the output was renamed");
    std::fs::write(dir.path().join("model.onnx"), &renamed).unwrap();
    std::fs::copy(&files.tokenizer, dir.path().join("tokenizer.json")).unwrap();
    let other = cairn_index::provision::provision_with(Some(dir.path())).unwrap();
    let e = OrtEmbedder::from_files(&other, OrtOptions::default()).unwrap();
    let text = "Ferries leave the Old Port at dawn.";
    let (got, want) = (
        e.embed_documents(&[text]).unwrap().vectors.remove(0),
        embedder().embed_documents(&[text]).unwrap().vectors.remove(0),
    );
    assert!(cosine(&got, &want) > 0.99999, "{}", cosine(&got, &want));
    let named = OrtOptions { output: Some("last_hidden_state".into()), ..OrtOptions::default() };
    let err = OrtEmbedder::from_files(&other, named).unwrap_err().to_string();
    assert!(
        err.contains("token_vectors_out (rank 3)"),
        "a configured output the model lacks is named: {err}"
    );
}
