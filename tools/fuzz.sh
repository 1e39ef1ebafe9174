#!/usr/bin/env bash
# Fuzzes txl's parsers with libFuzzer: configures build-fuzz/ with clang (TXL_FUZZ=ON: ASan with
# LeakSanitizer, UBSan and coverage on every library), builds the targets of tests/fuzz and runs
# each for N seconds (default 30), one after another, on its seeds in tests/fuzz/corpus/<target>/.
#
#   tools/fuzz.sh                 # 30 s per target
#   nice -n 10 tools/fuzz.sh 600  # 10 minutes per target, at low priority
#
# New inputs land in build-fuzz/fuzz/corpus/<target>/, crashes in build-fuzz/fuzz/artifacts/
# <target>/ (rerun one with build-fuzz/bin/<target> <file>). Exits non-zero on any finding.
#
# fuzz_tokenizer builds sentencepiece from source with the same instrumentation, so the fuzzer
# sees into its model parser: from $TXL_SPM_SOURCE, or Debian's source package fetched once into
# build-fuzz/_deps (apt-get source through a private list; nothing in /etc/apt changes).
# TXL_SPM_SOURCE=system links Debian's uninstrumented library instead.
#
# Environment: TXL_FUZZ_BUILD_DIR (default build-fuzz), TXL_JOBS (default: number of cores),
# CC / CXX (default clang-14 / clang++-14).
set -euo pipefail

seconds="${1:-30}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="${TXL_FUZZ_BUILD_DIR:-build-fuzz}"
say() { printf '[fuzz] %s\n' "$*"; }

command -v "${CXX:-clang++-14}" >/dev/null ||
  { echo "error: ${CXX:-clang++-14} not found: apt-get install clang-14 libclang-rt-14-dev" >&2; exit 1; }

# Debian's sentencepiece source with its patches (but static libraries kept), for an
# instrumented build. Prints the tree, or nothing when it cannot be had.
fetch_sentencepiece() {
  local deps="$root/$build/_deps" tree
  tree="$deps/sentencepiece-src"
  if [ -f "$tree/.txl-ready" ]; then echo "$tree"; return; fi
  mkdir -p "$deps/apt/lists/partial" "$deps/apt/cache/archives/partial" && cd "$deps/apt"
  echo "deb-src http://deb.debian.org/debian bookworm main" >sources.list
  local apt=(-o Dir::Etc::SourceList="$deps/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
             -o Dir::State::Lists="$deps/apt/lists" -o Dir::Cache="$deps/apt/cache"
             -o Debug::NoLocking=1)
  if ! { apt-get "${apt[@]}" update -qq && apt-get "${apt[@]}" source --download-only -qq \
           "sentencepiece=$(dpkg-query -W -f='${source:Version}' libsentencepiece0 2>/dev/null)"; } \
       >"$deps/apt/fetch.log" 2>&1; then
    say "cannot fetch sentencepiece's source (see $deps/apt/fetch.log)" >&2
    cd "$root"; return
  fi
  rm -rf "$tree" && mkdir -p "$tree"
  tar xzf sentencepiece_*.orig.tar.gz -C "$tree" --strip-components=1
  tar xJf sentencepiece_*.debian.tar.xz -C "$tree"
  (cd "$tree" && grep -v '^disable-static-library.patch' debian/patches/series |
     while read -r p; do [ -n "$p" ] && patch -p1 -s <"debian/patches/$p"; done)
  touch "$tree/.txl-ready"
  cd "$root"
  echo "$tree"
}

spm_source="${TXL_SPM_SOURCE:-}"
if [ -z "$spm_source" ]; then spm_source="$(fetch_sentencepiece)"; fi
if [ "$spm_source" = system ] || [ -z "$spm_source" ]; then
  spm_source=""
  say "fuzz_tokenizer: Debian's libsentencepiece (crashes caught; no coverage inside it)"
else
  say "fuzz_tokenizer: sentencepiece instrumented, from $spm_source"
fi

source "$root/tools/env.sh"
launcher=()
mapfile -t launcher < <(txl_ccache_launcher "$root")
CC="${CC:-clang-14}" CXX="${CXX:-clang++-14}" cmake -S . -B "$build" -G Ninja "${launcher[@]}" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTXL_FUZZ=ON -DTXL_BUILD_TESTS=OFF \
  -DTXL_FUZZ_SECONDS="$seconds" -DTXL_FUZZ_SPM_SOURCE="$spm_source" >/dev/null
say "building the fuzz targets"
cmake --build "$build" --target txl_fuzzers -j "${TXL_JOBS:-$(nproc)}"

say "running each target for $seconds s"
status=0
(cd "$build" && ctest -L fuzz --output-on-failure) || status=$?
# One line per target from libFuzzer's final statistics.
log="$build/Testing/Temporary/LastTest.log"
if [ -f "$log" ]; then
  awk '/^[0-9]+\/[0-9]+ Testing: / { t = $3 }
       /stat::number_of_executed_units:/ { e[t] = $2 }
       /stat::average_exec_per_sec:/ { r[t] = $2 }
       /stat::new_units_added:/ { n[t] = $2 }
       /ERROR: |SUMMARY: |==ERROR|deadly signal|Test Failed/ { f[t] = 1 }
       END { for (t in e) printf "[fuzz] %-20s %12s executions (%s/s), %s new inputs%s\n",
                                  t, e[t], r[t], n[t], (t in f ? ", FINDING" : "") }' "$log"
fi
for dir in "$build"/fuzz/corpus/*/; do
  say "corpus $(basename "$dir"): $(find "$dir" -type f | wc -l) new inputs, $(du -sh "$dir" | cut -f1)"
done
[ "$status" -eq 0 ] && say "no findings" || say "findings: see above and $build/fuzz/artifacts/"
exit "$status"
