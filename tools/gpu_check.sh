#!/usr/bin/env bash
# The one-command GPU check, for anyone with an NVIDIA GPU: builds txl's CUDA configuration
# (PyPI's LibTorch 2.x, the same build as `TXL_TORCH=pip tools/test.sh`) and checks that it runs
# there. Steps, each timed and recorded:
#   build        tools/setup.sh with TXL_TORCH=pip, into build-torch2/
#   gpu_tests    ctest -L gpu (tests that skip without a GPU; a skip fails this check)
#   distributed  ctest -L distributed on the GPUs with NCCL (TXL_TEST_DEVICE=cuda), with >= 2 GPUs
#   bench        txl-bench --json --quick with run.device=cuda: fp32 and bf16 training and
#                evaluation, the device's matmul peaks, MFU
#   kjv          200 steps of experiments/kjv_base.yaml (dropout 0) on the GPU and on the CPU; the
#                GPU's validation loss must be within 1% of the CPU's
# One JSON report: build-torch2/gpu_check/report.json (TXL_GPU_CHECK_OUT=dir chooses the folder),
# with every step's status, seconds and figures. Exit status 0 when every check passed.
#
#   TXL_GPU_CHECK_DEVICE=cpu   every step on the CPU: a dry run of this script on a machine
#                              without a GPU (the GPU tests then skip and are reported so)
#   TXL_GPU_CHECK_STEPS=200    training steps of the KJV comparison
#   TXL_GPU_CHECK_KJV=file     the KJV text (`bible -f` output, data.path) where the bible
#                              program is not installed
#   TXL_TORCH_PYTHON=python    build against that interpreter's torch as installed, with no venv
#                              and no pip (tools/setup.sh): a GPU machine without a registry
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export TXL_TORCH=pip
source tools/env.sh
build="$root/$txl_build_dir"
out="${TXL_GPU_CHECK_OUT:-$build/gpu_check}"
device="${TXL_GPU_CHECK_DEVICE:-cuda}"
steps="${TXL_GPU_CHECK_STEPS:-200}"
mkdir -p "$out/steps"
rm -f "$out"/steps/*.json "$out/report.json"
start_all=$(date +%s)

say() { printf '[gpu_check] %s\n' "$*"; }

# record NAME STATUS SECONDS [JSON-OBJECT-OF-DETAILS]: one step's result for the report.
record() {
  local details="${4:-}"
  [ -n "$details" ] || details='{}'
  printf '{"name": "%s", "status": "%s", "seconds": %s, "details": %s}\n' "$1" "$2" "$3" "$details" \
    >"$out/steps/$(ls "$out/steps" | wc -l | awk '{printf "%02d", $1}')_$1.json"
  say "$1: $2 (${3} s)"
}

# run_step NAME LOG COMMAND...: runs the command with its output in $out/LOG; passed or failed.
run_step() {
  local name="$1" log="$out/$2"
  shift 2
  local t0=$(date +%s)
  say "$name: $* (log: $log)"
  if "$@" >"$log" 2>&1; then
    record "$name" passed $(( $(date +%s) - t0 ))
  else
    record "$name" failed $(( $(date +%s) - t0 )) "{\"log\": \"$log\"}"
    tail -n 20 "$log" >&2
    return 1
  fi
}

# --- build -----------------------------------------------------------------------------------
if ! run_step build build.log tools/setup.sh; then
  python3 tools/gpu_check_report.py "$out" "$device" 0 "$start_all"
  exit 1
fi
python="${TXL_TORCH_PYTHON:-$build/venv/bin/python}"
gpus=$("$python" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
say "LibTorch $("$python" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)'), $gpus GPU(s)"
if [ "$device" = cuda ] && [ "$gpus" -lt 1 ]; then
  record gpu failed 0 '{"why": "no CUDA GPU visible to PyTorch (TXL_GPU_CHECK_DEVICE=cpu runs a dry run on the CPU)"}'
  python3 tools/gpu_check_report.py "$out" "$device" "$gpus" "$start_all"
  exit 1
fi

# --- GPU tests -------------------------------------------------------------------------------
# -V keeps each test's own figures (decoding against the fp64 forward) in the log and report.
t0=$(date +%s)
(cd "$build" && ctest -L gpu -V --no-tests=error) >"$out/gpu_tests.log" 2>&1
rc=$?
details=$(python3 tools/gpu_check_report.py --ctest "$out/gpu_tests.log" $rc "$device") ||
  details='{"status": "failed"}'
status=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["status"])' "$details")
record gpu_tests "$status" $(( $(date +%s) - t0 )) "$details"

# --- distributed with NCCL -------------------------------------------------------------------
if [ "$device" = cuda ] && [ "$gpus" -ge 2 ]; then
  t0=$(date +%s)
  if (cd "$build" && TXL_TEST_DEVICE=cuda ctest -L distributed --output-on-failure) >"$out/distributed.log" 2>&1; then
    record distributed passed $(( $(date +%s) - t0 )) "{\"gpus\": $gpus}"
  else
    record distributed failed $(( $(date +%s) - t0 )) "{\"gpus\": $gpus, \"log\": \"$out/distributed.log\"}"
  fi
else
  record distributed skipped 0 "{\"why\": \"needs 2 or more GPUs, found $gpus\"}"
fi

# --- bench -----------------------------------------------------------------------------------
t0=$(date +%s)
if "$build/bin/txl-bench" --json --quick --quiet --set "run.device=$device" --save "$out/bench.json" \
    >"$out/bench.log" 2>&1; then
  record bench passed $(( $(date +%s) - t0 )) "$(cat "$out/bench.json")"
else
  record bench failed $(( $(date +%s) - t0 )) "{\"log\": \"$out/bench.log\"}"
fi

# --- KJV: the GPU's validation loss against the CPU's ----------------------------------------
kjv() {  # kjv NAME DEVICE
  "$build/bin/txl-train" -c experiments/kjv_base.yaml --overwrite --quiet \
    --set "run.name=gpu_check_$1" --set "run.output_dir=$out/runs/$1" --set "run.device=$2" \
    --set "train.max_steps=$steps" --set "train.eval_interval=$steps" \
    --set train.checkpoint_interval=0 --set model.dropout=0 --set "data.cache_dir=$out/cache" \
    ${TXL_GPU_CHECK_KJV:+--set "data.path=$TXL_GPU_CHECK_KJV"}
}
t0=$(date +%s)
if run_step kjv_gpu kjv_gpu.log kjv gpu "$device" && run_step kjv_cpu kjv_cpu.log kjv cpu cpu; then
  status=failed
  if details=$(python3 tools/gpu_check_report.py --compare "$out/runs/gpu" "$out/runs/cpu" 0.01 2>"$out/compare.log") &&
      python3 -c 'import json,sys; sys.exit(0 if json.loads(sys.argv[1])["within"] else 1)' "$details"; then
    status=passed
  fi
  [ -n "$details" ] || details="{\"log\": \"$out/compare.log\"}"
  record kjv_valid_loss "$status" $(( $(date +%s) - t0 )) "$details"
fi

python3 tools/gpu_check_report.py "$out" "$device" "$gpus" "$start_all"
