#!/usr/bin/env bash
# ctest aot.gpu_check_unpacks: what travels to a GPU machine is the tarball
# --prepare packs (.bundle.tar.xz); a run there unpacks it next to itself
# once (a stamp skips the second time) and then reads it: here the
# --one-per-kind sample of aot.gpu_check_prepare, which the run then refuses.
#
#   gpu_check_unpack.sh GPU_CHECK_SH PREPARED_DIR WORKDIR
set -euo pipefail
script=$1 prepared=$2 work=$3
[ -f "$prepared.tar.xz" ] || { echo "no $prepared.tar.xz (aot.gpu_check_prepare packs it)"; exit 1; }
rm -rf "$work"
mkdir -p "$work"
cp "$prepared.tar.xz" "$work/bundle.tar.xz"
run() {
  local status=0
  "$script" --steps info --bundle-dir "$work/bundle" --out "$work/out" >"$work/run.log" 2>&1 ||
    status=$?
  cat "$work/run.log"
  [ "$status" -eq 2 ] || { echo "FAIL: expected the one-per-kind refusal (exit 2), got $status"; exit 1; }
  grep -q "prepared with --one-per-kind" "$work/run.log" ||
    { echo "FAIL: no refusal: the unpacked PREPARED was not read"; exit 1; }
}
# unpacked_by HOW: the run unpacked the tarball by HOW, into what was prepared.
unpacked_by() {
  grep -q "^gpu-check: unpacked $work/bundle.tar.xz (.* MiB, $1)" "$work/run.log" ||
    { echo "FAIL: not unpacked by $1"; exit 1; }
  cmp "$prepared/PREPARED" "$work/bundle/PREPARED"
  diff -r -x .unpacked -x '*.tar.xz*' "$prepared" "$work/bundle" >/dev/null ||
    { echo "FAIL: the unpacked bundle differs from the prepared one"; exit 1; }
}
run
unpacked_by "Python tarfile"
# The second run finds the stamp of this tarball: nothing to unpack again.
run
if grep -q "^gpu-check: unpacked" "$work/run.log"; then
  echo "FAIL: unpacked the same tarball twice"
  exit 1
fi
# Where Python cannot (no lzma module; here a python3 that fails), tar -xJf.
rm -rf "$work/bundle"
mkdir -p "$work/nopython"
printf '#!/bin/sh\necho "no lzma here" >&2\nexit 1\n' >"$work/nopython/python3"
chmod +x "$work/nopython/python3"
PATH="$work/nopython:$PATH" run
unpacked_by "tar -xJf"
echo "aot.gpu_check_unpacks: ok"
