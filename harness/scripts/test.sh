#!/usr/bin/env bash
# Runs the whole test suite: sets up (idempotent), builds, runs ctest. CI calls exactly this.
# The tests of the optional 32K-context model (ctest label `long-model`) are left out unless
# KVB_LONG_MODEL_TESTS=1, which also fetches that model (harness/scripts/get-model.sh).
# Every fuzz target of tests/fuzz/ runs a short deterministic slice here (ctest fuzz_slice_*, no
# sanitizers); the ASan + UBSan build of the suite and the libFuzzer runs are
# harness/scripts/sanitize.sh and fuzz.sh, left out of CI because they are a second full build.
# Before ctest, every tracked C++/CUDA source must be as clang-format-14 leaves it (the repo's
# .clang-format); setup.sh installs clang-format-14; without it the check is skipped with a notice.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
"$root/harness/scripts/setup.sh"
if command -v clang-format-14 >/dev/null; then
  mapfile -d '' sources < <(git -C "$root" ls-files -z '*.cc' '*.h' '*.cu' '*.cuh' 2>/dev/null)
  if ((${#sources[@]} == 0)); then
    echo "[test] no git checkout: the formatting check is skipped" >&2
  elif ! report="$(cd "$root" && clang-format-14 --dry-run -Werror "${sources[@]}" 2>&1)"; then
    echo "[test] these files are not formatted as .clang-format asks:" >&2
    sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: .*/  \1/p' <<<"$report" | sort -u >&2
    echo "[test] fix them with: git ls-files -z '*.cc' '*.h' '*.cu' '*.cuh' | xargs -0 clang-format-14 -i" >&2
    exit 1
  fi
else
  echo "[test] clang-format-14 not found: the formatting check is skipped" \
       "(harness/scripts/setup.sh installs it)" >&2
fi
labels=(-LE long-model)
if [ "${KVB_LONG_MODEL_TESTS:-0}" = 1 ]; then
  "$root/harness/scripts/get-model.sh" qwen2.5-coder-0.5b
  labels=()
fi
build="${KVB_BUILD_DIR:-$root/build}"
cd "$build"
ctest --output-on-failure -j "$(nproc)" --timeout 900 "${labels[@]}" "$@"
