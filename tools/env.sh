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

# txl_ccache_launcher ROOT: CMake's compiler-launcher option for ccache (nothing without
# ccache). Every txl source is compiled with the precompiled <torch/torch.h>, which ccache
# refuses to cache ("could not use precompiled header": not one object was cached) unless its
# sloppiness allows PCH; and CCACHE_BASEDIR hashes paths under ROOT relative to it, so a clone in
# another folder (a CI run) reuses the objects of an earlier clone: a second clone of a small
# PCH project built in 5 s instead of 81.
txl_ccache_launcher() {
  command -v ccache >/dev/null 2>&1 || return 0
  local sloppy=pch_defines,time_macros,include_file_mtime,include_file_ctime
  printf '%s\n' "-DCMAKE_CXX_COMPILER_LAUNCHER=$(command -v env);CCACHE_BASEDIR=$1;CCACHE_SLOPPINESS=$sloppy;ccache"
}
