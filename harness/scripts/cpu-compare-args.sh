# The arguments and checks of the CPU comparison scripts (compare-llama-cpp.sh,
# compare-kv-dtypes.sh), sourced with the script's arguments once it has set `root` and its
# default `rounds`: sets model, threads, rounds and kvbench, or exits naming what is missing.
# --kvbench PATH picks another build (default build/kvbench). A binary linked with the CUDA
# libraries carries their pages from the start (cuBLAS's relocations: ~216 MB of RSS before main,
# measured 2026-12-05, results/cpu-vs-llama-cpp.md), so the peak-RSS row of such a build is not the
# CPU engine's: the scripts say so when they see one.
name="$(basename "$0")"
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
threads=2
kvbench="$root/build/kvbench"
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --kvbench) kvbench="$2"; shift 2 ;;
    *) echo "$name: unknown argument '$1' (--model, --threads, --rounds, --kvbench)" >&2; exit 2 ;;
  esac
done
[ -f "$model" ] || { echo "$name: no model at $model (run harness/scripts/setup.sh)" >&2; exit 1; }
[ -x "$kvbench" ] || { echo "$name: $kvbench not built (run harness/scripts/setup.sh)" >&2; exit 1; }
if ldd "$kvbench" 2>/dev/null | grep -q libcublas; then
  echo "$name: note: $kvbench links the CUDA libraries; its peak RSS includes their pages" \
    "(a CPU-only build: cmake -DKVB_CUDA=OFF, then --kvbench BUILD/kvbench)" >&2
fi
