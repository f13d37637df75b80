// cucc's object cache (CACHE_DIR in dev/cpu/cucc): a build whose rewritten source, flags and
// compiler are those of an earlier one takes that build's object instead of compiling, and
// anything that changes the object changes the key. cucc_cache.py builds this file in a fresh
// cache (CUCC_CACHE_DIR) again and again, and checks with -v which builds came from the cache
// and with the programs' output that each build holds the values it was built with:
//   the same build twice: the second from the cache, with the same output and the same warning
//   (the diagnostics of a cached compile are replayed);
//   another -D value, an edited header, another -O level, another target (CUCC_MARCH),
//   CUCC_CACHE=0: compiled, right values.
//! run: python3 dev/cpu/tests/cucc_cache.py => pass /cucc_cache: all checks passed/
#include <cstdio>
#if __has_include("cucc_cache_value.h")
#include "cucc_cache_value.h"  // written by cucc_cache.py
#else
#define HEADER_VALUE 0
#endif
#ifndef VALUE
#define VALUE 0
#endif
#ifdef WARN
#warning "cucc_cache test warning"
#endif

__global__ void write_values(int* out) {
    out[threadIdx.x] = threadIdx.x == 0 ? VALUE : HEADER_VALUE;
}

int main() {
    int* out;
    cudaMallocManaged(&out, 2 * sizeof(int));
    write_values<<<1, 2>>>(out);
    if (cudaDeviceSynchronize() != cudaSuccess) return 1;
    printf("values %d %d\n", out[0], out[1]);
    return 0;
}
