#!/usr/bin/env bash
# The main job: installs what is missing, builds, then runs the default ablation,
# experiments/kjv_ablation.yaml: vanilla Transformer against Transformer-XL on the King James
# Bible (tokenizer, training of every variant, evaluation, report). About 15 minutes on 2 cores.
# The report lands in runs/kjv_ablation/. Rerunning skips finished work; Ctrl-C stops cleanly and
# the same command resumes. Extra arguments go to txl-ablate (e.g. --set train.max_steps=100).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/tools/env.sh"
"$root/tools/setup.sh"
cd "$root"
bin="$txl_build_dir/bin"
echo "[run] KJV ablation: experiments/kjv_ablation.yaml -> runs/kjv_ablation/"
start=$(date +%s)
status=0
"$bin/txl-ablate" --config experiments/kjv_ablation.yaml "$@" || status=$?
echo "[run] finished in $(( $(date +%s) - start )) s (exit $status)"
exit $status
