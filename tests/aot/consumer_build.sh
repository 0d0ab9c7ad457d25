#!/usr/bin/env bash
# ctest aot.consumer_builds: examples/aot_consumer configures and builds
# against lossjit-aot output and the toolkit's stub libcuda, for a forward-only
# variant, the default output, a fused op (with a bias) and a synthetic output
# with a backward; without
# a GPU the program reports it and exits 0 only under --allow-no-gpu.
#
#   consumer_build.sh LOSSJIT_AOT EXAMPLE_DIR WORKDIR SYNTH_DIR CMAKE CUDA_INCLUDE CUDA_STUB
set -euo pipefail
aot=$1 example=$2 work=$3 synth=$4 cmake=$5 cuda_include=$6 stub=$7
if [ -z "$cuda_include" ] || [ -z "$stub" ] || [ ! -f "$stub" ]; then
  echo "aot.consumer_builds: no CUDA toolkit (cuda.h and stub libcuda); skipped"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work/lib"
# Only the stub is here: it answers cuInit with CUDA_ERROR_STUB_LIBRARY.
ln -s "$stub" "$work/lib/libcuda.so.1"

build() { # name aot-dir
  local name=$1 dir=$2
  "$cmake" -G Ninja -S "$example" -B "$work/build-$name" -DLOSSJIT_AOT_DIR="$dir" \
    -DCMAKE_BUILD_TYPE=Release >"$work/$name.configure.log" 2>&1 ||
    { cat "$work/$name.configure.log"; return 1; }
  "$cmake" --build "$work/build-$name" -j 2 >"$work/$name.build.log" 2>&1 ||
    { cat "$work/$name.build.log"; return 1; }
  echo "built aot_consumer against $name"
}

"$aot" --preset linear-cross-entropy --dtype bf16 --bias --reduction none --no-gradients \
  --arch sm_80,sm_90 -o "$work/out-forward" --quiet
"$aot" --preset linear-cross-entropy --dtype f16 --arch sm_80,sm_90 -o "$work/out-default" --quiet
# The fused op (lce_forward_backward) with a bias, int32 labels and 'sum'.
"$aot" --preset linear-cross-entropy --dtype bf16 --bias --reduction sum --label-type i32 --fused \
  --arch sm_80 -o "$work/out-fused" --quiet
build forward "$work/out-forward"
build default "$work/out-default"
build fused "$work/out-fused"
grep -q "^#define LCE_HAS_FORWARD_BACKWARD 1$" "$work/out-fused/lce.h"
build synthetic-backward "$synth"
grep -q "lce_backward" "$synth/lce.h"

exe=$work/build-default/aot_consumer
status=0
out=$(LD_LIBRARY_PATH="$work/lib" "$exe" --allow-no-gpu 2>&1) || status=$?
echo "$out"
[ "$status" -eq 0 ] || { echo "expected exit 0 with --allow-no-gpu, got $status"; exit 1; }
echo "$out" | grep -q "no usable GPU"
status=0
LD_LIBRARY_PATH="$work/lib" "$exe" >/dev/null 2>&1 || status=$?
[ "$status" -eq 2 ] || { echo "expected exit 2 without --allow-no-gpu, got $status"; exit 1; }
echo "aot.consumer_builds: ok"
