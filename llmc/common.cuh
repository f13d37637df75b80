// llmc/common.cuh: what every other file needs: the error checks (one per library) and fatal()
// for bad input, the floating-point type of parameters and activations (floatX), the launch
// shapes several kernel families share, a 128-bit packed type for vector loads and stores, warp
// and block reductions, the seeded stochastic rounding used when fp32 values are written into bf16
// storage, and the host's seeded random numbers.
//
// Entry points: fatal(), CUDA_CHECK / CUDA_CHECK_LAUNCH, device_compute_capability, floatX,
// ceil_div / round_up / grid_for,
// x128 with load128 / store128, warp_sum / warp_sum2 / warp_group_sum / warp_max, block_reduce,
// ROW_LANES with row_sum / row_sum2 / row_max,
// CHUNK_THREADS with block_chunk / block_sum / block_max,
// stochastic_round_store, rng_next / rng_uniform / rng_normal.
//
// floatX is __nv_bfloat16 by default and float when compiled with -DENABLE_FP32. Every kernel
// accumulates in float whatever floatX is.
#pragma once

#include <cerrno>
#include <cstdarg>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "fileio.h"  // FOPEN_CHECK, FREAD_CHECK, MALLOC_CHECK, fopen_regular

// ---------------------------------------------------------------------------------------------
// Error checks: print where and what, then exit. Used on every CUDA and C library call (the C
// library's, host-only, are in fileio.h).

inline void cuda_check(cudaError_t err, const char* file, int line) {
    if (err != cudaSuccess) {
        fprintf(stderr, "CUDA error at %s:%d: %s (%s)\n", file, line, cudaGetErrorString(err),
                cudaGetErrorName(err));
        exit(EXIT_FAILURE);
    }
}
#define CUDA_CHECK(call) cuda_check((call), __FILE__, __LINE__)

// The compute capability of the current device, as major and minor.
inline void device_compute_capability(int* major, int* minor) {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, device));
    CUDA_CHECK(cudaDeviceGetAttribute(minor, cudaDevAttrComputeCapabilityMinor, device));
}
// After a kernel launch: reports a bad launch configuration at the launch site.
#define CUDA_CHECK_LAUNCH() cuda_check(cudaGetLastError(), __FILE__, __LINE__)

// Prints "error: <message>" and ends the program with a failure status: the response to bad
// input (flags, data, checkpoints), which is reported, never worked around.
[[noreturn]] inline void fatal(const char* format, ...) {
    va_list args;
    va_start(args, format);
    fprintf(stderr, "error: ");
    vfprintf(stderr, format, args);
    fprintf(stderr, "\n");
    va_end(args);
    exit(EXIT_FAILURE);
}

// ---------------------------------------------------------------------------------------------
// Precision.

#if defined(ENABLE_FP32)
typedef float floatX;
#define PRECISION_NAME "fp32"
#else
typedef __nv_bfloat16 floatX;
#define PRECISION_NAME "bf16"
#endif

constexpr bool FLOATX_IS_FP32 = sizeof(floatX) == sizeof(float);

__host__ __device__ inline size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
__host__ __device__ inline size_t round_up(size_t a, size_t b) { return ceil_div(a, b) * b; }

// Every tensor in the parameter and activation buffers starts on a multiple of this many
// elements: 256 bytes or more (aligned for 128-bit access and cuBLASLt), and a whole number of
// the 128-element blocks that FP8 scaling and ZeRO sharding split on.
constexpr size_t TENSOR_ALIGN = 128;

// Launch shapes shared by several kernel families: a grid-stride loop over `work` items gets at
// most 65536 blocks; the row kernels (LayerNorm, RMSNorm, the classifier) run blocks of
// ROW_THREADS threads, ROW_LANES of them to a row (ROWS_PER_BLOCK rows).
inline int grid_for(size_t work, int block) {
    size_t g = ceil_div(work, block);
    return (int)(g < 65536 ? g : 65536);
}

