#!/usr/bin/env bash
# The GPU check: ONE prepared command for a machine with a GPU (docs/gpu-check.md).
#
# 1) Here, on a machine with the compiler (MLIR):
#      scripts/gpu-check.sh --prepare [--no-wheels] [--no-pytest-kernels] [--arch sm_90,sm_90a]
#                           [--aot PATH] [--one-per-kind]
#    builds lossjit-aot and writes .bundle/ and .bundle.tar.xz (git-ignored): kernel
#    bundles for LOSSJIT_KERNEL_PATH, test-only bundles for ctest -L gpu
#    (chunked backward, tensor-core forward), AOT
#    C API outputs for the example consumer and the benchmark, googletest
#    sources; downloads the Liger-Kernel and cut-cross-entropy wheels into .whl/.
#    --one-per-kind builds one bundle of each kind (every AOT variant, tile and
#    strategy, one dtype/reduction/bias of each): CI's check of this script,
#    not a bundle for a GPU machine.
# 2) There, on the GPU machine (CUDA, CMake, ninja, python3 + torch; no MLIR),
#    in one call, in under 8 minutes:
#      scripts/gpu-check.sh [--out DIR] [--budget SECONDS] [--skip STEP,...]
#                           [--steps STEP,...] [--cap STEP=SECONDS,...]
#    builds the runtime-only configuration (+ the Python extension when
#    python/ exists), runs ctest -L gpu, the pytest suite on CUDA, the AOT
#    consumer against every prepared variant, and the fwd+bwd benchmark; every
#    step is time-boxed. Full results go to $OUT (default build-gpu/out/);
#    a summary and the benchmark table are printed last. Exit 0 when every
#    step that ran passed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SELF="$ROOT/scripts/gpu-check.sh"

usage() {
  # The header comment, up to the first line that is not one.
  awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$SELF"
  exit "${1:-0}"
}

# ------------------------------------------------------------------ options
MODE=run
WHEELS=1
PYTEST_KERNELS=1
ONE_PER_KIND=0
AOT=""
BUNDLE="${LOSSJIT_GPU_BUNDLE:-$ROOT/.bundle}"
# The lent devices are Hoppers (H100, H200): sm_90 (mma.sync) and sm_90a
# (wgmma, what a Hopper runs by default). An A100 needs sm_80 in the list
# (--arch sm_80, or sm_80,sm_90,sm_90a: the xz'ed bundle stays far below the
# 64 MiB working-tree transfer, but each arch adds prepare time).
ARCHES="${LOSSJIT_GPU_ARCHES:-sm_90,sm_90a}"
OUTDIR="${OUT:-$ROOT/build-gpu/out}"
BUDGET="${LOSSJIT_GPU_BUDGET:-430}"
SKIP=""
STEP_ORDER=""
CAPS=""
INTERNAL=""
while (($#)); do
  case "$1" in
  --prepare) MODE=prepare ;;
  --no-wheels) WHEELS=0 ;;
  --no-pytest-kernels) PYTEST_KERNELS=0 ;;
  --one-per-kind) ONE_PER_KIND=1 ;;
  --aot) AOT="$2"; shift ;;
  --bundle-dir) BUNDLE="$2"; shift ;;
  --arch) ARCHES="$2"; shift ;;
  --out) OUTDIR="$2"; shift ;;
  --budget) BUDGET="$2"; shift ;;
  --skip) SKIP="$2"; shift ;;
  --steps) STEP_ORDER="$2"; shift ;;
  --cap) CAPS="$2"; shift ;;
  --internal-step) INTERNAL="$2"; shift ;;
  -h | --help) usage 0 ;;
  *) echo "gpu-check: unknown argument '$1'" >&2; usage 3 ;;
  esac
  shift
done
BUNDLE="$(mkdir -p "$BUNDLE" && cd "$BUNDLE" && pwd)"

