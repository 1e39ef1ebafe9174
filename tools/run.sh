#!/usr/bin/env bash
# The main job: installs what is missing, builds, builds the books corpus, then runs the default
# ablation, experiments/books_ablation.yaml: a vanilla Transformer, the same model with relative
# positions and no memory, and Transformer-XL with its memory, on long documents (novels, plays
# and the Bible's books), two seeds, with each gain's interval. About 6 minutes on 2 cores after
# the build. The report lands in runs/books_ablation/.
#
#   tools/run.sh                         the books ablation
#   tools/run.sh kjv                     the KJV ablation (experiments/kjv_ablation.yaml): vanilla,
#                                        no memory, Transformer-XL and Shaw on the King James Bible
#   tools/run.sh books_long              the books ablation's model with and without memory and
#                                        4x the training (one seed, about 8 minutes)
#   tools/run.sh [JOB] --set KEY=VALUE   extra arguments go to txl-ablate (JOB: experiments/JOB_ablation.yaml)
#
# Rerunning skips finished work; Ctrl-C stops cleanly and the same command resumes.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/tools/env.sh"
job=books
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  if [ ! -f "$root/experiments/${1}_ablation.yaml" ]; then
    echo "error: no experiments/${1}_ablation.yaml (jobs: books, books_long, kjv)" >&2
    exit 2
  fi
  job=$1
  shift
fi
"$root/tools/setup.sh"
cd "$root"
bin="$txl_build_dir/bin"
if [ "${job#books}" != "$job" ] && [ ! -f data/corpora/books/metadata.csv ]; then
  echo "error: the books corpus (data/corpora/books) is missing and tools/setup.sh could not" \
       "build it (see its warning above; data/README.md, 'books'). 'tools/run.sh kjv' needs no" \
       "download." >&2
  exit 1
fi
echo "[run] ${job} ablation: experiments/${job}_ablation.yaml -> runs/${job}_ablation/"
start=$(date +%s)
status=0
"$bin/txl-ablate" --config "experiments/${job}_ablation.yaml" "$@" || status=$?
echo "[run] finished in $(( $(date +%s) - start )) s (exit $status)"
exit $status