// ROW_LANES: threads that share a row of a row kernel. On a GPU a warp (32): its lanes read a
// row's packs side by side (coalesced) and meet in shuffles (row_sum). Under the CPU runtime one
// thread a row: there the lanes of a warp are fibers that run one after the other, so a shuffle
// costs every lane a switch, and a row of width 128 cost ~20x its arithmetic in switches; with
// one lane a row the kernels hold no shuffle, and cucc runs them as thread loops. The dev/cuda
// harnesses of these kernels build with -DROW_LANES=32, so the GPU's form is checked on the CPU
// runtime too (as ATT_LANE_DIMS does for attention).
#ifndef ROW_LANES
#ifdef __CUCC__
#define ROW_LANES 1
#else
#define ROW_LANES 32
#endif
#endif
static_assert(ROW_LANES == 1 || ROW_LANES == 32, "a row is one thread or one warp");
// Rows of a block: 8 (a GPU's 8 warps), and 8 threads under the CPU runtime, where a block is
// the unit its OS threads share out: 256 rows to a block left GPT-2's 256 rows (T 64, B 4) to
// one core.
constexpr int ROWS_PER_BLOCK = 8;
constexpr int ROW_THREADS = ROW_LANES * ROWS_PER_BLOCK;

// ---------------------------------------------------------------------------------------------
// Packed128: 16 bytes of T moved with one 128-bit load or store. Pointers must be 16-byte
// aligned, which every tensor of the layouts is (see TENSOR_ALIGN) as long as the offset inside
// the tensor is a multiple of Packed128<T>::size elements.
template <class T>
struct alignas(16) Packed128 {
    static constexpr int size = 16 / sizeof(T);
    T v[size];
    __host__ __device__ T& operator[](int i) { return v[i]; }
    __host__ __device__ const T& operator[](int i) const { return v[i]; }
    __host__ __device__ static Packed128 zeros() {
        Packed128 z;
        for (int i = 0; i < size; i++) z.v[i] = (T)0.0f;
        return z;
    }
};
typedef Packed128<floatX> x128;
typedef Packed128<float> f128;

// The int4 moves the 16 bytes at once; memcpy between it and the packed object (free after
// optimization) keeps the element accesses and the 128-bit access from breaking C++'s
// aliasing rules, which g++ at -O2 enforces under the CPU runtime.
template <class T>
__device__ inline Packed128<T> load128(const T* p) {
    int4 bits = *reinterpret_cast<const int4*>(p);
    Packed128<T> r;
    memcpy(&r, &bits, sizeof(r));
    return r;
}
template <class T>
__device__ inline void store128(T* p, const Packed128<T>& v) {
    int4 bits;
    memcpy(&bits, &v, sizeof(bits));
    *reinterpret_cast<int4*>(p) = bits;
}

// ---------------------------------------------------------------------------------------------
// Warp reductions (xor butterfly: every lane of the group ends with the same bits).

