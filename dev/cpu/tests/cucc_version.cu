// cucc --version answers as nvcc does, with the release of the CUDA toolkit whose headers it
// compiles against: the line build scripts read ("Cuda compilation tools, release X.Y, ..."),
// the same release as cuda.h's CUDA_VERSION (nccl-tests' Makefile picks its C++ standard
// from it).
//! cpu-only
//! run: dev/cpu/cucc --version => pass /Cuda compilation tools, release (\d+)\.(\d+), V\1\.\2/
//! run: v=$(dev/cpu/cucc --version | grep release | sed 's/.*release //; s/,.*//'); n=$(sed -n 's/^#define CUDA_VERSION \([0-9]*\)$/\1/p' ${CUDA_HOME:-/usr/local/cuda}/include/cuda.h); echo "cucc $v, cuda.h $n"; [ "$v" = "$((n / 1000)).$((n % 1000 / 10))" ] => pass /cucc \d+\.\d+, cuda\.h \d+/
#include <cstdio>

int main() {
    printf("cucc_version: the checks are the run lines\n");
    return 0;
}
