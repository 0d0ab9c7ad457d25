#!/usr/bin/env bash
# ctest aot.gpu_check_default_arches: scripts/gpu-check.sh builds the pytest
# suite's kernels only for the arches a device loads by default
# (default_arches): sm_NNa replaces sm_NN where the list has both.
#
#   gpu_check_arches.sh GPU_CHECK_SH
set -euo pipefail
# The function alone, from the script (which would otherwise run).
# shellcheck source=/dev/null
source <(sed -n '/^default_arches() {/,/^}/p' "$1")
declare -F default_arches >/dev/null || { echo "no default_arches() in $1"; exit 1; }
failed=0
expect() { # ARCHES WANT
  local got
  got=$(default_arches "$1")
  if [ "$got" = "$2" ]; then
    echo "ok: $1 -> $got"
  else
    echo "FAIL: $1 -> '$got', expected '$2'"
    failed=1
  fi
}
expect sm_90,sm_90a sm_90a
expect sm_90a,sm_90 sm_90a
expect sm_80,sm_90,sm_90a sm_80,sm_90a
expect sm_80 sm_80
expect sm_90 sm_90
expect sm_90a sm_90a
expect sm_80,sm_86,sm_90 sm_80,sm_86,sm_90
expect sm_100,sm_100a,sm_90 sm_100a,sm_90
# A name that only starts like another keeps both (sm_9 is not sm_90's).
expect sm_9,sm_90a sm_9,sm_90a
exit $failed
