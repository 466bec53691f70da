# Issue 53, item 2 (run by scripts/bench/adapter MODEL_DIR DB QUERIES): a linear map W on the
# frozen query vectors, learnt from the vault's own pairs (each page's title -> its body without
# the title), measured on the vector arm alone (a page scored by its best chunk, as cairn does).
# W minimises sum ||W t - d||^2 + lambda ||W - I||^2 (ridge toward the identity; closed form);
# lambda is chosen by held-out pairs of the vault (title -> page MRR over a 20% split), never by
# the queries.
import glob, json, sys, math, numpy as np, lance, onnxruntime as ort
from tokenizers import Tokenizer
M, db, qfile = sys.argv[1], sys.argv[2], sys.argv[3]
tok = Tokenizer.from_file(f'{M}/tokenizer.json')
tok.enable_truncation(256); tok.enable_padding()
sess = ort.InferenceSession(f'{M}/model.onnx', providers=['CPUExecutionProvider'])
names = [i.name for i in sess.get_inputs()]

def embed(texts, bs=64):
    out = []
    for i in range(0, len(texts), bs):
        enc = tok.encode_batch(texts[i:i+bs])
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        feed = {'input_ids': ids, 'attention_mask': mask}
        if 'token_type_ids' in names: feed['token_type_ids'] = np.zeros_like(ids)
        h = sess.run(None, feed)[0]
        v = (h * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
        out.append(v / np.linalg.norm(v, axis=1, keepdims=True))
    return np.concatenate(out).astype(np.float32)

src = db.rstrip('/').split('/')[-1]
ct = glob.glob(f'{db}/*_chunks.lance')[0]; pt = glob.glob(f'{db}/*_pages.lance')[0]
ch = lance.dataset(ct).to_table(columns=['slug', 'vector', 'text']).to_pylist()
pages = lance.dataset(pt).to_table(columns=['slug', 'title']).to_pylist()
C = np.array([c['vector'] for c in ch], dtype=np.float32)
cslug = [c['slug'] for c in ch]
slugs = sorted(set(cslug)); sidx = {s: i for i, s in enumerate(slugs)}
cpage = np.array([sidx[s] for s in cslug])
qs = [json.loads(l) for l in open(qfile)]
Q = embed([q['query'] for q in qs])

def rank(V):
    S = V @ C.T  # queries x chunks
    P = np.full((len(V), len(slugs)), -9.0, dtype=np.float32)
    for j in range(C.shape[0]):
        np.maximum(P[:, cpage[j]], S[:, j], out=P[:, cpage[j]])
    return np.argsort(-P, axis=1)[:, :10]

def ndcg(top):
    tot = 0
    for q, t in zip(qs, top):
        g = q.get('grades') or {r: 1 for r in q['relevant']}
        gains = [g.get(slugs[i], 0) for i in t]
        dcg = sum(x / math.log2(k + 2) for k, x in enumerate(gains))
        ideal = sorted(g.values(), reverse=True)[:10]
        idcg = sum(x / math.log2(k + 2) for k, x in enumerate(ideal))
        tot += dcg / idcg if idcg else 0
    return tot / len(qs)

print(src, 'vector arm alone, nDCG@10:', round(ndcg(rank(Q)), 4))
# Pairs: each page's title (embedded as a query is) -> its body without the title.
title = {p['slug']: p['title'] for p in pages}
T = embed([title[s] for s in slugs])
body = {}
for c in ch:
    t = c['text']
    if t.startswith(title[c['slug']]): t = t[len(title[c['slug']]):]
    body[c['slug']] = body.get(c['slug'], '') + ' ' + t.strip()
D = embed([body[s].strip()[:2000] or title[s] for s in slugs])
rng = np.random.default_rng(7); perm = rng.permutation(len(slugs)); cut = int(.8 * len(slugs))
tr, te = perm[:cut], perm[cut:]
def fit(idx, lam):
    d = C.shape[1]; Tt, Dt = T[idx], D[idx]
    return (Dt.T @ Tt + lam * np.eye(d)) @ np.linalg.inv(Tt.T @ Tt + lam * np.eye(d))
def title_mrr(W, idx):
    V = T[idx] @ W.T; V /= np.linalg.norm(V, axis=1, keepdims=True)
    S = V @ D.T; r = (S > S[np.arange(len(idx)), idx][:, None]).sum(1)
    return float(np.mean(1 / (1 + r)))
I = np.eye(C.shape[1])
print('held-out title->page MRR, identity:', round(title_mrr(I, te), 4))
best = None
for lam in [0.1, 0.3, 1, 3, 10, 30, 100]:
    m = title_mrr(fit(tr, lam), te)
    print(f'  lambda {lam}: held-out title MRR {m:.4f}')
    if best is None or m > best[1]: best = (lam, m)
lam = best[0]; W = fit(np.arange(len(slugs)), lam)
V = Q @ W.T; V /= np.linalg.norm(V, axis=1, keepdims=True)
print(f'chosen by the vault alone: lambda {lam}; queries nDCG@10 with the adapter:', round(ndcg(rank(V)), 4))
for a in [0.25, 0.5]:
    Va = (1 - a) * Q + a * V; Va /= np.linalg.norm(Va, axis=1, keepdims=True)
    print(f'  mixed {a}: {ndcg(rank(Va)):.4f}')
