#!/usr/bin/env python3
"""Independent reference forward pass for Llama-family and Qwen2 GGUF models (float64 NumPy).

Reads the GGUF with the `gguf` package's reader and dequantiser (not kvbench's), runs a plain
full-sequence forward pass and prints the last position's logits as JSON:
    {"top": [[id, logit], ...], "logits": [...all vocab...] (with --all)}
RoPE follows llama.cpp's conventions: for Llama/Mistral GGUFs the converter permuted the Q/K rows so
that adjacent pairs (2i, 2i+1) rotate together ("norm" RoPE); Qwen2 GGUFs keep the HF row order and
rotate (i, i + d/2) ("neox" RoPE). Qwen2 adds a bias to Q, K and V. The output matrix is
output.weight, or token_embd.weight when the file has none (tied). Usage:
    numpy_forward.py --model M.gguf --ids 1,2,3 [--top-k 20] [--all] [--out FILE]
The venv with `gguf` and `numpy` is made by harness/scripts/setup.sh (tests/.venv).
"""
import argparse
import json
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def field(reader, key, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def load(path):
    reader = GGUFReader(path)
    arch = field(reader, "general.architecture")
    if arch not in ("llama", "mistral", "qwen2"):
        sys.exit(f"numpy_forward.py: architecture {arch!r} is not supported (llama, mistral, qwen2)")
    cfg = {
        "neox_rope": arch == "qwen2",
        "layers": int(field(reader, f"{arch}.block_count")),
        "heads": int(field(reader, f"{arch}.attention.head_count")),
        "kv_heads": int(field(reader, f"{arch}.attention.head_count_kv")),
        "eps": float(field(reader, f"{arch}.attention.layer_norm_rms_epsilon")),
        "theta": float(field(reader, f"{arch}.rope.freq_base", 10000.0)),
    }
    tensors = {}
    for t in reader.tensors:
        # Shapes in numpy order: [out, in] for linear weights (GGUF's ne is reversed).
        tensors[t.name] = dequantize(t.data, t.tensor_type).astype(np.float64).reshape(
            [int(n) for n in reversed(t.shape)])
    return cfg, tensors


def rms_norm(x, weight, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rope_interleaved(x, positions, theta):
    # x: [T, heads, d]; rotates (x[2i], x[2i+1]) by position * theta^(-2i/d).
    d = x.shape[-1]
    inv_freq = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    angles = positions[:, None] * inv_freq[None, :]
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def rope_neox(x, positions, theta):
    # x: [T, heads, d]; rotates (x[i], x[i + d/2]) by position * theta^(-2i/d).
    d = x.shape[-1]
    inv_freq = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    angles = positions[:, None] * inv_freq[None, :]
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    first, second = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)


def linear(h, w, name):
    # h @ W^T, plus the bias `name`.bias when the file has one (Qwen2's Q/K/V).
    y = h @ w[name + ".weight"].T
    bias = w.get(name + ".bias")
    return y if bias is None else y + bias


def forward(cfg, w, ids):
    T = len(ids)
    x = w["token_embd.weight"][ids]
    H, Hkv = cfg["heads"], cfg["kv_heads"]
    positions = np.arange(T, dtype=np.float64)
    mask = np.triu(np.full((T, T), -np.inf), k=1)
    for l in range(cfg["layers"]):
        p = f"blk.{l}."
        h = rms_norm(x, w[p + "attn_norm.weight"], cfg["eps"])
        q = linear(h, w, p + "attn_q").reshape(T, H, -1)
        k = linear(h, w, p + "attn_k").reshape(T, Hkv, -1)
        v = linear(h, w, p + "attn_v").reshape(T, Hkv, -1)
        d = q.shape[-1]
        rope = rope_neox if cfg["neox_rope"] else rope_interleaved
        q = rope(q, positions, cfg["theta"])
        k = rope(k, positions, cfg["theta"])
        out = np.empty((T, H, d))
        for a in range(H):
            kv = a // (H // Hkv)
            scores = q[:, a, :] @ k[:, kv, :].T / np.sqrt(d) + mask
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            out[:, a, :] = scores @ v[:, kv, :]
        x = x + out.reshape(T, H * d) @ w[p + "attn_output.weight"].T
        h = rms_norm(x, w[p + "ffn_norm.weight"], cfg["eps"])
        gate = h @ w[p + "ffn_gate.weight"].T
        up = h @ w[p + "ffn_up.weight"].T
        x = x + (gate / (1.0 + np.exp(-gate)) * up) @ w[p + "ffn_down.weight"].T
    h = rms_norm(x[-1], w["output_norm.weight"], cfg["eps"])
    output = w.get("output.weight", w["token_embd.weight"])  # tied embeddings when absent
    return output @ h


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--ids", required=True, help="comma-separated token ids")
    parser.add_argument("--top-k", type=int, default=20)
    parser.add_argument("--all", action="store_true", help="also print every logit")
    parser.add_argument("--out", help="write the JSON here instead of stdout")
    args = parser.parse_args()
    ids = [int(t) for t in args.ids.split(",") if t.strip()]
    cfg, weights = load(args.model)
    logits = forward(cfg, weights, np.array(ids))
    top = np.argsort(-logits, kind="stable")[: args.top_k]
    result = {"ids": ids, "top": [[int(i), float(logits[i])] for i in top]}
    if args.all:
        result["logits"] = [float(v) for v in logits]
    text = json.dumps(result)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
