#!/usr/bin/env bash
# Sets up what is missing, builds, and runs every CPU test (GoogleTest units,
# lit/FileCheck on passes and PTX, CPU numerics vs fp64). GPU tests
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
