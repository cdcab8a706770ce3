#!/usr/bin/env bash
# Runs the whole test suite: sets up (idempotent), builds, runs ctest. CI calls exactly this.
# The tests of the optional 32K-context model (ctest label `long-model`) are left out unless
# KVB_LONG_MODEL_TESTS=1, which also fetches that model (harness/scripts/get-model.sh).
# Every fuzz target of tests/fuzz/ runs a short deterministic slice here (ctest fuzz_slice_*, no
# sanitizers); the ASan + UBSan build of the suite and the libFuzzer runs are
# harness/scripts/sanitize.sh and fuzz.sh, left out of CI because they are a second full build.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
"$root/harness/scripts/setup.sh"
labels=(-LE long-model)
if [ "${KVB_LONG_MODEL_TESTS:-0}" = 1 ]; then
  "$root/harness/scripts/get-model.sh" qwen2.5-coder-0.5b
  labels=()
fi
build="${KVB_BUILD_DIR:-$root/build}"
cd "$build"
ctest --output-on-failure -j "$(nproc)" --timeout 900 "${labels[@]}" "$@"
