"""Makes smollm2_ids.json: SmolLM2-135M-Instruct token ids computed independently of kvbench.

The vocabulary and merges are read from the model GGUF with the `gguf` PyPI package; the ids come
from the `tokenizers` PyPI package (the Rust HF tokenizers, not llama.cpp and not kvbench) set up
as SmolLM2's tokenizer.json is: BPE model, pre-tokenizer Sequence[Digits(individual_digits=True),
ByteLevel(add_prefix_space=False, use_regex=True)], the 17 control tokens as special added tokens.

    python -m venv /tmp/venv && /tmp/venv/bin/pip install gguf tokenizers
    /tmp/venv/bin/python tests/goldens/tokenizer/make_smollm2_ids.py \
        models/SmolLM2-135M-Instruct.Q4_1.gguf > tests/goldens/tokenizer/smollm2_ids.json
"""
import json
import sys

import gguf
from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

reader = gguf.GGUFReader(sys.argv[1])
tokens = reader.fields["tokenizer.ggml.tokens"].contents()
types = reader.fields["tokenizer.ggml.token_type"].contents()
merges = [tuple(m.split(" ", 1)) for m in reader.fields["tokenizer.ggml.merges"].contents()]
assert reader.fields["tokenizer.ggml.pre"].contents() == "smollm"

tokenizer = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
    pre_tokenizers.Digits(individual_digits=True),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
])
tokenizer.add_special_tokens([AddedToken(t, special=True) for t, ty in zip(tokens, types) if ty == 3])

texts = [
    "What is the capital of France? Answer in one word.",
    "The special magic number for long-context is: 7294816.",
    "  Indented code:\n\tdef f(x):\n\t\treturn x**2  # square\n",
    "Don't stop; we'll see THEM'S ideas... 3.14159 vs 2,718!",
    "naïve café — Ünïcödé ½ € 你好，世界 🦙🚀",
    "A needle: the best thing to do in San Francisco is eat a sandwich.\n\n\n",
]
cases = [{"text": t, "ids": tokenizer.encode(t, add_special_tokens=False).ids} for t in texts]
special = "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
cases.append({"text": special, "parse_special": True,
              "ids": tokenizer.encode(special, add_special_tokens=False).ids})
print("[\n" + ",\n".join(json.dumps(c, ensure_ascii=False) for c in cases) + "\n]")
