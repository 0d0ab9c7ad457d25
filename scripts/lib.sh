# Shared by scripts/*.sh: idempotent setup, configure and build.
# Source it; it defines functions only.

LOSSJIT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOSSJIT_BUILD="${LOSSJIT_BUILD:-$LOSSJIT_ROOT/build}"
LLVM_PREFIX=/usr/lib/llvm-22

# Debian packages the build needs (LLVM/MLIR 22 come from Debian 12's
# security/backports archive as llvm-22-*).
LOSSJIT_APT_PACKAGES=(llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools
  ninja-build ccache cmake g++ libgtest-dev python3 zlib1g-dev libzstd-dev)

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
  if [ ! -f "$LOSSJIT_BUILD/build.ninja" ]; then
    cmake -G Ninja -S "$LOSSJIT_ROOT" -B "$LOSSJIT_BUILD" \
      -DCMAKE_BUILD_TYPE=Release \
      -DMLIR_DIR="$LLVM_PREFIX/lib/cmake/mlir" \
      -DLLVM_EXTERNAL_LIT="$LLVM_PREFIX/bin/lit" "$@" >"$LOSSJIT_BUILD.configure.log" 2>&1 ||
      { cat "$LOSSJIT_BUILD.configure.log"; return 1; }
  fi
}

lossjit_build() {
  export CCACHE_BASEDIR="$LOSSJIT_ROOT"
  local log="$LOSSJIT_BUILD.build.log" start=$SECONDS
  if ! ninja -C "$LOSSJIT_BUILD" -j"$(nproc)" "$@" >"$log" 2>&1; then
    grep -E -A8 'error|FAILED' "$log" | head -80
    echo "build failed; full log: $log"
    return 1
  fi
  echo "build: up to date ($((SECONDS - start)) s)"
}
