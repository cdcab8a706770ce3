"""Writes an HF tokenizer folder (tokenizer.json + tokenizer_config.json) for Qwen2/2.5 from Qwen's
tiktoken rank file (`qwen.tiktoken`: base64 token, rank). Byte-level BPE merges are derived from
the ranks the usual way: a token of rank r is the pair that BPE with ranks < r leaves of its bytes.
Standard library only. Usage: tiktoken_to_hf.py qwen.tiktoken OUT_DIR
"""
import base64
import json
import sys


def bytes_to_unicode():
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
                 list(range(ord("®"), ord("ÿ") + 1)))
    code_points, extra = printable[:], 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            code_points.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, code_points)))


def main(rank_file, out_dir):
    ranks = {}
    with open(rank_file, "rb") as lines:
        for line in lines:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    byte_map = bytes_to_unicode()

    def mapped(token):
        return "".join(byte_map[b] for b in token)

    def split_below(token, max_rank):
        parts = [bytes([b]) for b in token]
        while True:
            best = None
            for i in range(len(parts) - 1):
                rank = ranks.get(parts[i] + parts[i + 1])
                if rank is not None and rank < max_rank and (best is None or rank < best[0]):
                    best = (rank, i)
            if best is None:
                return parts
            i = best[1]
            parts = parts[:i] + [parts[i] + parts[i + 1]] + parts[i + 2:]

    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) > 1:
            left, right = split_below(token, rank)
            merges.append(mapped(left) + " " + mapped(right))
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    regex = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    tokenizer = {
        "version": "1.0",
        "added_tokens": [{"id": len(ranks) + i, "content": text, "special": True}
                         for i, text in enumerate(specials)],
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
             "use_regex": False}]},
        "model": {"type": "BPE", "byte_fallback": False,
                  "vocab": {mapped(token): rank for token, rank in ranks.items()},
                  "merges": merges},
    }
    with open(out_dir + "/tokenizer.json", "w", encoding="utf-8") as out:
        json.dump(tokenizer, out, ensure_ascii=False)
    with open(out_dir + "/tokenizer_config.json", "w", encoding="utf-8") as out:
        json.dump({"bos_token": None, "eos_token": "<|im_end|>", "add_bos_token": False}, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
