// llmc/norm.cuh: the L2 norm of a floatX buffer as a deterministic two-pass reduction: the
// global gradient norm (clipping) and the Frobenius norm that Muon's Newton-Schulz iteration
// normalizes by (llmc/muon.cuh).
//
// Entry points: l2_norm and norm_blocks_for (Muon's matrices), block_sum_of_squares (one block's
// share of the gradient norm, which llmc/zero.cuh sums over the shard plan).
#pragma once

#include "common.cuh"

// L2 norm of a buffer, in two passes so the summation order is fixed: pass 1 has `blocks`
// blocks, each summing the squares of its chunk (block_chunk, CHUNK_THREADS threads) into
// partials[block]; pass 2 is one thread adding the partials in order. The result depends only on
// the buffer, the block count and the target's CHUNK_THREADS, never on the number of CPU
// threads or the schedule. A buffer (one of Muon's matrices) takes norm_blocks_for(n) blocks, at
// most NORM_BLOCKS, which keeps the block count in proportion to the work. (The gradient norm is
// summed over the shard plan by llmc/zero.cuh, from block_sum_of_squares.)

constexpr int NORM_BLOCKS = 128;
constexpr int NORM_BLOCK_ELEMS = 4096;  // norm_blocks_for's target

// The sum of squares of the chunk of x[0..n) that block `block` of `blocks` owns, in a fixed
// order; every thread of the block must call it, and every thread gets the sum.
__device__ inline float block_sum_of_squares(const floatX* x, size_t n, size_t block,
                                             size_t blocks) {
    size_t begin, end;
    block_chunk(n, block, blocks, &begin, &end);
    float acc = 0.0f;
    for (size_t i = begin + threadIdx.x; i < end; i += CHUNK_THREADS) {
        float v = (float)x[i];
        acc += v * v;
    }
    return block_sum(acc);
}

static __global__ void norm_squared_partials_kernel(float* partials, const floatX* x, size_t n) {
    const float total = block_sum_of_squares(x, n, blockIdx.x, gridDim.x);
    if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

static __global__ void norm_finish_kernel(float* norm, const float* partials, int count) {
    float total = 0.0f;
    for (int b = 0; b < count; b++) total += partials[b];
    *norm = sqrtf(total);
}

// Writes ||x|| (n elements) to *norm (device), summed in `blocks` (1 to NORM_BLOCKS) partial
// sums; `partials` holds NORM_BLOCKS floats of scratch.
inline void l2_norm(float* norm, float* partials, const floatX* x, size_t n, int blocks,
                    cudaStream_t stream) {
    norm_squared_partials_kernel<<<blocks, CHUNK_THREADS, 0, stream>>>(partials, x, n);
    CUDA_CHECK_LAUNCH();
    norm_finish_kernel<<<1, 1, 0, stream>>>(norm, partials, blocks);
    CUDA_CHECK_LAUNCH();
}

// The block count for an n-element norm: about NORM_BLOCK_ELEMS elements a block (the same
// count on every target).
inline int norm_blocks_for(size_t n) {
    const size_t blocks = ceil_div(n, (size_t)NORM_BLOCK_ELEMS);
    return (int)(blocks < 1 ? 1 : blocks > NORM_BLOCKS ? NORM_BLOCKS : blocks);
}