# ================================================================= prepare
# Variants of the AOT C API (one directory each, prefix "lce"): the example
# consumer runs every one (--fused: also the fused forward+backward,
# lce_forward_backward), the benchmark uses f16-mean and bf16-mean.
AOT_VARIANTS=(
  "f16-mean|--dtype f16 --reduction mean --fused"
  "bf16-mean|--dtype bf16 --reduction mean --fused"
  "bf16-sum-bias-i32|--dtype bf16 --reduction sum --bias --label-type i32 --ignore-index 5 --fused"
  "f32-none|--dtype f32 --reduction none"
  # The backward in vocabulary chunks (chunk_dim V) on a budget small enough
  # that the consumer's 130 x 8191 shape takes 16 chunks of 512 columns.
  "bf16-mean-bias-vocab|--dtype bf16 --reduction mean --bias --strategy vocab_chunked --workspace-bytes 200000 --fused"
)
# Hopper tiles of the benchmark's bf16-mean graph, for sm_90a alone (built
# when --arch names it): TMA (tma=1), warp specialization (tma=2) and
# persistent backward products on one block per H200 SM. The consumer step
# checks each forward and backward against its fp64 reference on compute
# capability 9.0 (its default shapes take the TMA paths where V and D are
# multiples of 8, the cp.async fallbacks elsewhere); the benchmark times
# them next to the default tile (impls lossjit-tma, lossjit-ws,
# lossjit-persist), and auto's tile with the backward in vocabulary chunks
# (impl lossjit-vocab: no f32 V x D dW accumulator), and those chunks with
# 128x256 gradient tiles: from a producer warpgroup that lends the consumers
# its registers (tma=3, impl lossjit-lend), and by TMA alone (tma=1, whose
# 256 threads have 255 registers; impl lossjit-wide); and auto's tile in
# vocabulary chunks with its product tiles in 32 MiB bands of row blocks
# (band=32768, impl lossjit-band: bench/gpu/tile_order.py's DRAM model);
# and the vocabulary chunks with 128x256 logit tiles too on the producer
# warpgroup (impl lossjit-wide256: whole tiles fold without column masks);
# and the vocabulary chunks with every product in thread-block clusters of
# two row blocks that multicast each shared tile (cluster=2: on the producer
# warp's 128-column tile, impl lossjit-cluster; on wide256's tile, impl
# lossjit-wide256-cluster; in clusters of four on wide256's tile, impl
# lossjit-wide256-cluster4; persistent clusters of two on wide256's tile,
# each sweeping groups of row blocks, impl lossjit-wide256-cluster-persist;
# the fused forward+backward on wide256's tile in clusters of two, in
# vocabulary chunks within 256 MiB (impl lossjit-wide256-cluster-fused) and
# in row chunks of 1 GiB (impl lossjit-wide256-cluster-fused1g: over the
# issue's memory bound, the model's fastest): never run on hardware yet).
HOPPER_AOT_VARIANTS=(
  "bf16-mean-sm90a-tma|--dtype bf16 --reduction mean --tile matmul=wgmma,block_cols=128,block_k=64,stages=3,tma=1"
  "bf16-mean-sm90a-ws|--dtype bf16 --reduction mean --tile matmul=wgmma,block_cols=128,block_k=64,stages=2,tma=2"
  "bf16-mean-sm90a-persist|--dtype bf16 --reduction mean --tile matmul=wgmma,block_cols=128,persistent=132"
  "bf16-mean-sm90a-vocab|--dtype bf16 --reduction mean --strategy vocab_chunked"
  "bf16-mean-sm90a-lend|--dtype bf16 --reduction mean --strategy vocab_chunked --tile matmul=wgmma,block_cols=128,block_k=64,stages=3,grad_cols=256,tma=3"
  "bf16-mean-sm90a-wide|--dtype bf16 --reduction mean --strategy vocab_chunked --tile matmul=wgmma,block_cols=128,block_k=64,stages=3,grad_cols=256,tma=1"
  "bf16-mean-sm90a-band|--dtype bf16 --reduction mean --strategy vocab_chunked --tile matmul=wgmma,block_cols=128,block_k=64,stages=3,tma=1,band=32768"
  "bf16-mean-sm90a-wide256|--dtype bf16 --reduction mean --strategy vocab_chunked --tile matmul=wgmma,block_cols=256,block_k=64,stages=4,grad_cols=256,tma=3"
  "bf16-mean-sm90a-cluster|--dtype bf16 --reduction mean --strategy vocab_chunked --tile matmul=wgmma,block_cols=128,block_k=64,stages=2,tma=2,cluster=2"
  "bf16-mean-sm90a-wide256-cluster|--dtype bf16 --reduction mean --strategy vocab_chunked --fused --tile matmul=wgmma,block_cols=256,block_k=64,stages=4,grad_cols=256,tma=3,cluster=2"
  "bf16-mean-sm90a-wide256-cluster-rows1g|--dtype bf16 --reduction mean --fused --workspace-bytes 1073741824 --tile matmul=wgmma,block_cols=256,block_k=64,stages=4,grad_cols=256,tma=3,cluster=2"
  "bf16-mean-sm90a-wide256-cluster4|--dtype bf16 --reduction mean --strategy vocab_chunked --tile matmul=wgmma,block_cols=256,block_k=64,stages=4,grad_cols=256,tma=3,cluster=4"
  "bf16-mean-sm90a-wide256-cluster-persist|--dtype bf16 --reduction mean --strategy vocab_chunked --tile matmul=wgmma,block_cols=256,block_k=64,stages=4,grad_cols=256,tma=3,cluster=2,persistent=132"
)

# Test-only bundles (.bundle/test-kernels/<name>/) for tests/gpu/
# CompilerKernelGpuTest.cpp: the chunked backward with a workspace budget so
# small that a few dozen rows take several chunks (the preset's 256 MiB never
# chunks a test-sized problem), plus its forward. They stay off the kernel path
# of pytest and the benchmark: the Python package picks bundles by options and
# ignores workspace_bytes, so it could pick these.
TEST_WORKSPACE_BYTES=65536
TEST_VARIANTS=("f16 mean 1" "f16 none 0" "bf16 mean 1" "bf16 none 0" "f32 mean 1" "f32 none 0")

# Tensor-core check bundles (.bundle/test-kernels/mma-<dtype>-<reduction>-
# <bias>-<tile>/), forward only: f16/bf16 x mean/none x bias or not x these
# tiles — the default and the one-warp tensor-core tile, and the SIMT tile
# they are compared with (the kernel path's f16/bf16 bundles are tensor-core
# ones: lossjit-aot's --tile auto). Test-only: their manifest options equal
# the kernel path's (only the tile differs), so they stay off the path
# pytest and the benchmark read.
MMA_TILES=(
  "64x64x32x3|matmul=mma_sync,block_rows=64,block_cols=64,block_k=32,threads=128,stages=3"
  "32x32x16x2|matmul=mma_sync,block_rows=32,block_cols=32,block_k=16,threads=32,stages=2"
  "simt|matmul=simt"
)
# Hopper's warpgroup MMA (matmul=wgmma) exists on sm_90a only: its check
# bundles are built for that arch alone (the test runs them on compute
# capability 9.0), named mma-*-wgmma<tile> so the same kernel path finds them.
# The third loads x and w by TMA (tma=1): the test's shapes with D a multiple
# of 8 take the TMA path, the others its cp.async fallback. The fourth is
# warp-specialized (tma=2): a producer warp issues the TMA copies while the
# consumer warpgroups multiply (288 threads per block). The fifth runs
# lce_partial in thread-block clusters of two row blocks that multicast each
# W tile (cluster=2; 128 columns).
WGMMA_TILES=(
  "wgmma128x64x32x4|matmul=wgmma,block_rows=128,block_cols=64,block_k=32,threads=256,stages=4"
  "wgmma64x16x16x2|matmul=wgmma,block_rows=64,block_cols=16,block_k=16,threads=128,stages=2"
  "wgmmatma128x64x64x3|matmul=wgmma,block_rows=128,block_cols=64,block_k=64,threads=256,stages=3,tma=1"
  "wgmmaws128x64x64x2|matmul=wgmma,block_rows=128,block_cols=64,block_k=64,threads=256,stages=2,tma=2"
  "wgmmacluster128x128x64x2|matmul=wgmma,block_rows=128,block_cols=128,block_k=64,threads=256,stages=2,tma=2,cluster=2"
)

