// cucc --version answers as nvcc does, with the release of the CUDA toolkit whose headers it
// compiles against: the line build scripts read ("Cuda compilation tools, release X.Y, ..."),
// the release of the CUDART_VERSION this program was compiled with (nccl-tests' Makefile picks
// its C++ standard from it).
//! cpu-only
//! run: dev/cpu/cucc --version => pass /Cuda compilation tools, release (\d+)\.(\d+), V\1\.\2/
//! run: v=$(dev/cpu/cucc --version | grep release | sed 's/.*release //; s/,.*//'); h=$(./prog); echo "cucc $v, headers $h"; [ "$v" = "$h" ] => pass /cucc \d+\.\d+, headers \d+\.\d+/
#include <cstdio>

int main() {
    printf("%d.%d\n", CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
    return 0;
}
