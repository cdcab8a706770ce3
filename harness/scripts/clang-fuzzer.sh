# Sourced by harness/scripts/fuzz.sh and tests/fuzz/run_fuzzers.sh: require_clang_fuzzer sets
# `clangxx` to a clang++ that links -fsanitize=fuzzer, or exits 77 (ctest: skipped) naming what to
# install (harness/scripts/setup.sh installs clang and libclang-rt-14-dev).
require_clang_fuzzer() {
  clangxx="$(command -v clang++ || true)"
  if [ -z "$clangxx" ]; then
    echo "SKIP: clang++ not found (harness/scripts/setup.sh installs clang and libclang-rt-14-dev)"
    exit 77
  fi
  local probe_dir
  probe_dir="$(mktemp -d)"
  echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' \
    >"$probe_dir/p.cc"
  if ! "$clangxx" -fsanitize=fuzzer,address "$probe_dir/p.cc" -o "$probe_dir/p" 2>/dev/null; then
    rm -rf "$probe_dir"
    echo "SKIP: $clangxx cannot link -fsanitize=fuzzer (install libclang-rt-14-dev)"
    exit 77
  fi
  rm -rf "$probe_dir"
}