# Hopper-tile gradient check bundles (.bundle/test-kernels/hopper-<dtype>-
# <reduction>-<bias>-<tile>/), sm_90a alone: the chunked backward within 1 MiB
# (and the fused op for mean) on one wgmma tile twelve ways — the cp.async ring
# the others must equal bit for bit, TMA, warp specialization (a producer
# warp, or a producer warpgroup that lends its registers), persistent grids
# of 3 blocks, a band of one row block, and clusters of two row blocks that
# multicast the tiles they share (dZ, dX, dW; of four: dZ alone, whose
# 64-column tile is 16 W rows a block; of two, persistent and banded at
# once: the clusters sweep groups of row blocks); bf16 mean also in
# vocabulary chunks (-vocab: the backward, and the fused op after the
# forward's statistics). CompilerKernelGpuTest's
# HopperTilesBackwardMatchFp64AndTheCpAsyncBits runs them at V = 1000,
# D = 200 (multiples of 8: the TMA paths) on compute capability 9.0.
HOPPER_TEST_WORKSPACE_BYTES=1048576
HOPPER_TEST_TILE="matmul=wgmma,block_rows=128,block_cols=64,block_k=64,threads=256,stages=2,grad_cols=128"
HOPPER_TEST_TILES=("cpasync|" "tma|,tma=1" "spec|,tma=2" "persist|,persistent=3"
  "specpersist|,tma=2,persistent=3" "lend|,tma=3" "lendpersist|,tma=3,persistent=3"
  "band|,tma=1,band=1" "cluster|,tma=2,cluster=2" "lendcluster|,tma=3,cluster=2"
  "quadcluster|,tma=2,cluster=4" "sweptcluster|,tma=2,cluster=2,persistent=3,band=1")
# dtype, reduction, bias, and whether in vocabulary chunks too.
HOPPER_TEST_VARIANTS=("bf16 mean 1 1" "f16 none 0 0")

