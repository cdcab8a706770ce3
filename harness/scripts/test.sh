#!/usr/bin/env bash
# Runs the whole test suite: sets up (idempotent), builds, runs ctest. CI calls exactly this.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
"$root/harness/scripts/setup.sh"
build="${KVB_BUILD_DIR:-$root/build}"
cd "$build"
ctest --output-on-failure -j "$(nproc)" --timeout 900 "$@"
