#!/usr/bin/env python3
"""Makes the reference-logit goldens: tests/goldens/smollm2_reference_logits.json for
tests/engine/reference_logits_test.cc and tests/goldens/qwen2.5-coder-0.5b_reference_logits.json for
tests/long_model/ (the model from `harness/scripts/get-model.sh qwen2.5-coder-0.5b`).

For each prompt text: token ids from `kvbench tokenize` (the project's tokenizer, itself checked
against llama.cpp's vectors), then last-position logits from the independent NumPy forward pass
(tests/engine/reference/numpy_forward.py, float64, gguf package's dequantiser). Stored: the top 20
logits and every 97th vocabulary entry. The prompts are chosen by the model file's name. Run from
the repository root with the venv's python:
    tests/.venv/bin/python tests/goldens/make_reference_logits.py build/kvbench \
        models/SmolLM2-135M-Instruct.Q4_1.gguf > tests/goldens/smollm2_reference_logits.json
    tests/.venv/bin/python tests/goldens/make_reference_logits.py build/kvbench \
        models/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf \
        > tests/goldens/qwen2.5-coder-0.5b_reference_logits.json
"""
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "engine", "reference"))
import numpy_forward  # noqa: E402



def constants_table(lines, asked):
    """A long code prompt (about 13 tokens a line for Qwen2's single-digit pre-tokenizer) that ends by
    asking for one constant defined far back: a retrieval the model can get right."""
    body = "".join(f"VALUE_{i:04d} = {(i * 7919) % 10007}\n" for i in range(lines))
    return f"# Constants of the table.\n{body}\n# Check one of them.\nassert VALUE_{asked:04d} =="


PROMPTS = {
    "SmolLM2-135M-Instruct.Q4_1.gguf": [
        "The capital of France is",
        "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n",
        "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
        "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    ],
    "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf": [
        "The capital of France is",
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWrite a Python function that checks whether a number is prime.<|im_end|>\n"
        "<|im_start|>assistant\n",
        "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
        constants_table(230, 37),
    ],
}
STRIDE = 97


def main():
    kvbench, model = sys.argv[1], sys.argv[2]
    cfg, weights = numpy_forward.load(model)
    records = []
    for text in PROMPTS[os.path.basename(model)]:
        out = subprocess.run([kvbench, "tokenize", "--model", model, "--text", text, "--parse-special",
                              "--json"], check=True, capture_output=True, text=True).stdout
        ids = json.loads(out)["ids"]
        logits = numpy_forward.forward(cfg, weights, np.array(ids))
        top = np.argsort(-logits, kind="stable")[:20]
        records.append({
            "text": text,
            "ids": ids,
            "top": [[int(i), float(logits[i])] for i in top],
            "strided": [float(v) for v in logits[::STRIDE]],
        })
    json.dump({"model": os.path.basename(model), "stride": STRIDE,
               "made_by": "tests/goldens/make_reference_logits.py", "prompts": records},
              sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
