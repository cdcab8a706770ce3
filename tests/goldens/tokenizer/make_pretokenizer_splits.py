"""Makes pretokenizer_splits.json: how the HF `tokenizers` package (Rust, Oniguruma regexes)
pre-tokenizes llama.cpp's 46 tokenizer test strings with each family's regex, as written in the
families' tokenizer.json files (Llama-3 keeps its `(?i:...)`, kvbench spells it out).
Independent truth for kvbench's PCRE2 pre-tokenizers, in particular llama3 and qwen2, whose
vocabularies are not in the fixtures.

    /tmp/venv/bin/pip install tokenizers
    /tmp/venv/bin/python tests/goldens/tokenizer/make_pretokenizer_splits.py \
        llama.cpp/models/ggml-vocab-gpt-2.gguf.inp \
        > tests/goldens/tokenizer/pretokenizer_splits.json
"""
import json
import sys

from tokenizers import Regex, pre_tokenizers

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def split(pattern):
    return pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False)


families = {
    "gpt-2": split(GPT2),
    "starcoder": pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), split(GPT2)]),
    "llama-bpe": split(LLAMA3),
    "qwen2": split(QWEN2),
}
texts = open(sys.argv[1], encoding="utf-8").read().split("\n__ggml_vocab_test__\n")[:-1]
out = {"texts": texts,
       "pieces": {name: [[p for p, _ in pre.pre_tokenize_str(t)] for t in texts]
                  for name, pre in families.items()}}
print(json.dumps(out, ensure_ascii=False))
