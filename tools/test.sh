#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (ctest). Extra arguments go to ctest,
# e.g. `tools/test.sh -L fast` for the quick inner loop.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/tools/env.sh"
"$root/tools/setup.sh"
cd "$root/$txl_build_dir"
jobs="${TXL_JOBS:-$(nproc 2>/dev/null || echo 2)}"
echo "[test] running the test suite with $jobs parallel jobs"
ctest --output-on-failure -j "$jobs" "$@"
