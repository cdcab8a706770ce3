# The arguments and checks of the CPU comparison scripts (compare-llama-cpp.sh,
# compare-kv-dtypes.sh), sourced with the script's arguments once it has set `root` and its
# default `rounds`: sets model, threads, rounds and kvbench, or exits naming what is missing.
name="$(basename "$0")"
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
threads=2
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    *) echo "$name: unknown argument '$1' (--model, --threads, --rounds)" >&2; exit 2 ;;
  esac
done
[ -f "$model" ] || { echo "$name: no model at $model (run harness/scripts/setup.sh)" >&2; exit 1; }
kvbench="$root/build/kvbench"
[ -x "$kvbench" ] || { echo "$name: $kvbench not built (run harness/scripts/setup.sh)" >&2; exit 1; }
