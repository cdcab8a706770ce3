#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ (clang, ASan + UBSan, KVB_FUZZ=ON) and runs each for a
# number of inputs or a time, from a fresh copy of its seed corpus (make_fuzz_seeds, make_gguf_seeds).
#
#   harness/scripts/fuzz.sh [--runs N] [--time SECONDS] [--build-dir DIR] [--no-build] [TARGET...]
#
# TARGET is a file name of tests/fuzz/ without _fuzz.cc (gguf, safetensors, safetensors_index,
# hf_config, sweep_config, benchmark_jsonl, ruler_qa, score_predictions, tokenizer, chat_template,
# results_db); none: all of them. --runs N (default 100000) runs exactly N inputs with -seed=1, so
# the same binary sees the same inputs every time (ctest's slices); --time S runs each for S seconds;
# both: each stops at whichever comes first (the issue's "10^6 inputs or 30 minutes").
# The build folder (default build-san) is the one harness/scripts/sanitize.sh uses; KVB_JOBS caps
# the build's parallelism. A crash, leak, hang (10 s per input) or sanitizer report stops that
# target; its input is kept as DIR/fuzz-work/artifacts/TARGET-crash-* and the script exits 1 after
# running the rest. Exit 77 (ctest: skipped) when clang or its fuzzer runtime is missing
# (harness/scripts/setup.sh installs clang, libclang-rt-14-dev and llvm-14).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
. "$root/harness/scripts/clang-fuzzer.sh"
build="$root/build-san"
runs=100000
runs_given=0
seconds=""
do_build=1
targets=()
while (($#)); do
  case "$1" in
    --runs) runs="$2"; runs_given=1; shift 2 ;;
    --time) seconds="$2"; shift 2 ;;
    --build-dir) build="$2"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if ((${#targets[@]} == 0)); then
  for f in "$root"/tests/fuzz/*_fuzz.cc; do
    name="$(basename "$f" .cc)"
    targets+=("${name%_fuzz}")
  done
fi
for t in "${targets[@]}"; do
  [ -f "$root/tests/fuzz/${t}_fuzz.cc" ] || { echo "fuzz.sh: no target $t (tests/fuzz/${t}_fuzz.cc)" >&2; exit 2; }
done

if ((do_build)); then
  require_clang_fuzzer
  if [ ! -f "$build/CMakeCache.txt" ]; then
    CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVB_FUZZ=ON \
      -DKVB_CUDA=OFF -DKVB_BENCHMARKS=OFF -DCMAKE_CXX_FLAGS=-ffp-contract=fast >/dev/null
  fi
  names=(make_fuzz_seeds make_gguf_seeds)
  for t in "${targets[@]}"; do names+=("${t}_fuzz"); done
  cmake --build "$build" -j "${KVB_JOBS:-$(nproc)}" --target "${names[@]}"
fi
bin="$build/fuzz"
if [ ! -x "$bin/make_fuzz_seeds" ]; then
  echo "SKIP: $bin has no fuzz targets (configure $build with -DKVB_FUZZ=ON, or run without --no-build)"
  exit 77
fi

work="$build/fuzz-work"
mkdir -p "$work/artifacts"
# Seeds are written afresh for each call (ctest runs several calls at once).
seeds="$(mktemp -d "$work/seeds.XXXXXX")"
trap 'rm -rf "$seeds"' EXIT
mkdir -p "$seeds/gguf"
"$bin/make_fuzz_seeds" "$seeds"
"$bin/make_gguf_seeds" "$seeds/gguf"

# Reports name the source line; a leak report needs the symbolizer (llvm-14).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
symbolizer="$(command -v llvm-symbolizer || command -v llvm-symbolizer-14 || true)"
[ -n "$symbolizer" ] && export ASAN_SYMBOLIZER_PATH="$symbolizer"

failed=()
summary=()
for t in "${targets[@]}"; do
  corpus="$work/corpus/$t"
  rm -rf "$corpus"
  mkdir -p "$corpus"
  [ -d "$seeds/$t" ] && cp "$seeds/$t"/* "$corpus/"
  limit=(-runs="$runs")
  if [ -n "$seconds" ]; then
    ((runs_given)) || limit=()
    limit+=(-max_total_time="$seconds")
  fi
  max_len=8192
  [ "$t" = results_db ] && max_len=65536
  dict=()
  case "$t" in gguf|tokenizer|results_db) ;; *) dict=(-dict="$root/tests/fuzz/json.dict") ;; esac
  log="$work/$t.log"
  echo "== fuzz $t: ${limit[*]}"
  set +e
  "$bin/${t}_fuzz" "${limit[@]}" "${dict[@]}" -seed=1 -max_len="$max_len" -timeout=10 -error_exitcode=1 -rss_limit_mb=2560 \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/$t-" "$corpus" >"$log" 2>&1
  rc=$?
  set -e
  executed="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  if [ "$rc" = 77 ]; then
    grep -m1 SKIP "$log" || true
    summary+=("$t: skipped")
    continue
  fi
  if [ "$rc" != 0 ]; then
    failed+=("$t")
    summary+=("$t: FINDING after ${executed:-?} inputs (log $log)")
    grep -E "ERROR|runtime error|property violated|Test unit written|SUMMARY" "$log" | head -20 || true
  else
    summary+=("$t: ${executed:-?} inputs, no finding")
  fi
done
echo "== fuzz summary"
printf '  %s\n' "${summary[@]}"
if ((${#failed[@]})); then
  echo "fuzz.sh: findings in ${failed[*]}; reproduce with $bin/TARGET_fuzz ARTIFACT" >&2
  exit 1
fi
skipped=0
for s in "${summary[@]}"; do [[ "$s" == *skipped ]] && skipped=$((skipped + 1)); done
((skipped == ${#targets[@]})) && exit 77
exit 0
