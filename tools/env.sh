# Sourced by tools/setup.sh, tools/test.sh and tools/run.sh: which LibTorch txl builds against,
# and the build folder that goes with it.
#
#   TXL_TORCH unset    Debian's LibTorch 1.13 (libtorch-dev), into build/ (also TXL_TORCH=system)
#   TXL_TORCH=pip      PyPI's torch, the version pinned in tools/requirements-torch2.txt, installed
#                      into build-torch2/venv, into build-torch2/
#   TXL_BUILD_DIR=dir  another build folder
case "${TXL_TORCH:-}" in
  "" | system) txl_torch=system; txl_build_dir="${TXL_BUILD_DIR:-build}" ;;
  pip) txl_torch=pip; txl_build_dir="${TXL_BUILD_DIR:-build-torch2}" ;;
  *)
    echo "error: TXL_TORCH=${TXL_TORCH} is not one of: system (the default, Debian's LibTorch), pip" >&2
    exit 2
    ;;
esac
