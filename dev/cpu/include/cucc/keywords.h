// cucc/keywords.h: the CUDA declaration keywords as the CPU runtime sees them.
//
// Included by our cuda_runtime.h before and again after the toolkit's headers, because the
// toolkit's crt/host_defines.h gives some of them (__forceinline__, __align__) its own
// meaning; hence no include guard. For .cu files (cucc defines __CUCC_REWRITE__) __global__
// and __shared__ become markers that survive preprocessing, so that dev/cpu/cucc can find
// kernels and shared-memory declarations in the preprocessed text and rewrite them.
// __launch_bounds__(...) becomes a marker too (cucc passes the bound to the launch), and so
// does __noinline__: libstdc++ writes __attribute__((__noinline__)), which a macro expanding
// to __attribute__((noinline)) would break; cucc turns the marker into the right form for
// where it stands.
#undef __global__
#undef __shared__
#undef __device__
#undef __host__
#undef __constant__
#undef __managed__
#undef __forceinline__
#undef __noinline__
#undef __launch_bounds__
#undef __grid_constant__

#ifdef __CUCC_REWRITE__
#define __global__ __cucc_global__
#define __shared__ __cucc_shared__
#define __launch_bounds__(...) __cucc_launch_bounds__(__VA_ARGS__)
#define __noinline__ __cucc_noinline__
#else
#define __global__
#define __shared__
// Host C++ only hints at inlining: empty keeps __attribute__((__noinline__)) valid.
#define __launch_bounds__(...)
#define __noinline__
#endif
// __device__ and __constant__ variables are ordinary globals: every block and the host see
// one copy, as on a GPU (cudaMemcpyToSymbol copies to the host address). In a file that cucc
// compiles in two passes (__CUCC_TWO_PASSES__, see "Two passes" in dev/cpu/cucc) they are a
// marker, which cucc removes, giving a `static` such variable a name both passes share.
#if defined(__CUCC_REWRITE__) && defined(__CUCC_TWO_PASSES__)
#define __device__ __cucc_device__
#define __constant__ __cucc_device__
#define __managed__ __cucc_device__
#else
#define __device__
#define __constant__
#define __managed__
#endif
#define __host__
#define __forceinline__ inline
#define __grid_constant__
