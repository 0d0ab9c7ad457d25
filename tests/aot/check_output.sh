#!/usr/bin/env bash
# ctest aot.output_checks: lossjit-aot's full default output (forward and,
# once the compiler has it, backward) for several option sets and every arch:
#   * lossjit-aot --check (index schema, bundles load, PTX ABI),
#   * ptxas accepts every PTX for its arch (skipped without ptxas),
#   * the header compiles as C11 and C++17, the source as strict C11 and C++.
#
#   check_output.sh LOSSJIT_AOT WORKDIR CC CXX CUDA_INCLUDE PTXAS
set -euo pipefail
aot=$1 work=$2 cc=$3 cxx=$4 cuda_include=$5 ptxas=$6

rm -rf "$work"
mkdir -p "$work"
all_arches=sm_80,sm_86,sm_89,sm_90,sm_90a
declare -A sets=(
  [f16_mean]="--dtype f16 --reduction mean"
  [bf16_sum_bias_i32]="--dtype bf16 --reduction sum --bias --label-type i32 --ignore-index 0"
  [f32_none]="--dtype f32 --reduction none"
  [f16_mean_fused]="--dtype f16 --reduction mean --fused"
)
dirs=()
for name in "${!sets[@]}"; do
  dir=$work/$name
  # shellcheck disable=SC2086
  "$aot" --preset linear-cross-entropy ${sets[$name]} --arch "$all_arches" --name "chk_$name" \
    -o "$dir" --quiet
  "$aot" --check "$dir" --quiet
  dirs+=("$dir")
  for lang in c c++; do
    if [ "$lang" = c ]; then compiler=$cc std=-std=c11; else compiler=$cxx std=-std=c++17; fi
    "$compiler" -x "$lang" "$std" -Wall -Wextra -pedantic -Werror -fsyntax-only \
      -I"$cuda_include" "$dir/chk_$name.h"
    "$compiler" -x "$lang" "$std" -Wall -Wextra -Werror -c -I"$cuda_include" \
      "$dir/chk_$name.c" -o "$work/chk_${name}_$lang.o"
  done
  python3 - "$dir" "$name" <<'PY'
import json, re, sys
index = json.load(open(sys.argv[1] + "/manifest.json"))
roles = [op["role"] for op in index["ops"]]
arches = [a["arch"] for a in index["ops"][0]["arches"]]
assert roles[0] == "forward", roles
fused = sys.argv[2].endswith("_fused")
if fused:
    assert roles == ["forward", "backward", "forward_backward"], roles
# The header says which entry points it declares (a consumer's #if).
header = open(f"{sys.argv[1]}/chk_{sys.argv[2]}.h").read()
for macro, want in (("HAS_FORWARD", 1), ("HAS_BACKWARD", 1), ("HAS_FORWARD_BACKWARD", int(fused))):
    got = re.findall(rf"^#define CHK_{sys.argv[2].upper()}_{macro} (\d)$", header, re.M)
    assert got == [str(want)], (macro, got, want)
assert arches == ["sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"], arches
print(f"{sys.argv[2]}: ops {roles}, arches {arches}")
PY
done

if [ -z "$ptxas" ] || [ ! -x "$ptxas" ]; then
  echo "aot.output_checks: no ptxas; PTX assembly checks skipped"
  exit 77
fi
# Every PTX file is named <kernel>.<arch>.ptx.
list=$work/ptx-files
# Hopper's TMA kernels (tile tma=1, sm_90a only): the C API encodes their
# tensor maps with cuTensorMapEncodeTiled, so its TMA code (I_TMA 1) must
# build against the real cuda.h as strict C11 and C++17, pedantic.
tma=$work/bf16_tma
"$aot" --preset linear-cross-entropy --dtype bf16 --reduction mean --bias \
  --tile matmul=wgmma,block_k=64,stages=3,tma=1 --arch sm_90a --name chk_tma -o "$tma" --quiet
"$aot" --check "$tma" --quiet
grep -q '^#define CHK_TMA_I_TMA 1$' "$tma/chk_tma.c" || { echo "chk_tma.c: no TMA code"; exit 1; }
for lang in c c++; do
  if [ "$lang" = c ]; then compiler=$cc std=-std=c11; else compiler=$cxx std=-std=c++17; fi
  "$compiler" -x "$lang" "$std" -Wall -Wextra -pedantic -Werror -c -I"$cuda_include" \
    "$tma/chk_tma.c" -o "$work/chk_tma_$lang.o"
done
dirs+=("$tma")
find "${dirs[@]}" -name '*.ptx' >"$list"
count=$(wc -l <"$list")
export ptxas
# shellcheck disable=SC2016
xargs -a "$list" -P 2 -I{} bash -c '
  f={}; arch=${f%.ptx}; arch=${arch##*.}
  "$ptxas" -arch="$arch" -o /dev/null "$f" || { echo "ptxas -arch=$arch rejected $f"; exit 255; }'
echo "aot.output_checks: ptxas accepted $count PTX files"
