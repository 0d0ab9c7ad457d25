# Shared by scripts/*.sh: idempotent setup, configure and build.
# Source it; it defines functions only.

LOSSJIT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOSSJIT_BUILD="${LOSSJIT_BUILD:-$LOSSJIT_ROOT/build}"
LLVM_PREFIX=/usr/lib/llvm-22

# Debian packages the build needs (LLVM/MLIR 22 come from Debian 12's
# security/backports archive as llvm-22-*; xz-utils packs gpu-check.sh's
# bundle and is only of priority "standard").
LOSSJIT_APT_PACKAGES=(llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools
  ninja-build ccache cmake g++ libgtest-dev nlohmann-json3-dev python3 python3-venv zlib1g-dev
  libzstd-dev xz-utils)

lossjit_setup() {
  local missing=() p
  for p in "${LOSSJIT_APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >/dev/null
  fi
  if ! command -v ptxas >/dev/null && [ ! -x /usr/local/cuda/bin/ptxas ]; then
    echo "setup: note: no CUDA toolkit (ptxas) found; the ptxas checks will be skipped"
  fi
}

lossjit_configure() {
  mkdir -p "$LOSSJIT_BUILD"
  if [ ! -f "$LOSSJIT_BUILD/build.ninja" ]; then
    cmake -G Ninja -S "$LOSSJIT_ROOT" -B "$LOSSJIT_BUILD" \
      -DCMAKE_BUILD_TYPE=Release \
      -DMLIR_DIR="$LLVM_PREFIX/lib/cmake/mlir" \
      -DLLVM_EXTERNAL_LIT="$LLVM_PREFIX/bin/lit" "$@" >"$LOSSJIT_BUILD/configure.log" 2>&1 ||
      { cat "$LOSSJIT_BUILD/configure.log"; return 1; }
  fi
}

lossjit_build() {
  export CCACHE_BASEDIR="$LOSSJIT_ROOT"
  local log="$LOSSJIT_BUILD/build.log" start=$SECONDS
  if ! ninja -C "$LOSSJIT_BUILD" -j"$(nproc)" "$@" >"$log" 2>&1; then
    grep -E -A8 'error|FAILED' "$log" | head -80
    echo "build failed; full log: $log"
    return 1
  fi
  echo "build: up to date ($((SECONDS - start)) s)"
}

# --- Python part: the _lossjit extension and the pytest suite ---
# torch, numpy (torch warns "Failed to initialize NumPy" without it),
# pybind11, pytest, pytest-xdist (the suite on every core) and expecttest
# (torch's OpInfo samples, which the float64 tests run, import it) come
# from PyPI (torch with its CUDA wheels: about 1 minute once, nothing when
# already installed). The extension is built by the same CMake build
# (-DLOSSJIT_ENABLE_PYTHON=ON); no second C++ build.
lossjit_python_setup() {
  LOSSJIT_PYTHON="$(command -v python3)"
  "$LOSSJIT_PYTHON" -c "import torch, numpy, pybind11, pytest, xdist, expecttest" 2>/dev/null && return
  # Debian's own python3 refuses pip installs (PEP 668): use a virtual
  # environment next to the sources instead (git-ignored).
  if "$LOSSJIT_PYTHON" -c 'import os, sys, sysconfig
sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) else 1)'; then
    local venv="$LOSSJIT_ROOT/.venv"
    [ -x "$venv/bin/python" ] || "$LOSSJIT_PYTHON" -m venv "$venv"
    LOSSJIT_PYTHON="$venv/bin/python"
    "$LOSSJIT_PYTHON" -c "import torch, numpy, pybind11, pytest, xdist, expecttest" 2>/dev/null &&
      return
  fi
  echo "setup: pip install torch numpy pybind11 pytest pytest-xdist expecttest"
  "$LOSSJIT_PYTHON" -m pip install --quiet --disable-pip-version-check \
    torch numpy pybind11 pytest pytest-xdist expecttest 2>&1 | grep -v "Running pip as the 'root' user" || true
  "$LOSSJIT_PYTHON" -c "import torch, numpy, pybind11, pytest, xdist, expecttest"
}

# Turns LOSSJIT_ENABLE_PYTHON on in the configured build directory; cmake
# re-runs only when the option is not on yet.
lossjit_enable_python() {
  grep -q "^LOSSJIT_ENABLE_PYTHON:BOOL=ON" "$LOSSJIT_BUILD/CMakeCache.txt" 2>/dev/null && return
  cmake -S "$LOSSJIT_ROOT" -B "$LOSSJIT_BUILD" -DLOSSJIT_ENABLE_PYTHON=ON \
    -DPython_EXECUTABLE="$LOSSJIT_PYTHON" >>"$LOSSJIT_BUILD/configure.log" 2>&1 ||
    { cat "$LOSSJIT_BUILD/configure.log"; return 1; }
}

# Runs tests/python against the built extension (<build>/python) and python/.
# Each test file runs in one of nproc pytest-xdist workers (--dist loadfile:
# test_distributed.py's module fixture spawns its 4 ranks once, not once a
# worker): the suite is single-threaded JIT compiles and CPU kernels, so two
# workers take it from about 14 to about 7.5 minutes on 2 cores. Without
# xdist (a runtime-only machine) or with one core it runs in one process.
# The workers (and the ranks and child processes they spawn) share one kernel
# cache in the build tree, never the user's: a kernel that several test files
# use compiles once. Its keys hold the compiler's fingerprint, so an edited
# compiler misses instead of linking stale code; 512 MiB LRU.
lossjit_pytest() {
  local parallel=() cores
  cores=$(nproc 2>/dev/null || echo 1)
  if ((cores > 1)) && "$LOSSJIT_PYTHON" -c "import xdist" 2>/dev/null; then
    parallel=(-n "$cores" --dist loadfile)
  fi
  PYTHONPATH="$LOSSJIT_ROOT/python:$LOSSJIT_BUILD/python${PYTHONPATH:+:$PYTHONPATH}" \
    LOSSJIT_CACHE_DIR="$LOSSJIT_BUILD/test-cache/pytest" LOSSJIT_CACHE_MAX_BYTES=536870912 \
    LOSSJIT_CACHE_DISABLE= \
    LOSSJIT_BUILD="$LOSSJIT_BUILD" "$LOSSJIT_PYTHON" -m pytest -q -p no:cacheprovider \
    "${parallel[@]}" "$LOSSJIT_ROOT/tests/python" "$@"
}
