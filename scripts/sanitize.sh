#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer build of the runtime, the
# tools and the unit tests, and every CPU test under it (docs/reliability.md).
#
#   scripts/sanitize.sh [--build DIR] [--jobs N] [--runtime-only] [--no-tests]
#                       [-- CTEST_ARGS...]
#
# Configures DIR (default build-asan/) with the same compiler as the normal
# build, -fsanitize=address,undefined -fno-sanitize-recover=all, -O1 -g (the
# LLVM/MLIR libraries themselves are not instrumented), builds everything
# (--runtime-only: the MLIR-free configuration, minutes instead of an hour),
# then runs ctest -LE gpu: the runtime, tool and compiler unit tests, the fuzz
# corpus replays, the lit suite and the AOT checks. Any sanitizer report
# fails the test it happens in. Prints the time of each step.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

BUILD="$LOSSJIT_ROOT/build-asan"
JOBS="$(nproc)"
COMPILER=ON
RUN_TESTS=1
CTEST_ARGS=()
while (($#)); do
  case "$1" in
  --build) BUILD="$2"; shift 2 ;;
  --jobs) JOBS="$2"; shift 2 ;;
  --runtime-only) COMPILER=OFF; shift ;;
  --no-tests) RUN_TESTS=0; shift ;;
  --) shift; CTEST_ARGS=("$@"); break ;;
  -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "sanitize.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

lossjit_setup
export CCACHE_BASEDIR="$LOSSJIT_ROOT"
flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
start=$SECONDS
# allow_user_poisoning=0, for the instrumented tools the build runs (the AOT
# test bundles) as for the tests: LLVM's headers poison the free space of a
# BumpPtrAllocator slab when the code including them is built with ASan
# (LLVM_ADDRESS_SANITIZER_BUILD: "LLVM itself is built with ASan") and
# unpoison what they hand out; Debian's libMLIR.so, not instrumented, hands
# out the rest of the same slabs without unpoisoning, so its first write there
# (StringAttr::get, NamedAttrList) is reported as use-after-poison. The same
# mismatch as NDEBUG below, at run time; nothing else poisons memory by hand.
export ASAN_OPTIONS="allow_user_poisoning=0"
mkdir -p "$BUILD"
if [ ! -f "$BUILD/build.ninja" ]; then
  # -DNDEBUG as in the release build: MLIR's headers must see the same
  # configuration as the libraries they describe.
  cmake -G Ninja -S "$LOSSJIT_ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g -DNDEBUG" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g -DNDEBUG" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DLOSSJIT_ENABLE_COMPILER="$COMPILER" \
    -DMLIR_DIR="$LLVM_PREFIX/lib/cmake/mlir" -DLLVM_EXTERNAL_LIT="$LLVM_PREFIX/bin/lit" \
    >"$BUILD/configure.log" 2>&1 || { cat "$BUILD/configure.log"; exit 1; }
fi
if ! ninja -C "$BUILD" -j"$JOBS" >"$BUILD/build.log" 2>&1; then
  grep -E -A8 'error|FAILED' "$BUILD/build.log" | head -60
  echo "sanitize: build failed; full log: $BUILD/build.log"
  exit 1
fi
echo "sanitize: build $((SECONDS - start)) s ($BUILD, -j$JOBS)"
((RUN_TESTS)) || exit 0

# halt/abort on the first report so that it fails its test. Leaks are not
# checked: LLVM and MLIR keep global state they never free (cl::opt,
# ManagedStatic), which LeakSanitizer would report at every tool's exit.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1:strict_string_checks=1:detect_invalid_pointer_pairs=0:check_initialization_order=1:allow_user_poisoning=0"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1"
tests=$SECONDS
status=0
(cd "$BUILD" && ctest -LE gpu -j"$JOBS" --output-on-failure --timeout 1200 "${CTEST_ARGS[@]}") ||
  status=$?
echo "sanitize: tests $((SECONDS - tests)) s, total $((SECONDS - start)) s"
if ((status == 0)); then
  echo "sanitize: clean (no AddressSanitizer or UndefinedBehaviorSanitizer report)"
fi
exit $status