# The graph (MLIR, the loss dialect) of one test variant: @lce (forward) and
# @lce_grad (chunked backward within $4 bytes), int64 labels, ignore_index -100.
test_graph() { # DTYPE REDUCTION BIAS(0|1) WORKSPACE_BYTES
  local t=$1 red=$2 bias=$3 ws=$4
  local m="tensor<?x?x$t>" v="tensor<?x$t>" lt="tensor<f32>"
  [ "$red" = none ] && lt="tensor<?xf32>"
  local b_arg="" b_use="" b_ty="" gb_use="" g_out="$m, $m" g_ret="%g#0, %g#1" n=2
  if ((bias)); then
    b_arg=", %b: $v" b_use=", %b" b_ty=", $v" gb_use=" bias %b" g_out="$m, $m, $v"
    g_ret="%g#0, %g#1, %g#2" n=3
  fi
  cat <<MLIR
// gpu-check --prepare: $t, reduction $red, bias $bias, chunked backward within $ws bytes.
module {
  func.func @lce(%x: $m, %w: $m, %y: tensor<?xi64>$b_arg) -> ($lt, tensor<?xf32>) {
    %l, %lse = loss.linear_cross_entropy %x, %w, %y$b_use {compute = f32, storage = $t, reduction = #loss<reduction $red>} : $m, $m, tensor<?xi64>$b_ty -> $lt, tensor<?xf32>
    return %l, %lse : $lt, tensor<?xf32>
  }
  func.func @lce_grad(%x: $m, %w: $m, %y: tensor<?xi64>$b_arg, %lse: tensor<?xf32>, %gl: $lt) -> ($g_out) {
    %g:$n = loss.linear_cross_entropy_grad %x, %w, %y, %lse, %gl$gb_use {compute = f32, storage = $t, reduction = #loss<reduction $red>, strategy = "chunked", workspace_bytes = $ws : i64} : $m, $m, tensor<?xi64>, tensor<?xf32>, $lt$b_ty -> $g_out
    return $g_ret : $g_out
  }
}
MLIR
}

# The arches of a comma-separated list that a device of exactly one of
# their compute capabilities picks with no LOSSJIT_CUDA_ARCH: sm_NNa where
# the list has it (compute capability N.N takes the arch-specific code),
# else sm_NN. (A newer device, which runs sm_NN's PTX but not sm_NNa's,
# would find no pytest kernels: the lent ones are Hoppers.)
#   default_arches sm_80,sm_90,sm_90a  ->  sm_80,sm_90a
default_arches() { # ARCHES
  local arch out=() list=",$1,"
  for arch in ${1//,/ }; do
    [[ $arch != *a && $list == *",${arch}a,"* ]] && continue
    out+=("$arch")
  done
  (IFS=,; echo "${out[*]}")
}

prepare() {
  set -e
  local start=$SECONDS
  if [ -z "$AOT" ]; then
    # shellcheck source=lib.sh
    source "$ROOT/scripts/lib.sh"
    lossjit_configure
    lossjit_build lossjit-aot
    AOT="$LOSSJIT_BUILD/bin/lossjit-aot"
  fi
  [ -x "$AOT" ] || { echo "gpu-check: no lossjit-aot at $AOT" >&2; exit 1; }
  echo "gpu-check --prepare: $AOT -> $BUNDLE (arches $ARCHES)"
  rm -rf "$BUNDLE/aot" "$BUNDLE/kernels" "$BUNDLE/test-kernels" "$BUNDLE/pytest-kernels" \
    "$BUNDLE/googletest" \
    "$BUNDLE/.unpacked" "$BUNDLE.tar.xz" "$BUNDLE.tar.xz.tmp" "$BUNDLE.tar.gz"
  mkdir -p "$BUNDLE/aot" "$BUNDLE/kernels" "$BUNDLE/test-kernels/graphs"

  local entry name args jobs=()
  # add_job KIND ARGS: one lossjit-aot job; with --one-per-kind, only the
  # first job of each KIND (the cross products below repeat the same code
  # paths per dtype, reduction and bias; every tile and strategy is a kind).
  local -A kinds=()
  add_job() {
    if ((ONE_PER_KIND)); then
      [ -n "${kinds[$1]:-}" ] && return 0
      kinds[$1]=1
    fi
    jobs+=("$2")
  }
  for entry in "${AOT_VARIANTS[@]}"; do
    name=${entry%%|*}
    args=${entry#*|}
    add_job "aot-$name" "--preset linear-cross-entropy $args --arch $ARCHES -o $BUNDLE/aot/$name"
  done
  if [[ ,$ARCHES, == *,sm_90a,* ]]; then
    for entry in "${HOPPER_AOT_VARIANTS[@]}"; do
      name=${entry%%|*}
      args=${entry#*|}
      add_job "aot-$name" "--preset linear-cross-entropy $args --arch sm_90a -o $BUNDLE/aot/$name"
    done
  fi
  # A cubin variant where this machine can assemble (nvJitLink or ptxas).
  if command -v ptxas >/dev/null || [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/ptxas" ] ||
    ls "${CUDA_HOME:-/usr/local/cuda}"/lib64/libnvJitLink.so* >/dev/null 2>&1; then
    add_job cubin "--preset linear-cross-entropy --dtype f16 --reduction mean --emit cubin --arch $ARCHES -o $BUNDLE/aot/f16-mean-cubin"
  else
    echo "gpu-check --prepare: no nvJitLink/ptxas here; no cubin variant"
  fi
  # LOSSJIT_KERNEL_PATH: bundles (no C API) for the Python tests and the
  # benchmark: every dtype (f64: SIMT in f64) x reduction x bias, int64
  # labels, ignore_index -100.
  local dtype reduction bias
  for dtype in f16 bf16 f32 f64; do
    for reduction in mean sum none; do
      for bias in nobias bias; do
        args="--dtype $dtype --reduction $reduction"
        [ "$bias" = bias ] && args="$args --bias"
        # mean/sum also get the fused forward+backward (fused_backward=True).
        [ "$reduction" != none ] && args="$args --fused"
        add_job "kernels-$dtype" "--preset linear-cross-entropy $args --no-c-api --arch $ARCHES -o $BUNDLE/kernels/$dtype-$reduction-$bias"
        # The Python package's CUDA backward and fused op for N <= V with
        # 16-bit storage (lossjit._kernels.backward_strategy), for mean (the
        # benchmark's impls lossjit and lossjit-fused) and sum.
        if [[ $dtype == *16 && $reduction != none ]]; then
          add_job "kernels-$dtype-vocab" "--preset linear-cross-entropy $args --strategy vocab_chunked --no-c-api --arch $ARCHES -o $BUNDLE/kernels/$dtype-$reduction-$bias-vocab"
        fi
      done
    done
  done
  # Test-only bundles from small graphs (see TEST_VARIANTS).
  local variant graph
  for variant in "${TEST_VARIANTS[@]}"; do
    read -r dtype reduction bias <<<"$variant"
    name="$dtype-$reduction-$( ((bias)) && echo bias || echo nobias)-ws$TEST_WORKSPACE_BYTES"
    graph="$BUNDLE/test-kernels/graphs/$name.mlir"
    test_graph "$dtype" "$reduction" "$bias" "$TEST_WORKSPACE_BYTES" >"$graph"
    add_job "test-$dtype" "$graph --no-c-api --arch $ARCHES -o $BUNDLE/test-kernels/$name"
  done
  # Tensor-core check bundles (see MMA_TILES).
  local tile arches
  for dtype in f16 bf16; do
    for reduction in mean none; do
      for bias in nobias bias; do
        for tile in "${MMA_TILES[@]}" "${WGMMA_TILES[@]}"; do
          args="--dtype $dtype --reduction $reduction --no-gradients --tile ${tile#*|}"
          [ "$bias" = bias ] && args="$args --bias"
          name="mma-$dtype-$reduction-$bias-${tile%%|*}"
          # wgmma exists on sm_90a only.
          arches=$ARCHES
          [[ $tile == wgmma* ]] && arches=sm_90a
          add_job "mma-${tile%%|*}" "--preset linear-cross-entropy $args --no-c-api --arch $arches -o $BUNDLE/test-kernels/$name"
        done
      done
    done
  done
  # Hopper-tile gradient check bundles (see HOPPER_TEST_TILES), in row and
  # in vocabulary chunks.
  if [[ ,$ARCHES, == *,sm_90a,* ]]; then
    for variant in "${HOPPER_TEST_VARIANTS[@]}"; do
      read -r dtype reduction bias vocab <<<"$variant"
      strategies=(chunked)
      ((vocab)) && strategies+=(vocab_chunked)
      for tile in "${HOPPER_TEST_TILES[@]}"; do
        for strategy in "${strategies[@]}"; do
          args="--dtype $dtype --reduction $reduction --workspace-bytes $HOPPER_TEST_WORKSPACE_BYTES"
          args="$args --strategy $strategy --tile $HOPPER_TEST_TILE${tile#*|}"
          ((bias)) && args="$args --bias"
          [ "$reduction" != none ] && args="$args --fused"
          name="hopper-$dtype-$reduction-$( ((bias)) && echo bias || echo nobias)-${tile%%|*}"
          [ $strategy = vocab_chunked ] && name="$name-vocab"
          add_job "hopper-${tile%%|*}-$strategy" "--preset linear-cross-entropy $args --no-c-api --arch sm_90a -o $BUNDLE/test-kernels/$name"
        done
      done
    done
  fi
  printf '%s\n' "${jobs[@]}" >"$BUNDLE/jobs.txt"
  export AOT
  # shellcheck disable=SC2016
  xargs -a "$BUNDLE/jobs.txt" -P 2 -I{} bash -c \
    '"$AOT" --quiet {} || { echo "FAILED: lossjit-aot {}"; exit 255; }'
  for dir in "$BUNDLE"/aot/* "$BUNDLE"/kernels/* "$BUNDLE"/test-kernels/*-ws* \
    "$BUNDLE"/test-kernels/mma-* "$BUNDLE"/test-kernels/hopper-*; do
    [ -d "$dir" ] || continue
    "$AOT" --check "$dir" --quiet
  done
  rm -f "$BUNDLE/jobs.txt"
  # The variants the pytest suite's CUDA tests use (logit transforms, label
  # types, ignore indices): a runtime-only build finds nothing else.
  # (A few minutes: --no-pytest-kernels skips them, as the CPU test of
  # --prepare does.)
  # Only for the arches a device loads by default (the suite sets no
  # LOSSJIT_CUDA_ARCH): sm_90a alone where sm_90 and sm_90a are both asked
  # for, which saves some 200 s of prepare per arch left out.
  rm -rf "$BUNDLE/pytest-kernels"
  if ((PYTEST_KERNELS)); then
    python3 "$ROOT/tests/python/make_cuda_bundles.py" --aot "$AOT" --arch "$(default_arches "$ARCHES")" \
      --jobs 2 -o "$BUNDLE/pytest-kernels"
  fi

  # One index over all kernel-path variants: options, op and arch -> bundle
  # key, for runtime-only code that cannot compute cache keys.
  python3 - "$BUNDLE/kernels" <<'PY'
import json, os, sys
root = sys.argv[1]
variants = []
for name in sorted(os.listdir(root)):
    path = os.path.join(root, name, "manifest.json")
    if not os.path.isfile(path):
        continue
    index = json.load(open(path))
    variants.append({
        "dir": name,
        "options": index["options"],
        "ops": [{"role": op["role"], "entry": op["entry"],
                 "arches": {a["arch"]: a["key"] for a in op["arches"]}}
                for op in index["ops"]],
    })
json.dump({"format": "lossjit-kernel-path-index", "format_version": 1,
           "variants": variants}, open(os.path.join(root, "index.json"), "w"), indent=1)
print(f"gpu-check --prepare: {len(variants)} kernel-path variants indexed")
PY

  # The runtime parses JSON with nlohmann-json (header-only): its headers
  # travel with the bundle too (runtime/CMakeLists.txt finds them there).
  rm -rf "$BUNDLE/nlohmann"
  if [ -f /usr/include/nlohmann/json.hpp ]; then
    mkdir -p "$BUNDLE/nlohmann/include"
    cp -r /usr/include/nlohmann "$BUNDLE/nlohmann/include/"
  else
    echo "gpu-check --prepare: no /usr/include/nlohmann; the GPU machine must have nlohmann-json"
  fi

  # The GPU machine may lack GoogleTest; its sources travel with the bundle.
  if [ -d /usr/src/googletest ]; then
    cp -r /usr/src/googletest "$BUNDLE/googletest"
    rm -rf "$BUNDLE/googletest/googlemock/docs" "$BUNDLE/googletest/googletest/docs"
  else
    echo "gpu-check --prepare: no /usr/src/googletest; the GPU machine must have GTest"
  fi

  if ((WHEELS)); then
    download_wheels || echo "gpu-check --prepare: wheel download failed; the benchmark skips those peers"
  fi

  {
    echo "prepared: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)$(
      git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ' (+ uncommitted changes)')"
    echo "lossjit-aot: $AOT"
    echo "arches: $ARCHES"
    ((ONE_PER_KIND)) && echo "one-per-kind: yes (CI's check of --prepare; not for a GPU machine)"
    echo "aot: $(cd "$BUNDLE/aot" && echo *)"
    echo "kernels: $(cd "$BUNDLE/kernels" && ls -d */ | wc -l) variants"
    echo "test-kernels: $(cd "$BUNDLE/test-kernels" && ls -d *-ws*/ | wc -l) variants"
    echo "pytest-kernels: $(ls -d "$BUNDLE"/pytest-kernels/*/ 2>/dev/null | wc -l) bundles (make_cuda_bundles.py, $(default_arches "$ARCHES"))"
    echo "mma-kernels: $(cd "$BUNDLE/test-kernels" && ls -d mma-*/ | wc -l) tensor-core check variants (forward, with their SIMT references)"
    echo "hopper-kernels: $(cd "$BUNDLE/test-kernels" && ls -d hopper-*/ 2>/dev/null | wc -l) Hopper-tile gradient check variants"
  } >"$BUNDLE/PREPARED"
  # What travels to the GPU machine: one xz'ed tarball, unpacked there by
  # the run (unpack_bundle). Its 64 MiB dictionary sees that the bundles
  # repeat each other's PTX (one kernel in many variants and arches): 357
  # MiB packed into 6 MiB where gzip's 32 KiB window made 58 MiB. Written
  # under a temporary name first, so an interrupted --prepare leaves no torn
  # one (and the previous tarball is gone: no stale one can travel).
  tar -C "$BUNDLE" -cf - . | xz -9 -T2 >"$BUNDLE.tar.xz.tmp"
  mv -f "$BUNDLE.tar.xz.tmp" "$BUNDLE.tar.xz"
  local size packed
  size=$(du -sm "$BUNDLE" | cut -f1)
  packed=$(du -sm "$BUNDLE.tar.xz" | cut -f1)
  echo "gpu-check --prepare: done in $((SECONDS - start)) s; $BUNDLE is ${size} MiB," \
    "packed into $BUNDLE.tar.xz (${packed} MiB: carry this)"
  [ -d "$ROOT/.whl" ] && echo "gpu-check --prepare: .whl is $(du -sm "$ROOT/.whl" | cut -f1) MiB"
  if ((packed > 40)); then
    echo "gpu-check --prepare: warning: the bundle is large for a 64 MiB working-tree transfer"
  fi
}

# On the GPU machine: unpack the carried $BUNDLE.tar.xz into $BUNDLE unless
# that tarball was unpacked there already. A $BUNDLE some earlier call
# unpacked (it has a .unpacked stamp) is replaced, never mixed with a newer
# tarball; one that --prepare wrote or that travelled unpacked (PREPARED but
# no stamp) is used as it is, whatever tarball an earlier call left.
unpack_bundle() {
  local tarball="$BUNDLE.tar.xz" stamp
  [ -f "$tarball" ] || return 0
  if [ -f "$BUNDLE/PREPARED" ] && [ ! -f "$BUNDLE/.unpacked" ]; then
    echo "gpu-check: $BUNDLE was not unpacked from a tarball: using it, not $tarball"
    return 0
  fi
  stamp=$(cksum <"$tarball")
  [ "$(cat "$BUNDLE/.unpacked" 2>/dev/null)" = "$stamp" ] && return 0
  local how
  rm -rf "$BUNDLE" && mkdir -p "$BUNDLE" && how=$(extract_xz "$tarball" "$BUNDLE") &&
    echo "$stamp" >"$BUNDLE/.unpacked" &&
    echo "gpu-check: unpacked $tarball ($(du -sm "$BUNDLE" | cut -f1) MiB, $how)"
}

# Python's tarfile (its lzma module: no xz binary needed, which a GPU image
# may lack), else tar -J; prints which one unpacked, and Python's error when
# neither could.
extract_xz() { # TARBALL DIR
  local err
  err=$(python3 - "$1" "$2" 2>&1 <<'PY'
import sys, tarfile
with tarfile.open(sys.argv[1], "r:xz") as tar:
    # (The "data" filter where Python has it: no paths out of DIR.)
    if hasattr(tarfile, "data_filter"):
        tar.extractall(sys.argv[2], filter="data")
    else:
        tar.extractall(sys.argv[2])
PY
  ) && { echo "Python tarfile"; return 0; }
  if tar -C "$2" -xJf "$1" >&2; then
    echo "tar -xJf"
    return 0
  fi
  echo "gpu-check: Python could not unpack $1 either: ${err##*$'\n'}" >&2
  return 1
}

download_wheels() {
  local whl="$ROOT/.whl" pkg
  mkdir -p "$whl"
  local platforms=()
  for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 \
    manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$p")
  done
  for pkg in liger-kernel cut-cross-entropy; do
    if ls "$whl"/"${pkg//-/_}"-*.whl >/dev/null 2>&1; then
      echo "gpu-check --prepare: $(cd "$whl" && ls "${pkg//-/_}"-*.whl) already in .whl"
      continue
    fi
    timeout 120 python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp "${platforms[@]}" -d "$whl" "$pkg" ||
      echo "gpu-check --prepare: no wheel for $pkg"
  done
  ls -la "$whl"
}

# ===================================================================== run
# Steps, in order; each runs as `gpu-check.sh --internal-step NAME` under a
# timeout. Caps are seconds; a step also never runs past the budget.
# profile runs after bench, which takes what is left of the default budget:
# name it in --steps (before bench, or with --cap bench=...) to get it.
STEPS=(info gtest build ctest pytest consumer bench profile)
declare -A CAP=([info]=20 [gtest]=90 [build]=170 [ctest]=150 [pytest]=120 [consumer]=120
  [bench]=600 [profile]=150)

# --steps reorders (or subsets) the steps, --cap changes their caps: a short
# lease puts the measurements before the slower checks.
apply_step_options() {
  local name entry
  if [ -n "$STEP_ORDER" ]; then
    IFS=, read -r -a STEPS <<<"$STEP_ORDER"
    for name in "${STEPS[@]}"; do
      [ -n "${CAP[$name]:-}" ] || { echo "gpu-check: --steps: unknown step '$name'" \
        "(expected some of info,gtest,build,ctest,pytest,consumer,bench,profile)" >&2; return 3; }
    done
  fi
  [ -n "$CAPS" ] || return 0
  local -a entries
  IFS=, read -r -a entries <<<"$CAPS"
  for entry in "${entries[@]}"; do
    name=${entry%%=*}
    if [ -z "${CAP[$name]:-}" ] || ! [[ ${entry#*=} =~ ^(0|[1-9][0-9]*)$ ]]; then
      echo "gpu-check: --cap: '$entry' is not STEP=SECONDS with a known step" >&2
      return 3
    fi
    CAP[$name]=${entry#*=}
  done
}

BUILD="$ROOT/build-gpu"
LOGS="$BUILD/logs"
GTEST_PREFIX=/tmp/lossjit-gtest

kernel_path() {
  local dirs=("$BUNDLE"/kernels/*/)
  local IFS=:
  [ -d "${dirs[0]}" ] && echo "${dirs[*]%/}"
}

# ctest -L gpu only: the kernel path plus the test-only bundles (chunked
# backward with a small budget, tensor-core forwards, Hopper tiles'
# gradients).
test_kernel_path() {
  local dirs=("$BUNDLE"/kernels/*/ "$BUNDLE"/test-kernels/*-ws*/ "$BUNDLE"/test-kernels/mma-*/
    "$BUNDLE"/test-kernels/hopper-*/)
  local existing=() d
  for d in "${dirs[@]}"; do
    [ -d "$d" ] && existing+=("${d%/}")
  done
  local IFS=:
  echo "${existing[*]}"
}

have_python_package() { [ -f "$ROOT/python/CMakeLists.txt" ]; }

step_info() {
  echo "host: $(hostname) $(uname -m), $(nproc) cores"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader ||
    echo "nvidia-smi failed"
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no cuda")' ||
    echo "no torch"
  cmake --version | head -1
  command -v nvcc >/dev/null && nvcc --version | tail -1
  if [ ! -f "$BUNDLE/PREPARED" ]; then
    echo "no $BUNDLE/PREPARED: run scripts/gpu-check.sh --prepare first (on a machine with" \
      "MLIR) and carry .bundle.tar.xz (and .whl) to this machine"
    return 1
  fi
  cat "$BUNDLE/PREPARED"
}

step_gtest() {
  if { [ -f /usr/include/gtest/gtest.h ] || [ -f /usr/local/include/gtest/gtest.h ]; } &&
    find /usr/lib /usr/lib64 /usr/local/lib /usr/local/lib64 -maxdepth 2 -name 'libgtest.*' \
      2>/dev/null | grep -q .; then
    echo "system GoogleTest found"
    return 0
  fi
  [ -f "$GTEST_PREFIX/.done" ] && { echo "GoogleTest already built"; return 0; }
  [ -d "$BUNDLE/googletest" ] || { echo "no GoogleTest here and none in $BUNDLE"; return 1; }
  cmake -G Ninja -S "$BUNDLE/googletest" -B /tmp/lossjit-gtest-build -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$GTEST_PREFIX" -DBUILD_GMOCK=OFF -DINSTALL_GTEST=ON >/dev/null &&
    cmake --build /tmp/lossjit-gtest-build -j "$(nproc)" >/dev/null &&
    cmake --install /tmp/lossjit-gtest-build >/dev/null && touch "$GTEST_PREFIX/.done" &&
    echo "built GoogleTest into $GTEST_PREFIX"
}

configure() { # python: ON|OFF
  # The python3 on PATH is the one with torch (a venv on the GPU machines):
  # build the extension for it, not for whatever FindPython meets first.
  cmake -G Ninja -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DLOSSJIT_ENABLE_COMPILER=OFF \
    -DLOSSJIT_ENABLE_PYTHON="$1" -DPython_EXECUTABLE="$(command -v python3)" \
    -DCMAKE_PREFIX_PATH="$GTEST_PREFIX" >"$LOGS/configure.log" 2>&1
}

step_build() {
  mkdir -p "$LOGS"
  local python=OFF
  have_python_package && python=ON
  if ! configure "$python"; then
    tail -30 "$LOGS/configure.log"
    [ "$python" = ON ] || return 1
    echo "configure with the Python extension failed; retrying without it"
    python=OFF
    rm -rf "$BUILD/CMakeCache.txt"
    configure OFF || { tail -30 "$LOGS/configure.log"; return 1; }
  fi
  if ! ninja -C "$BUILD" -j "$(nproc)" >"$LOGS/build.log" 2>&1; then
    grep -E -A8 'error|FAILED' "$LOGS/build.log" | head -60
    [ "$python" = ON ] || return 1
    echo "build with the Python extension failed; building without it"
    configure OFF && ninja -C "$BUILD" -j "$(nproc)" >"$LOGS/build.log" 2>&1 ||
      { grep -E -A8 'error|FAILED' "$LOGS/build.log" | head -40; return 1; }
    return 2 # built, but not everything
  fi
  echo "runtime-only build ok (python extension: $python)"
}

step_ctest() {
  [ -f "$BUILD/CTestTestfile.cmake" ] || { echo "no build"; return 1; }
  # CompilerKernelGpuTest finds the compiler's bundles here and fails (does not
  # skip) on a GPU machine when they are missing.
  export LOSSJIT_KERNEL_PATH
  LOSSJIT_KERNEL_PATH="$(test_kernel_path)"
  echo "LOSSJIT_KERNEL_PATH: $(tr ':' '\n' <<<"$LOSSJIT_KERNEL_PATH" | grep -c .) bundle roots" \
    "(.bundle/kernels/*, .bundle/test-kernels/*-ws*, .bundle/test-kernels/mma-*, .bundle/test-kernels/hopper-*)"
  # Four at a time: one GPU runs several contexts, and a kernel that hangs
  # costs its own test's timeout, not the time of every test after it.
  cd "$BUILD" && ctest -L gpu -j 4 --output-on-failure \
    --timeout 120 --output-junit "$OUTDIR/ctest-gpu.xml"
}

step_pytest() {
  if ! ls "$ROOT"/tests/python/test_*.py >/dev/null 2>&1; then
    echo "no tests/python/test_*.py"
    return 77
  fi
  if ! ls "$BUILD"/python/_lossjit*.so >/dev/null 2>&1; then
    echo "the Python extension was not built"
    return 1
  fi
  local flags=()
  python3 -c 'import pytest_timeout' 2>/dev/null && flags+=(--timeout=90)
  # Four processes share the GPU; the CPU cases skip anyway (no compiler).
  python3 -c 'import xdist' 2>/dev/null && flags+=(-n 4)
  # The kernel path plus the suite's own variants (make_cuda_bundles.py).
  local path
  path="$(kernel_path)"
  [ -d "$BUNDLE/pytest-kernels" ] && path="$BUNDLE/pytest-kernels${path:+:$path}"
  cd "$ROOT" && PYTHONPATH="$ROOT/python:$BUILD/python${PYTHONPATH:+:$PYTHONPATH}" \
    LOSSJIT_KERNEL_PATH="$path" \
    python3 -m pytest tests/python -q -rf -k cuda -p no:cacheprovider "${flags[@]}" \
    --junitxml="$OUTDIR/pytest.xml"
}

# One consumer's build into BUILD_DIR (a CMake configure and a compile of
# its lce.c, megabytes of embedded PTX), logged to LOG; its exit status goes
# to LOG.status, which appears whole (renamed into place) once it is done.
build_consumer() { # AOT_DIR BUILD_DIR LOG
  local status=0
  { cmake -G Ninja -S "$ROOT/examples/aot_consumer" -B "$2" -DCMAKE_BUILD_TYPE=Release \
    -DLOSSJIT_AOT_DIR="$1" && cmake --build "$2" -j 2; } >"$3" 2>&1 || status=$?
  echo "$status" >"$3.status.tmp" && mv -f "$3.status.tmp" "$3.status"
}

step_consumer() {
  local dir name failed=0 cc
  local log="$OUTDIR/consumer.log" logs="$LOGS/consumer"
  : >"$log"
  rm -rf "$logs" && mkdir -p "$logs"
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1)
  # The consumers build in the background, half as many at a time as there
  # are cores (each takes seconds: one after another, some twenty variants
  # came near the step's limit), and each runs as soon as its build is done,
  # in order: a step cut short still ran the first ones.
  local -a names=()
  for dir in "$BUNDLE"/aot/*/; do
    name=$(basename "$dir")
    [ -f "$dir/lce.h" ] || continue
    # sm_90a code loads on compute capability 9.0 alone.
    if [[ $name == *-sm90a-* && ${cc// /} != 9.0 ]]; then
      echo "consumer $name: skipped (sm_90a only, this device is ${cc:-unknown})"
      continue
    fi
    names+=("$name")
  done
  ((${#names[@]})) || { echo "no AOT variants in $BUNDLE/aot"; return 1; }
  local slots=$(($(nproc) / 2))
  ((slots >= 1)) || slots=1
  (
    for name in "${names[@]}"; do
      while (($(jobs -rp | wc -l) >= slots)); do wait -n; done
      build_consumer "$BUNDLE/aot/$name" "$BUILD/consumer-$name" "$logs/$name.build.log" &
    done
    wait
  ) &
  local builder=$!
  for name in "${names[@]}"; do
    while [ ! -f "$logs/$name.build.log.status" ] && kill -0 "$builder" 2>/dev/null; do
      sleep 0.2
    done
    cat "$logs/$name.build.log" >>"$log" 2>/dev/null
    if [ "$(cat "$logs/$name.build.log.status" 2>/dev/null)" != 0 ]; then
      echo "consumer $name: build FAILED"
      failed=1
      continue
    fi
    local run="$logs/$name.run.log" status=0
    timeout 60 "$BUILD/consumer-$name/aot_consumer" --quiet >"$run" 2>&1 || status=$?
    { echo "== $name"; cat "$run"; } >>"$log"
    if ((status == 0)); then
      echo "consumer $name: $(tail -1 "$run")"
    else
      echo "consumer $name: FAILED (exit $status)"
      grep -E '^FAIL|error' "$run" | tail -15
      failed=1
    fi
  done
  wait "$builder"
  return $failed
}

step_bench() {
  local site=/tmp/lossjit-site
  if ls "$ROOT"/.whl/*.whl >/dev/null 2>&1; then
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$site" "$ROOT"/.whl/*.whl && echo "peer wheels: $(cd "$ROOT/.whl" && echo *.whl)"
  fi
  local budget=${STEP_LIMIT:-300}
  cd "$ROOT" && PYTHONUNBUFFERED=1 \
    PYTHONPATH="$site:$ROOT/python:$BUILD/python${PYTHONPATH:+:$PYTHONPATH}" \
    LOSSJIT_KERNEL_PATH="$(kernel_path)" \
    python3 "$ROOT/bench/gpu/bench_lce.py" --out "$OUTDIR" --budget "$((budget - 10))" \
    --aot-dir "$BUNDLE/aot" ${LOSSJIT_BENCH_ARGS:-}
}

# Nsight Compute over one forward + backward of the benchmark's shape, bf16:
# speed of light, memory workload, occupancy and launch statistics of every
# lce_* kernel of the first call, as CSV, for each of PROFILES (benchmark
# impl | AOT variant | CSV in $OUT | kernel launches): the TMA tile auto
# takes, and the fused op on the 128x256 tiles in clusters of two (the
# performance model's fastest within the memory bound), each in half of the
# step's time. The clocks stay as they are (--clock-control none; METHOD.md).
PROFILES=(
  "lossjit-tma|bf16-mean-sm90a-tma|profile.csv|24"
  "lossjit-wide256-cluster-fused|bf16-mean-sm90a-wide256-cluster|profile-wide256-cluster-fused.csv|24"
)
step_profile() {
  local ncu
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  [ -n "$ncu" ] && [ -x "$ncu" ] || { echo "no ncu on this machine"; return 77; }
  echo "ncu: $ncu"
  local entry impl variant csv launches status=77 one
  local each=$(((${STEP_LIMIT:-150} - 5) / ${#PROFILES[@]}))
  for entry in "${PROFILES[@]}"; do
    IFS='|' read -r impl variant csv launches <<<"$entry"
    if [ ! -d "$BUNDLE/aot/$variant" ]; then
      echo "$impl: no $variant AOT variant"
      continue
    fi
    # ncu's report alone goes to the CSV (--log-file); the benchmark's own
    # output to the logs.
    cd "$ROOT" && PYTHONUNBUFFERED=1 timeout "$each" "$ncu" --clock-control none \
      --target-processes all --kernel-name regex:'^lce_' --launch-count "$launches" \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
      --section LaunchStats --csv --page details --log-file "$OUTDIR/$csv" \
      python3 "$ROOT/bench/gpu/bench_lce.py" --out "/tmp/lossjit-profile-$impl" --budget 60 \
      --seconds 0.1 --n 4096 --dtypes bf16 --impls "$impl" --in-process --aot-dir "$BUNDLE/aot" \
      >"$LOGS/profile-$impl.out" 2>&1
    one=$?
    # (Its own timeout is not the step's: the step would report it as one.)
    ((one == 124)) && { echo "$impl: ncu ran past its ${each} s"; one=1; }
    tail -5 "$LOGS/profile-$impl.out"
    local rows
    rows=$(grep -c '"lce_' "$OUTDIR/$csv" 2>/dev/null || true)
    echo "$csv: ${rows:-0} metric rows of lce_* kernels ($impl)"
    # The step fails when any profile failed, passes when one ran and none failed.
    if ((one != 0)); then
      status=$one
    elif ((status == 77)); then
      status=0
    fi
  done
  return $status
}

run_internal() {
  case "$INTERNAL" in
  info | gtest | build | ctest | pytest | consumer | bench | profile) "step_$INTERNAL" ;;
  *) echo "unknown step $INTERNAL" >&2; return 3 ;;
  esac
}

run_all() {
  local start=$SECONDS name status limit left t0
  local -a rows=()
  local failed=0
  apply_step_options || return 3
  echo "gpu-check: budget ${BUDGET}s, steps ${STEPS[*]}, output in $OUTDIR"
  unpack_bundle || { echo "gpu-check: cannot unpack $BUNDLE.tar.xz"; return 1; }
  if grep -qs '^one-per-kind: yes' "$BUNDLE/PREPARED"; then
    echo "gpu-check: $BUNDLE was prepared with --one-per-kind (one bundle of each kind," \
      "CI's check of --prepare): the steps would miss most variants; run" \
      "scripts/gpu-check.sh --prepare without it"
    return 2
  fi
  for name in "${STEPS[@]}"; do
    left=$((BUDGET - (SECONDS - start) - 5))
    limit=${CAP[$name]}
    ((limit > left)) && limit=$left
    if [[ ",$SKIP," == *",$name,"* ]]; then
      rows+=("$name|skipped (--skip)|0")
      continue
    fi
    if ((limit < 10)); then
      rows+=("$name|skipped (no time left)|0")
      continue
    fi
    echo
    echo "=================== $name (limit ${limit}s) ==================="
    t0=$SECONDS
    STEP_LIMIT=$limit timeout --kill-after=5 "$limit" \
      "$SELF" --internal-step "$name" --bundle-dir "$BUNDLE" --out "$OUTDIR"
    status=$?
    case $status in
    0) rows+=("$name|ok|$((SECONDS - t0))") ;;
    2) rows+=("$name|partial|$((SECONDS - t0))"); failed=1 ;;
    77) rows+=("$name|skipped (nothing to run)|$((SECONDS - t0))") ;;
    124 | 137) rows+=("$name|TIMEOUT after ${limit}s|$((SECONDS - t0))"); failed=1 ;;
    *) rows+=("$name|FAILED (exit $status)|$((SECONDS - t0))"); failed=1 ;;
    esac
  done
  {
    echo "## lossjit GPU check, $(date -u +%Y-%m-%d)"
    echo
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null |
      sed 's/^/card, driver: /'
    [ -f "$BUNDLE/PREPARED" ] && grep -E '^(commit|prepared):' "$BUNDLE/PREPARED"
    echo
    echo "| step | result | seconds |"
    echo "| --- | --- | --- |"
    local row
    for row in "${rows[@]}"; do
      IFS='|' read -r n r s <<<"$row"
      echo "| $n | $r | $s |"
    done
    echo
    echo "total: $((SECONDS - start)) s"
    if [ -f "$OUTDIR/bench.md" ]; then
      echo
      cat "$OUTDIR/bench.md"
    fi
  } >"$OUTDIR/summary.md"
  echo
  echo "=================== summary ==================="
  cat "$OUTDIR/summary.md"
  return $failed
}

if [ -n "$INTERNAL" ]; then
  run_internal
  exit $?
fi
if [ "$MODE" = prepare ]; then
  prepare
else
  mkdir -p "$OUTDIR" "$LOGS"
  OUTDIR="$(cd "$OUTDIR" && pwd)"
  run_all 2>&1 | tee "$OUTDIR/gpu-check.log"
  exit "${PIPESTATUS[0]}"
fi
