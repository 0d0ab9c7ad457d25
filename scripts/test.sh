#!/usr/bin/env bash
# Sets up what is missing, builds, and runs every CPU test (GoogleTest units,
# lit/FileCheck on passes and PTX, CPU numerics vs fp64), then a few seconds
# of each runtime libFuzzer target (bench/fuzz.sh: a small clang build in
# build-fuzz/; skipped with a note without clang's libFuzzer). GPU tests
# (ctest -L gpu) are left to scripts/gpu-check.sh on a machine with a GPU.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
lossjit_setup
lossjit_python_setup
lossjit_configure -DLOSSJIT_ENABLE_PYTHON=ON -DPython_EXECUTABLE="$LOSSJIT_PYTHON"
lossjit_enable_python
lossjit_build
cd "$LOSSJIT_BUILD"
ctest -LE gpu -j"$(nproc)" --output-on-failure --timeout 600
lossjit_pytest
# 8 s per target (24 s in all) from the seed corpus: finds what a change
# breaks in the parsers quickly; long runs are bench/fuzz.sh's job.
"$LOSSJIT_ROOT/bench/fuzz.sh" --seconds 8
