#!/usr/bin/env bash
# Sets up what is missing, builds, then runs the main job on a default head
# (D=1024, V=32000, fp16): compiles the fused loss to PTX for sm_80, sm_90
# and sm_90a (Hopper's wgmma kernels, what a Hopper runs by default)
# under out/kernels, checks it with ptxas when the CUDA toolkit is present,
# and runs the CPU backend on random inputs next to an fp64 reference.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
lossjit_setup
lossjit_configure
lossjit_build lossjit-aot lossjit-runner lossjit-opt
cd "$LOSSJIT_ROOT"
bin="$LOSSJIT_BUILD/bin"

echo "== graph -> PTX (in-process), fp16 storage, f32 compute"
rm -rf out/kernels
"$bin/lossjit-aot" --preset linear-cross-entropy --dtype f16 --arch sm_80,sm_90,sm_90a -o out/kernels
ptxas=$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)
if [ -x "$ptxas" ]; then
  for f in out/kernels/*/*.ptx; do
    arch=$(basename "$f" .ptx); arch=${arch##*.}
    "$ptxas" -arch="$arch" "$f" -o /dev/null
  done
  echo "ptxas accepts all $(ls out/kernels/*/*.ptx | wc -l) PTX files"
fi

echo
echo "== CPU backend vs fp64 reference (N=128, V=32000, D=1024, fp16)"
"$bin/lossjit-runner" --preset linear-cross-entropy --random 128,32000,1024 \
  --dtype f16 --random-logit-size 8 --check
