#!/usr/bin/env bash
# The CPU engine's KV cache element types side by side (issue 22): prefill tokens/s at 512 and
# 2,048 tokens, decode tokens/s after 512 and after 2,048 tokens (128 tokens each), and peak RSS for
# a 2,048-token prompt + 64 tokens, for --kv-dtype f32, f16 and bf16, alternated round by round
# (the order rotates each round). Not part of CI.
#
#   harness/scripts/compare-kv-dtypes.sh [--model M.gguf] [--threads 2] [--rounds 3] [--kvbench PATH]
#
# kvbench is ./build/kvbench, pinned to as many cores as --threads.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
rounds=3
source "$root/harness/scripts/cpu-compare-args.sh" "$@"

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
kvb=(taskset -c "0-$((threads - 1))" "$kvbench")
dtypes=(f32 f16 bf16)
for r in $(seq 1 "$rounds"); do
  for i in 0 1 2; do
    d="${dtypes[$(((i + r - 1) % 3))]}"
    echo "[compare] round $r of $rounds: $d (load $(cut -d' ' -f1 /proc/loadavg))"
    common=(bench --model "$model" --threads "$threads" --kv-dtype "$d" --no-ceilings)
    "${kvb[@]}" "${common[@]}" --decode-tokens 128 --json >"$out/$d.$r.json"
    "${kvb[@]}" "${common[@]}" --context 2048 --decode-tokens 128 --json >"$out/$d.$r.long.json"
    /usr/bin/time -f %M -o "$out/$d.$r.rss" "${kvb[@]}" "${common[@]}" --context 2048 \
      --decode-tokens 64 >/dev/null 2>&1
  done
done

python3 - "$out" "$rounds" "$model" "$threads" <<'PY'
import json, os, sys
out, rounds, model, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
dtypes = ["f32", "f16", "bf16"]
def load(d, r, suffix=""):
    return json.load(open(os.path.join(out, f"{d}.{r}{suffix}.json")))
def figures(d, r):
    short, long = load(d, r), load(d, r, ".long")
    pre = {p["tokens"]: p["tokens_per_s"] for p in short["prefill"]}
    rss = int(open(os.path.join(out, f"{d}.{r}.rss")).read().split()[-1]) / 1024
    return [pre[512], pre[2048], short["decode"]["tokens_per_s"], long["decode"]["tokens_per_s"],
            long["decode"]["kv_bytes"] / 1e6, rss]
rows = ["prefill 512 tokens (tok/s)", "prefill 2,048 tokens (tok/s)",
        "decode 128 after 512 (tok/s)", "decode 128 after 2,048 (tok/s)",
        "KV bytes after 2,048 + 128 (MB)", "peak RSS, 2,048-token prompt + 64 tokens (MB)"]
F = {d: [figures(d, r) for r in range(1, rounds + 1)] for d in dtypes}
fmt = lambda xs: " / ".join(f"{x:.1f}" for x in xs)
print(f"\n{os.path.basename(model)}, {threads} threads, {rounds} alternated rounds (each round's figure)\n")
print("| | f32 | f16 | bf16 | f16 / f32 | bf16 / f32 |")
print("|---|---|---|---|---|---|")
for i, name in enumerate(rows):
    col = {d: [x[i] for x in F[d]] for d in dtypes}
    mean = {d: sum(v) / len(v) for d, v in col.items()}
    print(f"| {name} | {fmt(col['f32'])} | {fmt(col['f16'])} | {fmt(col['bf16'])} | "
          f"{mean['f16'] / mean['f32']:.2f}x | {mean['bf16'] / mean['f32']:.2f}x |")
PY
