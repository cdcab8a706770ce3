#!/usr/bin/env bash
# Whether a change to CUDA sources changed the machine code of any kernel: compiles each named
# kernels/cuda/*.cu at REV and in the working tree to cubins (sm_90; sm_90a for *_sm90a.cu, as the
# build; nvcc -cubin with the build's defines) and compares every kernel's .text section, matched
# by name with the anonymous-namespace hash left out. For refactors that must not change what runs
# on the GPU: when every kernel's code is identical, the GPU tests of the old code still stand for
# the new. Needs nvcc only, no GPU.
#
#   harness/scripts/device-code-diff.sh REV kernels/cuda/decode_attention.cu [...]
#
# Prints per file: kernels at REV, in the tree, identical; exits 1 when any kernel differs or is
# missing on one side.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
rev="${1:?usage: device-code-diff.sh REV FILE.cu...}"
shift
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/old"
git -C "$root" archive "$rev" kernels | tar x -C "$work/old"
cubin() {  # cubin SOURCE_ROOT FILE OUT (files named *_sm90a.cu as the build compiles them: sm_90a)
  local arch=sm_90
  [[ "$2" == *_sm90a.cu ]] && arch=sm_90a
  (cd "$1" && "$nvcc" -DKVB_HAVE_CUDA=1 -DKVB_HAVE_WGMMA_PREFILL=1 -I"$1" -O3 -DNDEBUG -arch=$arch \
    -std=c++20 -cubin "$2" -o "$3")
}
status=0
for file in "$@"; do
  name="$(basename "$file" .cu)"
  cubin "$work/old" "$file" "$work/$name.old.cubin"
  cubin "$root" "$file" "$work/$name.new.cubin"
  python3 - "$work/$name.old.cubin" "$work/$name.new.cubin" "$file" <<'PY' || status=1
import re, struct, sys

def kernels(path):
    """.text.<kernel> sections of an ELF64 cubin, the anonymous-namespace hash left out of the names."""
    b = open(path, "rb").read()
    shoff, = struct.unpack_from("<Q", b, 0x28)
    entsize, count, names = struct.unpack_from("<HHH", b, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", b, shoff + i * entsize) for i in range(count)]
    strtab = headers[names][4]
    def name(offset):
        end = b.index(b"\0", strtab + offset)
        return b[strtab + offset:end].decode()
    out = {}
    for h in headers:
        n = name(h[0])
        if n.startswith(".text."):
            out[re.sub(r"_GLOBAL__N__[0-9a-f]+_(\d+_\w+?_cu)_[0-9a-f]+", r"ANON_\1", n)] = b[h[4]:h[4] + h[5]]
    return out

old, new = kernels(sys.argv[1]), kernels(sys.argv[2])
same = sum(1 for k in old if new.get(k) == old[k])
print(f"{sys.argv[3]}: {len(old)} kernels at the revision, {len(new)} in the tree, {same} identical")
sys.exit(0 if same == len(old) == len(new) else 1)
PY
done
exit $status
