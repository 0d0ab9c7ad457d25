#!/usr/bin/env bash
# libFuzzer runs of the input parsers (tests/fuzz):
#   npy     the .npy header parser (tools/support/NpyFormat)
#   json    the bounded JSON parser (runtime/Json, nlohmann SAX)
#   bundle  a bundle directory through readBundleDirectory, then the
#           launch-plan checks (LaunchPlan build/resolve/checkBuffers/pack)
#   graph   (--with-compiler) graph text through the nesting bound, MLIR's
#           parser and verifier, and the CPU and GPU pipelines up to kernels
#
#   bench/fuzz.sh [--seconds N] [--targets npy,json,bundle] [--build DIR] [--jobs J]
#                 [--with-compiler]
#
# Builds a runtime-only configuration with clang (-fsanitize=fuzzer,address,
# undefined) in DIR (default build-fuzz/), then runs each target for N
# seconds (default 600) on J processes (default 1), starting from the seed
# corpus tests/fuzz/corpus/<target> (read-only; new inputs go to
# DIR/corpus/<target>). --with-compiler configures the compiler too (default
# DIR build-fuzz-compiler/, target graph added): a clang build of all of
# lossjit's compiler code, far longer than the runtime-only one. A crash
# stops the run with exit status 1 and leaves its input in
# DIR/artifacts/<target>/: copy it into tests/fuzz/corpus/<target>/ after the
# fix, where `ctest -R fuzz.replay` replays it in every build.
# Without clang++, or a clang++ whose -fsanitize=fuzzer does not link, it
# prints a note and exits 0. scripts/test.sh runs it with --seconds 8 (the
# runtime-only targets).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_PER_TARGET=600
TARGETS=npy,json,bundle
BUILD="$ROOT/build-fuzz"
JOBS=1
COMPILER=OFF
while (($#)); do
  case "$1" in
  --seconds) SECONDS_PER_TARGET="$2"; shift 2 ;;
  --targets) TARGETS="$2"; shift 2 ;;
  --build) BUILD="$2"; shift 2 ;;
  --jobs) JOBS="$2"; shift 2 ;;
  --with-compiler) COMPILER=ON; shift ;;
  -h | --help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "fuzz.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

CLANG=$(command -v clang++ || true)
if [ -z "$CLANG" ]; then
  echo "fuzz.sh: no clang++ (apt-get install clang): fuzzing skipped"
  exit 0
fi
# clang without its libFuzzer runtime (a separate package on some systems)
# cannot link the targets: a note, not a failure.
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char *, unsigned long) { return 0; }' \
  >"$probe/probe.cpp"
if ! "$CLANG" -fsanitize=fuzzer,address,undefined "$probe/probe.cpp" -o "$probe/probe" \
  >"$probe/log" 2>&1; then
  echo "fuzz.sh: $CLANG cannot link -fsanitize=fuzzer ($(head -1 "$probe/log")): fuzzing skipped"
  exit 0
fi
if [ "$COMPILER" = ON ]; then
  [ "$BUILD" = "$ROOT/build-fuzz" ] && BUILD="$ROOT/build-fuzz-compiler"
  [[ ",$TARGETS," == *,graph,* ]] || TARGETS="$TARGETS,graph"
fi

mkdir -p "$BUILD"
if [ ! -f "$BUILD/build.ninja" ]; then
  # -O1 -g and assertions on (no NDEBUG): the point is to find bugs.
  cmake -G Ninja -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER="${CLANG%++}" -DCMAKE_CXX_COMPILER="$CLANG" \
    -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
    -DLOSSJIT_ENABLE_COMPILER="$COMPILER" -DLOSSJIT_ENABLE_TESTS=OFF -DLOSSJIT_ENABLE_FUZZ=ON \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    >"$BUILD/fuzz-configure.log" 2>&1 || { cat "$BUILD/fuzz-configure.log"; exit 1; }
fi
IFS=, read -r -a targets <<<"$TARGETS"
binaries=()
for t in "${targets[@]}"; do binaries+=("lossjit-fuzz-$t"); done
export CCACHE_BASEDIR="$ROOT"
build_start=$SECONDS
ninja -C "$BUILD" -j"$(nproc)" "${binaries[@]}" >"$BUILD/fuzz-build.log" 2>&1 ||
  { grep -E -A8 'error|FAILED' "$BUILD/fuzz-build.log" | head -60; exit 1; }
echo "fuzz: build $((SECONDS - build_start)) s ($BUILD)"

# allow_user_poisoning=0: LLVM's headers poison the free space of a
# BumpPtrAllocator slab when the code including them is built with ASan
# (LLVM_ADDRESS_SANITIZER_BUILD), and unpoison what they hand out; Debian's
# libMLIR.so, not instrumented, hands out the rest of the same slabs without
# unpoisoning, so its first write there (e.g. in StringAttr::get) is reported
# as use-after-poison. Nothing else here poisons memory by hand.
export ASAN_OPTIONS="allow_user_poisoning=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
status=0
for t in "${targets[@]}"; do
  corpus="$BUILD/corpus/$t"
  artifacts="$BUILD/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  log="$BUILD/fuzz-$t.log"
  # -rss_limit_mb: the limits under test keep every input far below 2 GiB;
  # -timeout: no input may take a second (a hang is a bug too). With
  # -jobs, libFuzzer writes fuzz-<n>.log into the working directory: $BUILD.
  parallel=()
  if ((JOBS > 1)); then parallel=(-jobs="$JOBS" -workers="$JOBS"); fi
  rm -f "$BUILD"/fuzz-[0-9]*.log
  if (cd "$BUILD" && "$BUILD/bin/lossjit-fuzz-$t" "$corpus" "$ROOT/tests/fuzz/corpus/$t" \
    -max_total_time="$SECONDS_PER_TARGET" "${parallel[@]}" \
    -timeout=1 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" >"$log" 2>&1); then
    runs=$(cat "$log" "$BUILD"/fuzz-[0-9]*.log 2>/dev/null |
      grep -o 'stat::number_of_executed_units: *[0-9]*' | grep -o '[0-9]*$' |
      awk '{ s += $1 } END { print s + 0 }' || true)
    echo "fuzz $t: ok, ${SECONDS_PER_TARGET} s, $runs inputs, corpus $(ls "$corpus" | wc -l) files"
  else
    echo "fuzz $t: FAILED, see $log; the input is in $artifacts/"
    cat "$log" "$BUILD"/fuzz-[0-9]*.log 2>/dev/null | grep -E -m5 'ERROR|SUMMARY|==[0-9]+==' ||
      tail -20 "$log" || true
    status=1
  fi
done
exit $status
