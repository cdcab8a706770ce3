#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (-fsanitize=fuzzer,address) and runs each for a bounded
# time. Usage: run_fuzzers.sh SOURCE_DIR WORK_DIR [SECONDS] [RUNS]. Exits 77 (ctest: skipped) when clang
# or its fuzzer runtime is missing (harness/scripts/setup.sh installs clang and libclang-rt-14-dev).
set -euo pipefail
src="$1"
work="$2"
seconds="${3:-300}"
runs="${4:-200000}"
mkdir -p "$work"

. "$src/harness/scripts/clang-fuzzer.sh"
require_clang_fuzzer

flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I"$src")
sources=("$src/engine/gguf.cc" "$src/engine/weights_loader.cc" "$src/engine/weight_source.cc"
         "$src/engine/hf_config.cc" "$src/engine/safetensors.cc" "$src/engine/weight_matrix.cc"
         "$src/kernels/cpu/dequantize.cc" "$src/kernels/cpu/block_formats.cc"
         "$src/kernels/cpu/quantized_matmul.cc" "$src/kernels/cpu/quantized_dot_scalar.cc"
         "$src/kernels/cpu/quantized_dot_avx2.cc" "$src/kernels/cpu/matmul.cc"
         "$src/kernels/cpu/cpu_features.cc")
# The weight matrices' kernels (kernels/cpu/quantized_matmul.cc) reach OpenBLAS.
blas=($(pkg-config --cflags --libs openblas))
fuzzer="$work/gguf_fuzz"
# Rebuild only when a source is newer than the binary (the compile takes a minute on a busy box).
rebuild=0
[ -x "$fuzzer" ] || rebuild=1
for f in "${sources[@]}" "$src/tests/fuzz/gguf_fuzz.cc" "$src/engine/gguf.h" "$src/kernels/cpu/dequantize.h" \
         "$src/engine/weight_matrix.h" "$src/engine/weights.h" "$src/engine/weight_source.h"; do
  [ "$f" -nt "$fuzzer" ] && rebuild=1
done
if [ "$rebuild" = 1 ]; then
  echo "building $fuzzer"
  "$clangxx" "${flags[@]}" "$src/tests/fuzz/gguf_fuzz.cc" "${sources[@]}" "${blas[@]}" -ltbb \
    -o "$fuzzer"
fi
"$clangxx" -std=c++20 -O1 -I"$src" "$src/tests/fuzz/make_gguf_seeds.cc" -o "$work/make_gguf_seeds"

# A fresh corpus each time: with the fixed seed and run count below, every run replays the same inputs.
corpus="$work/gguf_corpus"
rm -rf "$corpus"
mkdir -p "$corpus"
"$work/make_gguf_seeds" "$corpus"
# The run is bounded by a run count (deterministic with -seed, so CI and a developer see the same
# inputs) and, as a guard on a slow machine, by time.
"$fuzzer" -runs="$runs" -max_total_time="$seconds" -seed=1 -max_len=8192 -timeout=10 -error_exitcode=1 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$work/" "$corpus"
