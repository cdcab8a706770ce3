#!/usr/bin/env python3
"""Makes tests/goldens/dequantize_goldens.json: truth for tests/engine/dequantize_test.cc.

Independent reference: the `gguf` package from PyPI (gguf.quants.dequantize, GGUFReader); made with
gguf 0.19.0 and numpy 2.4.6:
  python3 -m venv /tmp/venv && /tmp/venv/bin/pip install gguf numpy
  /tmp/venv/bin/python tests/goldens/make_dequantize_goldens.py models/SmolLM2-135M-Instruct.Q4_1.gguf \
      models/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf
(the second model is fetched by `harness/scripts/get-model.sh qwen2.5-coder-0.5b`; tests/.venv has
gguf 0.19.0 and numpy).

Three parts:
  random_blocks: for each type, seeded random block bytes (scale fields set to sane fp16 values) and
                 the floats the reference decodes them to;
  model_samples: a few elements of real tensors of the default model, by flat index;
  long_model_samples: the same for Qwen2.5-Coder-0.5B-Instruct Q4_K_M, one tensor of each of its
                 types (q5_0, q8_0, q4_K, q6_K, f32), checked by tests/long_model/ (label long-model).
"""
import json
import sys

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType as T
from gguf.quants import dequantize

rng = np.random.default_rng(20261130)

# (type, bytes per block, byte offsets of fp16 scale fields, blocks to emit)
layouts = [
    (T.Q4_0, 18, [0], 2),
    (T.Q4_1, 20, [0, 2], 2),
    (T.Q8_0, 34, [0], 2),
    (T.Q4_K, 144, [0, 2], 1),
    (T.Q6_K, 210, [208], 1),
    # Appended later (issue 20); the draws above are unchanged, so are their blocks.
    (T.Q5_0, 22, [0], 2),
    (T.Q5_1, 24, [0, 2], 2),
    (T.Q5_K, 176, [0, 2], 1),
]
random_blocks = []
for qtype, block_bytes, scale_offsets, n_blocks in layouts:
    raw = bytearray(rng.integers(0, 256, size=block_bytes * n_blocks, dtype=np.uint8).tobytes())
    for b in range(n_blocks):
        for off in scale_offsets:
            raw[b * block_bytes + off: b * block_bytes + off + 2] = np.float16(rng.uniform(-0.05, 0.05)).tobytes()
    values = dequantize(np.frombuffer(bytes(raw), dtype=np.uint8), qtype).reshape(-1)
    random_blocks.append({"type": int(qtype), "name": qtype.name, "hex": bytes(raw).hex(),
                          "values": [float(v) for v in values]})



def model_samples(path, picks):
    reader = GGUFReader(path)
    samples = []
    for name, indices in picks:
        tensor = next(t for t in reader.tensors if t.name == name)
        values = dequantize(tensor.data, tensor.tensor_type).reshape(-1)
        samples.append({"tensor": name, "type": tensor.tensor_type.name, "indices": indices,
                        "values": [float(values[i]) for i in indices]})
    return samples


samples = model_samples(sys.argv[1], [("token_embd.weight", [0, 1, 31, 32, 575, 576, 1234567, 28311551]),
                                      ("blk.0.attn_q.weight", [0, 1, 15, 16, 17, 31, 100000, 331775]),
                                      ("blk.29.ffn_down.weight", [0, 5, 884735]),
                                      ("output_norm.weight", [0, 575])])
long_samples = model_samples(sys.argv[2], [
    ("token_embd.weight", [0, 1, 15, 16, 17, 31, 32, 895, 896, 12345678, 136134655]),  # q5_0
    ("output.weight", [0, 31, 32, 77777777, 136134655]),                                # q8_0
    ("blk.2.ffn_down.weight", [0, 1, 63, 64, 255, 256, 1000000, 4358143]),              # q4_K
    ("blk.0.ffn_down.weight", [0, 1, 127, 128, 255, 256, 2222222, 4358143]),            # q6_K
    ("blk.0.attn_v.weight", [0, 100, 114687]),                                          # q8_0
    ("blk.2.attn_v.weight", [0, 100, 114687]),                                          # q5_0
    ("blk.5.attn_k.bias", [0, 64, 127])])                                               # f32

json.dump({"made_by": "tests/goldens/make_dequantize_goldens.py (gguf.quants.dequantize from PyPI)",
           "random_blocks": random_blocks, "model_samples": samples, "long_model_samples": long_samples},
          open("tests/goldens/dequantize_goldens.json", "w"), indent=0)
