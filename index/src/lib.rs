//! `cairn-index`: the Embedder trait and its ONNX Runtime implementation, model provisioning, and per-source LanceDB storage.
