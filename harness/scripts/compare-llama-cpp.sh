#!/usr/bin/env bash
# The CPU engine beside llama.cpp on one GGUF (issue 22's table), both tools alternated in one run:
# prefill tokens/s at 512 and 2,048 tokens, decode tokens/s (128 tokens after a 512-token prompt)
# and peak RSS for a 2,048-token prompt + 64 tokens. Not part of CI (it builds llama.cpp, minutes).
#
#   harness/scripts/compare-llama-cpp.sh [--model M.gguf] [--threads 2] [--rounds 2] [--kvbench PATH]
#
# llama.cpp comes from the source archive of the PyPI package llama-cpp-python 0.3.16 (its
# vendor/llama.cpp), checked by SHA-256 and built once, CPU only, into build-llama-cpp/.
# kvbench is ./build/kvbench (harness/scripts/setup.sh builds it) unless --kvbench names another.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
rounds=2
source "$root/harness/scripts/cpu-compare-args.sh" "$@"

work="$root/build-llama-cpp"
bench="$work/build/bin/llama-bench"
if [ ! -x "$bench" ]; then
  mkdir -p "$work"
  sha=34ed0f9bd9431af045bb63d9324ae620ad0536653740e9bb163a2e1fcb973be6
  archive="$work/llama_cpp_python-0.3.16.tar.gz"
  if [ ! -f "$archive" ]; then
    echo "[compare] fetching llama-cpp-python==0.3.16 (source archive)"
    python3 -m pip download --quiet --no-deps --disable-pip-version-check --no-binary=:all: \
      -d "$work" llama-cpp-python==0.3.16
  fi
  echo "$sha  $archive" | sha256sum -c --status ||
    { echo "compare-llama-cpp.sh: $archive does not have SHA-256 $sha" >&2; exit 1; }
  tar xzf "$archive" -C "$work"
  src="$work/llama_cpp_python-0.3.16/vendor/llama.cpp"
  echo "[compare] building llama-bench from $src (CPU only)"
  cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF -DLLAMA_CURL=OFF \
    -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON >/dev/null
  cmake --build "$work/build" -j "$(nproc)" --target llama-bench >/dev/null
fi

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# kvbench's --threads sets its TBB pool and OpenBLAS; taskset pins it to as many cores as
# llama-bench's -t uses.
kvb=(taskset -c "0-$((threads - 1))" "$kvbench")
peak_kb() { /usr/bin/time -f %M -o "$out/rss" "$@" >/dev/null 2>&1; cat "$out/rss"; }
for r in $(seq 1 "$rounds"); do
  echo "[compare] round $r of $rounds: llama.cpp"
  "$bench" -m "$model" -t "$threads" -p 512,2048 -n 128 -r 1 -o json >"$out/llama.$r.json" 2>/dev/null
  echo "$(peak_kb "$bench" -m "$model" -t "$threads" -p 0 -n 0 -pg 2048,64 -r 1)" >"$out/llama.$r.rss"
  echo "[compare] round $r of $rounds: kvbench"
  "${kvb[@]}" bench --model "$model" --threads "$threads" --decode-tokens 128 --json >"$out/kvb.$r.json"
  # --no-ceilings: without the bandwidth probe's 512 MiB buffer, the peak is the engine's own.
  echo "$(peak_kb "${kvb[@]}" bench --model "$model" --threads "$threads" --context 2048 \
    --decode-tokens 64 --no-ceilings)" >"$out/kvb.$r.rss"
done

python3 - "$out" "$rounds" "$model" "$threads" <<'PY'
import json, os, sys
out, rounds, model, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def llama(r):
    rows = json.load(open(os.path.join(out, f"llama.{r}.json")))
    pick = lambda p, g: next(x["avg_ts"] for x in rows if x["n_prompt"] == p and x["n_gen"] == g)
    return pick(512, 0), pick(2048, 0), pick(0, 128)
def kvb(r):
    j = json.load(open(os.path.join(out, f"kvb.{r}.json")))
    pre = {p["tokens"]: p["tokens_per_s"] for p in j["prefill"]}
    return pre[512], pre[2048], j["decode"]["tokens_per_s"]
rss = lambda tool, r: int(open(os.path.join(out, f"{tool}.{r}.rss")).read().split()[-1]) / 1024
L = [llama(r) for r in range(1, rounds + 1)]
K = [kvb(r) for r in range(1, rounds + 1)]
fmt = lambda xs: " / ".join(f"{x:.1f}" for x in xs)
print(f"\n{os.path.basename(model)}, {threads} threads, {rounds} alternated rounds\n")
print("| | llama.cpp | kvbench | kvbench / llama.cpp |")
print("|---|---|---|---|")
names = ["prefill 512 tokens (tok/s)", "prefill 2,048 tokens (tok/s)", "decode 128 after 512 (tok/s)"]
for i, name in enumerate(names):
    l, k = [x[i] for x in L], [x[i] for x in K]
    print(f"| {name} | {fmt(l)} | {fmt(k)} | {sum(k) / sum(l):.2f}x |")
lr = [rss("llama", r) for r in range(1, rounds + 1)]
kr = [rss("kvb", r) for r in range(1, rounds + 1)]
print(f"| peak RSS, 2,048-token prompt + 64 tokens (MB) | {fmt(lr)} | {fmt(kr)} | {sum(kr) / sum(lr):.2f}x |")
PY