__device__ inline float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
// Two warp_sums side by side, the same bits as one after the other: a GPU interleaves their
// shuffles, the CPU runtime exchanges both values in one warp call (cucc's butterfly fusion).
__device__ inline void warp_sum2(float& a, float& b) {
    for (int offset = 16; offset > 0; offset /= 2) {
        a += __shfl_xor_sync(0xffffffffu, a, offset);
        b += __shfl_xor_sync(0xffffffffu, b, offset);
    }
}
// The sum over each aligned group of `width` lanes (a power of two up to 32; the whole warp
// calls it): every lane of a group ends with the group's sum.
__device__ inline float warp_group_sum(float v, int width) {
    for (int offset = width / 2; offset > 0; offset /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
__device__ inline float warp_max(float v) {
    for (int offset = 16; offset > 0; offset /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Block-wide sum or max over blockDim.x threads (a multiple of 32, at most 1024), every thread
// calling: each warp reduces with shuffles, then every warp adds up (or maxes) the warps' results
// from shared memory, in the same butterfly: every thread gets the same bits, on every run.
template <bool is_max>
__device__ inline float block_reduce(float v) {
    __shared__ float warp_values[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = is_max ? warp_max(v) : warp_sum(v);
    __syncthreads();  // warp_values may still be read by an earlier call
    if (lane == 0) warp_values[warp] = v;
    __syncthreads();
    v = lane < warps ? warp_values[lane] : (is_max ? -INFINITY : 0.0f);
    return is_max ? warp_max(v) : warp_sum(v);
}

// CHUNK_THREADS: the threads of a block that walks its chunk of a buffer (block_chunk): the
// reductions to one value (the norms' sums of squares, the FP8 amaxes, the log Z monitor) and
// the copies of ZeRO's runs. On a GPU 256: the threads stride through the chunk side by side
// (coalesced) and a reduction's meet in block_reduce. Under the CPU runtime one thread a block:
// a reduction's warp calls and barriers cost every thread of a block a fiber switch each (in an
// FP8 run the amax's block maxima took 60% of the step), and a copy of one element a thread
// cannot be vectorized; with one thread, block_sum and block_max are the value itself (no
// shuffle or barrier in the text), the thread walks its chunk as one loop, and cucc runs the
// kernels as thread loops. The dev/cuda harness of the FP8 quantizers builds with
// -DCHUNK_THREADS=256, so the GPU's form is checked on the CPU runtime too (as ROW_LANES does for
// the row kernels).
#ifndef CHUNK_THREADS
#ifdef __CUCC__
#define CHUNK_THREADS 1
#else
#define CHUNK_THREADS 256
#endif
#endif
static_assert(CHUNK_THREADS == 1 || (CHUNK_THREADS % 32 == 0 && CHUNK_THREADS <= 1024),
              "a chunk's block is one thread or whole warps");
__device__ inline float block_sum(float v) {
#if CHUNK_THREADS > 1
    v = block_reduce<false>(v);
#endif
    return v;
}
__device__ inline float block_max(float v) {
#if CHUNK_THREADS > 1
    v = block_reduce<true>(v);
#endif
    return v;
}

// The chunk [*begin, *end) of [0, n) that block `block` of `blocks` owns: the blocks take
// consecutive chunks, a multiple of 64 elements long, whose threads stride through them by
// CHUNK_THREADS.
__device__ inline void block_chunk(size_t n, size_t block, size_t blocks, size_t* begin,
                                   size_t* end) {
    const size_t chunk = round_up(ceil_div(n, blocks), 64);
    *begin = block * chunk < n ? block * chunk : n;
    *end = n - *begin > chunk ? *begin + chunk : n;
}

// The sums (or the max) over the ROW_LANES lanes of a row (every lane ends with them); with one
// lane a row, the values themselves (no shuffle in the text, for cucc's thread loops: see
// ROW_LANES).
__device__ inline float row_sum(float v) {
#if ROW_LANES > 1
    v = warp_sum(v);
#endif
    return v;
}
__device__ inline void row_sum2(float& a, float& b) {
#if ROW_LANES > 1
    warp_sum2(a, b);
#endif
}
__device__ inline float row_max(float v) {
#if ROW_LANES > 1
    v = warp_max(v);
#endif
    return v;
}

// ---------------------------------------------------------------------------------------------
// Stochastic rounding. A bf16 is the top 16 bits of a float; adding a uniform random 16-bit
// number to the float's bits and truncating rounds up with probability equal to the dropped
// fraction, so the rounding is unbiased. The random number is a hash of (seed, index): the
// same seed and element give the same bits on any device, thread count or sharding.

__host__ __device__ inline uint32_t hash_u32(uint32_t x) {
    // A 32-bit integer hash with good avalanche (constants from the "lowbias32" search).
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

// The bf16 bits of v rounded stochastically with element `index`'s noise of `seed` (host and
// device: test_gpt sets parameters as an update would have stored them).
__host__ __device__ inline unsigned short stochastic_round_bits(float v, uint32_t seed,
                                                                size_t index) {
    uint32_t r = hash_u32(seed ^ hash_u32((uint32_t)index ^ hash_u32((uint32_t)(index >> 32))));
    uint32_t bits;
    memcpy(&bits, &v, sizeof(bits));
    if ((bits & 0x7f800000u) != 0x7f800000u) bits += r & 0xffffu;  // inf and nan pass unchanged
    return (unsigned short)(bits >> 16);
}

__device__ inline void stochastic_round_store(floatX* dst, float v, uint32_t seed, size_t index) {
#if defined(ENABLE_FP32)
    (void)seed;
    (void)index;
    *dst = v;
#else
    __nv_bfloat16_raw raw;
    raw.x = stochastic_round_bits(v, seed, index);
    *dst = __nv_bfloat16(raw);
#endif
}

// ---------------------------------------------------------------------------------------------
// Host random numbers.

// A small seeded generator for host-side initialization and random tokens (splitmix64).
inline uint64_t rng_next(uint64_t* state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
inline double rng_uniform(uint64_t* state) {
    return (rng_next(state) >> 11) * (1.0 / 9007199254740992.0);
}
inline double rng_normal(uint64_t* state) {  // Box-Muller
    double u1 = rng_uniform(state), u2 = rng_uniform(state);
    return sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
}
