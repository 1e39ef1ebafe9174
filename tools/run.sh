#!/usr/bin/env bash
# The main job: installs what is missing, builds, then prepares the default corpus (the King
# James Bible) and its sentencepiece tokenizer, printing the corpus statistics.
# Extra arguments go to txl-prepare.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/tools/setup.sh"
cd "$root"
bin="${TXL_BUILD_DIR:-build}/bin"
echo "[run] preparing the KJV corpus and tokenizer"
"$bin/txl-prepare" --corpus kjv "$@"
