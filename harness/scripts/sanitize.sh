#!/usr/bin/env bash
# Builds the CPU suite with AddressSanitizer + UndefinedBehaviorSanitizer and runs it: every test of
# harness/scripts/test.sh (the `long-model` label aside) with every library, test and the kvbench
# binary the tests start instrumented. A sanitizer report fails the test that triggered it.
#
#   harness/scripts/sanitize.sh [CTEST ARGS...]     e.g. -R Store, -L harness, -E fuzz_
#
# With clang (harness/scripts/setup.sh installs it) the build is the one harness/scripts/fuzz.sh
# uses (build-san, KVB_FUZZ=ON): the suite then includes each fuzz target's deterministic slice
# (ctest label `fuzz`). Without clang it is a gcc build with KVB_SANITIZE=ON (build-san-gcc), no
# fuzz targets. KVB_JOBS caps the build's and ctest's parallelism (default: nproc). The CUDA
# kernels are not built here; harness/scripts/cuda-sanitize.sh checks them with compute-sanitizer.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
"$root/harness/scripts/setup.sh" --no-build
jobs="${KVB_JOBS:-$(nproc)}"
if command -v clang++ >/dev/null; then
  build="${KVB_SANITIZE_BUILD_DIR:-$root/build-san}"
  config=(-DKVB_FUZZ=ON)
  compilers=(CC=clang CXX=clang++)
else
  build="${KVB_SANITIZE_BUILD_DIR:-$root/build-san-gcc}"
  config=(-DKVB_SANITIZE=ON)
  compilers=()
fi
start=$(date +%s)
if [ ! -f "$build/CMakeCache.txt" ]; then
  # -ffp-contract=fast: clang fuses multiply-adds as gcc does, so tolerances tuned on the gcc
  # build hold here too.
  env "${compilers[@]}" cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVB_CUDA=OFF \
    -DKVB_BENCHMARKS=OFF -DCMAKE_CXX_FLAGS=-ffp-contract=fast "${config[@]}" >/dev/null
fi
cmake --build "$build" -j "$jobs"
built=$(date +%s)

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
symbolizer="$(command -v llvm-symbolizer || command -v llvm-symbolizer-14 || true)"
[ -n "$symbolizer" ] && export ASAN_SYMBOLIZER_PATH="$symbolizer"
cd "$build"
status=0
ctest --output-on-failure -j "$jobs" --timeout 1800 -LE long-model "$@" || status=$?
end=$(date +%s)
echo "[sanitize] build $((built - start)) s, tests $((end - built)) s, $build"
exit $status
